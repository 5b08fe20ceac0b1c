"""Elementwise kernels whose outputs are whole vectors but whose inputs are not: rows of 49
padded to 56 by a cat (as memory-efficient attention's masks are), a window bias read through
a permute plus a window mask, padded the same way, and, for contrast, transposes (a strided
site that streams). torchfuse as tuned (its kernels' names carry the vector width: _v1_ is
scalar) against Inductor, L2 flushed before each of 30 runs, median, and the largest
difference from eager.

    PYTHONPATH=build-gpu/python python3 bench/unaligned_rows.py [NAME,NAME...]

(names: substrings of the cases' names; default every case).
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import Fn, median_ms  # noqa: E402
import torchfuse  # noqa: E402


def window(t, m):
    b = t.permute(2, 0, 1).unsqueeze(0).unsqueeze(0) + m
    return torch.cat([b, b[..., :7]], -1)


CASES = [
    ("transpose 4096^2", lambda x: x.t().contiguous() * 2.0, [(4096, 4096)]),
    ("nchw->nhwc 64x96x56x56", lambda x: x.permute(0, 2, 3, 1).contiguous() * 2.0,
     [(64, 96, 56, 56)]),
    ("x.t()+y 4096^2", lambda x, y: x.t() + y, [(4096, 4096), (4096, 4096)]),
    ("y+x.t() 4096^2", lambda x, y: y + x.t(), [(4096, 4096), (4096, 4096)]),
    ("x.t().contiguous() 4096^2", lambda x: x.t().contiguous(), [(4096, 4096)]),
    ("y+nchw.permute 64x96x56x56", lambda x, y: y + x.permute(0, 2, 3, 1),
     [(64, 96, 56, 56), (64, 56, 56, 96)]),
    ("y*x.mT 64x512x384", lambda x, y: y * x.transpose(1, 2), [(64, 512, 384), (64, 384, 512)]),
    ("window bias+mask pad", window, [(49, 49, 3), (64, 64, 1, 49, 49)]),
    ("rows 49 -> pad 56", lambda x: torch.cat([x * 2.0, x[..., :7] * 2.0], -1),
     [(4096, 3, 49, 49)]),
]


def main():
    only = sys.argv[1].split(",") if len(sys.argv) > 1 else None
    print(torch.cuda.get_device_name(0), torch.__version__)
    for name, f, shapes in CASES:
        if only and not any(o in name for o in only):
            continue
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            xs = [torch.randn(*s, device="cuda", dtype=dtype) for s in shapes]
            compiled = torchfuse.compile(Fn(f).cuda(), cache_dir=tempfile.mkdtemp(),
                                         tune_mode="sync", dynamo=False)
            inductor = torch.compile(f)
            with torch.no_grad():
                err = (compiled(*xs).double() - f(*xs).double()).abs().max().item()
                inductor(*xs)
                ours = median_ms(lambda: compiled(*xs), 30) * 1e3
                theirs = median_ms(lambda: inductor(*xs), 30) * 1e3
            print(f"{name:24s} {str(dtype)[6:]:9s} torchfuse {ours:7.1f} us  inductor {theirs:7.1f} us"
                  f"  err {err:.1e}  {compiled.kernel_variants()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
