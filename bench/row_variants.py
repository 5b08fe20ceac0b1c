"""One BENCH.md workload's row-kernel variants side by side: Inductor, torchfuse as tuned, and
torchfuse forced to each given variant (TORCHFUSE_ROW_STRATEGY), with % of copy bandwidth and
the error against eager; after the tuned line, the tuner's record (its phases and each trial's
time, the runoff's where it ran). With --prof VARIANT: one call of that variant inside an NVTX range
"prof", for Nsight Compute (ncu --nvtx --nvtx-include "prof/" ...).

    PYTHONPATH=build/python python3 bench/row_variants.py layernorm bf16 block_t256 block_t512
    ncu --nvtx --nvtx-include "prof/" --set full python3 bench/row_variants.py layernorm bf16 --prof block_t256
"""
import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import median_ms, workloads  # noqa: E402
from side_by_side import Workload, copy_tbs  # noqa: E402
import torchfuse  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", help="a BENCH.md workload name, as bench/side_by_side.py prints it")
    parser.add_argument("dtype", choices=["f32", "bf16"])
    parser.add_argument("variants", nargs="*")
    parser.add_argument("--prof", default="", help="run this variant once in an NVTX range")
    args = parser.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    found = [w for w in workloads() if w[0] == args.workload]
    if not found:
        print("workloads:", ", ".join(w[0] for w in workloads()))
        return 2
    _, shape, body, nparams = found[0]
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    params = [torch.randn(shape[-1], device="cuda", dtype=dtype) for _ in range(nparams)]
    module = Workload(body, params).cuda()

    def compiled(variant):
        if variant:
            os.environ["TORCHFUSE_ROW_STRATEGY"] = variant
        else:
            os.environ.pop("TORCHFUSE_ROW_STRATEGY", None)
        cache_dir = tempfile.mkdtemp()
        c = torchfuse.compile(module, cache_dir=cache_dir, tune_mode="sync", dynamo=False)
        c(x)
        c(x)
        return c, cache_dir

    def tuning(cache_dir):
        """The tuner's records in cache_dir: each one's phases and trials' times."""
        lines = []
        for e in torchfuse.cache.ls(cache_dir):
            if e["type"] == "tuning" and e["trials"]:
                trials = " ".join(f"{t['variant']}={t['ms'] * 1e3:.1f}" if "ms" in t else
                                  f"{t['variant']}: {t['error']}" for t in e["trials"])
                lines.append(f"    {e['kernel']}: {e['phases']}\n    trials (us): {trials}")
        return "\n".join(lines)

    with torch.no_grad():
        if args.prof:
            c, _ = compiled(args.prof)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("prof")
            c(x)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            return 0
        out = module(x)
        gb = (x.numel() * x.element_size() + out.numel() * out.element_size()) / 1e9
        copy = copy_tbs()
        ref = out.double()

        def line(label, fn, extra=""):
            ms = median_ms(fn, 50)
            err = ((fn().double() - ref).norm() / ref.norm()).item()
            print(f"{label:28s} {ms * 1e3:8.1f} us {gb / ms * 1e3 / copy / 10:5.1f}% err {err:.1e} {extra}",
                  flush=True)

        print(f"== {args.workload} {args.dtype} {list(shape)}, copy {copy:.3f} TB/s", flush=True)
        ind = torch.compile(module)
        ind(x)
        line("inductor", lambda: ind(x))
        for v in [None] + args.variants:
            c, cache_dir = compiled(v)
            line(str(v) if v else "torchfuse tuned", lambda: c(x), "" if v else str(c.kernel_variants()))
            if not v:
                print(tuning(cache_dir), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
