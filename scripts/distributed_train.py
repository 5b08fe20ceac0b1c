"""A compiled model where training runs: a small GPT-2 under DistributedDataParallel and FSDP,
one process per GPU, eager against torch.compile(backend="torchfuse") (and Inductor for time).

Every rank builds the same model (one seed), trains it `--steps` steps with AdamW on its own
batches, and the compiled runs must match the eager distributed run: the loss of every step and
the parameters at the end within --tol (relative), or, for the parameters, no further from an
f64 eager run than twice eager's own distance to it (AdamW divides each gradient by its running
RMS, so a gradient that is rounding noise moves its parameter by up to lr per step whichever way
the rounding falls: the f64 run shows how far f32 eager itself is from the exact answer). The ranks share one torchfuse cache; the
script reports how many tuning runs each rank made and how many kernels the cache holds tuned,
so that "each kernel tuned once" can be read off. Last line: `distributed: ok` or
`distributed: FAILED (...)`, with a non-zero exit on failure.

    torchrun --nproc_per_node=2 scripts/distributed_train.py [--steps 20] [--modes ddp,fsdp]
        [--backends eager,torchfuse,inductor] [--device cuda|cpu]

With --device cpu (gloo) and --backends eager it checks its own plumbing where no GPU is.
"""
import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist


class TinyLM(torch.nn.Module):
    """Where transformers is missing: embedding, an MLP block with a layer norm, an LM head."""

    class Out:
        def __init__(self, loss):
            self.loss = loss

    def __init__(self, vocab=1000, h=256):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, h)
        self.fc1, self.fc2 = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)
        self.ln = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab)

    def forward(self, x, labels):
        e = self.emb(x)
        h = self.ln(e + self.fc2(torch.nn.functional.gelu(self.fc1(e))))
        logits = self.head(h)
        return self.Out(torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                          labels.flatten()))


def build_model(seed):
    torch.manual_seed(seed)
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return TinyLM()
    cfg = GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=256, vocab_size=1000,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "eager"
    return GPT2LMHeadModel(cfg)


def batches(rank, steps, device):
    g = torch.Generator().manual_seed(1000 + rank)
    return [torch.randint(0, 1000, (4, 128), generator=g).to(device) for _ in range(steps)]


def wrap(model, mode, device):
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ids = [device.index] if device.type == "cuda" else None
        # Small buckets: Dynamo splits the graph at bucket boundaries (DDPOptimizer).
        return DDP(model, device_ids=ids, bucket_cap_mb=1)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    return FSDP(model, use_orig_params=True, device_id=device if device.type == "cuda" else None)


def full_params(wrapped, mode):
    """Every parameter, whole, on every rank."""
    if mode == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        with FSDP.summon_full_params(wrapped):
            return {n: p.detach().double().clone() for n, p in wrapped.named_parameters()}
    return {n: p.detach().double().clone() for n, p in wrapped.named_parameters()}


def worst_difference(params, ref):
    """The largest relative difference of one parameter tensor."""
    return max(((params[k] - ref[k]).norm() / ref[k].norm().clamp_min(1e-30)).item() for k in ref)


def train(mode, backend, args, device, data):
    """Trains one copy; backend "eager64" is eager with f64 parameters and activations."""
    model = build_model(0).to(device)
    if backend == "eager64":
        model = model.double()
    wrapped = wrap(model, mode, device)
    fn = wrapped
    if backend not in ("eager", "eager64"):
        from torch import _dynamo
        _dynamo.reset()
        if backend == "torchfuse":
            import torchfuse  # registers the backend
        fn = torch.compile(wrapped, backend=backend)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    losses, times = [], []
    for step, x in enumerate(data):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = fn(x, labels=x).loss
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
        if step == 0 and backend == "torchfuse":
            # Untimed: the tuning candidates that started compiling in the first step finish,
            # and the next step times them, so that the later steps run the tuned kernels (as
            # Inductor's run its compiled ones from the first step) and no background compile
            # shares the host with the timed steps.
            torchfuse.wait_for_compiles()
    return losses, times, full_params(wrapped, mode)


def tuning_runs():
    try:
        from torchfuse import _C
        return int(_C.phase_times().get("tune", (0.0, 0))[1])
    except Exception:  # noqa: BLE001
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="ddp,fsdp")
    ap.add_argument("--backends", default="eager,torchfuse,inductor")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # One cache for every rank (rank 0 names it), unless the caller gave one.
    if "TORCHFUSE_CACHE_DIR" not in os.environ:
        name = [tempfile.mkdtemp(prefix="torchfuse-dist-") if rank == 0 else None]
        dist.broadcast_object_list(name, src=0)
        os.environ["TORCHFUSE_CACHE_DIR"] = name[0]
    data = batches(rank, args.steps, device)
    backends = [b for b in args.backends.split(",") if b]
    failures = []
    for mode in [m for m in args.modes.split(",") if m]:
        results = {}
        compiled = [b for b in backends if b != "eager"]
        for backend in backends + (["eager64"] if "eager" in backends and compiled else []):
            try:
                results[backend] = train(mode, backend, args, device, data)
            except Exception as e:  # noqa: BLE001  (report and go on)
                failures.append(f"{mode}/{backend}: {type(e).__name__}: {str(e)[:200]}")
                if rank == 0:
                    print(f"{mode} {backend}: failed: {e}", flush=True)
        if "eager" not in results:
            continue
        ref_losses, _, ref_params = results["eager"]
        exact = results.get("eager64")
        eager_to_exact = worst_difference(ref_params, exact[2]) if exact else None
        for backend, (losses, times, params) in results.items():
            if backend == "eager64":
                continue
            worst_loss = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref_losses, losses))
            worst_param = worst_difference(params, ref_params)
            step_ms = statistics.median(times[len(times) // 2:])  # after compiles and tuning
            to_exact = ""
            params_ok = worst_param <= args.tol
            if exact and backend != "eager":
                d = worst_difference(params, exact[2])
                params_ok = params_ok or d <= 2 * eager_to_exact
                to_exact = f"; against f64 eager {d:.2e} (eager's own {eager_to_exact:.2e})"
            ok = worst_loss <= args.tol and params_ok
            if backend in ("torchfuse",) and not ok:
                failures.append(f"{mode}/{backend}: loss {worst_loss:.2e}, params {worst_param:.2e}"
                                f"{to_exact}")
            if rank == 0:
                print(f"{mode} {backend}: {world} rank(s), {args.steps} steps, step {step_ms:.2f} ms "
                      f"(median of the later half), first step {times[0]:.0f} ms, worst loss "
                      f"difference {worst_loss:.2e}, worst parameter difference {worst_param:.2e}"
                      f" against eager{to_exact}", flush=True)
    tunes = [None] * world
    dist.all_gather_object(tunes, tuning_runs())
    if rank == 0 and "torchfuse" in backends:
        tuned = 0
        try:
            import torchfuse
            tuned = sum(1 for e in torchfuse.cache.ls() if e["type"] == "tuning" and e["tuned"])
        except Exception as e:  # noqa: BLE001
            print(f"cache listing failed: {e}")
        print(f"tuning runs per rank {tunes} (sum {sum(tunes)}); tuned kernels in the shared "
              f"cache {tuned}", flush=True)
    dist.barrier()
    if rank == 0:
        print("distributed: ok" if not failures else f"distributed: FAILED ({'; '.join(failures)})",
              flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
