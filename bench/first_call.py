"""Where the first call of torch.compile(model, backend=B) spends its time.

Per model (bench/models.py's configs, bf16, no_grad) and backend: the first call's wall time
split into Dynamo (tracing the Python, and the rest: the first call less the backend and the
runs), the backend's compile of the graphs it is handed (for torchfuse: AOTAutograd's trace,
or make_fx's, and torchfuse's graph compile apart), and those graphs' first runs (for
torchfuse: kernel choice, NVRTC, tuning, module loads and the run itself), with torchfuse's own
phase totals (threads summed; TORCHFUSE_HOST_TIMES=1 adds each node's host time) and why any
of its inference graphs was not traced by make_fx alone. Backends: torchfuse (the default),
torchfuse+flash (torchfuse with TORCHFUSE_ATTENTION_KERNEL=flash) and any other torch.compile
backend (aot_eager: Dynamo and AOTAutograd alone; inductor). --steady adds the time of a later
call (best of 5 x 10 calls, after torchfuse's compiles and one settling call) and the largest
error against eager, relative to eager's largest logit.

    PYTHONPATH=build-gpu/python TORCHFUSE_CACHE_DIR=$(mktemp -d) [TORCHFUSE_TUNE=background] \
        python3 bench/first_call.py [--models gpt2,llama] [--warm-imports]

--fresh runs each model and backend in a process of its own, with empty torchfuse, Inductor and
CUDA compute caches, the imports any backend pays made before the timed call, and
TORCHFUSE_HOST_TIMES=1 for torchfuse; --repeat N runs the list N times, every other round in
reverse order:

    PYTHONPATH=build-gpu/python python3 bench/first_call.py --fresh --steady \
        --models llama,gpt2 --backends torchfuse,torchfuse+flash,aot_eager,inductor [--repeat 2]

The CUDA driver's compute cache is off (CUDA_CACHE_DISABLE=1, set by bench/models.py's import,
before CUDA starts) unless CUDA_CACHE_DISABLE is set.
"""
import argparse
import functools
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (bench/models.py: the model configs; turns the compute cache off)
from cold_caches import collect_garbage, empty_caches_env  # noqa: E402

FLASH = "+flash"


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

    def wrap_first(self, key, fn):
        """`fn` (a compiled graph), its first call timed into `key`."""
        state = {"first": True}

        def call(*args):
            if not state["first"]:
                return fn(*args)
            state["first"] = False
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.s[key] = self.s.get(key, 0.0) + time.perf_counter() - t0
        call.__dict__.update(getattr(fn, "__dict__", {}))  # _boxed_call, where it has one
        return call


def first_call(name, backend, warm_imports, steady):
    """Prints where `name`'s first call with `backend` (torchfuse+flash: torchfuse with
    TORCHFUSE_ATTENTION_KERNEL=flash for this call) goes, in this process."""
    if not backend.endswith(FLASH):
        return measure(name, backend, backend, warm_imports, steady)
    keep = os.environ.get("TORCHFUSE_ATTENTION_KERNEL")
    os.environ["TORCHFUSE_ATTENTION_KERNEL"] = "flash"
    try:
        return measure(name, backend[:-len(FLASH)], backend, warm_imports, steady)
    finally:
        if keep is None:
            del os.environ["TORCHFUSE_ATTENTION_KERNEL"]
        else:
            os.environ["TORCHFUSE_ATTENTION_KERNEL"] = keep


def measure(name, backend, label, warm_imports, steady):
    import torchfuse  # noqa: F401  (registers the backend)
    from torchfuse import _C, _backend

    ours = backend == "torchfuse"
    model, x = models.bf16_inference(name)
    if warm_imports:
        # Imports and lazy initialization that any backend pays once per process.
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(torch.nn.Linear(8, 8).cuda(), backend="aot_eager")(
                torch.randn(2, 8, device="cuda"))
    timers = Timers()
    if ours:
        inner = _backend.Backend()
        inner.compile = timers.wrap("torchfuse graph compile", inner.compile)
    else:
        from torch._dynamo.backends.registry import lookup_backend
        inner = lookup_backend(backend)
    call = timers.wrap("backend", inner)

    def timed_backend(gm, example_inputs, **kwargs):
        return timers.wrap_first("first runs", call(gm, example_inputs, **kwargs))

    torch._dynamo.reset()
    fast = torch.compile(model, backend=timed_backend)
    before = dict(_C.phase_times())
    with torch.no_grad():
        collect_garbage()
        t0 = time.perf_counter()
        fast(x)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    s = timers.s
    backend_s, graph_s, runs_s = (s.get(k, 0.0) for k in
                                  ("backend", "torchfuse graph compile", "first runs"))
    rows = [("first call", total),
            ("Dynamo and the rest (first call - backend - runs)", total - backend_s - runs_s)]
    if ours:
        rows += [("AOTAutograd (or make_fx)", backend_s - graph_s),
                 ("torchfuse graph compile (incl. explain)", graph_s)]
    else:
        rows += [(f"backend ({backend})", backend_s)]
    rows += [("compiled graphs' first runs", runs_s)]
    print(f"== {name}, {label}: first call, seconds")
    for k, v in rows:
        print(f"  {k:55s} {v:8.2f}")
    if ours:
        print(f"== {name}, {label}: torchfuse phases (ms, count; threads summed)")
        for k, (ms, n) in sorted(_C.phase_times().items()):
            ms0, n0 = before.get(k, (0.0, 0))
            if ms - ms0 >= 0.05 or n - n0:
                print(f"  {k:55s} {ms - ms0:10.1f} {n - n0:6d}")
        print(f"  counters: {_C.process_counters()}")
        print(f"  traced by make_fx {inner.traced} of {inner.exported} exported; not traced: "
              f"{inner.untraced}")
    if steady:
        with torch.no_grad():
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
        print(f"== {name}, {label}: a later call {min(times) * 1e3:.3f} ms; largest error "
              f"against eager {err:.2e}")
    sys.stdout.flush()


def in_fresh_process(name, backend, steady):
    """`name`'s first call with `backend` in a process of its own with empty caches."""
    env = empty_caches_env(
        TORCHFUSE_HOST_TIMES="1" if backend.startswith("torchfuse") else "0")
    env.pop("TORCHFUSE_ATTENTION_KERNEL", None)  # the backend's name says
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--models", name,
                        "--backends", backend, "--warm-imports"] + (["--steady"] if steady else []),
                       env=env, capture_output=True, text=True, timeout=600)
    out = [ln for ln in p.stdout.splitlines() if ln.startswith(("==", "  "))]
    print("\n".join(out) if p.returncode == 0 else
          f"== {name}, {backend} failed:\n{p.stderr[-2000:]}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--backends", default="torchfuse")
    p.add_argument("--warm-imports", action="store_true")
    p.add_argument("--steady", action="store_true")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--repeat", type=int, default=1)
    a = p.parse_args()
    backends = a.backends.split(",")
    for r in range(a.repeat):
        for name in a.models.split(","):
            for backend in backends if r % 2 == 0 else backends[::-1]:
                if a.fresh:
                    in_fresh_process(name, backend, a.steady)
                else:
                    first_call(name, backend, a.warm_imports, a.steady)


if __name__ == "__main__":
    main()
