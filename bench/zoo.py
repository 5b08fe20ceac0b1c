"""A sweep over models beyond bench/models.py's four: transformers language models and timm
vision models built from their configs with random weights, bf16 forward under no_grad, each
through torch.compile(backend="torchfuse") against eager (and Inductor with --inductor).

Per model: the first call's seconds; the relative error of the output against an f32 eager run
next to eager bf16's own (ok where torchfuse's is at most twice eager's, or below 1e-3);
median ms of event-timed calls, the systems timed in turn once all are compiled
(models.interleaved_ms); the device time of one call (its kernels, copies and fills summed:
what the GPU spends, where a host-bound model's call time is the host's); kernels per forward
(torchfuse's own); graphs captured and the nodes left to torch, by op, with the first reason
given. One model failing (an exception) is reported and the sweep goes on; a crash of the
process would end it at the model it names.

    PYTHONPATH=build-gpu/python python3 bench/zoo.py [OUT.md] [--models bert,resnet50,...]
        [--inductor] [--profile N] [--channels-last]
"""
import argparse
import collections
import copy
import os
import sys
import time
import traceback
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (time_ms, device_events, kernels_of, settle, logits)
from cold_caches import collect_garbage  # noqa: E402

TEXT_BATCH, TEXT_LEN, IMAGE_BATCH = 8, 512, 32


class Seq2Seq(torch.nn.Module):
    """An encoder-decoder called with one tensor: the decoder reads the first quarter."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, decoder_input_ids=ids[:, : ids.shape[1] // 4])


def _text(make, vocab, seq2seq=False):
    def build():
        m = make()
        if seq2seq:
            m = Seq2Seq(m)
        return m, lambda: torch.randint(0, vocab, (TEXT_BATCH, TEXT_LEN), device="cuda")
    return build


def _hf(config_name, model_name, seq2seq=False, **cfg):
    def make():
        import transformers
        config = getattr(transformers, config_name)(**cfg)
        return getattr(transformers, model_name)(config)
    return _text(make, cfg.get("vocab_size", 32000), seq2seq)


def _timm(name, size=224):
    def build():
        import timm
        m = timm.create_model(name, pretrained=False)
        return m, lambda: torch.randn(IMAGE_BATCH, 3, size, size, device="cuda")
    return build


_SMALL_LM = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                 num_attention_heads=16, vocab_size=32000, max_position_embeddings=2048)

MODELS = {
    "bert": _hf("BertConfig", "BertForMaskedLM", vocab_size=30522),
    "distilbert": _hf("DistilBertConfig", "DistilBertForMaskedLM", vocab_size=30522),
    "opt": _hf("OPTConfig", "OPTForCausalLM", vocab_size=50272),
    "gpt_neox": _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", hidden_size=1024,
                    intermediate_size=4096, num_hidden_layers=4, num_attention_heads=16,
                    vocab_size=50304, rotary_pct=0.25),
    "mistral": _hf("MistralConfig", "MistralForCausalLM", num_key_value_heads=4,
                   sliding_window=256, **_SMALL_LM),
    "qwen2": _hf("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=4, **_SMALL_LM),
    "gemma": _hf("GemmaConfig", "GemmaForCausalLM", hidden_size=1024, intermediate_size=4096,
                 num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1,
                 head_dim=128, vocab_size=32000),
    "phi": _hf("PhiConfig", "PhiForCausalLM", hidden_size=1024, intermediate_size=4096,
               num_hidden_layers=4, num_attention_heads=16, vocab_size=51200),
    "t5": _hf("T5Config", "T5ForConditionalGeneration", seq2seq=True, vocab_size=32128),
    "bart": _hf("BartConfig", "BartForConditionalGeneration", seq2seq=True, vocab_size=50265,
                d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072),
    "resnet50": _timm("resnet50"),
    "efficientnet_b0": _timm("efficientnet_b0"),
    "mobilenetv3": _timm("mobilenetv3_large_100"),
    "deit_small": _timm("deit_small_patch16_224"),
    "swin_tiny": _timm("swin_tiny_patch4_window7_224"),
    "convnext_tiny": _timm("convnext_tiny"),
    "convnextv2_tiny": _timm("convnextv2_tiny"),
    "regnety_016": _timm("regnety_016"),
}


def output(out):
    """The tensor a model's output is judged by."""
    out = models.logits(out)
    if isinstance(out, dict):
        out = out.get("last_hidden_state", next(iter(out.values())))
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.float()


def rel_err(got, ref):
    return ((got - ref).norm() / ref.norm()).item()


def left_to_torch(backend):
    """(graphs, Counter of op -> count, {op: first reason}) over the graphs `backend` kept."""
    ops, why = collections.Counter(), {}
    for g, args in zip(backend.graphs, backend.example_inputs):
        for node in g.explain(args).get("left_to_torch", []):
            ops[node["op"]] += 1
            why.setdefault(node["op"], node.get("why", ""))
    return len(backend.graphs) + len(backend.symbolic), ops, why


def device_time(events, top=0):
    """(ms, top) of one call's device events (models.device_events): its kernels, copies and
    fills summed (what the GPU spends, apart from the host's launch gaps, which decide a
    host-bound model's call time), and its `top` kernels by device time [(ms, count, name)]."""
    total, count = collections.Counter(), collections.Counter()
    for name, us in events:
        total[name] += us
        count[name] += 1
    return (sum(total.values()) / 1e3,
            [(us / 1e3, count[n], n) for n, us in total.most_common(top)])


