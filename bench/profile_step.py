"""The kernels of one bf16 training step of a model of bench/models.py (GPT-2 by default)
through a torch.compile backend, by total device time (torch.profiler): where a step's time
goes.

    PYTHONPATH=build-gpu/python python3 bench/profile_step.py [inductor|torchfuse|torchfuse-bw]
        [TOP] [MODEL]
"""
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from torchfuse._backend import Backend  # noqa: E402


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "torchfuse-bw"
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    name = sys.argv[3] if len(sys.argv) > 3 else "gpt2"
    torch.manual_seed(0)
    model, make_input = models.MODELS[name]()
    model = model.cuda().to(torch.bfloat16).train()
    x = make_input()
    backend = {"inductor": "inductor", "torchfuse": Backend(compile_backward=False),
               "torchfuse-bw": Backend(compile_backward=True)}[which]
    fn = torch.compile(model, backend=backend)

    def run():
        for p in model.parameters():
            p.grad = None
        fn(x, labels=x).loss.backward()

    for _ in range(3):
        run()
    if which != "inductor":
        import torchfuse
        torchfuse.wait_for_compiles()  # then one call finishes the background tuning
    run()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    total = collections.Counter()
    count = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name] += e.time_range.elapsed_us()
            count[e.name] += 1
    all_us = sum(total.values())
    print(f"{name} {which}: {sum(count.values())} kernels, {all_us / 1e3:.2f} ms of device time")
    for kernel, us in total.most_common(top):
        print(f"{us / 1e3:8.3f} ms {count[kernel]:4d}x  {kernel[:150]}")


if __name__ == "__main__":
    main()
