"""Depthwise convolutions over channels-last activations: torchfuse's kernel against torch's
(cuDNN) and Inductor's (which calls the same cuDNN convolution), on ConvNeXt-tiny's 7x7 layers
and MobileNetV2's 3x3 ones at batch 64. Median of 30 runs with L2 flushed before each, % of
the device-to-device copy bandwidth for the bytes the convolution must move (input and output
once), the largest relative error against torch's convolution in f64, and the first call of
each shape in this process (torch's pays cuDNN's run-time compile of its kernel on a shape's
first use; torchfuse's its NVRTC compile, once per filter, stride and dtype, not per shape).

    PYTHONPATH=build-gpu/python python3 bench/depthwise_conv.py [OUT.md] [--dtypes bf16,f32]
"""
import argparse
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import median_ms  # noqa: E402
import torchfuse  # noqa: E402

# (model, channels, image size, filter, stride)
CASES = [("convnext", 96, 56, 7, 1), ("convnext", 192, 28, 7, 1), ("convnext", 384, 14, 7, 1),
         ("convnext", 768, 7, 7, 1), ("mobilenet", 32, 112, 3, 1), ("mobilenet", 96, 112, 3, 2),
         ("mobilenet", 144, 56, 3, 1), ("mobilenet", 144, 56, 3, 2), ("mobilenet", 192, 28, 3, 1),
         ("mobilenet", 384, 14, 3, 1), ("mobilenet", 576, 14, 3, 2), ("mobilenet", 960, 7, 3, 1)]
BATCH = 64


def copy_tbs():
    src = torch.empty(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 20)
    return 2 * src.nbytes / (ms * 1e-3) / 1e12


def first_ms(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--dtypes", default="bf16,f32")
    args = ap.parse_args()
    out_path, dtypes = args.out, args.dtypes
    copy = copy_tbs()
    device = torch.cuda.get_device_name(0)
    print(device, torch.__version__, f"copy {copy:.3f} TB/s", flush=True)
    rows = []
    for dtype, label in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        if label not in dtypes.split(","):
            continue
        for model, c, size, k, stride in CASES:
            torch.manual_seed(0)
            conv = torch.nn.Conv2d(c, c, k, stride=stride, padding=k // 2, groups=c).cuda()
            conv = conv.to(dtype).eval()
            x = torch.randn(BATCH, c, size, size, device="cuda", dtype=dtype).contiguous(
                memory_format=torch.channels_last)
            with torch.no_grad():
                torch_first = first_ms(lambda: conv(x))
                compiled = torchfuse.compile(conv, cache_dir=tempfile.mkdtemp(), dynamo=False)
                ours_first = first_ms(lambda: compiled(x))
                got = compiled(x)
                launches = compiled.stats(last_call=True).get("conv_launches", 0)
                want = torch.nn.functional.conv2d(x.double(), conv.weight.double(),
                                                  conv.bias.double(), stride, k // 2, 1, c)
                err = ((got.double() - want).abs().max() / want.abs().max()).item()
                inductor = torch.compile(conv)
                inductor(x)
                theirs = median_ms(lambda: conv(x), 30) * 1e3
                ours = median_ms(lambda: compiled(x), 30) * 1e3
                ind = median_ms(lambda: inductor(x), 30) * 1e3
            nbytes = x.nbytes + got.nbytes
            pct = lambda us: 100 * nbytes / (us * 1e-6) / 1e12 / copy  # noqa: E731
            row = (f"| {model} {c}x{size}x{size} k{k} s{stride} | {label} | {theirs:.1f} | "
                   f"{ind:.1f} | {ours:.1f} | {ours / theirs:.2f} | {pct(theirs):.0f} / "
                   f"{pct(ours):.0f} | {torch_first:.1f} / {ours_first:.1f} | {err:.1e} | "
                   f"{launches} |")
            print(row, flush=True)
            rows.append(row)
    head = ("| layer (batch 64) | dtype | torch (cuDNN) µs | Inductor µs | torchfuse µs | "
            "torchfuse / torch | % copy torch / torchfuse | first call ms torch / torchfuse | "
            "max rel. error vs f64 | torchfuse kernels |\n" + "|---" * 10 + "|")
    table = head + "\n" + "\n".join(rows)
    print(table)
    if out_path:
        with open(out_path, "w") as f:
            f.write(f"{device}, torch {torch.__version__}, copy {copy:.3f} TB/s, "
                    f"`python3 bench/depthwise_conv.py`\n\n{table}\n")


if __name__ == "__main__":
    main()
