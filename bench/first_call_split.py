"""Where a cold first call goes: torch.compile(model, backend=B) on bench/models.py's bf16
models under no_grad, each model and backend in a fresh process with empty torchfuse, Inductor
and CUDA compute caches (as bench/cold_first_call.py), the first call split into Dynamo's
analysis, the backend's compile of the graphs it is handed, and those graphs' first runs. Then
the steady time of a call (best of 5 x 10 calls, after torchfuse's compiles and one settling
call) and the largest error against eager, relative to eager's largest logit. For torchfuse,
the phases of its first two calls (TORCHFUSE_HOST_TIMES: each node's host time) and why any
graph was not traced by make_fx alone. The backend `torchfuse+flash` is torchfuse with
TORCHFUSE_ATTENTION_KERNEL=flash.

    PYTHONPATH=build-gpu/python python3 bench/first_call_split.py llama,gpt2 \\
        torchfuse,torchfuse+flash,aot_eager,inductor [REPEAT]
"""
import os
import subprocess
import sys
import tempfile
import time

FLASH = "+flash"


def first_call_timed(fn, totals):
    """`fn` (a compiled graph), adding the time of its first call to totals["first_runs"]."""
    state = {"first": True}

    def call(*args):
        if not state["first"]:
            return fn(*args)
        state["first"] = False
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            totals["first_runs"] += time.perf_counter() - t0
    call.__dict__.update(getattr(fn, "__dict__", {}))
    return call


def one(name, backend):
    """In a child process: prints RESULT, STEADY and (torchfuse) PHASES and TRACED lines."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import models
    from cold_caches import collect_garbage
    if backend.endswith(FLASH):
        os.environ["TORCHFUSE_ATTENTION_KERNEL"] = "flash"
        backend = backend[:-len(FLASH)]
    if backend == "torchfuse":
        from torchfuse import _C, _backend
        inner = _backend.backend
    else:
        from torch._dynamo.backends.registry import lookup_backend
        inner = lookup_backend(backend)
    totals = {"backend": 0.0, "first_runs": 0.0, "graphs": 0}

    def timed_backend(gm, example_inputs, **kwargs):
        t0 = time.perf_counter()
        compiled = inner(gm, example_inputs, **kwargs)
        totals["backend"] += time.perf_counter() - t0
        totals["graphs"] += 1
        return first_call_timed(compiled, totals)

    model, x = models.bf16_inference(name)
    label = backend + (FLASH if os.environ.get("TORCHFUSE_ATTENTION_KERNEL") == "flash" else "")
    with torch.no_grad():
        # The imports and lazy set-up any backend pays, outside the timed call.
        torch.compile(torch.nn.Linear(8, 8).cuda(), backend="aot_eager")(
            torch.randn(2, 8, device="cuda"))
        torch._dynamo.reset()
        fast = torch.compile(model, backend=timed_backend)
        torch.cuda.synchronize()
        collect_garbage()
        before = _C.phase_times() if backend == "torchfuse" else {}
        t0 = time.perf_counter()
        fast(x)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast(x)
        torch.cuda.synchronize()
        second = time.perf_counter() - t0
        phases = _C.phase_times() if backend == "torchfuse" else {}
        models.settle(backend, fast, x)
        for _ in range(3):
            fast(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(10):
                fast(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / 10)
        got, want = models.logits(fast(x)).float(), models.logits(model(x)).float()
        err = ((got - want).abs().max() / want.abs().max()).item()
    ms = {k: 1e3 * totals[k] for k in ("backend", "first_runs")}
    print(f"RESULT {name} {label}: first call {total * 1e3:.0f} ms = Dynamo "
          f"{total * 1e3 - ms['backend'] - ms['first_runs']:.0f} + backend {ms['backend']:.0f} "
          f"+ first runs {ms['first_runs']:.0f} ({totals['graphs']} graphs); second call "
          f"{second * 1e3:.1f} ms")
    print(f"STEADY {name} {label}: {min(times) * 1e3:.3f} ms a call; largest error against "
          f"eager {err:.2e}")
    if backend == "torchfuse":
        spent = sorted(((v[0] - before.get(k, (0, 0))[0], v[1] - before.get(k, (0, 0))[1], k)
                        for k, v in phases.items()), reverse=True)
        print("PHASES " + "; ".join(f"{k} {t:.0f} ms/{n}" for t, n, k in spent[:22] if t >= 2))
        be = _backend.backend
        print(f"TRACED by make_fx {be.traced} of {be.exported} exported; not traced: "
              f"{be.untraced}")


def main():
    names, backends = sys.argv[1].split(","), sys.argv[2].split(",")
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for r in range(repeat):
        for name in names:
            for backend in backends if r % 2 == 0 else backends[::-1]:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(),
                           TORCHFUSE_CACHE_DIR=tempfile.mkdtemp(),
                           CUDA_CACHE_PATH=tempfile.mkdtemp(),
                           TORCHFUSE_HOST_TIMES="1" if backend.startswith("torchfuse") else "0")
                env.pop("TORCHFUSE_ATTENTION_KERNEL", None)
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name,
                                    backend], env=env, capture_output=True, text=True,
                                   timeout=600)
                lines = [ln for ln in p.stdout.splitlines()
                         if ln.startswith(("RESULT", "STEADY", "PHASES", "TRACED"))]
                print("\n".join(lines) if lines else
                      f"{name} {backend} failed:\n{p.stderr[-2000:]}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        one(sys.argv[2], sys.argv[3])
    else:
        main()
