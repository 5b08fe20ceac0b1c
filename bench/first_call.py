"""What a first call costs, and how much of it is capture: per real model (bench/models.py),
the first call of torch.compile with backend "aot_eager" (Dynamo and AOTAutograd, no compiler)
run twice so that the second is warm, then torchfuse's and Inductor's first calls. Capture is
the floor of any backend built on AOTAutograd; the rest of a first call is the compiler's.

    PYTHONPATH=build-gpu/python python3 bench/first_call.py [--models gpt2,llama] [--profile DIR]

--profile writes cProfile's view of torchfuse's first call (cumulative and own time) to
DIR/first_call_<model>.txt.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (bench/models.py: the model configs)


def first_call_s(fn, x, profiler=None):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    fn(x)
    torch.cuda.synchronize()
    if profiler is not None:
        profiler.disable()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    import torchfuse  # noqa: F401  (registers the backend)
    print("| model | capture s (aot_eager, warm) | torchfuse first call s | Inductor first call s |"
          " capture / Inductor | torchfuse / Inductor |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, make_input = models.MODELS[name]()
        model = model.cuda().eval().to(torch.bfloat16)
        x = make_input()
        with torch.no_grad():
            model(x)
            capture = []
            for _ in range(2):
                torch._dynamo.reset()
                capture.append(first_call_s(torch.compile(model, backend="aot_eager"), x))
            torch._dynamo.reset()
            prof = cProfile.Profile() if args.profile else None
            ours = first_call_s(torch.compile(model, backend="torchfuse"), x, prof)
            if prof is not None:
                os.makedirs(args.profile, exist_ok=True)
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(80)
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
                with open(os.path.join(args.profile, f"first_call_{name}.txt"), "w") as f:
                    f.write(text.getvalue())
            torch._dynamo.reset()
            inductor = first_call_s(torch.compile(model), x)
            torch._dynamo.reset()
        print(f"| {name} | {capture[1]:.2f} | {ours:.2f} | {inductor:.2f} | "
              f"{capture[1] / inductor:.2f} | {ours / inductor:.2f} |", flush=True)


if __name__ == "__main__":
    main()
