"""What a process's first fused attention costs, and whether readying cuDNN's attention first
(a tiny call, on the main thread or a side thread) shortens it. Each case runs in a fresh
process, one after another, twice: CUDA and cuBLAS are set up first, then the first
`F.scaled_dot_product_attention` of bf16 [4, 32, 1024, 64], causal, is timed, then one of
another shape.

    none               nothing before the call
    main               a [1, 1, 64, 64] cuDNN attention on the main thread first
    thread             the same on a side thread and stream, joined
    thread_busy        the same while the main thread computes for 0.7 s (as AOTAutograd would)
    none_busy          the main thread computes for 0.7 s, no warm-up
    thread_samestream  on a side thread, its default stream
    flash              flash attention only, no warm-up

    python3 bench/sdpa_first_use.py
"""
import subprocess
import sys
import threading
import time

CASES = ["none", "main", "thread", "thread_busy", "none_busy", "thread_samestream", "flash"]


def busy(seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sum(range(1000))


def child(case):
    import torch
    import torch.nn.functional as F
    x = torch.randn(64, 64, device="cuda")
    (x @ x).sum().item()  # the context and cuBLAS
    op = torch.ops.aten._scaled_dot_product_cudnn_attention.default

    def warm(side_stream=True):
        t0 = time.perf_counter()
        q = torch.ones(1, 1, 64, 64, device="cuda", dtype=torch.bfloat16)
        if side_stream:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                op(q, q, q, None, False, 0.0, True)
            stream.synchronize()
        else:
            op(q, q, q, None, False, 0.0, True)
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    warm_ms = None
    if case == "main":
        warm_ms = warm(False)
    elif case.startswith("thread"):
        result = {}
        t = threading.Thread(target=lambda: result.setdefault(
            "ms", warm(case != "thread_samestream")))
        t.start()
        if case == "thread_busy":
            busy(0.7)
        t.join()
        warm_ms = result["ms"]
    elif case == "none_busy":
        busy(0.7)
    q = torch.randn(4, 32, 1024, 64, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if case == "flash":
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    else:
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    F.scaled_dot_product_attention(q, q[:, :, :512], q[:, :, :512])
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    warm_text = "-" if warm_ms is None else f"{warm_ms:.1f}"
    print(f"warm-up ms {warm_text} first call ms {(t1 - t0) * 1e3:.1f} "
          f"another shape ms {(t2 - t1) * 1e3:.1f}")


def main():
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return
    for case in CASES:
        for round_ in range(2):
            p = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True)
            print(case, round_, p.stdout.strip() or p.stderr.strip()[-300:], flush=True)


if __name__ == "__main__":
    main()
