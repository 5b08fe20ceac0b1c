"""cuDNN attention's warm-up while the torch.compile backend compiles (torchfuse._warmup)."""
import os
import subprocess
import sys
import textwrap
import types
import unittest

import torch
import torch.fx

from torchfuse import _warmup

CUDA = torch.cuda.is_available()
HAS_DYNAMO = hasattr(torch, "compile") and hasattr(torch, "_dynamo")


def cuda_value(dtype):
    """A stand-in for a CUDA tensor (or Dynamo's fake one) of `dtype`: what target() reads."""
    return types.SimpleNamespace(is_cuda=True, dtype=dtype, device=torch.device("cuda", 0))


def cpu_value(dtype):
    return types.SimpleNamespace(is_cuda=False, dtype=dtype, device=torch.device("cpu"))


def scaled_dot_product_attention(q, k, v):  # the name Dynamo's graphs call it by
    return q


def graph(*calls, meta=None):
    """A graph of one input x whose nodes call each of `calls` (a function, or a method's name)
    on x; `meta` is the example value put on every call's node."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = x
    for c in calls:
        if isinstance(c, str):
            y = g.call_method(c, (y,))
        else:
            y = g.call_function(c, (y, y, y) if c is scaled_dot_product_attention else (y,))
        if meta is not None:
            y.meta["example_value"] = meta
    g.output(y)
    return torch.fx.GraphModule(torch.nn.Module(), g)


class TargetTest(unittest.TestCase):
    """Which graphs warm cuDNN's attention up, and in which dtype (no GPU needed)."""

    def test_fused_attention_in_half_precision_on_cuda(self):
        bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
        gm = graph(torch.relu, scaled_dot_product_attention)
        self.assertEqual(_warmup.target(gm, [cuda_value(bf16)], rewrite=False)[1], bf16)
        self.assertEqual(_warmup.target(gm, [cuda_value(f16)], rewrite=True)[1], f16)
        self.assertIsNone(_warmup.target(gm, [cuda_value(f32)], rewrite=True))  # not cuDNN's
        self.assertIsNone(_warmup.target(gm, [cpu_value(bf16)], rewrite=True))
        # The node's own example value decides where the inputs say nothing (token ids).
        gm = graph(scaled_dot_product_attention, meta=cuda_value(bf16))
        self.assertEqual(_warmup.target(gm, [cuda_value(torch.int64)], rewrite=False)[1], bf16)

    def test_softmax_only_where_the_inference_rewrite_may_make_it_fused_attention(self):
        for calls in ((torch.softmax,), ("softmax",), (torch.nn.functional.softmax,)):
            gm = graph(torch.relu, *calls)
            with self.subTest(calls=calls):
                self.assertEqual(_warmup.target(gm, [cuda_value(torch.bfloat16)], True)[1],
                                 torch.bfloat16)
                self.assertIsNone(_warmup.target(gm, [cuda_value(torch.bfloat16)], False))
        gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 4),
                                                         torch.nn.Softmax(-1)))
        self.assertEqual(_warmup.target(gm, [cuda_value(torch.float16)], True)[1], torch.float16)

    def test_graphs_without_attention(self):
        gm = graph(torch.relu, torch.log_softmax, "sum")
        self.assertIsNone(_warmup.target(gm, [cuda_value(torch.bfloat16)], rewrite=True))

    def test_arguments_come_from_the_schema(self):
        def arg(name, default=False, kwarg_only=False):
            return types.SimpleNamespace(name=name, kwarg_only=kwarg_only,
                                         has_default_value=lambda: default)

        q = object()
        op = types.SimpleNamespace(_schema=types.SimpleNamespace(arguments=[
            arg("query"), arg("key"), arg("value"), arg("attn_bias"), arg("compute_log_sumexp"),
            arg("dropout_p", default=True), arg("is_causal", default=True),
            arg("scale", kwarg_only=True)]))
        self.assertEqual(_warmup._arguments(op, q), [q, q, q, None, False])
        op._schema.arguments.insert(3, arg("something_new"))
        with self.assertRaisesRegex(ValueError, "something_new"):
            _warmup._arguments(op, q)
        real = getattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention", None)
        if real is not None:  # this torch's own: every required argument is known
            self.assertEqual(_warmup._arguments(real.default, q)[:3], [q, q, q])


@unittest.skipUnless(CUDA and HAS_DYNAMO, "needs a CUDA device and torch.compile")
class WarmupGpuTest(unittest.TestCase):
    def run_child(self, env):
        """A fresh process (the warm-up runs once a process): a bf16 block calling fused
        attention, compiled with the torchfuse backend; prints the warm-up's state and the
        error against eager."""
        code = textwrap.dedent("""
            import torch, torchfuse
            import torch.nn.functional as F
            from torchfuse import _warmup

            class Attention(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.qkv = torch.nn.Linear(64, 192)

                def forward(self, x):
                    q, k, v = self.qkv(x).view(2, 128, 3, 2, 32).permute(2, 0, 3, 1, 4)
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    return torch.nn.functional.gelu(y.transpose(1, 2).reshape(2, 128, 64))

            torch.manual_seed(0)
            model = Attention().cuda().to(torch.bfloat16).eval()
            x = torch.randn(2, 128, 64, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                want = model(x).float()
                got = torch.compile(model, backend="torchfuse")(x).float()
                print("RNG", torch.cuda.get_rng_state().tolist())
            print("STATE", _warmup.state())
            print("ERR", ((got - want).norm() / want.norm()).item())
        """)
        p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in p.stdout.splitlines()
                 if " " in ln}
        return lines

    def test_the_backend_warms_cudnn_attention_up_once_where_a_graph_calls_it(self):
        on = self.run_child({"TORCHFUSE_WARM_CUDNN": "1"})
        off = self.run_child({"TORCHFUSE_WARM_CUDNN": "0"})
        for lines in (on, off):
            self.assertLess(float(lines["ERR"]), 2e-2)
        # It draws no random numbers: the caller's generator is where it is without it.
        self.assertEqual(on["RNG"], off["RNG"])
        state = eval(on["STATE"], {"torch": torch})  # noqa: S307  (our own child's dict)
        wanted = torch.cuda.get_device_capability() >= (9, 0) and \
            torch.backends.cudnn.is_available() and \
            getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)()
        self.assertEqual(state["started"], wanted, state)
        if wanted:
            self.assertIsNone(state["error"], state)
            self.assertGreater(state["ms"], 0)
            self.assertEqual(state["dtype"], torch.bfloat16)
        # TORCHFUSE_WARM_CUDNN=0 turns it off.
        state = eval(off["STATE"], {"torch": torch})  # noqa: S307
        self.assertFalse(state["started"])
        self.assertIsNone(state["ms"])

if __name__ == "__main__":
    unittest.main()
