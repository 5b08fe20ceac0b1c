"""f32 vision models from timm (random weights, batch 32, 224x224, eval, no_grad): eager,
torch.compile(backend="torchfuse") and Inductor, timed side by side (models.interleaved_ms);
the relative error of torchfuse's and eager's outputs against the model in f64; torchfuse's first
call; how many of a forward's kernels are torchfuse's depthwise convolution kernel (f32 inference
graphs keep NCHW activations, so these are its NCHW kernel).

    PYTHONPATH=build-gpu/python python3 bench/f32_vision.py convnext_tiny,mobilenetv2_100
"""
import copy
import os
import sys
import time

import timm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (kernel_names, interleaved_ms)
import torchfuse  # noqa: E402,F401  (registers the "torchfuse" backend)


def relative_error(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def run(name):
    torch.manual_seed(0)
    m = timm.create_model(name, pretrained=False).cuda().eval()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    with torch.no_grad():
        want = copy.deepcopy(m).double()(x.double())
        eager_err = relative_error(m(x), want)
        t0 = time.time()
        ours = torch.compile(m, backend="torchfuse")
        got = ours(x)
        torch.cuda.synchronize()
        first = time.time() - t0
        err = relative_error(got, want)
        names = models.kernel_names(ours, x)
        depthwise = sum(1 for k in names if "tf_depthwise_conv" in k)
        inductor = torch.compile(m)
        inductor(x)
        ms = models.interleaved_ms({"eager": m, "torchfuse": ours, "inductor": inductor}, x)
    print(f"{name} f32 b32: eager {ms['eager']:.2f} ms, torchfuse {ms['torchfuse']:.2f}, "
          f"inductor {ms['inductor']:.2f}; rel err vs f64 {err:.2e} (eager {eager_err:.2e}); "
          f"first call {first:.1f} s; tf_depthwise_conv kernels {depthwise} of {len(names)}",
          flush=True)
    torch._dynamo.reset()


if __name__ == "__main__":
    for model_name in sys.argv[1].split(","):
        run(model_name)
