"""Where the first call of torch.compile(model, backend="torchfuse") spends its time.

Per model (bench/models.py's configs, bf16, no_grad), in a fresh process with an empty
torchfuse cache: the first call's wall time split into Dynamo (tracing the Python), AOTAutograd
(functionalizing and decomposing), torchfuse's graph compile (FX to its IR, import and fusion,
explain), and the first run of the compiled graphs (kernel choice, NVRTC, tuning, module loads,
and the run itself), with torchfuse's own phase totals (threads summed).

    PYTHONPATH=build-gpu/python TORCHFUSE_CACHE_DIR=$(mktemp -d) [TORCHFUSE_TUNE=background] \
        python3 bench/first_call.py [--models gpt2,llama] [--warm-imports]

The CUDA driver's compute cache is off (CUDA_CACHE_DISABLE=1, set by bench/models.py's import,
before CUDA starts) unless CUDA_CACHE_DISABLE is set.
"""
import argparse
import functools
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (bench/models.py: the model configs; turns the compute cache off)
from cold_caches import collect_garbage  # noqa: E402


class Timers:
    def __init__(self):
        self.s = {}

    def wrap(self, key, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.s[key] = self.s.get(key, 0.0) + time.perf_counter() - t0
        return timed


def first_call(name, warm_imports):
    import torchfuse
    from torchfuse import _C, _backend, _runtime

    torch.manual_seed(0)
    model, make_input = models.MODELS[name]()
    model = model.cuda().eval().to(torch.bfloat16)
    x = make_input()
    if x.is_floating_point():  # images: the bf16 model takes bf16 pixels
        x = x.to(torch.bfloat16)
    if warm_imports:
        # Imports and lazy initialization that any backend pays once per process.
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(torch.nn.Linear(8, 8).cuda(), backend="aot_eager")(
                torch.randn(2, 8, device="cuda"))
    timers = Timers()
    backend = _backend.Backend()
    backend.compile = timers.wrap("torchfuse graph compile", backend.compile)
    call = timers.wrap("backend (AOTAutograd + graph compile)", backend.__call__)
    # A compiled graph runs through its per-call path (direct), or through torch.ops where
    # that declines (through_op); Compiled.__call__ and the backend's own callables call these.
    saved = {m: getattr(_runtime.Compiled, m) for m in ("direct", "through_op")}
    for m, fn in saved.items():
        setattr(_runtime.Compiled, m, timers.wrap("compiled graphs' runs", fn))
    try:
        torch._dynamo.reset()
        fast = torch.compile(model, backend=lambda gm, ex, **kw: call(gm, ex, **kw))
        before = dict(_C.phase_times())
        with torch.no_grad():
            collect_garbage()
            t0 = time.perf_counter()
            fast(x)
            torch.cuda.synchronize()
            total = time.perf_counter() - t0
    finally:
        for m, fn in saved.items():
            setattr(_runtime.Compiled, m, fn)
    s = timers.s
    backend_s = s.get("backend (AOTAutograd + graph compile)", 0.0)
    graph_s = s.get("torchfuse graph compile", 0.0)
    runs_s = s.get("compiled graphs' runs", 0.0)
    rows = [("first call", total),
            ("Dynamo and the rest (first call - backend - runs)", total - backend_s - runs_s),
            ("AOTAutograd", backend_s - graph_s),
            ("torchfuse graph compile (incl. explain)", graph_s),
            ("compiled graphs' first runs", runs_s)]
    print(f"== {name}: first call, seconds")
    for k, v in rows:
        print(f"  {k:55s} {v:8.2f}")
    print(f"== {name}: torchfuse phases (ms, count; threads summed)")
    for k, (ms, n) in sorted(_C.phase_times().items()):
        ms0, n0 = before.get(k, (0.0, 0))
        print(f"  {k:55s} {ms - ms0:10.1f} {n - n0:6d}")
    print(f"  counters: {_C.process_counters()}")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--warm-imports", action="store_true")
    a = p.parse_args()
    for name in a.models.split(","):
        first_call(name, a.warm_imports)


if __name__ == "__main__":
    main()
