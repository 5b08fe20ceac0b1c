"""Real models side by side: eager, torch.compile (Inductor) and torch.compile(backend=
"torchfuse") in one process, bf16 forward under no_grad, random weights from configs.

Per model: outputs checked against eager (the relative error of each compiler's logits against
an f32 run, next to eager's own), median per-call ms of event-timed calls, kernels per forward
from torch.profiler (and torchfuse's own, named tf_*), and the first call's time (compile).

    PYTHONPATH=build-gpu/python python3 bench/models.py OUT_DIR [--models gpt2,llama,vit,convnext]
"""
import argparse
import copy
import functools
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Before torch: turns the CUDA driver's compute cache off, so that a cold compile compiles.
from cold_caches import collect_garbage, fresh_inductor_cache  # noqa: E402

import torch  # noqa: E402


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(use_cache=False)  # a forward over whole sequences: no key/value cache out
    cfg._attn_implementation = "eager"
    m = GPT2LMHeadModel(cfg)
    return m, lambda: torch.randint(0, cfg.vocab_size, (8, 1024), device="cuda")


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                      max_position_embeddings=2048, use_cache=False)
    cfg._attn_implementation = "eager"
    m = LlamaForCausalLM(cfg)
    return m, lambda: torch.randint(0, cfg.vocab_size, (4, 1024), device="cuda")


def vit():
    import timm
    m = timm.create_model("vit_base_patch16_224", pretrained=False)
    return m, lambda: torch.randn(64, 3, 224, 224, device="cuda")


def convnext():
    # Depthwise convolutions, layer norms over channels-last activations, GELU.
    import timm
    m = timm.create_model("convnext_tiny", pretrained=False)
    return m, lambda: torch.randn(64, 3, 224, 224, device="cuda")


MODELS = {"gpt2": gpt2, "llama": llama, "vit": vit, "convnext": convnext}


def bf16_inference(name):
    """Model `name` (seeded) in bf16 on the GPU in eval mode, and its input (images in bf16)."""
    torch.manual_seed(0)
    model, make_input = MODELS[name]()
    model = model.cuda().eval().to(torch.bfloat16)
    x = make_input()
    if x.is_floating_point():
        x = x.to(torch.bfloat16)
    return model, x


def logits(out):
    return out.logits if hasattr(out, "logits") else out


def event_samples(fn, x, reps):
    """ms of `reps` event-timed calls of fn(x), each synchronized, after 3 warm-up calls."""
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(x)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return times


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def time_ms(fn, x, reps=20):
    return median(event_samples(fn, x, reps))


def interleaved_ms(fns, x, rounds=5, reps=10):
    """{label: median ms} of event-timed calls of each fn(x) in `fns` ({label: fn}), timed in
    turn: `rounds` rounds, each of `reps` calls of every fn. The host's speed drifts over
    seconds and between processes by up to 1.6x on the GPU machines, so a host-bound model's
    call time is compared only between calls timed side by side."""
    samples = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            samples[label] += event_samples(fn, x, reps)
    return {label: median(t) for label, t in samples.items()}


