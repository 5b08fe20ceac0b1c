"""Host time per call of a one-kernel graph (a hand-written GeLU of a 1 x 1024 tensor), where
launching costs more than running: each way of calling it, side by side in one process.

    eager op            torch.tanh(x), one torch op (the floor a Python call of torch pays)
    eager module        the module's five ops
    dynamo floor        torch.compile with a backend that runs one torch op (torch.tanh) for
                        the graph: what Dynamo's frame and guards cost before any compiler
    torch.compile       Inductor, through Dynamo
    torchfuse           torchfuse.compile(model): Dynamo, the compiled graph (an inference
                        graph is called directly, without AOTAutograd's runtime wrappers)
    torchfuse, aot      the same graph through aot_autograd's runtime wrappers
                        (TORCHFUSE_INFERENCE_EXPORT=0 while it compiles)
    torchfuse fx        torchfuse.compile(model, dynamo=False): FX capture, the per-call path
    torchfuse aten      the same for a module whose Python reads the input's sizes: the ATen
                        trace, its per-call path pinned to the input signature
    handle op           the compiled handle through torch.ops.torchfuse.run (the dispatcher)
    handle direct       the compiled handle through _C.DirectCall (no dispatcher)
    graph replay        a bare torch.cuda.CUDAGraph.replay() of the eager module (no outputs)

Per call: the wall time of many back-to-back calls over their number, median of 7 rounds, the
ways interleaved round by round so that a host whose speed drifts slows them alike (the GPU's
1 x 1024 kernel takes less than any of these, so the host's time is what is measured).
Each output is checked against eager. With TORCHFUSE_HOST_TIMES=1 in the environment the C++
side also reports its own time per call ("host: whole call"); that timing slows every call.

    PYTHONPATH=build-gpu/python python3 bench/per_call.py [--calls 2000]
"""
import argparse
import copy
import os
import sys
import time
import warnings

import torch


class HandGelu(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


class SizedGelu(HandGelu):
    """HandGelu behind Python that reads the input's sizes (FX's symbolic tracing stops there;
    torchfuse.compile(..., dynamo=False) takes it as an ATen trace on torch >= 2.0)."""

    def forward(self, x):
        n, d = x.shape
        return super().forward(x.reshape(n, d))


def _round_us(fn, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def per_call_us(fn, calls, rounds=7):
    for _ in range(20):
        fn()
    times = sorted(_round_us(fn, calls) for _ in range(rounds))
    return times[len(times) // 2]


def interleaved_us(fns, calls, rounds=7):
    """Median per call of each function, timed in turn within each round."""
    for fn in fns:
        for _ in range(20):
            fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            times[i].append(_round_us(fn, calls))
    return [sorted(t)[len(t) // 2] for t in times]


def ways(model, x, cache_dir):
    import torchfuse
    from torchfuse import _C
    yield "eager op", lambda: torch.tanh(x)
    yield "eager module", lambda: model(x)
    torch._dynamo.reset()
    floor = torch.compile(copy.deepcopy(model),
                          backend=lambda gm, _: lambda *args: (torch.tanh(args[0]),))
    yield "dynamo floor", lambda: floor(x)
    tc = torch.compile(model)
    yield "torch.compile", lambda: tc(x)
    tf = torchfuse.compile(model, cache_dir=cache_dir)
    yield "torchfuse", lambda: tf(x)
    os.environ["TORCHFUSE_INFERENCE_EXPORT"] = "0"
    try:
        wrapped = torchfuse.compile(copy.deepcopy(model), cache_dir=cache_dir)
        wrapped(x)  # compiles now, through aot_autograd
    finally:
        os.environ.pop("TORCHFUSE_INFERENCE_EXPORT")
    yield "torchfuse, aot", lambda: wrapped(x)
    fx = torchfuse.compile(model, cache_dir=cache_dir, dynamo=False)
    yield "torchfuse fx", lambda: fx(x)
    # The same graph behind a read of the input's sizes, which FX cannot trace: the ATen
    # trace's path, whose per-call path also compares the call's signature with its pin.
    aten = torchfuse.compile(SizedGelu(), cache_dir=cache_dir, dynamo=False)
    yield "torchfuse aten", lambda: aten(x)
    run = torch.ops.torchfuse.run.default
    handle = fx._handle
    yield "handle op", lambda: run(handle, [x])[0]
    direct = _C.DirectCall(handle, False, [])
    args = (x,)
    yield "handle direct", lambda: direct(args)[0]
    static = x.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(static)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        out = model(static)
    yield "graph replay", graph.replay
    del out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    import tempfile
    import torchfuse
    from torchfuse import _C
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; microseconds per call, "
          f"1x1024 hand-written GeLU, median of 7 rounds of {a.calls} calls")
    with torch.no_grad(), tempfile.TemporaryDirectory() as cache_dir:
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(1, 1024, device="cuda", dtype=dtype)
            model = HandGelu()
            want = model(x)
            labels, fns = [], []
            for label, fn in ways(model, x, cache_dir):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = fn()
                    torchfuse.wait_for_compiles()
                    got = fn()
                    if got is not None and label not in ("eager op", "dynamo floor"):
                        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
                labels.append(label)
                fns.append(fn)
            cells = list(zip(labels, interleaved_us(fns, a.calls)))
            print(f"{str(dtype).replace('torch.', '')}: " +
                  ", ".join(f"{label} {us:.1f}" for label, us in cells), flush=True)
        times = _C.phase_times()
        for name in sorted(n for n in times if n.startswith("host:")):
            ms, count = times[name]
            print(f"C++ {name}: {ms * 1e3 / max(count, 1):.2f} us per call over {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
