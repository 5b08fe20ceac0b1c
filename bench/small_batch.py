"""Small batches, where launching kernels costs more than running them: GPT-2 small (bf16,
no_grad, random weights) at batch 1 over a few sequence lengths, and a one-kernel graph (a
hand-written GeLU of a 1 x 1024 tensor), side by side in one process:

    eager, Inductor (torch.compile default), Inductor with CUDA graphs (mode="reduce-overhead"),
    torchfuse (torchfuse.compile), torchfuse with CUDA graphs (torchfuse.compile(cuda_graphs=True))

Per call: the wall time of many back-to-back calls over their number (the steady state a
serving loop sees: the host's per-call cost where it exceeds the GPU's), median of 5 rounds.
Every result is checked against eager (GPT-2: the logits' relative error to an f32 run).

    PYTHONPATH=build-gpu/python python3 bench/small_batch.py OUT_DIR [--lengths 32,128,512]
"""
import argparse
import copy
import json
import os
import sys
import time
import warnings

import torch


def per_call_us(fn, args, calls=200, rounds=5):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    times.sort()
    return times[len(times) // 2]


def backends(model):
    """(label, callable) per backend, each compiled anew."""
    import torchfuse
    torch._dynamo.reset()
    yield "eager", model
    torch._dynamo.reset()
    yield "inductor", torch.compile(model)
    torch._dynamo.reset()
    yield "inductor_cudagraphs", torch.compile(model, mode="reduce-overhead")
    torch._dynamo.reset()
    yield "torchfuse", torchfuse.compile(model)
    torch._dynamo.reset()
    yield "torchfuse_cudagraphs", torchfuse.compile(model, cuda_graphs=True)


def settle(label, fn, args):
    """Compiled, tuned (torchfuse tunes in the background) and captured before timing."""
    for _ in range(3):
        fn(*args)
    if label.startswith("torchfuse"):
        import torchfuse
        torchfuse.wait_for_compiles()
        for _ in range(3):
            fn(*args)
    torch.cuda.synchronize()


class HandGelu(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


def gpt2_rows(lengths):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config()
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).cuda().eval()
    ref_model = copy.deepcopy(model).float()
    model = model.to(torch.bfloat16)

    class Logits(torch.nn.Module):  # logits only: no key/value cache objects in the result
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(ids, use_cache=False).logits

    wrapped = Logits(model)
    rows = []
    with torch.no_grad():
        for t in lengths:
            ids = torch.randint(0, cfg.vocab_size, (1, t), device="cuda")
            ref = ref_model(ids, use_cache=False).logits.float()
            row = {"workload": f"GPT-2 small, batch 1, T={t}"}
            for label, fn in backends(wrapped):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    settle(label, fn, (ids,))
                    got = fn(ids).float()
                    row[f"{label}_err"] = ((got - ref).norm() / ref.norm()).item()
                    row[f"{label}_us"] = per_call_us(fn, (ids,), calls=50)
                if label == "torchfuse_cudagraphs":
                    row["torchfuse_cudagraphs_replays"] = fn.stats()["graph_replays"]
                print(f"  {row['workload']}: {label} {row[f'{label}_us']:.1f} us, "
                      f"error {row[f'{label}_err']:.2e}", flush=True)
            rows.append(row)
    return rows


def gelu_rows():
    rows = []
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(1, 1024, device="cuda", dtype=dtype)
            want = HandGelu()(x.double())
            row = {"workload": f"gelu 1x1024 {str(dtype).replace('torch.', '')}"}
            for label, fn in backends(HandGelu()):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    settle(label, fn, (x,))
                    got = fn(x)
                    row[f"{label}_err"] = ((got.double() - want).abs().max()).item()
                    row[f"{label}_us"] = per_call_us(fn, (x,))
            print(f"  {row['workload']}: " + ", ".join(
                f"{k[:-3]} {v:.1f} us" for k, v in row.items() if k.endswith("_us")), flush=True)
            rows.append(row)
    return rows


LABELS = ["eager", "inductor", "inductor_cudagraphs", "torchfuse", "torchfuse_cudagraphs"]


def write_table(path, rows):
    device = torch.cuda.get_device_name()
    with open(path, "w") as f:
        f.write(f"{device}, torch {torch.__version__}, commit "
                f"{os.environ.get('TORCHFUSE_COMMIT', 'unknown')}, `python3 bench/small_batch.py`"
                "\n\nMicroseconds per call (back-to-back calls, median of 5 rounds); in brackets "
                "the relative error of GPT-2's logits against an f32 run, or the gelu's largest "
                "error against f64.\n\n")
        f.write("| workload | " + " | ".join(LABELS) + " |\n")
        f.write("|---" * (len(LABELS) + 1) + "|\n")
        for r in rows:
            cells = [f"{r[l + '_us']:.1f} ({r[l + '_err']:.1e})" for l in LABELS]
            f.write(f"| {r['workload']} | " + " | ".join(cells) + " |\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--lengths", default="32,128,512")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = gelu_rows() + gpt2_rows([int(t) for t in a.lengths.split(",") if t])
    with open(os.path.join(a.out, "small_batch.json"), "w") as f:
        json.dump(rows, f, indent=1)
    write_table(os.path.join(a.out, "small_batch.md"), rows)
    print(open(os.path.join(a.out, "small_batch.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