def device_events(fn, x):
    """[(name, µs)] of the device work of one call of fn(x) (kernels, copies and fills), after
    a call that warms up."""
    from torch.profiler import ProfilerActivity, profile
    fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    return [(e.name, e.time_range.elapsed_us()) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def kernels_of(events):
    """The kernel names among device_events' (copies and fills left out)."""
    return [name for name, _ in events if not name.startswith(("Memcpy", "Memset"))]


def kernel_names(fn, x):
    return kernels_of(device_events(fn, x))


def cold():
    """Before a backend's first call: no Dynamo cache, and Inductor's and torchfuse's on-disk
    caches new and empty, torchfuse's kernel and tuning tables cleared, so that the first call
    compiles everything it runs (an earlier configuration of the same model compiled many of
    the same kernels). The CUDA driver's compute cache is off for the process (cold_caches)."""
    torch._dynamo.reset()
    fresh_inductor_cache(prefix="inductor-models-")
    os.environ["TORCHFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchfuse-models-")
    try:
        from torchfuse import _C
    except ImportError:  # Inductor alone
        return
    _C.reset_process_caches()


def settle(label, fn, *args):
    """torchfuse tunes lazily (its first calls run each group's torch ops while its kernels
    compile): once its compiles are done, one more call `fn(*args)` switches to the kernels,
    times the candidates and keeps the winners, so that the checked and timed calls run tuned
    kernels."""
    if label.startswith("torchfuse"):
        import torchfuse
        torchfuse.wait_for_compiles()
        fn(*args)
        torch.cuda.synchronize()


def write_histogram(path, title, names):
    """Appends the kernel names of one forward, most frequent first, to `path`."""
    counts = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    with open(path, "a") as f:
        f.write(f"== {title}\n")
        for n, c in sorted(counts.items(), key=lambda kv: -kv[1]):
            f.write(f"{c:5d}  {n[:200]}\n")


def run_model(name, out):
    """One model's row: eager, Inductor and torchfuse side by side."""
    torch.manual_seed(0)
    model, make_input = MODELS[name]()
    model = model.cuda().eval()
    x = make_input()
    with torch.no_grad():
        ref = logits(copy.deepcopy(model).float()(x)).float()
        model = model.to(torch.bfloat16)
        if x.is_floating_point():  # images: the bf16 model takes bf16 pixels
            x = x.to(torch.bfloat16)
        want = logits(model(x)).float()
        eager_err = ((want - ref).norm() / ref.norm()).item()
        row = {"model": name, "eager_err": eager_err}
        row["eager_ms"] = time_ms(model, x)
        row["eager_kernels"] = len(kernel_names(model, x))
        # What capture alone costs (Dynamo and AOTAutograd, no compiler): the floor of any
        # backend's first call.
        cold()
        captured = torch.compile(model, backend="aot_eager")
        collect_garbage()
        t0 = time.perf_counter()
        captured(x)
        torch.cuda.synchronize()
        row["capture_first_s"] = time.perf_counter() - t0
        del captured
        # torchfuse_eager_attn: attention kept as the model writes it (TORCHFUSE_ATTENTION=0),
        # to show what the fused-attention rewrite is worth.
        # torchfuse_nodynamo: torchfuse.compile(model, dynamo=False), FX or the ATen trace.
        for label, backend in (("inductor", "inductor"), ("torchfuse", "torchfuse"),
                               ("torchfuse_eager_attn", "torchfuse"),
                               ("torchfuse_nodynamo", None)):
            cold()
            os.environ["TORCHFUSE_ATTENTION"] = "0" if label == "torchfuse_eager_attn" else "1"
            if backend is None:
                import torchfuse
                fast = torchfuse.compile(model, dynamo=False)
            else:
                fast = torch.compile(model, backend=backend)
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                collect_garbage()
                t0 = time.perf_counter()
                got = logits(fast(x)).float()
                torch.cuda.synchronize()
                row[f"{label}_first_s"] = time.perf_counter() - t0
            details = os.path.join(out, f"details_{name}.txt")
            with open(details, "a") as f:
                f.write(f"== {label}: warnings\n")
                f.writelines(f"{w.message}\n" for w in caught)
            settle(label, fast, x)
            # The error of a settled call: a lazy first call ran torch ops for the groups whose
            # kernels were still compiling.
            got = logits(fast(x)).float()
            row[f"{label}_err"] = ((got - ref).norm() / ref.norm()).item()
            row[f"{label}_ms"] = time_ms(fast, x)
            names = kernel_names(fast, x)
            write_histogram(details, f"{label}: kernels per forward", names)
            row[f"{label}_kernels"] = len(names)
            row[f"{label}_own"] = sum(1 for n in names if n.startswith("tf_"))
            if backend is None:
                row[f"{label}_capture"] = fast.how
            del fast, got
        os.environ.pop("TORCHFUSE_ATTENTION", None)
    return row


def train_step(model, fn):
    """A training step (forward through `fn`, backward; no optimizer) of a causal LM."""
    def run(inp):
        for p in model.parameters():
            p.grad = None
        loss = fn(inp, labels=inp).loss
        loss.backward()
        return loss
    return run


def run_training(name, out):
    """A training step (forward and backward, optimizer excluded) in bf16: eager, Inductor and
    torchfuse side by side (time, kernels per step, first call)."""
    torch.manual_seed(0)
    model, make_input = MODELS[name]()
    model = model.cuda().to(torch.bfloat16).train()
    x = make_input()
    step = functools.partial(train_step, model)
    row = {"model": f"{name} train"}
    for label, backend in (("eager", None), ("inductor", "inductor"), ("torchfuse", "torchfuse")):
        cold()
        fn = model if backend is None else torch.compile(model, backend=backend)
        run = step(fn)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collect_garbage()
            t0 = time.perf_counter()
            run(x)
            torch.cuda.synchronize()
            row[f"{label}_first_s"] = time.perf_counter() - t0
        settle(label, run, x)
        row[f"{label}_ms"] = time_ms(run, x, reps=10)
        names = kernel_names(run, x)
        row[f"{label}_kernels"] = len(names)
        row[f"{label}_own"] = sum(1 for n in names if n.startswith("tf_"))
        details = os.path.join(out, f"details_{name}_train.txt")
        with open(details, "a") as f:
            f.write(f"== {label}: warnings\n")
            f.writelines(f"{w.message}\n" for w in caught)
        write_histogram(details, f"{label}: kernels per step", names)
        del fn, run
    return row


def run_each(fn, names, out, suffix):
    """fn(name, out) for each comma-separated name; a failure becomes a row saying so and the
    next name runs."""
    rows = []
    for name in [m for m in names.split(",") if m]:
        try:
            row = fn(name, out)
        except Exception:  # noqa: BLE001  (report it and go on with the next model)
            traceback.print_exc()
            row = {"model": name + suffix,
                   "error": traceback.format_exc(limit=1).strip().splitlines()[-1]}
        rows.append(row)
        print(row, flush=True)
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="gpt2,llama,vit,convnext")
    ap.add_argument("--train", default="gpt2", help="models to time a training step of")
    args = ap.parse_args()
    import torchfuse  # noqa: F401  (registers the backend)
    os.makedirs(args.out, exist_ok=True)
    rows = run_each(run_model, args.models, args.out, "")
    train_rows = run_each(run_training, args.train, args.out, " train")
    lines = ["| model | eager ms | Inductor ms | torchfuse ms | torchfuse ms, eager attention | "
             "torchfuse ms, dynamo=False (capture) | "
             "kernels eager / Inductor / torchfuse (own) / eager attention / dynamo=False (own) | "
             "first call s capture only / Inductor / torchfuse / dynamo=False | rel. error vs "
             "f32: eager / Inductor / torchfuse / dynamo=False |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['eager_ms']:.2f} | {r['inductor_ms']:.2f} | "
            f"{r['torchfuse_ms']:.2f} | {r['torchfuse_eager_attn_ms']:.2f} | "
            f"{r['torchfuse_nodynamo_ms']:.2f} ({r['torchfuse_nodynamo_capture']}) | "
            f"{r['eager_kernels']} / {r['inductor_kernels']} / "
            f"{r['torchfuse_kernels']} ({r['torchfuse_own']}) / "
            f"{r['torchfuse_eager_attn_kernels']} / {r['torchfuse_nodynamo_kernels']} "
            f"({r['torchfuse_nodynamo_own']}) | {r['capture_first_s']:.1f} / "
            f"{r['inductor_first_s']:.1f} / {r['torchfuse_first_s']:.1f} / "
            f"{r['torchfuse_nodynamo_first_s']:.1f} | {r['eager_err']:.2e} / "
            f"{r['inductor_err']:.2e} / {r['torchfuse_err']:.2e} / "
            f"{r['torchfuse_nodynamo_err']:.2e} |")
    lines += ["", "| training step, bf16 | eager ms | Inductor ms | torchfuse ms | kernels per step "
              "eager / Inductor / torchfuse (own) | first call s eager / Inductor / torchfuse |",
              "|---|---|---|---|---|---|"]
    for r in train_rows:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['eager_ms']:.2f} | {r['inductor_ms']:.2f} | "
            f"{r['torchfuse_ms']:.2f} | {r['eager_kernels']} / {r['inductor_kernels']} / "
            f"{r['torchfuse_kernels']} ({r['torchfuse_own']}) | {r['eager_first_s']:.1f} / "
            f"{r['inductor_first_s']:.1f} / {r['torchfuse_first_s']:.1f} |")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "models.md"), "w") as f:
        f.write(table + "\n")
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "commit": os.environ.get("TORCHFUSE_COMMIT", "?"), "forward": rows,
           "train": train_rows}
    with open(os.path.join(args.out, "models.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    from report import plot_models
    plot_models(doc, args.out)
    print(table)
    ok = all("error" not in r and all(r[f"{k}_err"] <= max(2 * r["eager_err"], 1e-2)
                                      for k in ("torchfuse", "torchfuse_nodynamo")) for r in rows)
    print("models:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
