"""Changing shapes side by side: GPT-2 (4 layers, bf16, no_grad, random weights) called with one
sequence length after another, then one batch size after another, through eager, torch.compile
(Inductor) and torch.compile(backend="torchfuse") in one process. Dynamo marks the changing
dim dynamic after the second shape it sees; from then on one graph serves every length.

Per system and shape: the first call's time (a compile where the system compiles), the median
per-call time (event-timed, in rounds that take the systems in turn once every shape has been
seen), kernels per forward from torch.profiler (torchfuse's own
named tf_*), the output's relative error against eager, and for torchfuse the NVRTC compiles
and tuning runs the shape caused. Writes dynamic.md and dynamic.json into OUT_DIR.

    PYTHONPATH=build-gpu/python python3 bench/dynamic.py OUT_DIR [--lengths 256,384,512,640]
        [--batches 1,2,4,8] [--layers 4] [--rounds 7]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import kernel_names, logits, settle, time_ms  # noqa: E402


_LIBRARY_MATMUL = ("nvjet", "gemm", "cutlass", "xmma", "sm90_", "sm80_")
_ATTENTION = ("sdpa", "flash", "fmha", "attention")


def other_kernels(names):
    """The kernels of a forward that are neither torchfuse's own (tf_*) nor matrix products or
    fused attention from torch's libraries: what torch runs that a fuser could have taken."""
    out = []
    for n in names:
        low = n.lower()
        if n.startswith("tf_") or any(k in low for k in _LIBRARY_MATMUL + _ATTENTION):
            continue
        out.append(n)
    return out


def build(layers):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=layers)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).cuda().eval().to(torch.bfloat16), cfg.vocab_size


def sweep(model, vocab, shapes, out_rows, kind, rounds):
    """Every system over `shapes` ((batch, length) in call order)."""
    import torchfuse  # noqa: F401  (registers the backend)
    from torchfuse import _C
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.randint(0, vocab, s, device="cuda", generator=g) for s in shapes]
    with torch.no_grad():
        wants = [logits(model(x)).float() for x in inputs]
        systems = [("eager", model)]
        for label in ("inductor", "torchfuse"):
            torch._dynamo.reset()
            systems.append((label, torch.compile(model, backend=label)))
        rows = {}
        for label, fn in systems:
            for (b, t), x, want in zip(shapes, inputs, wants):
                before = _C.process_counters()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                got = logits(fn(x)).float()
                torch.cuda.synchronize()
                first_ms = (time.perf_counter() - t0) * 1e3
                settle(label, fn, x)
                after = _C.process_counters()
                names = kernel_names(fn, x)
                row = {"sweep": kind, "system": label, "batch": b, "length": t,
                       "first_ms": first_ms, "samples": [],
                       "kernels": len(names), "own": sum(1 for n in names if n.startswith("tf_")),
                       "other": other_kernels(names),
                       "err": ((got - want).norm() / want.norm()).item()}
                if label == "torchfuse":
                    row["nvrtc"] = after["nvrtc_compiles"] - before["nvrtc_compiles"]
                    row["tuning"] = after["tuning_runs"] - before["tuning_runs"]
                rows[(label, b, t)] = row
        # Per-call times, once every shape has been seen: rounds that time each system in turn
        # at each shape, so that the host's drift (these forwards are host-bound) falls on
        # every system alike; a row's time is the median of its rounds' medians.
        before = _C.process_counters()
        for _ in range(rounds):
            for (b, t), x in zip(shapes, inputs):
                for label, fn in systems:
                    rows[(label, b, t)]["samples"].append(time_ms(fn, x, reps=10))
        after = _C.process_counters()
        for row in rows.values():
            if row["system"] == "torchfuse":  # what the timed calls compiled and tuned: nothing
                row["nvrtc_timed"] = after["nvrtc_compiles"] - before["nvrtc_compiles"]
                row["tuning_timed"] = after["tuning_runs"] - before["tuning_runs"]
            samples = sorted(row["samples"])
            row["ms"] = samples[len(samples) // 2]
            row["ms_min"], row["ms_max"] = samples[0], samples[-1]
            out_rows.append(row)
            print(json.dumps(row), flush=True)


def markdown(rows, device):
    out = [f"{device}, torch {torch.__version__}. GPT-2 bf16 forward, shapes called in the "
           "order listed; ms per call: the median over rounds that time every system in turn at "
           "every shape (each round's time the median of 10 event-timed calls), with the "
           "range of the rounds for torchfuse and Inductor; first call in ms, kernels "
           "per forward (torchfuse's own). torchfuse's NVRTC compiles and tuning runs are those "
           "the shape's first calls caused.", ""]
    for kind in ("length", "batch"):
        keys = []
        for r in rows:
            if r["sweep"] == kind and (r["batch"], r["length"]) not in keys:
                keys.append((r["batch"], r["length"]))
        if not keys:
            continue
        out += ["| batch x length | eager ms | Inductor ms (range) | torchfuse ms (range) | torchfuse / Inductor "
                "| first call ms eager / Inductor / torchfuse | kernels Inductor / torchfuse (own) "
                "| torchfuse's share of the non-matmul kernels "
                "| NVRTC / tuning | error vs eager Inductor / torchfuse |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for b, t in keys:
            r = {x["system"]: x for x in rows
                 if x["sweep"] == kind and x["batch"] == b and x["length"] == t}
            e, i, f = r["eager"], r["inductor"], r["torchfuse"]
            out.append(f"| {b} x {t} | {e['ms']:.3f} | {i['ms']:.3f} ({i['ms_min']:.2f}-{i['ms_max']:.2f}) | "
                       f"{f['ms']:.3f} ({f['ms_min']:.2f}-{f['ms_max']:.2f}) | "
                       f"{f['ms'] / i['ms']:.3f} | {e['first_ms']:.0f} / {i['first_ms']:.0f} / "
                       f"{f['first_ms']:.0f} | {i['kernels']} / {f['kernels']} ({f['own']}) | "
                       f"{f['own']} / {f['own'] + len(f['other'])} | "
                       f"{f['nvrtc']} / {f['tuning']} | {i['err']:.1e} / {f['err']:.1e} |")
        timed = [(r["nvrtc_timed"], r["tuning_timed"]) for r in rows
                 if r["sweep"] == kind and r["system"] == "torchfuse"]
        others = sorted({n[:80] for r in rows if r["sweep"] == kind and r["system"] == "torchfuse"
                         for n in r["other"]})
        out += ["", f"NVRTC compiles / tuning runs of torchfuse during the timed rounds: "
                f"{timed[0][0]} / {timed[0][1]}. Non-matmul kernels are those other than cuBLAS's "
                "products and the fused attention; torch's among torchfuse's: "
                + (", ".join(f"`{n}`" for n in others) or "none") + ".", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--lengths", default="256,384,512,640")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model, vocab = build(args.layers)
    rows = []
    lengths = [int(t) for t in args.lengths.split(",") if t]
    batches = [int(b) for b in args.batches.split(",") if b]
    if lengths:
        sweep(model, vocab, [(8, t) for t in lengths], rows, "length", args.rounds)
    if batches:
        sweep(model, vocab, [(b, 512) for b in batches], rows, "batch", args.rounds)
    device = torch.cuda.get_device_name()
    with open(os.path.join(args.out, "dynamic.json"), "w") as f:
        json.dump(rows, f, indent=1)
    text = markdown(rows, device)
    with open(os.path.join(args.out, "dynamic.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
