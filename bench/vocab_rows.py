"""Vocabulary rows ([4096, 50257] bf16): the traffic bound of a pure cast next to log_softmax and
softmax, Inductor against torchfuse (tuned, and forced to each given variant, or to a default
list). With --prof VARIANT: one run of that log_softmax variant inside an NVTX range "prof",
for ncu --nvtx --nvtx-include "prof/".

    PYTHONPATH=build-gpu/python python3 bench/vocab_rows.py [VARIANT...] [--prof VARIANT]
"""
import argparse, os, sys, tempfile, torch
sys.path.insert(0, "bench")
from compile_baseline import median_ms
from side_by_side import Workload, copy_tbs
import torchfuse
parser = argparse.ArgumentParser()
parser.add_argument("variants", nargs="*", help="row variants to force (TORCHFUSE_ROW_STRATEGY)")
parser.add_argument("--prof", default="", help="run this log_softmax variant once in an NVTX range")
args = parser.parse_args()
prof = bool(args.prof)
copy = 3.0 if prof else copy_tbs()
print(f"copy {copy:.3f} TB/s", flush=True)
torch.manual_seed(0)
x = torch.randn(4096, 50257, device="cuda", dtype=torch.bfloat16)
def pct(t, gb): return f"{t*1e3:7.1f} us {gb/t*1e3/copy/10:5.1f}%"
gb6 = x.numel() * 6 / 1e9
gb4 = x.numel() * 4 / 1e9
with torch.no_grad():
    if not prof: print("eager cast bf16->f32     ", pct(median_ms(lambda: x.float(), 50), gb6), flush=True)
    if not prof: print("eager copy bf16          ", pct(median_ms(lambda: x.clone(), 50), gb4), flush=True)
    def tf(body, variant):
        if variant: os.environ["TORCHFUSE_ROW_STRATEGY"] = variant
        else: os.environ.pop("TORCHFUSE_ROW_STRATEGY", None)
        c = torchfuse.compile(Workload(body, []).cuda(), cache_dir=tempfile.mkdtemp(), tune_mode="sync", dynamo=False)
        c(x); c(x)
        return c
    for name, body, gb in [] if prof else [("log_softmax f32 out", lambda x, p: torch.log_softmax(x.float(), -1), gb6),
                           ("softmax bf16 out", lambda x, p: torch.softmax(x, -1), gb4)]:
        ind = torch.compile(Workload(body, []).cuda()); ind(x)
        print(f"== {name}: inductor", pct(median_ms(lambda: ind(x), 50), gb), flush=True)
        ref = body(x, []).double()
        forced = args.variants or ["looped_t512_u1", "looped_t512_u1_l2", "looped_t1024_u2_l2",
                                   "looped_t512_u2_sm", "looped_t1024_u2_sm", "looped_t512_u2_l2_sm"]
        for v in [None] + forced:
            c = tf(body, v)
            err = ((c(x).double() - ref).norm() / ref.norm()).item()
            print(f"   {str(v):24s}", pct(median_ms(lambda: c(x), 50), gb), c.kernel_variants() if v is None else "", f"err {err:.1e}", flush=True)
    if prof:
        c = tf(lambda x, p: torch.log_softmax(x.float(), -1), args.prof)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("prof"); c(x); x.float(); torch.cuda.synchronize(); torch.cuda.nvtx.range_pop()
