"""ATen's fused attention against the unfused form over short and long key lengths.

For q, k, v of [B, H, L, D] (bf16, contiguous; an additive mask of [B, 1, L, L] or none) it
prints the time of one call of `scaled_dot_product_attention` with ATen's own choice of
kernel, with each backend forced (cuDNN, memory-efficient, flash; nan where the backend
refuses), and of the unfused form as torch runs it (`(q @ k^T) * scale (+ mask)`, softmax,
`@ v`), in ms: the mean of 50 calls after 5, between CUDA events. It needs no torchfuse:

    python3 bench/attention_lengths.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(2048, 3, 49, 32), (512, 6, 49, 32), (128, 12, 49, 32), (1024, 4, 64, 32),
          (256, 12, 64, 64), (128, 12, 128, 64), (64, 12, 197, 64), (32, 12, 256, 64),
          (16, 12, 512, 64), (8, 12, 1024, 64)]


def ms(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def main():
    dt = torch.bfloat16
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| B | H | L | D | mask | default | cuDNN | efficient | flash | unfused |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b, h, length, d in SHAPES:
        q, k, v = (torch.randn(b, h, length, d, device="cuda", dtype=dt) for _ in range(3))
        for masked in (False, True):
            m = torch.randn(b, 1, length, length, device="cuda", dtype=dt) if masked else None
            r = {"default": ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m))}
            for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION),
                                  ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                                  ("flash", SDPBackend.FLASH_ATTENTION)]:
                try:
                    with sdpa_kernel(backend):
                        r[name] = ms(lambda: F.scaled_dot_product_attention(q, k, v,
                                                                             attn_mask=m))
                except Exception:  # noqa: BLE001  (a backend that refuses these operands)
                    r[name] = float("nan")
            scale = d ** -0.5

            def unfused():
                s = (q @ k.transpose(-2, -1)) * scale
                if m is not None:
                    s = s + m
                return torch.softmax(s, -1) @ v
            r["unfused"] = ms(unfused)
            print(f"| {b} | {h} | {length} | {d} | {'yes' if masked else 'no'} | "
                  + " | ".join(f"{r[k]:.3f}" for k in ("default", "cudnn", "efficient",
                                                        "flash", "unfused")) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
