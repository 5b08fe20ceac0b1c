"""A training step through torch.compile: eager, Inductor, and torchfuse with the backward
graph run by torch or compiled by torchfuse, side by side (time, kernels per step), with the
gradients of a small f32 config compared with eager's first.

    PYTHONPATH=build-gpu/python python3 bench/train_step.py [--model gpt2|llama] [--layers N]
"""
import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from torchfuse._backend import Backend  # noqa: E402


def small(name, layers, dtype):
    torch.manual_seed(0)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=layers, n_embd=256, n_head=4, vocab_size=1000, n_positions=256,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        cfg._attn_implementation = "eager"
        m = GPT2LMHeadModel(cfg)
        x = torch.randint(0, 1000, (4, 128), device="cuda")
    else:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
                          max_position_embeddings=256)
        cfg._attn_implementation = "eager"
        m = LlamaForCausalLM(cfg)
        x = torch.randint(0, 1000, (4, 128), device="cuda")
    return m.cuda().to(dtype).train(), x


def grads(model, fn, x):
    for p in model.parameters():
        p.grad = None
    loss = fn(x, labels=x).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()
                           if p.grad is not None}


def check_grads(name, layers):
    model, x = small(name, layers, torch.float32)
    want_loss, want = grads(model, model, x)
    for label, be in (("torch backward", Backend(compile_backward=False)),
                      ("fused backward", Backend(compile_backward=True))):
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss, got = grads(model, torch.compile(model, backend=be), x)
        worst = max(((got[k] - want[k]).norm() / want[k].norm().clamp_min(1e-30)).item()
                    for k in want)
        print(f"{name} {layers} layers f32, {label}: loss {loss.item():.6f} (eager "
              f"{want_loss.item():.6f}), {len(got)}/{len(want)} grads, worst relative error "
              f"{worst:.2e}; {len(caught)} warnings")
        for w in caught[:5]:
            print("   ", str(w.message)[:300])


def time_steps(name):
    torch.manual_seed(0)
    model, make_input = models.MODELS[name]()
    model = model.cuda().to(torch.bfloat16).train()
    x = make_input()

    for label, backend in (("eager", None), ("inductor", "inductor"),
                           ("torchfuse, torch backward", Backend(compile_backward=False)),
                           ("torchfuse, fused backward", Backend(compile_backward=True))):
        torch._dynamo.reset()
        run = models.train_step(model, model if backend is None
                                else torch.compile(model, backend=backend))
        t0 = time.perf_counter()
        run(x)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        models.settle("torchfuse" if label.startswith("torchfuse") else label, run, x)
        ms = models.time_ms(run, x, reps=10)
        names = models.kernel_names(run, x)
        own = sum(1 for n in names if n.startswith("tf_"))
        print(f"{name} train bf16 {label}: {ms:.2f} ms, {len(names)} kernels ({own} own), "
              f"first call {first:.1f} s", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args()
    check_grads(args.model, args.layers)
    if not args.no_time:
        time_steps(args.model)


if __name__ == "__main__":
    main()
