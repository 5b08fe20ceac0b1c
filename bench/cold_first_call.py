"""Cold first calls: torch.compile(model, backend=B) on bench/models.py's models (bf16, no_grad),
each model and backend in a fresh process with empty torchfuse and Inductor caches, after the
imports and lazy initialization any backend pays (a tiny aot_eager compile). `aot_eager` is
Dynamo and AOTAutograd alone: the floor of any backend built on them. `torchfuse_workers` is
torchfuse with its NVRTC compiles in worker processes (TORCHFUSE_COMPILE_WORKERS=1, opt-in);
`torchfuse` tunes lazily (the default: the first call runs each group's own torch ops while its
heuristic's kernel compiles in the background); `torchfuse_background` is torchfuse with
background tuning (TORCHFUSE_TUNE=background: the first call compiles and runs the heuristic's
kernel). The `_nowarm` forms turn off NVRTC's warm-up on a pool thread at the capture's start
(TORCHFUSE_WARM_NVRTC=0). `dynamo` is Dynamo alone (its `eager` backend runs the captured
torch-level graph as it is). `torchfuse_fx` is `torchfuse.compile(model, dynamo=False)`: FX or
TorchScript capture, no Dynamo or AOTAutograd (its first call also checks the output against
eager's and prints the error).
Every torchfuse figure is also printed with the first call's NVRTC compiles and NVRTC time
(torchfuse's process counters and phase totals). `--eager-first` runs each model once eagerly
before it is compiled: its torch kernels' first use (module loading, cuDNN and cuBLAS set-up)
then falls outside every backend's first call.

    PYTHONPATH=build-gpu/python python3 bench/cold_first_call.py OUT.md [--models gpt2,vit]
        [--backends torchfuse,torchfuse_workers,torchfuse_background] [--eager-first]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

# Each backend and its column's title.
TITLES = {"torchfuse": "torchfuse", "torchfuse_workers": "torchfuse, compiles in worker processes",
          "torchfuse_background": "torchfuse, background tuning", "inductor": "Inductor",
          "aot_eager": "Dynamo + AOTAutograd alone (aot_eager)", "dynamo": "Dynamo alone",
          "torchfuse_fx": "torchfuse, dynamo=False",
          "torchfuse_nowarm": "torchfuse, no NVRTC warm-up",
          "torchfuse_background_nowarm": "torchfuse, background tuning, no NVRTC warm-up"}
BACKENDS = tuple(TITLES)  # the default order


def one(name, backend, eager_first=False):
    """In a child process: prints the first call's seconds."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models
    from cold_caches import collect_garbage
    fx = backend == "torchfuse_fx"
    if backend.startswith("torchfuse"):
        import torchfuse  # noqa: F401  (registers the backend)
        backend = "torchfuse"
    elif backend == "dynamo":
        backend = "eager"
    model, x = models.bf16_inference(name)
    with torch.no_grad():
        torch.compile(torch.nn.Linear(8, 8).cuda(), backend="aot_eager")(
            torch.randn(2, 8, device="cuda"))
        torch._dynamo.reset()
        if eager_first:
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            print(f"EAGER_FIRST_S {time.perf_counter() - t0:.3f}")
        fast = torchfuse.compile(model, dynamo=False) if fx else torch.compile(model, backend=backend)
        torch.cuda.synchronize()
        collect_garbage()
        t0 = time.perf_counter()
        out = fast(x)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if fx:
            # Checked once compiled: a lazy first call runs torch ops while kernels compile.
            models.settle("torchfuse", fast, x)
            out = fast(x)
            got, want = models.logits(out).float(), models.logits(model(x)).float()
            print(f"capture {fast.how}: max error against eager "
                  f"{(got - want).abs().max().item():.3g} (outputs up to "
                  f"{want.abs().max().item():.3g})"
                  + (f"; before it: {fast._capture.failed}" if fast._capture is not None and
                     fast._capture.failed else "")
                  + (f"; {fast._capture_error}" if fast._capture_error else ""))
    print(f"FIRST_CALL_S {seconds:.3f}")
    if backend == "torchfuse":
        from torchfuse import _C
        nvrtc = _C.phase_times().get("nvrtc")
        print("COUNTERS", _C.process_counters(), "nvrtc phase", nvrtc, "nvrtc warm-up ms",
              round(_C.nvrtc_warmup_ms(), 1))


def run_one(name, backend, eager_first):
    """`name`'s first call with `backend` in a fresh process; its seconds, None on failure."""
    from cold_caches import empty_caches_env
    env = empty_caches_env()
    env["TORCHFUSE_COMPILE_WORKERS"] = "1" if backend == "torchfuse_workers" else "0"
    # The default mode unless the backend names one, whatever the shell has.
    env.pop("TORCHFUSE_TUNE", None)
    if backend.startswith("torchfuse_background"):
        env["TORCHFUSE_TUNE"] = "background"
    if backend.endswith("_nowarm"):
        env["TORCHFUSE_WARM_NVRTC"] = "0"
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name, backend]
                       + (["--eager-first"] if eager_first else []),
                       env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("FIRST_CALL_S")]
    seconds = float(lines[-1].split()[1]) if lines else None
    if not lines:
        print(f"{name} {backend} failed:\n{p.stderr[-2000:]}", file=sys.stderr)
    notes = [ln for ln in p.stdout.splitlines()
             if ln.startswith(("COUNTERS", "capture", "EAGER_FIRST_S"))]
    print(f"{name} {backend}: {seconds} {' '.join(notes)}", flush=True)
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--models", default="gpt2,llama,vit,convnext")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--eager-first", action="store_true",
                    help="run each model once eagerly before compiling it")
    ap.add_argument("--repeat", type=int, default=1,
                    help="fresh processes per model and backend, each round in another order "
                         "of the backends; the table gives their median")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(*args.one, eager_first=args.eager_first)
        return
    rows = []
    asked = args.backends.split(",")
    for name in args.models.split(","):
        times = {b: [] for b in asked}
        for rep in range(args.repeat):
            # Each repeat in another order: nothing a process leaves behind (the page cache's
            # copy of the libraries) favours one backend.
            k = rep % len(asked)
            for backend in asked[k:] + asked[:k]:
                t = run_one(name, backend, args.eager_first)
                if t is not None:
                    times[backend].append(t)
        rows.append((name, {b: statistics.median(v) if v else None for b, v in times.items()}))
    others = [b for b in asked if b != "inductor"]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.3f}"  # noqa: E731
    heads = [f"{TITLES[b]} s" for b in asked]
    if "inductor" in asked:
        heads += [f"{TITLES[b]} / Inductor" for b in others]
    lines = ["| model | " + " | ".join(heads) + " |", "|---" * (1 + len(heads)) + "|"]
    for name, r in rows:
        cells = [fmt(r.get(b)) for b in asked]
        if "inductor" in asked:
            cells += [ratio(r.get(b), r.get("inductor")) for b in others]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        import torch
        with open(args.out, "w") as f:
            f.write(f"Commit {os.environ.get('TORCHFUSE_COMMIT', '?')}, `python3 "
                    f"bench/cold_first_call.py`, {torch.cuda.get_device_name(0)}, torch "
                    f"{torch.__version__}: each first call in a fresh process with empty "
                    f"caches, bf16 forward under no_grad"
                    f"{f', median of {args.repeat} processes' if args.repeat > 1 else ''}"
                    f"{', after one eager call of the model' if args.eager_first else ''}."
                    f"\n\n{table}\n")


if __name__ == "__main__":
    main()