def run_model(name, with_inductor, profile=0, channels_last=False):
    from torchfuse._backend import Backend
    torch.manual_seed(0)
    model, make_input = MODELS[name]()
    model = model.cuda().eval()
    x = make_input()
    if channels_last and x.dim() == 4:
        # The layout CNN inference usually runs in on GPUs: weights and images NHWC in memory.
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    row = {"model": name}
    with torch.no_grad():
        ref = output(copy.deepcopy(model).float()(x))
        model = model.to(torch.bfloat16)
        if x.is_floating_point():
            x = x.to(torch.bfloat16)
        row["eager_err"] = rel_err(output(model(x)), ref)
        events = models.device_events(model, x)
        row["eager_kernels"] = len(models.kernels_of(events))
        row["eager_device_ms"], top = device_time(events, profile)
        if profile:
            row["eager_top"] = top
        systems = [("torchfuse", None)] + ([("inductor", "inductor")] if with_inductor else [])
        torch._dynamo.reset()  # the model before's compiled code
        timed = {"eager": model}  # timed side by side once all are compiled
        for label, backend in systems:
            # No reset between the systems: Dynamo keeps one compiled entry per backend.
            be = Backend(keep=True) if backend is None else backend
            fast = torch.compile(model, backend=be)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                collect_garbage()
                t0 = time.perf_counter()
                got = output(fast(x))
                torch.cuda.synchronize()
                row[f"{label}_first_s"] = time.perf_counter() - t0
                models.settle(label, fast, x)
                # A settled call's error: a lazy first call ran torch ops for the groups whose
                # kernels were still compiling.
                got = output(fast(x))
                row[f"{label}_err"] = rel_err(got, ref)
            timed[label] = fast
            events = models.device_events(fast, x)
            names = models.kernels_of(events)
            row[f"{label}_kernels"] = len(names)
            row[f"{label}_device_ms"], top = device_time(events, profile)
            if profile:
                row[f"{label}_top"] = top
            if backend is None:
                row["own"] = sum(1 for n in names if n.startswith("tf_"))
                row["graphs"], ops, why = left_to_torch(be)
                row["left"] = dict(ops)
                row["why"] = why
            del got
        frames = torch._dynamo.utils.counters["frames"]
        compiled = sum(frames.values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for label, ms in models.interleaved_ms(timed, x).items():
                row[f"{label}_ms"] = ms
        if sum(frames.values()) != compiled:  # a timed call compiled anew: its time is not a call's
            raise RuntimeError("Dynamo compiled again while the systems were timed in turn")
        del timed, fast
    e, t = row["eager_err"], row["torchfuse_err"]
    row["ok"] = t <= max(2 * e, 1e-3)
    return row


def line(r):
    if "error" in r:
        return f"| {r['model']} | error: {r['error']} ||||||||||"
    ind = (f"{r['inductor_ms']:.2f}", f"{r['torchfuse_ms'] / r['inductor_ms']:.2f}",
           f"{r['inductor_first_s']:.1f}", f"{r['inductor_device_ms']:.2f}",
           f"{r['inductor_kernels']}") \
        if "inductor_ms" in r else ("", "", "", "", "-")
    left = ", ".join(f"{op} ×{c}" for op, c in sorted(r["left"].items(), key=lambda kv: -kv[1]))
    return (f"| {r['model']} | {'ok' if r['ok'] else 'WRONG'} {r['torchfuse_err']:.2e} / "
            f"{r['eager_err']:.2e} | {r['eager_ms']:.2f} | {ind[0]} | {r['torchfuse_ms']:.2f} | "
            f"{r['torchfuse_ms'] / r['eager_ms']:.2f} | {ind[1]} | {r['eager_device_ms']:.2f} / "
            f"{ind[3]} / {r['torchfuse_device_ms']:.2f} | {r['torchfuse_first_s']:.1f} "
            f"/ {ind[2]} | {r['eager_kernels']} / {ind[4]} / {r['torchfuse_kernels']} "
            f"({r['own']}) | "
            f"{r['graphs']} | {left or '-'} |")


HEADER = ("| model | output: torchfuse / eager rel. error vs f32 | eager ms | Inductor ms | "
          "torchfuse ms | torchfuse / eager | torchfuse / Inductor | device ms eager / Inductor "
          "/ torchfuse | first call s torchfuse / Inductor | kernels eager / Inductor / torchfuse "
          "(own) | graphs | nodes left to torch |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print each system's N kernels that take the most device time")
    ap.add_argument("--channels-last", action="store_true",
                    help="vision models' weights and images channels-last (NHWC in memory)")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for name in args.models.split(","):
        try:
            row = run_model(name, args.inductor, args.profile, args.channels_last)
        except Exception as e:  # noqa: BLE001  (report it and go on with the next model)
            traceback.print_exc()
            row = {"model": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                   if str(e) else type(e).__name__}
        rows.append(row)
        for key in [k for k in row if k.endswith("_top")]:
            print(f"{name} {key[:-4]}: top kernels by device time")
            for ms, count, kernel in row.pop(key):
                print(f"  {ms:8.3f} ms {count:4d}x  {kernel[:140]}")
        print(row, flush=True)
        torch.cuda.empty_cache()
    text = "\n".join([HEADER] + [line(r) for r in rows])
    reasons = sorted({(op, why) for r in rows for op, why in r.get("why", {}).items()})
    text += "\n\nWhy each op stays torch's (first reason seen):\n" + "\n".join(
        f"- `{op}`: {why}" for op, why in reasons)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if all("error" not in r and r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
