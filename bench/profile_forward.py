"""Where one bf16 forward's device time goes, per system: the kernels of one call of a real model
(bench/models.py) under no_grad through eager, Inductor and torchfuse, summed by kind (matrix
products, convolutions, attention, the compiler's own kernels, other ATen kernels, copies) and
the heaviest kernels by total time.

    PYTHONPATH=build-gpu/python python3 bench/profile_forward.py vit,convnext [--top 15]
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

KINDS = [  # (kind, substrings of a kernel's name), first match wins
    ("Inductor", ("triton_",)),
    ("attention", ("flash", "fmha", "attention", "cudnn_generated_fort_native_sdpa")),
    ("convolution", ("conv", "fprop", "dgrad", "wgrad", "implicit_gemm", "depthwise")),
    ("matrix product", ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "sm80_", "cublas")),
    ("copy/fill", ("Memcpy", "Memset")),
]


def kind_of(name, own):
    for kind, keys in KINDS:
        if any(k in name for k in keys):
            return kind
    return "torchfuse" if name in own else "other ATen"


def profile(label, fn, x, top, own):
    events = models.device_events(fn, x)
    by_kind = collections.Counter()
    by_name = collections.Counter()
    count = collections.Counter()
    for name, us in events:
        by_kind[kind_of(name, own)] += us
        by_name[name] += us
        count[name] += 1
    total = sum(by_kind.values())
    print(f"== {label}: {len(events)} device events, {total / 1e3:.3f} ms of device time")
    for kind, us in by_kind.most_common():
        print(f"   {kind:15s} {us / 1e3:8.3f} ms  {100 * us / total:5.1f} %")
    for name, us in by_name.most_common(top):
        print(f"   {us / 1e3:8.3f} ms {count[name]:4d}x  {kind_of(name, own):14s} {name[:110]}")
    return events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--systems", default="eager,inductor,torchfuse")
    args = ap.parse_args()
    import torchfuse  # noqa: F401  (registers the backend)
    for name in args.models.split(","):
        torch._dynamo.reset()
        model, x = models.bf16_inference(name)
        with torch.no_grad():
            eager_names = set(models.kernel_names(model, x))
            for system in args.systems.split(","):
                if system == "eager":
                    fn = model
                elif system == "inductor":
                    fn = torch.compile(model)
                else:
                    fn = torch.compile(model, backend="torchfuse")
                fn(x)
                models.settle(system, fn, x)
                ms = models.time_ms(fn, x)
                # torchfuse's kernels: those its call launches that eager never does (ATen's
                # library kernels among them are told apart by name first).
                own = set()
                if system == "torchfuse":
                    own = set(models.kernel_names(fn, x)) - eager_names
                profile(f"{name} {system} ({ms:.2f} ms a call)", fn, x, args.top, own)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
