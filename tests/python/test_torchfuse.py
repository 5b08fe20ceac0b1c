"""The torchfuse Python package: CPU tests run everywhere (Debian's torch 1.13 in CI), GPU tests
where CUDA is (torch 2.11 on the GPU machine).

    PYTHONPATH=build/python python3 -m unittest discover -s tests/python -v
"""
import contextlib
import copy
import functools
import itertools
import json
import math
import operator
import os
import re
import shutil
import sys
import tempfile
import unittest
import warnings
from typing import Tuple
from unittest import mock

import torch

import torchfuse

# Background tuning unless a test names a mode, whatever TORCHFUSE_TUNE the shell has: a
# first call then runs the kernels it checks, where lazy tuning (the default) would run the
# groups' torch ops while those compile. The tests of lazy tuning set their own.
os.environ["TORCHFUSE_TUNE"] = "background"

CUDA = torch.cuda.is_available()
HAS_DYNAMO = hasattr(torch, "compile") and hasattr(torch, "_dynamo")


class HandGelu(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


class Softmax(torch.nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.max(dim=-1, keepdim=True)[0])
        return e / e.sum(-1, keepdim=True)


class Compared(torch.nn.Module):
    """Comparisons with Python numbers, one elementwise group."""

    def forward(self, x):
        return torch.where(x > 0.25, x * 0.5, torch.where(x != 0.5, x, -x))


class BiasGelu(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        y = x + self.bias
        return 0.5 * y * (1.0 + torch.tanh(0.79788456 * (y + 0.044715 * y ** 3)))


class LayerNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(n) + 0.5)
        self.b = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.w + self.b


class RmsNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(n) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.w


class Block(torch.nn.Module):
    """nn modules the FX path maps: Linear, GELU, Dropout (eval), LayerNorm, Softmax, ReLU, SiLU."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.gelu = torch.nn.GELU(approximate="tanh")
        self.drop = torch.nn.Dropout(0.5)
        self.ln = torch.nn.LayerNorm(64)
        self.sm = torch.nn.Softmax(dim=-1)
        self.relu = torch.nn.ReLU()
        self.silu = torch.nn.SiLU()

    def forward(self, x):
        return self.sm(self.ln(self.drop(self.gelu(self.lin(x))))) + self.silu(self.relu(x))


class ShapeBranch(torch.nn.Module):
    """A branch on a size: FX cannot trace it, TorchScript scripts it and import settles it."""

    def forward(self, x):
        if x.shape[-1] > 4:
            return torch.tanh(x) * 2
        return torch.exp(x)


class Logits(torch.nn.Module):
    """The logits of a language model's output; ids stay integers under .float()."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids.long()).logits


class Pick(torch.nn.Module):
    """One output of a module returning a dict (of tuples): out[key], or out[key][index]."""

    def __init__(self, model, key, index=None):
        super().__init__()
        self.model, self.key, self.index = model, key, index

    def forward(self, x):
        out = self.model(x)[self.key]
        return out if self.index is None else out[self.index]


def workloads(device, dtype):
    """BENCH.md's workloads at test sizes: (name, module, input)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    out = [("gelu", HandGelu(), rand(512, 1024))]
    for n in (256, 1024, 4096):
        out.append((f"softmax {n}", Softmax(), rand(64, n)))
    out += [("bias+gelu", BiasGelu(1024), rand(256, 1024)),
            ("layernorm", LayerNorm(1024), rand(256, 1024)),
            ("rmsnorm", RmsNorm(1024), rand(256, 1024))]
    return [(n, m.to(device=device, dtype=dtype).eval(), x) for n, m, x in out]


@contextlib.contextmanager
def scoped_env(**values):
    """The environment variables `values` names set for the block (None: unset), restored
    after it."""
    old = {k: os.environ.get(k) for k in values}
    def put(items):
        for k, v in items.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    put(values)
    try:
        yield
    finally:
        put(old)


def fused_only():
    """Kernel choices without the tuner's torch candidate: a test that counts torchfuse's
    kernels checks what fuses, not which of a kernel and the torch ops timed faster."""
    return scoped_env(TORCHFUSE_TUNE_TORCH="0")


def tolerance(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype in (torch.bfloat16, torch.float16) else \
        dict(atol=1e-5, rtol=1e-4)


def untimed_attention(test):
    """Runs `test` with the attention rewrite taking every length without timing it against
    the unfused form: which one wins at a test's small sizes depends on the GPU and the
    moment, and such tests check the rewrite itself."""
    @functools.wraps(test)
    def run(self, *args, **kwargs):
        from torchfuse import _attention
        keep = _attention.MEASURE_BELOW_KEYS
        _attention.MEASURE_BELOW_KEYS = 0
        try:
            return test(self, *args, **kwargs)
        finally:
            _attention.MEASURE_BELOW_KEYS = keep
    return run


class WindowAttention(torch.nn.Module):
    """Shifted-window attention as Swin writes it: a bias per head added to the scores, then
    a mask per window added to the scores viewed as [images, windows, heads, N, N]."""

    def __init__(self, windows=4, heads=3, n=49):
        super().__init__()
        self.shape = (windows, heads, n)
        self.bias = torch.nn.Parameter(torch.randn(1, heads, n, n))
        self.register_buffer("mask", (torch.rand(windows, n, n) > 0.8) * -100.0)

    @staticmethod
    def attend(q, k, v, bias, mask, shape: Tuple[int, int, int]):
        w, h, n = shape
        s = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1) + bias
        s = (s.view(-1, w, h, n, n) + mask[None, :, None]).view(-1, h, n, n)
        return torch.softmax(s, -1) @ v

    def forward(self, q, k, v):
        return self.attend(q, k, v, self.bias, self.mask, self.shape)


class Fn(torch.nn.Module):
    """A function as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def run_serialized(serialized, inputs):
    """Runs the JSON that torchfuse's FX serializer writes (torchfuse._fx.serialize) with
    torch's own aten ops, node by node: what the C++ side is handed, computed on the CPU."""
    doc, env, feed = json.loads(serialized.text), {}, iter(inputs)

    def value(a):
        if isinstance(a, list):
            return [value(v) for v in a]
        if not isinstance(a, dict):
            return a
        if "node" in a:
            return env[a["node"]]
        if "dtype" in a:
            return getattr(torch, a["dtype"].split(".")[-1])
        if "float" in a:
            return float(a["float"])
        raise AssertionError(f"argument {a} is not read here")

    for n in doc["nodes"]:
        if n["op"] == "placeholder":
            env[n["name"]] = next(feed)
        elif n["op"] == "get_attr":
            env[n["name"]] = serialized.attrs[n["target"]]
        elif n["op"] == "output":
            return value(n["args"][0])
        else:
            args = [value(a) for a in n["args"]]
            kwargs = {k: value(v) for k, v in n["kwargs"].items()}
            if n["target"] == "getitem":
                env[n["name"]] = args[0][args[1]]
            else:
                op = getattr(torch.ops.aten, n["target"].split("::")[1])
                env[n["name"]] = op(*args, **kwargs)
    raise AssertionError("no output node")


class TempCache(unittest.TestCase):
    def setUp(self):
        self.cache_dir = tempfile.mkdtemp(prefix="torchfuse-py-")

    def tearDown(self):
        shutil.rmtree(self.cache_dir, ignore_errors=True)


class CpuTest(TempCache):
    def test_environment_changes_go_through_torchfuses_gate(self):
        """While torchfuse is imported, os.environ's changes (os.putenv, os.unsetenv) wait for
        NVRTC's reads of the environment on compile threads (common/env.h): they reach the C
        library's environment, through os.environ and mock.patch.dict, and accept and refuse
        what the os module's own functions do."""
        import ctypes

        from torchfuse import _environ
        self.assertIs(os.putenv, _environ.putenv)
        self.assertIs(os.unsetenv, _environ.unsetenv)
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        name = "TORCHFUSE_TEST_GATED_%d" % os.getpid()
        os.environ[name] = "one"
        self.assertEqual(libc.getenv(name.encode()), b"one")
        with mock.patch.dict(os.environ, {name: "two"}):
            self.assertEqual(libc.getenv(name.encode()), b"two")
        self.assertEqual(libc.getenv(name.encode()), b"one")
        del os.environ[name]
        self.assertIsNone(libc.getenv(name.encode()))
        self.assertIsNotNone(libc.getenv(b"PATH"))  # restored by mock.patch.dict
        cases = [("putenv", ("", "x")), ("putenv", ("A=B", "x")), ("putenv", ("A\0", "x")),
                 ("putenv", (name, "x\0")), ("putenv", (1, "x")), ("unsetenv", ("",)),
                 ("unsetenv", ("A=B",)), ("unsetenv", ("A\0",)), ("putenv", (name.encode(), b"v")),
                 ("unsetenv", (name,))]

        def outcome(fn, args):
            try:
                fn(*args)
                return ("ok", libc.getenv(name.encode()))
            except Exception as e:  # noqa: BLE001  (compared below)
                return (type(e).__name__, str(e))
        for fn_name, args in cases:
            with self.subTest(fn=fn_name, args=args):
                ours = outcome(getattr(_environ, fn_name), args)
                theirs = outcome(_environ._real[fn_name], args)
                self.assertEqual(ours, theirs)
        _environ.uninstall()
        try:
            self.assertIs(os.putenv, _environ._real["putenv"])
            theirs = lambda key, value: None  # noqa: E731  (another library's replacement)
            os.putenv = theirs
            _environ.install()
            self.assertIs(os.putenv, theirs)  # left as it is
        finally:
            os.putenv = _environ._real["putenv"]
            _environ.install()
            _environ.install()  # once only
        self.assertIs(os.putenv, _environ.putenv)
        self.assertIsNot(_environ._real["putenv"], _environ.putenv)  # the os module's own

    def test_the_compiled_forward_is_called_only_where_module_call_adds_nothing(self):
        # Which callable a Dynamo call takes (the GPU test runs both through Dynamo): the
        # compiled forward for a plain module; the compiled module where __call__ would run
        # hooks (the module's or global ones), where forward was set on the instance after
        # compiling, or where the class overrides __call__; never for TorchScript or a lazy
        # module.
        class OwnCall(HandGelu):
            def __call__(self, x):
                return super().__call__(x) + 1

        pick = torchfuse._forward_callable
        self.assertTrue(pick(HandGelu()))
        self.assertTrue(pick(Block()))
        self.assertFalse(pick(OwnCall()))
        self.assertFalse(pick(torch.jit.script(HandGelu())))
        self.assertFalse(pick(torch.nn.LazyLinear(4)))
        self.assertFalse(pick(lambda x: x))

        model = Block()
        fast = torchfuse.CompiledModule(model, dynamo=False)
        module_call, forward_call = object(), object()
        fast._compiled, fast._compiled_forward = module_call, forward_call
        self.assertIs(fast._dynamo_callable(), forward_call)
        for register in (model.register_forward_hook, model.register_forward_pre_hook,
                         torch.nn.modules.module.register_module_forward_hook,
                         torch.nn.modules.module.register_module_forward_pre_hook):
            with self.subTest(hook=register.__name__):
                hook = register(lambda *a: None)
                self.assertIs(fast._dynamo_callable(), module_call)
                hook.remove()
                self.assertIs(fast._dynamo_callable(), forward_call)
        model.forward = lambda x: x
        self.assertIs(fast._dynamo_callable(), module_call)
        del model.forward
        self.assertIs(fast._dynamo_callable(), forward_call)
        fast._compiled_forward = None
        self.assertIs(fast._dynamo_callable(), module_call)

    @staticmethod
    def _aten_graph(fn, args):
        """The ATen graph of `fn` (make_fx) with shapes, dtypes and strides on each node, as
        AOTAutograd's graphs have them."""
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp
        aten = torch.ops.aten
        gm = make_fx(fn)(*args)
        for node in gm.graph.nodes:  # torch 1.13 writes views of reshapes so
            if node.op == "call_function" and node.target == aten._reshape_alias.default:
                node.target, node.args = aten.view.default, node.args[:2]
        gm.recompile()
        FakeTensorProp(gm).propagate(*args)
        return gm

    @staticmethod
    def _attention_match(fn, args):
        """torchfuse's attention matcher on the ATen graph of `fn`, at its last batched
        product."""
        from torchfuse import _attention
        gm = CpuTest._aten_graph(fn, args)
        products = [node for node in gm.graph.nodes
                    if node.op == "call_function" and node.target == torch.ops.aten.bmm.default]
        return _attention._match(gm, products[-1])

    def test_only_graphs_without_side_effects_or_aliased_outputs_skip_functionalization(self):
        """The checks that let an inference graph be traced by make_fx alone: a torch-level
        graph with an in-place method, function or argument or a module call has side
        effects; one whose outputs are inputs, views of inputs or of one base (by the ops'
        names) may return aliases; an ATen graph with a mutable op (or a batch norm that
        updates its statistics), an output that is (a view of) an input, or two outputs of one
        base does not return fresh values of its own."""
        import torch.fx

        from torchfuse import _backend

        def inplace_method(x):
            y = x * 2.0
            return y.add_(1.0)

        side_effects = [
            (lambda x: torch.tanh(x) * x + 1.0, False),
            (lambda x: torch.nn.functional.layer_norm(x, (8,)).view(-1), False),
            (lambda x: ((x > 0) & (x < 1)) | (x == 2), False),
            (inplace_method, True),
            (lambda x: torch.relu_(x * 2.0), True),
            (lambda x: torch.nn.functional.relu(x * 2.0, inplace=True), True),
        ]
        for fn, want in side_effects:
            gm = torch.fx.symbolic_trace(fn)
            self.assertEqual(_backend._side_effect(gm) is not None, want, gm.code)
        # A module call: what its forward does is not in the graph.
        gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(8, 8)))
        self.assertIn("calls module", _backend._side_effect(gm) or "", gm.code)

        # Dynamo's graphs of `with torch.autocast(...)` and of a grad-mode switch, built by
        # hand (symbolic_trace runs a context manager instead of recording it). An autocast
        # region is traced as the export traces it; a grad-mode switch is a side effect.
        def _enter_autocast(*args):
            return None

        def _exit_autocast(mode):
            return None

        def _set_grad_enabled(mode):
            return None

        def switched(enter, leave, enter_args):
            graph = torch.fx.Graph()
            x = graph.placeholder("x")
            mode = graph.call_function(enter, enter_args)
            y = graph.call_function(torch.tanh, (x,))
            graph.call_function(leave, (mode,))
            graph.output(graph.call_function(torch.mul, (y, x)))
            return torch.fx.GraphModule(torch.nn.Module(), graph)

        gm = switched(_enter_autocast, _exit_autocast, ("cuda", None, False, None))
        self.assertIsNone(_backend._side_effect(gm), gm.code)
        gm = switched(_set_grad_enabled, _set_grad_enabled, (True,))
        self.assertIn("switches a global mode", _backend._side_effect(gm) or "", gm.code)

        def one_base_torch(x):
            y = torch.exp(x)
            return y, y.transpose(0, 1)

        may_alias = [
            (lambda x: torch.tanh(x).view(-1), False),
            (lambda x: (torch.exp(x), torch.sin(x).t()), False),
            (lambda x: x, True),
            (lambda x: x.view(-1), True),
            (lambda x: (torch.tanh(x), x.float().contiguous()), True),
            (lambda x: torch.flatten(x[:, 1:]), True),
            (one_base_torch, True),
        ]
        for fn, want in may_alias:
            gm = torch.fx.symbolic_trace(fn)
            self.assertEqual(_backend._may_return_aliases(gm) is not None, want, gm.code)

        def one_base(x):
            y = torch.exp(x)
            return y, y.t()

        def mutates(x):
            y = x * 2.0
            y.add_(1.0)
            return y

        x = torch.randn(4, 8)
        # (function, None where pure and fresh, else the start of why not)
        fresh = [
            (lambda x: torch.tanh(x) * x + 1.0, None),
            (lambda x: (torch.exp(x).view(-1), torch.sin(x).t()), None),
            (lambda x: x.view(-1), "aliases: output 0"),
            (lambda x: x, "aliases: output 0"),
            (lambda x: (torch.chunk(x, 2)[1], torch.exp(x)), "aliases: output 0"),
            (one_base, "aliases: outputs 0 and 1"),
            (mutates, "mutates: add_"),
        ]
        for fn, want in fresh:
            gm = self._aten_graph(fn, [x])
            why = _backend._impurity(gm)
            if want is None:
                self.assertIsNone(why, gm.code)
            else:
                self.assertTrue(why is not None and why.startswith(want), (why, gm.code))
        # A batch norm in training writes its running statistics.
        gm = self._aten_graph(lambda x, m, v: torch.nn.functional.batch_norm(
            x, m, v, training=True) * 2.0, [x, torch.randn(8), torch.rand(8) + 0.5])
        self.assertIn("mutates", _backend._impurity(gm) or "", gm.code)

    def test_metadata_writes_on_values_of_the_graph_become_views(self):
        """An in-place restride (as_strided_, unsqueeze_, transpose_) of a value the graph
        computed and nothing else reads becomes its view op, so the trace stays pure (an
        adaptive average pool's decomposition restrides its mean so); one of an input, or of a
        value read elsewhere too, stays, and the graph goes to the export."""
        from torchfuse import _backend

        def restrided_mean(x):
            y = x.mean((-1, -2), keepdim=True)
            y.as_strided_(y.shape, (y.shape[1], 1, y.shape[1], y.shape[1]))
            return y * 2.0

        def unsqueezed(x):
            y = torch.exp(x)
            y.unsqueeze_(0)
            return y + 1.0

        def read_before(x):
            y = torch.exp(x)
            z = y + 1.0
            y.transpose_(0, 1)
            return y * 3.0, z

        def writes_input(x):
            x.unsqueeze_(0)
            return x * 2.0

        def squeezed_dims(x):
            y = torch.exp(x).unsqueeze(0).unsqueeze(2)
            y.squeeze_((0, 2))  # aten.squeeze_.dims, on torch >= 2.0
            return y - 1.0

        x = torch.randn(4, 6, 3, 5)
        cases = [(restrided_mean, 1), (unsqueezed, 1), (read_before, 0), (writes_input, 0)]
        if hasattr(torch.ops.aten.squeeze_, "dims"):
            cases.append((squeezed_dims, 1))
        for fn, views in cases:
            gm = self._aten_graph(fn, [x.clone()])
            self.assertEqual(_backend._metadata_writes_as_views(gm), views, gm.code)
            why = _backend._impurity(gm)
            if views:
                self.assertIsNone(why, gm.code)
                got, want = gm(x.clone()), fn(x.clone())
                self.assertEqual(got.shape, want.shape)
                self.assertEqual(got.stride(), want.stride())
                torch.testing.assert_close(got, want)
            else:
                self.assertTrue(why is not None and why.startswith("mutates"), (why, gm.code))

    def test_attention_matcher_folds_a_window_mask(self):
        """The attention matcher on an ATen graph of windowed attention (Swin's shifted
        windows): the scores plus a bias, viewed per window [B', W, H, N, N] plus a mask per
        window, viewed back. It finds the scale, the bias and the window mask with its fold;
        the folded mask the rewrite writes (expanded to [B', W, ...], reshaped to [B' * W,
        ...]) added to the scores is what the model computes. A bool tensor added there is no
        mask: no match."""
        from torchfuse import _attention
        b, w, h, n, d = 8, 4, 3, 16, 8

        def attention(q, k, v, bias, mask):
            s = torch.matmul(q * 0.25, k.transpose(-2, -1)) + bias
            s = (s.view(-1, w, h, n, n) + mask).view(-1, h, n, n)
            return torch.matmul(torch.softmax(s, -1), v)

        def matches(mask):
            args = [torch.randn(b, h, n, d) for _ in range(3)] + [torch.randn(1, h, n, n), mask]
            return self._attention_match(attention, args)

        found = matches(torch.randn(1, w, 1, n, n))
        self.assertIsNotNone(found)
        self.assertEqual(found.scale, 0.25)
        kinds = [(e[0], _attention._shape(e[1]), tuple(e[2:])) for e in found.masks]
        self.assertEqual(kinds, [("add", (1, h, n, n), ()),
                                 ("add", (1, w, 1, n, n), ((b // w, w),))])
        self.assertEqual(_attention._mask_shape(found.masks[1]), (b, 1, n, n))
        scores, mask = torch.randn(b, h, n, n), torch.randn(1, w, 1, n, n)
        folded = mask.expand(b // w, w, 1, n, n).reshape(b, 1, n, n)
        torch.testing.assert_close(scores + folded,
                                   (scores.view(-1, w, h, n, n) + mask).view(-1, h, n, n))
        self.assertIsNone(matches(torch.rand(1, w, 1, n, n) > 0.5))  # a bool, not a mask

    def test_attention_matcher_takes_safe_softmax_whose_test_reads_the_scores_alone(self):
        """SDPA's math form: softmax, then where(no key of the row left, zeros, p) with the test
        eq(scores, -inf) -> logical_not -> any -> logical_not. The matcher takes it (a safe
        softmax with its mask); where something else also compares the scores with -inf, the
        scores are not the softmax's and its test's alone: no match."""
        b, h, n, d = 2, 3, 16, 8

        def attention(q, k, v, mask, other_reader):
            s = torch.matmul(q * 0.25, k.transpose(-2, -1)) + mask
            p = torch.softmax(s, -1)
            masked = torch.logical_not(torch.eq(s, float("-inf")))
            p = torch.where(torch.logical_not(torch.any(masked, -1, keepdim=True)),
                            torch.full_like(p, 0), p)
            out = torch.matmul(p, v)
            return (out, torch.eq(s, float("-inf")).sum()) if other_reader else out

        args = [torch.randn(b, h, n, d) for _ in range(3)] + [torch.randn(b, 1, n, n)]
        found = self._attention_match(lambda *a: attention(*a, False), args)
        self.assertIsNotNone(found)
        self.assertTrue(found.safe)
        self.assertEqual(found.scale, 0.25)
        self.assertEqual(len(found.masks), 1)
        self.assertIsNone(self._attention_match(lambda *a: attention(*a, True), args))

    def test_memory_efficient_attention_masks_are_written_with_aligned_rows(self):
        """The mask the rewrite hands ATen's memory-efficient kernel (_aligned_mask): eager's
        values broadcast to [B, H, Tq, Tk], rows starting at multiples of 8 elements, the
        mask's broadcast dims still broadcast (no copy per batch), for masks of every rank,
        per key or not, wide and narrow. In a graph, the mask's kernel writes the padded rows
        and torch reads views of them: nothing of the padding is left to torch."""
        from torchfuse import _attention
        shape = (8, 3, 49, 49)
        for mask_shape, want in (((1, 3, 49, 49), shape), ((8, 3, 49, 49), shape),
                                 ((3, 49, 49), shape), ((8, 1, 1, 49), shape),
                                 ((8, 3, 49, 1), shape), ((2, 3, 16, 3), (2, 3, 16, 3)),
                                 ((1, 3, 64, 64), (2, 3, 64, 64))):
            with self.subTest(mask=mask_shape, shape=want):
                mask = torch.randn(mask_shape)
                got = _attention._aligned_mask(mask, mask_shape, want)
                self.assertEqual(tuple(got.shape), want)
                self.assertTrue(torch.equal(got, mask.expand(want)))
                self.assertEqual(got.stride(-1), 1)
                self.assertTrue(all(s % 8 == 0 for s in got.stride()[:-1]), got.stride())
                padded = (1,) * (4 - len(mask_shape)) + mask_shape
                for d in range(3):
                    if padded[d] == 1 and want[d] > 1:
                        self.assertEqual(got.stride(d), 0, (d, got.stride()))

        class Masked(torch.nn.Module):
            def forward(self, bias, x):
                m = _attention._aligned_mask(bias.clamp_min(-1e4), (1, 3, 49, 49), shape)
                return torch.cumsum(m, -1) + x  # cumsum: an op torch runs, as the kernel

        args = (torch.randn(1, 3, 49, 49), torch.randn(shape))
        found = torchfuse.explain(Masked(), *args)
        self.assertEqual([l["op"] for g in found for l in g["left_to_torch"]],
                         ["aten::cumsum"], found)
        self.assertEqual(sum(g["views"] for g in found), 2, found)  # the slice and the expand
        self.assertEqual(sum(g["kernels"] for g in found), 2, found)
        fast = torchfuse.compile(Masked(), cache_dir=self.cache_dir)
        torch.testing.assert_close(fast(*args), Masked()(*args))

    def test_window_attention_as_written_is_one_kernel_between_its_products(self):
        """Where shifted-window attention stays as written, the bias add, the mask add (on the
        scores viewed per window) and the softmax are one kernel: the views leave it (one onto
        the first product's result, one past the softmax). With the q scale, two kernels."""
        model = WindowAttention()
        with mock.patch.dict(os.environ, {"TORCHFUSE_ATTENTION": "0"}):
            kernels = torchfuse.inspect(model, "f32[8,3,49,32]", "f32[8,3,49,32]",
                                        "f32[8,3,49,32]", arch="sm_90", kernels_only=True,
                                        cache_dir=self.cache_dir)
            self.assertEqual(len(kernels), 2, list(kernels))
            fast = torchfuse.compile(model, dynamo=False)
            args = [torch.randn(8, 3, 49, 32) for _ in range(3)]
            torch.testing.assert_close(fast(*args), model(*args))
            # The ATen graph (as AOTAutograd hands it over): matmul's expands and views too.
            gm = self._aten_graph(lambda q, k, v, bias, mask: WindowAttention.attend(
                q, k, v, bias, mask, (4, 3, 49)), args + [model.bias.detach(), model.mask])
            kernels = torchfuse.inspect(gm, *["f32[8,3,49,32]"] * 3, "f32[1,3,49,49]",
                                        "f32[4,49,49]", arch="sm_90", kernels_only=True,
                                        cache_dir=self.cache_dir)
            self.assertEqual(len(kernels), 2, list(kernels))

    def test_compile_of_hand_written_gelu_gives_eagers_answer_on_cpu(self):
        model = HandGelu()
        fast = torchfuse.compile(model)
        x = torch.randn(16, 100)
        torch.testing.assert_close(fast(x), model(x))
        with self.assertRaises(RuntimeError):
            fast.kernel_sources()  # CPU calls compile nothing

    def test_fx_capture_of_nn_modules_fuses_everything_but_the_matmul(self):
        model = Block().eval()
        report = torchfuse.inspect(model, torch.randn(8, 64), arch="sm_90",
                                   cache_dir=self.cache_dir)
        self.assertIn("node(s) run by torch", report)
        self.assertIn("linear(", report)
        # One row kernel: gelu, layer_norm, softmax, and the relu/silu branch added after it.
        kernels = torchfuse.inspect(model, "f32[8,64]", arch="sm_90", kernels_only=True,
                                    cache_dir=self.cache_dir)
        self.assertEqual(len(kernels), 1, kernels.keys())
        source = next(iter(kernels.values()))
        for op in ("tf_tanh", "rsqrt", "exp"):
            self.assertIn(op, source)
        for name, source in kernels.items():
            self.assertIn('extern "C" __global__', source)
            self.assertIn(name, source)

    def test_every_bench_workload_is_one_kernel(self):
        for name, model, x in workloads("cpu", torch.float32):
            kernels = torchfuse.inspect(model, x, arch="sm_90", kernels_only=True,
                                        cache_dir=self.cache_dir)
            self.assertEqual(len(kernels), 1, f"{name}: {list(kernels)}")

    @unittest.skipUnless(sys.platform.startswith("linux"), "libstdc++ is Linux's C++ runtime")
    def test_the_extension_shares_libtorchs_cpp_runtime(self):
        """The extension resolves the C++ runtime's symbols to the libstdc++.so LibTorch
        loads, not to a private static copy: streams and locales made by one copy and used by
        the other (torch's printers writing into the extension's streams) crash."""
        import ctypes
        ext = ctypes.CDLL(torchfuse._C.__file__)
        runtime = ctypes.CDLL("libstdc++.so.6")
        for symbol in ("_ZNSt6locale7classicEv", "_ZNSt8ios_base4InitC1Ev"):
            with self.subTest(symbol=symbol):
                ours = ctypes.cast(getattr(ext, symbol), ctypes.c_void_p).value
                theirs = ctypes.cast(getattr(runtime, symbol), ctypes.c_void_p).value
                self.assertEqual(ours, theirs)

    def test_untraceable_modules_are_traced_at_the_aten_level_or_scripted(self):
        fast = torchfuse.compile(ShapeBranch(), dynamo=False)
        fast._ensure((torch.randn(4, 8),))
        self.assertEqual(fast.how, "aten" if torchfuse._aten.available() else "script")
        kernels = torchfuse.inspect(fast, "f32[4,8]", arch="sm_90", kernels_only=True,
                                    cache_dir=self.cache_dir)
        self.assertEqual(len(kernels), 1)
        self.assertIn("tanh", next(iter(kernels.values())))

    def test_signatures_traced_before_are_kept_when_a_new_one_cannot_be_captured(self):
        """Captures by signature (an ATen trace's), with the capture itself replaced: a new
        signature that no capture takes runs eagerly, with one warning, and is not tried
        again; the signatures captured before keep their graphs."""
        model = HandGelu()
        a, b = torch.randn(4, 8), torch.randn(2, 8)
        real = torchfuse._capture(model, [a], "")
        tried = []

        def capture(module, args, options):
            tried.append(tuple(args[0].shape))
            if args[0].shape[0] != 4:
                raise RuntimeError("torchfuse: cannot capture the module's graph (test)")
            return torchfuse._Capture(real.handle, "aten", real.returns,
                                      torchfuse._aten.signature(args))

        fast = torchfuse.compile(model, dynamo=False)
        with mock.patch.object(torchfuse, "_capture", capture), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertTrue(fast._ensure((a,)))
            self.assertFalse(fast._ensure((b,)))
            self.assertFalse(fast._ensure((b,)))
            self.assertTrue(fast._ensure((a,)))
        self.assertEqual(tried, [(4, 8), (2, 8)])
        said = [str(w.message) for w in caught if "cannot capture" in str(w.message)]
        self.assertEqual(len(said), 1, said)
        self.assertIn("this input signature", said[0])
        self.assertIsNone(fast._capture_error)
        self.assertEqual(fast._handle, real.handle)

    def test_the_per_call_path_declines_what_it_cannot_run(self):
        model = HandGelu()
        x = torch.randn(4, 8)
        captured = torchfuse._capture(model, [x], "")
        handle, returns_tuple = captured.handle, captured.returns
        self.assertEqual((captured.how, captured.signature), ("fx", None))
        try:
            direct = torchfuse._C.DirectCall(handle, True, [])
            self.assertIsNone(direct((x,)))  # a CPU tensor
            self.assertIsNone(direct([x, "a string"]))
            self.assertIsNone(direct(()))
            self.assertIsNone(direct(x))  # not a tuple or list of arguments
            self.assertEqual((direct.calls, direct.declined), (0, 4))
            # The op's path takes what it declined: a CPU call runs the module eagerly.
            got = torchfuse._runtime.run(handle, (x,), returns_tuple, direct)
            torch.testing.assert_close(got, model(x))
        finally:
            torchfuse._C.release(handle)

    def test_precompile_then_cache_ls_clear(self):
        out = torchfuse.precompile(RmsNorm(256), "f32[32,256]", arch="sm_90",
                                   cache_dir=self.cache_dir)
        self.assertIn("1 kernel(s) for sm_90", out)
        entries = torchfuse.cache.ls(self.cache_dir)
        tuning = [e for e in entries if e["type"] == "tuning"]
        self.assertEqual(len(tuning), 1)
        self.assertGreaterEqual(sum(e["type"] == "binary" for e in entries), 1)
        self.assertEqual(tuning[0]["arch"], 90)
        if not CUDA:
            # No GPU: one binary, and the heuristic's choice recorded as such, untimed.
            self.assertEqual(len(entries), 2)
            self.assertFalse(tuning[0]["tuned"])
            self.assertEqual(tuning[0]["trials"], [])
        binary = [e for e in entries if e["type"] == "binary"][0]
        self.assertEqual((binary["trials"], binary["phases"]), ([], ""))
        # A tuned record's trials as the listing reads them.
        self.assertEqual(torchfuse.cache._trials("block_t256=0.0676;looped_t512_u2=compile failed;"
                                                 "torch=0.3019"),
                         [{"variant": "block_t256", "ms": 0.0676},
                          {"variant": "looped_t512_u2", "error": "compile failed"},
                          {"variant": "torch", "ms": 0.3019}])
        self.assertIn("tuning", torchfuse.cache.ls(self.cache_dir, as_text=True))
        self.assertEqual(torchfuse.cache.path(self.cache_dir), self.cache_dir)
        if not CUDA:
            self.assertIn("1", torchfuse.cache.rebuild(self.cache_dir, arch="sm_90"))
        torchfuse.cache.clear(self.cache_dir)
        self.assertEqual(torchfuse.cache.ls(self.cache_dir), [])

    def test_compiles_run_in_the_worker_next_to_the_extension(self):
        from torchfuse import _C
        here = os.path.join(os.path.dirname(os.path.abspath(_C.__file__)), "torchfuse-nvrtc-worker")
        with scoped_env(TORCHFUSE_COMPILE_WORKERS="1"):  # opt-in
            self.assertEqual(_C.compile_worker_path(), here)
            before = _C.process_counters()
            torchfuse.precompile(RmsNorm(160), "f32[12,160]", arch="sm_90",
                                 cache_dir=self.cache_dir)
            after = _C.process_counters()
        self.assertGreater(after["worker_compiles"], before["worker_compiles"])
        self.assertEqual(after["compiles_in_process"], before["compiles_in_process"])
        self.assertEqual(after["workers_lost"], before["workers_lost"])

    def test_compile_warms_nvrtc_ahead_on_a_gpu_without_counting_a_compile(self):
        from torchfuse import _C
        before = _C.process_counters()["nvrtc_compiles"]
        torchfuse.compile(RmsNorm(64))  # before any call
        torchfuse.wait_for_compiles()
        if CUDA and _C.compile_worker_path() == "" and \
                os.environ.get("TORCHFUSE_WARM_NVRTC", "1") != "0":
            self.assertGreaterEqual(_C.nvrtc_warmup_ms(), 0)
        elif not CUDA:
            self.assertEqual(_C.nvrtc_warmup_ms(), -1)  # no GPU: nothing to compile for
        self.assertEqual(_C.process_counters()["nvrtc_compiles"], before)

    def test_cache_export_and_import_ship_a_precompiled_cache(self):
        # (A shape of its own: this process's records would keep the cache from being written.)
        torchfuse.precompile(RmsNorm(128), "f32[24,128]", arch="sm_90", cache_dir=self.cache_dir)
        tar = os.path.join(self.cache_dir, "..", os.path.basename(self.cache_dir) + ".tar")
        other = self.cache_dir + "-other"
        try:
            self.assertIn("1 tuning record(s)", torchfuse.cache.export(tar, cache_dir=self.cache_dir))
            self.assertIn("1 tuning record(s)", torchfuse.cache.import_(tar, cache_dir=other))
            self.assertEqual(sorted((e["type"], e["kernel"]) for e in torchfuse.cache.ls(other)),
                             sorted((e["type"], e["kernel"])
                                    for e in torchfuse.cache.ls(self.cache_dir)))
            with open(tar, "wb") as f:
                f.write(b"junk")
            with self.assertRaisesRegex(RuntimeError, "refused"):
                torchfuse.cache.import_(tar, cache_dir=other)
        finally:
            shutil.rmtree(other, ignore_errors=True)
            if os.path.exists(tar):
                os.unlink(tar)

    def test_bad_specs_and_models_raise(self):
        with self.assertRaises(RuntimeError):
            torchfuse.inspect(HandGelu(), "f32[8,1x]", arch="sm_90")
        with self.assertRaises(RuntimeError):
            torchfuse.inspect("/no/such/model.pt2", "f32[8]", arch="sm_90")
        with self.assertRaises(RuntimeError):
            torchfuse.inspect(HandGelu(), "f32[8]", arch="sm_1")

    def test_export_archives_load_from_python(self):
        path = os.path.join(os.path.dirname(__file__), "..", "data", "mlp_block.pt2")
        kernels = torchfuse.inspect(path, "f32[4,16]", arch="sm_90", kernels_only=True,
                                    cache_dir=self.cache_dir)
        self.assertEqual(len(kernels), 1)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_torch_compile_backend_is_registered_and_correct_on_cpu(self):
        self.assertIn("torchfuse", torch._dynamo.list_backends())
        torch._dynamo.reset()
        model = LayerNorm(128)
        fast = torch.compile(model, backend="torchfuse")
        x = torch.randn(8, 128)
        torch.testing.assert_close(fast(x), model(x))

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_decomposition_table_is_built_once_and_each_compile_gets_a_copy(self):
        from torchfuse import _backend
        aten = torch.ops.aten
        first = _backend._decompositions(False)
        with_backward = _backend._decompositions(True)
        built = _backend._decomposition_table.cache_info().misses
        torch._dynamo.reset()
        model = LayerNorm(64)
        x = torch.randn(4, 64)
        torch.testing.assert_close(torch.compile(model, backend="torchfuse")(x), model(x))
        with torch.no_grad():  # an inference graph: AOTAutograd's export
            torch._dynamo.reset()
            torch.testing.assert_close(torch.compile(model, backend="torchfuse")(x), model(x))
        second = _backend._decompositions(False)
        self.assertEqual(_backend._decomposition_table.cache_info().misses, built)
        self.assertIsNot(first, second)
        self.assertEqual(first.keys(), second.keys())
        self.assertIn(aten.native_layer_norm.default, first)
        self.assertFalse(any("backward" in str(op) for op in first))
        self.assertTrue(any("backward" in str(op) for op in with_backward))
        first.clear()  # a caller's change stays in its copy
        self.assertIn(aten.native_layer_norm.default, _backend._decompositions(False))

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_backend_leaves_unsupported_nodes_to_torch(self):
        class Cumsum(torch.nn.Module):
            def forward(self, x):
                y = torch.tanh(x) * 2
                return torch.exp(torch.cumsum(y, -1)[:, :8]) + 1

        torch._dynamo.reset()
        x = torch.randn(4, 16)
        fast = torch.compile(Cumsum(), backend="torchfuse")
        torch.testing.assert_close(fast(x), Cumsum()(x))

    def test_fx_capture_takes_convolutions_pools_and_batch_norm(self):
        """Convolution, pooling, flatten and eval batch-norm modules reach the C++ side as the
        aten ops their forward calls (torch runs them; what follows fuses), so such models are
        captured by FX rather than by TorchScript. Checked op by op against the modules on the
        CPU, in 1, 2 and 3 dims."""
        from torchfuse import _fx
        nn = torch.nn

        def randomized(bn):
            with torch.no_grad():
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)
            return bn

        class Net2d(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, padding=1)
                self.same = nn.Conv2d(8, 8, 4, padding="same", groups=2, bias=False)
                self.strided = nn.Conv2d(8, 8, 3, stride=(2, 1), padding=(0, 2), dilation=(1, 2))
                self.bn = randomized(nn.BatchNorm2d(8))
                self.pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
                self.avg = nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False)
                self.gap = nn.AdaptiveAvgPool2d((2, 1))
                self.flat = nn.Flatten()
                self.fc = nn.Linear(16, 5)

            def forward(self, x):
                y = torch.relu(self.bn(self.conv(x)))
                y = self.avg(self.pool(self.strided(self.same(y) + y)))
                return self.fc(self.flat(self.gap(y)))

        class Net1d(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv1d(4, 6, 5, stride=2, padding=2)
                self.bn = randomized(nn.BatchNorm1d(6))
                self.pool = nn.MaxPool1d(2)
                self.gap = nn.AdaptiveAvgPool1d(3)

            def forward(self, x):
                return self.gap(self.pool(torch.tanh(self.bn(self.conv(x)))))

        class Net3d(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv3d(2, 4, 3, padding=1)
                self.bn = randomized(nn.BatchNorm3d(4))
                self.pool = nn.MaxPool3d(2, stride=1)
                self.gap = nn.AdaptiveAvgPool3d(1)
                self.flat = nn.Flatten(1, -1)

            def forward(self, x):
                return self.flat(self.gap(self.pool(self.bn(self.conv(x))).sigmoid()))

        torch.manual_seed(0)
        for model, shape in ((Net2d(), (2, 3, 17, 19)), (Net1d(), (3, 4, 29)),
                             (Net3d(), (2, 2, 5, 6, 7))):
            with self.subTest(model=type(model).__name__):
                model.eval()
                serialized = _fx.serialize(torch.fx.symbolic_trace(model))
                for _ in range(2):
                    x = torch.randn(*shape)
                    with torch.no_grad():
                        torch.testing.assert_close(run_serialized(serialized, [x]), model(x))
                fast = torchfuse.compile(model, dynamo=False)
                fast._ensure((torch.randn(*shape),))
                self.assertEqual(fast.how, "fx")
                spec = "f32[" + ",".join(map(str, shape)) + "]"
                kernels = torchfuse.inspect(fast, spec, arch="sm_90", kernels_only=True,
                                            cache_dir=self.cache_dir)
                self.assertGreaterEqual(len(kernels), 1)

    def test_fx_capture_takes_bitwise_operators_between_masks(self):
        """&, |, ^ and ~ between tensors of an FX graph (masks combined as attention masks are)
        reach the C++ side as aten's __and__, __or__, __xor__ and bitwise_not, run by torch
        between the kernels around them, with eager's values; with a Python scalar operand,
        whose dtype aten's Scalar overloads may change, the node is refused by name."""
        from torchfuse import _C, _fx, _runtime

        class Masks(torch.nn.Module):
            def forward(self, x, y):
                keep = ((x > 0) & (y < 0.5)) | (~(x > y) ^ (y > 1))
                return torch.where(keep, torch.tanh(x), y * 2.0)

        class ScalarMask(torch.nn.Module):
            def forward(self, x):
                return torch.where(True & (x > 0), x, -x)

        gm = torch.fx.symbolic_trace(Masks())
        serialized = _fx.serialize(gm)
        for _ in range(2):
            x, y = torch.randn(8, 64), torch.randn(8, 64)
            torch.testing.assert_close(run_serialized(serialized, [x, y]), Masks()(x, y))
        handle, _ = _runtime.compile_graph_module(gm, f"cache_dir={self.cache_dir}")
        found = _C.explain(handle, ["f32[8,64]", "f32[8,64]"])
        self.assertEqual(sorted(l["op"] for l in found["left_to_torch"]),
                         ["aten::__and__", "aten::__or__", "aten::__xor__"])
        self.assertGreaterEqual(found["kernels"], 1)
        with self.assertRaisesRegex(_fx.Unsupported, "node and_: and_ with an operand"):
            _fx.serialize(torch.fx.symbolic_trace(ScalarMask()))

    def test_fx_capture_keeps_in_place_activations_in_place(self):
        """nn.ReLU(inplace=True) and F.relu(x, inplace=True) reach the C++ side as relu_: the
        importer makes it functional where later reads of the value see its result, as in
        eager (the relus then fuse), and refuses it, naming the node, where it writes the
        module's input (such a call runs eagerly). Before, FX capture wrote them out of
        place, and a later read of the relu's input saw the values before the relu."""
        from torchfuse import _fx
        nn, F = torch.nn, torch.nn.functional

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(16, 16)
                self.act = nn.ReLU(inplace=True)

            def forward(self, x):
                y = self.fc(x)
                z = self.act(y)  # y is z now
                w = F.relu(z * 2.0 - 0.5, inplace=True)
                return y + z + w

        class OnTheInput(nn.Module):
            def forward(self, x):
                return F.relu(x, inplace=True) * 2.0

        torch.manual_seed(0)
        model = Block()
        serialized = _fx.serialize(torch.fx.symbolic_trace(model))
        targets = [n["target"] for n in json.loads(serialized.text)["nodes"]
                   if n["op"] == "call_function"]
        self.assertEqual(targets.count("aten::relu_"), 2, targets)
        with torch.no_grad():
            x = torch.randn(4, 16)
            want = model(x)
            torch.testing.assert_close(run_serialized(serialized, [x]), want)
            torch.testing.assert_close(want, 2 * torch.relu(model.fc(x)) +
                                       torch.relu(2 * torch.relu(model.fc(x)) - 0.5))
            fast = torchfuse.compile(model, dynamo=False, cache_dir=self.cache_dir)
            fast._ensure((torch.randn(4, 16),))
            self.assertEqual(fast.how, "fx")
            text = torchfuse.inspect(fast, "f32[4,16]", arch="sm_90", cache_dir=self.cache_dir)
            graphs = text.split("== fusion groups")[0]
            self.assertNotIn("aten::relu_", graphs)  # functional: the relus fuse
            self.assertNotIn("opaque", graphs)
            self.assertIn("1 kernel(s), 1 node(s) run by torch", text)  # the product
            # A dropout in eval between the product and the in-place relu (an alias of the
            # product in the serialized graph): the relu writes through it, as in eager.
            mlp = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1), nn.ReLU(inplace=True),
                                nn.Linear(16, 16)).eval()
            mlp_fast = torchfuse.compile(mlp, dynamo=False, cache_dir=self.cache_dir)
            mlp_fast._ensure((torch.randn(4, 16),))
            self.assertEqual(mlp_fast.how, "fx")
            text = torchfuse.inspect(mlp_fast, "f32[4,16]", arch="sm_90",
                                     cache_dir=self.cache_dir)
            graphs = text.split("== fusion groups")[0]
            self.assertNotIn("aten::relu_", graphs)
            self.assertNotIn("opaque", graphs)
            on_input = torchfuse.compile(OnTheInput(), dynamo=False, cache_dir=self.cache_dir)
            on_input._ensure((torch.randn(4, 16),))
            with self.assertRaisesRegex(RuntimeError, "in place .* aten::relu_"):
                torchfuse.inspect(on_input, "f32[4,16]", arch="sm_90", cache_dir=self.cache_dir)

    def test_fx_capture_refuses_modules_that_change_what_forward_does(self):
        """A subclass of a torch.nn module with its own forward (seen as a module call by a
        tracer that keeps it whole) is not serialized as its base class's op."""
        from torchfuse import _fx
        nn = torch.nn

        class Doubled(nn.Conv2d):
            def forward(self, x):
                return super().forward(x) * 2

        class Keep(torch.fx.Tracer):
            def is_leaf_module(self, m, name):
                return isinstance(m, nn.Conv2d) or super().is_leaf_module(m, name)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = Doubled(3, 4, 3)

            def forward(self, x):
                return self.conv(x)

        model = Net()
        gm = torch.fx.GraphModule(model, Keep().trace(model))
        with self.assertRaisesRegex(_fx.Unsupported, "Doubled with its own forward"):
            _fx.serialize(gm)

    def test_indexing_in_fx_capture_is_read_inside_one_kernel(self):
        class Indexing(torch.nn.Module):
            def forward(self, x):
                a, b = x.chunk(2, dim=-1)
                return torch.nn.functional.silu(a[..., 1:]) * b[:, None, :-1].squeeze(1) + x[0, :31]

        kernels = torchfuse.inspect(Indexing(), "f32[8,64]", arch="sm_90", kernels_only=True,
                                    cache_dir=self.cache_dir)
        self.assertEqual(len(kernels), 1)
        fast = torchfuse.compile(Indexing(), dynamo=False)
        x = torch.randn(8, 64)
        torch.testing.assert_close(fast(x), Indexing()(x))

    def test_prims_casts_of_decomposed_graphs_fuse(self):
        """prims.convert_element_type (what decompositions cast with; LibTorch alone does not
        know it) reaches the C++ side as aten's _to_copy and fuses with its neighbours."""
        from torchfuse import _fx
        convert = torch.ops.prims.convert_element_type.default
        g = torch.fx.Graph()
        x = g.placeholder("x")
        y = g.call_function(torch.ops.aten.exp.default,
                            (g.call_function(convert, (x, torch.float64)),))
        g.output(g.call_function(convert, (y, torch.float32)))
        gm = torch.fx.GraphModule({}, g)
        text = _fx.serialize(gm).text
        self.assertIn("aten::_to_copy", text)
        self.assertNotIn("prims::", text)
        kernels = torchfuse.inspect(gm, "f32[8,64]", arch="sm_90", kernels_only=True,
                                    cache_dir=self.cache_dir)
        self.assertEqual(len(kernels), 1)
        x = torch.randn(8, 64)
        torch.testing.assert_close(torchfuse.compile(gm, dynamo=False)(x), gm(x))

    def test_hard_activations_fuse_into_one_kernel(self):
        """MobileNet's activations, as modules (ReLU6 in place, Hardswish, Hardsigmoid) and as
        functions (hardtanh with other bounds), captured by FX: one kernel, nothing left to
        torch, compiled for sm_90 without a GPU, and the module's answer."""
        class Hard(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.relu6 = torch.nn.ReLU6(inplace=True)
                self.swish, self.gate = torch.nn.Hardswish(), torch.nn.Hardsigmoid()

            def forward(self, x):
                y = self.relu6(self.swish(x * 3.0) * 2.0)
                return torch.nn.functional.hardtanh(y - x, -0.5, 1.5) * self.gate(x * 3.0)

        found = torchfuse.explain(Hard(), "f32[8,64]", cache_dir=self.cache_dir)
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0]["left_to_torch"], [], found)
        self.assertEqual(found[0]["kernels"], 1, found)
        kernels = torchfuse.inspect(Hard(), "f32[8,64]", arch="sm_90", kernels_only=True,
                                    cache_dir=self.cache_dir)
        self.assertEqual(len(kernels), 1)
        x = torch.randn(8, 64)
        self.assertEqual(torchfuse._capture(Hard(), [x], "").how, "fx")
        torch.testing.assert_close(torchfuse.compile(Hard(), dynamo=False)(x), Hard()(x))

    def test_explain_names_the_nodes_torch_runs(self):
        class Cumsum(torch.nn.Module):
            def forward(self, x):
                return torch.cumsum(torch.tanh(x), -1) * 2

        found = torchfuse.explain(Cumsum(), "f32[8,64]", cache_dir=self.cache_dir)
        self.assertEqual(len(found), 1)
        left = found[0]["left_to_torch"]
        self.assertEqual([l["op"] for l in left], ["aten::cumsum"])
        self.assertIn("aten::cumsum", found[0]["warning"])
        self.assertGreaterEqual(found[0]["kernels"], 1)

    def test_whole_and_decomposed_layer_norms_fuse_alike(self):
        """An inference trace keeps a last-dim layer norm whole (native_layer_norm, which the
        importer decomposes itself) instead of tracing its decomposition: the fused graph is
        the same either way (kernels and the nodes left to torch, f32 and bf16), for a
        residual add of rows viewed back to [B, T, C] (OPT), a reshape straight into the norm,
        a norm over permuted (channels-last) activations, and two norms of one residual
        stream. Over two dims, or with a bias and no weight, the trace decomposes it."""
        from torch._decomp import decomposition_table
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _backend, _runtime
        F = torch.nn.functional
        ln = torch.ops.aten.native_layer_norm.default
        B, T, C = 4, 16, 96

        def graphs(dtype):
            w, b = torch.randn(C, dtype=dtype), torch.randn(C, dtype=dtype)
            mat = torch.randn(C, C, dtype=dtype)

            def rows_viewed_back(x, res):
                return F.layer_norm(res + (x.view(-1, C) @ mat).view(B, T, C), (C,), w, b)

            def view_into_norm(x, res):
                return F.layer_norm((x @ mat).view(B, T, C), (C,), w, b) + res

            def channels_last(x, res):
                y = x.view(B, 4, 4, C).permute(0, 3, 1, 2).permute(0, 2, 3, 1)
                return F.gelu(F.layer_norm(y, (C,), w, b).reshape(B, T, C) @ mat) + res

            def one_stream(x, res):
                r = res + x.view(B, T, C) * 0.5
                return F.layer_norm(r, (C,), w, b), F.layer_norm(r * 2, (C,))

            return (rows_viewed_back, view_into_norm, channels_last, one_stream)

        def fused(fn, args, table):
            gm = make_fx(fn, decomposition_table=table)(*args)
            whole = any(n.op == "call_function" and n.target == ln for n in gm.graph.nodes)
            found = _runtime.Compiled(gm, f"cache_dir={self.cache_dir}").explain(args)
            return whole, found["kernels"], sorted(l["op"] for l in found["left_to_torch"])

        for dtype in (torch.float32, torch.bfloat16):
            for fn in graphs(dtype):
                with self.subTest(graph=fn.__name__, dtype=str(dtype)):
                    args = [torch.randn(B * T, C, dtype=dtype), torch.randn(B, T, C, dtype=dtype)]
                    whole = fused(fn, args, {ln: _backend._layer_norm_inference})
                    decomposed = fused(fn, args, {ln: decomposition_table[ln]})
                    self.assertTrue(whole[0])
                    self.assertFalse(decomposed[0])
                    self.assertGreaterEqual(whole[1], 1)
                    self.assertEqual(whole[1:], decomposed[1:])
        x, w = torch.randn(B, T, C), torch.randn(C)
        for name, fn in (("two dims", lambda x: F.layer_norm(x, (T, C))),
                         ("bias, no weight", lambda x: F.layer_norm(x, (C,), None, w))):
            with self.subTest(case=name):
                gm = make_fx(fn, decomposition_table={ln: _backend._layer_norm_inference})(x)
                self.assertFalse(any(n.target == ln for n in gm.graph.nodes))
                torch.testing.assert_close(gm(x), fn(x))

    def test_convolution_bias_becomes_an_add_for_the_next_kernel(self):
        """aten.convolution with a bias becomes the convolution without it plus an add of the
        bias viewed to broadcast over the channels (1-d and 2-d, grouped), same result; but
        a depthwise one on a device where torchfuse's kernel runs it (which adds the bias
        itself) keeps its bias."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _conv

        class Convs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
                self.pw = torch.nn.Conv2d(8, 4, 1, bias=False)
                self.c1 = torch.nn.Conv1d(4, 6, 3)

            def forward(self, x):
                y = torch.relu(self.dw(x)) + x
                return self.c1(self.pw(y).flatten(2))

        model = Convs().eval()
        x = torch.randn(2, 8, 5, 7)
        with torch.no_grad():
            gm = make_fx(model)(x)
            self.assertEqual(_conv.split_conv_bias(gm), 2, gm.code)
            convs = [n for n in gm.graph.nodes if n.target == torch.ops.aten.convolution.default]
            self.assertEqual(len(convs), 3)
            self.assertTrue(all(n.args[2] is None for n in convs), gm.code)
            # Each bias is added right after its convolution, which nothing else reads.
            adds = [n for n in gm.graph.nodes if n.target == torch.ops.aten.add.Tensor and
                    n.args[0] in convs]
            self.assertEqual(len(adds), 2, gm.code)
            self.assertTrue(all(list(a.args[0].users) == [a] for a in adds), gm.code)
            for inp in (x, torch.randn(2, 8, 5, 7)):
                torch.testing.assert_close(gm(inp), model(inp), atol=1e-5, rtol=1e-5)
            # Where the kernel runs depthwise convolutions (here, as if on the CPU): the
            # depthwise one keeps its bias, the 1-d one's is split.
            def functional(x, wd, bd, wp, w1, b1):
                y = torch.relu(torch.nn.functional.conv2d(x, wd, bd, padding=1, groups=8)) + x
                return torch.nn.functional.conv1d(
                    torch.nn.functional.conv2d(y, wp).flatten(2), w1, b1)

            params = [model.dw.weight, model.dw.bias, model.pw.weight, model.c1.weight,
                      model.c1.bias]
            kept = self._aten_graph(functional, [x] + params)  # with the nodes' tensors
            self.assertEqual(_conv.split_conv_bias(kept, kernel_devices=("cpu",)), 1,
                             kept.code)
            convs = [n for n in kept.graph.nodes
                     if n.target == torch.ops.aten.convolution.default]
            self.assertEqual([n.args[2] is not None for n in convs], [True, False, False],
                             kept.code)
            torch.testing.assert_close(kept(x, *params), model(x), atol=1e-5, rtol=1e-5)
            # On the devices by default (CUDA), a CPU graph's depthwise bias is split too.
            self.assertEqual(_conv.split_conv_bias(self._aten_graph(functional, [x] + params)),
                             2)
            # Depthwise convolutions the kernel does not take (the extension's rule: f64, a
            # 12-wide filter, a stride of 9, a channel multiplier of 2) have their bias split.
            cases = [(torch.float32, (8, 1, 3, 3), 1, 8, True),
                     (torch.float64, (8, 1, 3, 3), 1, 8, False),
                     (torch.float32, (8, 1, 3, 12), 1, 8, False),
                     (torch.float32, (8, 1, 3, 3), 9, 8, False),
                     (torch.float32, (16, 1, 3, 3), 1, 8, False)]
            for dtype, wshape, stride, groups, keeps in cases:
                xc = torch.randn(2, 8, 20, 20, dtype=dtype)
                wc, bc = torch.randn(*wshape, dtype=dtype), torch.randn(wshape[0], dtype=dtype)

                one = functools.partial(torch.nn.functional.conv2d, stride=stride,
                                        groups=groups)
                g = self._aten_graph(lambda x, w, b: one(x, w, b), [xc, wc, bc])
                self.assertEqual(_conv.split_conv_bias(g, kernel_devices=("cpu",)),
                                 0 if keeps else 1, (dtype, wshape, stride, groups))
                torch.testing.assert_close(g(xc, wc, bc), one(xc, wc, bc))

    def test_convolutions_run_on_channels_last_activations(self):
        """The channels-last pass on an ATen graph of a small network: the image becomes
        channels-last once (the casts, pointwise ops and the pool after a convolution keep
        that layout), a value of unknown layout (a concatenation's slice) once more, and not
        a pooled value of 1x1 positions or an NHWC result viewed as NCHW; the means, the max
        and the sum (with its dtype) over the positions of a channels-last value reduce one
        NHWC view of it over its dims 1 and 2 (columns); the graph's outputs that eager gives
        contiguous are made contiguous; the rewritten graph computes the model's values, each
        convolution reading a channels-last input, with eager's strides."""
        from torchfuse import _conv
        aten = torch.ops.aten

        conv = torch.nn.functional.conv2d

        def net(x, w1, b1, w2, b2, w3, b3, w4, w5, w6):
            y = torch.relu(conv(x, w1, b1, padding=1).double()).float()  # casts keep layouts
            y = torch.nn.functional.max_pool2d(y, 2)
            z = torch.relu(conv(y, w2, b2, padding=1) * 0.5 + y)
            w = conv(torch.cat([z, y], 1)[:, 4:12], w3, b3)
            gate = torch.sigmoid(conv(z.mean((2, 3), keepdim=True), w4))  # 1x1 positions
            nhwc = torch.nn.functional.linear(z.permute(0, 2, 3, 1), w5)  # NHWC, permuted back
            pooled = z.amax((-2, -1)) + z.sum((2, 3), dtype=torch.float64).float()
            return w * gate, conv(nhwc.permute(0, 3, 1, 2), w6), z.mean((2, 3)), pooled

        torch.manual_seed(0)
        args = [torch.randn(2, 3, 8, 10), torch.randn(8, 3, 3, 3), torch.randn(8),
                torch.randn(8, 8, 3, 3), torch.randn(8), torch.randn(4, 8, 1, 1), torch.randn(4),
                torch.randn(4, 8, 1, 1), torch.randn(6, 8), torch.randn(4, 6, 3, 3)]
        with torch.no_grad():
            gm = self._aten_graph(net, args)
            _conv.split_conv_bias(gm)
            self.assertEqual(_conv.channels_last(gm, (torch.float32,), ("cpu",)), 2, gm.code)
            # Without recompiling (a caller that reads only the graph): the same graph, the
            # code as it was.
            lazy = self._aten_graph(net, args)
            code = lazy.code
            self.assertEqual(_conv.split_conv_bias(lazy, recompile=False), 3)
            self.assertEqual(_conv.channels_last(lazy, (torch.float32,), ("cpu",),
                                                 recompile=False), 2)
            self.assertEqual(lazy.code, code)
            self.assertEqual(str(lazy.graph), str(gm.graph))
            nodes = list(gm.graph.nodes)
            convs = [n for n in nodes if n.target == aten.convolution.default]
            # c1 and c3 read a conversion; c2 reads the pool of c1's activation as it is, the
            # others their inputs (1x1 positions, a mean of the NHWC view permuted back;
            # eager's NHWC result permuted).
            self.assertEqual([c.args[0].target for c in convs],
                             [aten.contiguous.default, operator.getitem,
                              aten.contiguous.default, aten.permute.default,
                              aten.permute.default], gm.code)
            self.assertEqual(convs[3].args[0].args[1], [0, 3, 1, 2], gm.code)
            means = [n for n in nodes if n.target == aten.mean.dim]
            self.assertEqual([(m.args[1], m.args[2]) for m in means],
                             [([1, 2], True), ([1, 2], False)], gm.code)
            pools = [n for n in nodes
                     if n.target in (aten.amax.default, aten.sum.dim_IntList)]
            self.assertEqual([(p.args[1], p.args[2], p.kwargs) for p in pools],
                             [([1, 2], False, {}), ([1, 2], False, {"dtype": torch.float64})],
                             gm.code)
            # One view of z, read by all four.
            self.assertEqual({m.args[0] for m in means + pools}, {means[0].args[0]}, gm.code)
            self.assertEqual(means[0].args[0].args[1], [0, 2, 3, 1], gm.code)
            self.assertTrue(all(c.args[0].kwargs.get("memory_format") == torch.channels_last
                                for c in (convs[0], convs[2])), gm.code)
            # Outputs eager gives contiguous are made so; the last convolution's, channels-last
            # in eager too (it reads an NHWC result), stays.
            output = nodes[-1].args[0]
            self.assertEqual([o.target == aten.contiguous.default for o in output],
                             [True, False, True, True], gm.code)
            seen = []

            class Record(torch.fx.Interpreter):
                def call_function(self, target, a, kwargs):
                    if target == aten.convolution.default:
                        seen.append(a[0].is_contiguous(memory_format=torch.channels_last))
                    return super().call_function(target, a, kwargs)

            got = Record(gm).run(*args)
            want = net(*args)
        self.assertEqual(seen, [True] * 5)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
            self.assertEqual(g.stride(), w.stride())

    def test_cuda_graphs_refuse_calls_they_cannot_replay(self):
        """The CUDA-graph bookkeeping that needs no GPU: CPU calls run as they are (a module
        compiled with cuda_graphs runs them eagerly), and call signatures."""
        from torchfuse._cuda_graphs import CudaGraphs
        graphs = CudaGraphs("Test")
        calls = []

        def fn(*args, **kwargs):
            calls.append((args, kwargs))
            return args[0] * 2

        x = torch.randn(4, 4)
        # CPU tensors: the call as it is, no warning.
        torch.testing.assert_close(graphs(fn, (x,), {}), x * 2)
        self.assertEqual(len(calls), 1)
        self.assertEqual(graphs.graphs, {})
        self.assertEqual(graphs.seen, set())
        # Signatures: sizes, strides and plain values tell calls apart; other objects have
        # none (such calls run without a graph).
        self.assertIsNone(CudaGraphs._signature([x, object()]))
        self.assertEqual(graphs.stats(), {"cuda_graphs": 0, "graph_replays": 0})
        key = CudaGraphs._signature([x, 3, "a"])
        self.assertEqual(key, CudaGraphs._signature([torch.randn(4, 4), 3, "a"]))
        self.assertNotEqual(key, CudaGraphs._signature([x.t(), 3, "a"]))
        self.assertNotEqual(key, CudaGraphs._signature([x, 4, "a"]))
        fast = torchfuse.compile(HandGelu(), cache_dir=self.cache_dir, cuda_graphs=True)
        torch.testing.assert_close(fast(x), HandGelu()(x))

    def test_version_is_the_programs(self):
        import subprocess
        self.assertRegex(torchfuse.__version__, r"^\d+\.\d+")
        program = os.environ.get("TORCHFUSE_PROGRAM")
        if program:  # set by the build's test run
            out = subprocess.run([program, "--version"], capture_output=True, text=True)
            self.assertEqual(out.stdout.strip(), f"torchfuse {torchfuse.__version__}")

    def test_library_messages_reach_the_torchfuse_logger(self):
        import logging
        import time
        logger = logging.getLogger("torchfuse")
        with self.assertLogs("torchfuse", level="DEBUG") as seen:
            torchfuse._C.log(logging.WARNING, "said on the calling thread")
            torchfuse._C.log_from_thread(logging.INFO, "said on a thread of the library")
            deadline = time.time() + 5
            while time.time() < deadline and not any("thread of the library" in m
                                                      for m in seen.output):
                time.sleep(0.01)
        self.assertIn("WARNING:torchfuse:said on the calling thread", seen.output)
        self.assertIn("INFO:torchfuse:said on a thread of the library", seen.output)
        # A precompile says what it did with each kernel, and counts them.
        with self.assertLogs("torchfuse", level="INFO") as seen:
            torchfuse.precompile(Softmax(), "f32[16,128]", arch="sm_90", cache_dir=self.cache_dir)
            deadline = time.time() + 5
            while time.time() < deadline and not any("kernel 1/1" in m for m in seen.output):
                time.sleep(0.01)
        self.assertTrue(any("precompile: kernel 1/1 softmax" in m for m in seen.output),
                        seen.output)
        self.assertEqual(logger.level, logging.NOTSET)  # untouched unless TORCHFUSE_LOG says

    def test_fallbacks_are_warnings_and_log_messages(self):
        from torchfuse import _runtime
        with self.assertLogs("torchfuse", level="INFO") as seen, \
                self.assertWarnsRegex(UserWarning, "frob runs in torch"):
            _runtime.warn_once(("test", id(self)), "node frob runs in torch: a test")
        self.assertEqual(seen.output, ["INFO:torchfuse:node frob runs in torch: a test"])

    def test_traces_that_read_values_are_told_by_their_exception_or_its_cause(self):
        """The ATen trace's refusal of a module that reads a tensor's value looks through the
        exceptions a wrapper raised from the trace's own, and no further than that."""
        from torchfuse import _aten
        try:
            try:
                raise RuntimeError("aten._local_scalar_dense.default on a fake tensor")
            except RuntimeError as inner:
                raise ValueError("the export failed") from inner
        except ValueError as e:
            self.assertTrue(_aten._reads_values(e))
        self.assertFalse(_aten._reads_values(ValueError("the export failed")))
        for kind in _aten._value_errors():  # those this torch has
            self.assertTrue(issubclass(kind, Exception))
            wrapped = RuntimeError("wrapped")
            wrapped.__cause__ = kind.__new__(kind)
            self.assertTrue(_aten._reads_values(wrapped), kind)


@unittest.skipUnless(CUDA, "no CUDA device")
class GpuTest(TempCache):
    def kernel_names(self, fn, *args, settle=False):
        """The CUDA kernels of one call of fn(*args), copies and fills left out. The call
        before it warms up; with `settle`, background tuning finishes first and one more call
        times its candidates, so that the kernels profiled are the tuned ones."""
        from torch.profiler import ProfilerActivity, profile
        fn(*args)
        if settle:
            torchfuse.wait_for_compiles()
            fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*args)
            torch.cuda.synchronize()
        return [e.name for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA
                and not e.name.startswith(("Memcpy", "Memset"))]

    def count_kernels(self, fn, x):
        return len(self.kernel_names(fn, x))

    def assert_matches_eager(self, got, model, x):
        """Against eager PyTorch: in f32, exactly eager's tolerance; in bf16, against eager run
        on the same values in f32 (torchfuse accumulates in f32, where bf16 eager rounds every
        intermediate), within bf16's resolution."""
        if x.dtype == torch.float32:
            torch.testing.assert_close(got, model(x), **tolerance(x.dtype))
            return
        reference = copy.deepcopy(model).float()(x.float())
        torch.testing.assert_close(got.float(), reference, atol=2e-2, rtol=2e-2)
        eager_error = (model(x).float() - reference).abs().max().item()
        fused_error = (got.float() - reference).abs().max().item()
        self.assertLessEqual(fused_error, max(2 * eager_error, 1e-2))

    def check(self, make_fast, label):
        for dtype in (torch.float32, torch.bfloat16):
            for name, model, x in workloads("cuda", dtype):
                with self.subTest(workload=name, dtype=str(dtype), path=label):
                    with torch.no_grad():
                        fast = make_fast(model)
                        # Twice: the second input runs the same compiled code on fresh data.
                        for inp in (x, torch.randn_like(x)):
                            self.assert_matches_eager(fast(inp), model, inp)
                        # Background tuning times its candidates in the call after its
                        # compiles: counted here, they would be the call's kernels.
                        torchfuse.wait_for_compiles()
                        fast(x)
                        eager_kernels = self.count_kernels(model, x)
                        fused_kernels = self.count_kernels(fast, x)
                    print(f"{label} {name} {dtype}: {fused_kernels} kernel(s), eager "
                          f"{eager_kernels}")
                    self.assertGreaterEqual(fused_kernels, 1)
                    self.assertLess(fused_kernels, eager_kernels)

    def test_captured_models_with_torch_ops_run(self):
        """ConvNeXt's block (depthwise convolution, channels-last layer norm, MLP, scale,
        residual) through the captures without Dynamo: the ATen trace (torch >= 2.0, taken
        first for convolutions on CUDA), FX (its GraphModule), and TorchScript where a branch
        on a size stops FX's tracing (torch < 2.0). Its convolutions, products and pooling run
        in torch between fused kernels."""
        class ConvNeXtBlock(torch.nn.Module):
            def __init__(self, c, branch):
                super().__init__()
                self.branch = branch
                self.conv_dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
                self.norm = torch.nn.LayerNorm(c, eps=1e-6)
                self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
                self.gamma = torch.nn.Parameter(torch.rand(c) + 0.5)

            def forward(self, x):
                y = self.conv_dw(x).permute(0, 2, 3, 1)
                if self.branch and x.shape[1] > 32:
                    y = y * 0.5
                y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y))))
                y = y.permute(0, 3, 1, 2) * self.gamma.reshape(1, -1, 1, 1) + x
                return torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)

        for dtype, branch in itertools.product((torch.float32, torch.bfloat16), (False, True)):
            with self.subTest(dtype=str(dtype), branch=branch):
                torch.manual_seed(0)
                model = ConvNeXtBlock(64, branch).cuda().eval().to(dtype)
                fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
                with torch.no_grad():
                    for _ in range(2):
                        x = torch.randn(4, 64, 14, 14, device="cuda", dtype=dtype)
                        self.assert_matches_eager(fast(x), model, x)
                    if not branch:
                        traced = torchfuse.compile(torch.fx.symbolic_trace(model),
                                                   cache_dir=self.cache_dir, dynamo=False)
                        self.assert_matches_eager(traced(x), model, x)
                        self.assertEqual(traced.how, "fx")
                # Convolutions on CUDA: the ATen trace first (torch >= 2.0); else FX, or
                # TorchScript where the branch on a size stops FX.
                self.assertEqual(fast.how, "aten" if torchfuse._aten.available() else
                                 "script" if branch else "fx")
                stats = fast.stats()
                self.assertGreater(stats["fused_launches"], 0, stats)
                self.assertGreater(stats["torch_ops"], 0, stats)

    def test_relative_position_bias_lookups_are_gather_kernels(self):
        """Swin's relative position bias: its table's rows at a buffer of positions
        (`table[index]`, aten::index), viewed per head and added to the scores before a
        softmax. Through torch.compile the lookup runs as torchfuse's gather kernel; the
        capture without Dynamo holds the table as a constant, and the lookup folds at import.
        Either way no torch op runs, and the output is eager's."""
        class RelativeBias(torch.nn.Module):
            def __init__(self, window=7, heads=4):
                super().__init__()
                side = 2 * window - 1
                self.table = torch.nn.Parameter(torch.randn(side * side, heads))
                grid = torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")
                coords = torch.stack(grid).flatten(1)
                rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
                self.register_buffer("index", (rel[..., 0] * side + rel[..., 1]).flatten())
                self.n, self.heads = window * window, heads

            def forward(self, scores):
                bias = self.table[self.index].view(self.n, self.n, self.heads).permute(2, 0, 1)
                return torch.softmax(scores + bias, dim=-1)

        ways = [True, False] if HAS_DYNAMO else [False]
        for dtype, dynamo in itertools.product((torch.float32, torch.bfloat16), ways):
            with self.subTest(dtype=str(dtype), dynamo=dynamo), torch.no_grad():
                if HAS_DYNAMO:
                    torch._dynamo.reset()
                torch.manual_seed(0)
                model = RelativeBias().cuda().eval().to(dtype)
                fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=dynamo)
                for _ in range(2):
                    scores = torch.randn(8, 4, 49, 49, device="cuda", dtype=dtype)
                    self.assert_matches_eager(fast(scores), model, scores)
                stats = fast.stats(last_call=True)
                self.assertEqual(stats["torch_ops"], 0, stats)
                self.assertEqual(stats["gather_launches"], 1 if dynamo else 0, stats)

    @unittest.skipUnless(torchfuse._aten.available(), "the ATen trace needs torch >= 2.0")
    def test_modules_reading_sizes_are_traced_once_per_signature(self):
        """A patch embedding and a transformer MLP whose Python reads input sizes (FX's
        symbolic tracing stops at them) run through the ATen trace: one compiled graph per
        input signature, each pinned to it, a signature seen before reusing its graph, the
        module's dict of outputs rebuilt; a branch on a value is not traced."""
        class PatchMlp(torch.nn.Module):
            def __init__(self, c, d):
                super().__init__()
                self.proj = torch.nn.Conv2d(c, d, 4, stride=4)
                self.norm = torch.nn.LayerNorm(d)
                self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

            def forward(self, x):
                B, C, H, W = x.shape
                assert H % 4 == 0 and W % 4 == 0, "sizes the patches divide"
                t = self.proj(x).flatten(2).transpose(1, 2)  # B, H/4 * W/4, d
                t = t + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(t))))
                grid = t.reshape(B, H // 4, W // 4, -1)
                return {"tokens": t, "pooled": (grid.mean((1, 2)), grid.amax((1, 2)))}

        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=str(dtype)):
                torch.manual_seed(0)
                model = PatchMlp(3, 64).cuda().eval().to(dtype)
                fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
                shapes = [(2, 3, 16, 16), (3, 3, 8, 24), (2, 3, 16, 16)]
                with torch.no_grad():
                    for shape in shapes:
                        x = torch.randn(*shape, device="cuda", dtype=dtype)
                        got = fast(x)
                        self.assertEqual(sorted(got), ["pooled", "tokens"])
                        self.assertIsInstance(got["pooled"], tuple)
                        for key, i in (("tokens", None), ("pooled", 0), ("pooled", 1)):
                            g = got[key] if i is None else got[key][i]
                            self.assert_matches_eager(g, Pick(model, key, i), x)
                    self.assertEqual(fast.how, "aten")
                    # Two signatures, two graphs; the third call took the first's.
                    self.assertEqual(len(fast._captures), 2)
                    self.assertEqual(fast._capture.signature, torchfuse._aten.signature([x]))
                    # Another layout of the same sizes is another signature.
                    xt = torch.randn(2, 3, 16, 16, device="cuda", dtype=dtype)
                    xt = xt.transpose(2, 3).contiguous().transpose(2, 3)
                    self.assert_matches_eager(fast(xt)["tokens"], Pick(model, "tokens"), xt)
                    self.assertEqual(len(fast._captures), 3)
                stats = fast.stats()
                self.assertGreater(stats["fused_launches"], 0, stats)

        class ValueBranch(torch.nn.Module):
            def forward(self, x):
                return torch.tanh(x) if x.sum() > 0 else torch.exp(x)

        fast = torchfuse.compile(ValueBranch(), cache_dir=self.cache_dir, dynamo=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sign in (1.0, -1.0):
                x = (torch.rand(8, 256, device="cuda") + 0.1) * sign
                torch.testing.assert_close(fast(x), ValueBranch()(x))
        self.assertNotEqual(fast.how, "aten")
        self.assertIn("reads a tensor's value", " ".join(fast._capture.failed))

        # A first call under autocast is not traced: the graph would hold autocast's casts.
        fast = torchfuse.compile(ShapeBranch(), cache_dir=self.cache_dir, dynamo=False)
        x = torch.randn(8, 256, device="cuda")
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast(x)
        self.assertNotEqual(fast.how, "aten")
        self.assertIn("autocast", " ".join(fast._capture.failed))

    def test_weights_read_as_they_are_are_held_not_copied(self):
        """A graph's constants are the module's own tensors where the graph reads them as they
        are: FX's capture and the ATen trace both see an in-place update of such a weight
        (a copy made at compile would keep the old values)."""
        class ScaleShift(torch.nn.Module):
            def __init__(self, reads_sizes):
                super().__init__()
                self.reads_sizes = reads_sizes
                self.w = torch.nn.Parameter(torch.rand(512) + 0.5)
                self.register_buffer("b", torch.randn(512))

            def forward(self, x):
                if self.reads_sizes:
                    rows, cols = x.shape
                    x = x.reshape(rows, cols)
                return torch.nn.functional.gelu(x * self.w + self.b)

        for reads_sizes, how in ((False, "fx"), (True, "aten")):
            with self.subTest(capture=how):
                torch.manual_seed(0)
                model = ScaleShift(reads_sizes).cuda()
                fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
                x = torch.randn(64, 512, device="cuda")
                with torch.no_grad():
                    torch.testing.assert_close(fast(x), model(x), **tolerance(torch.float32))
                    model.w.mul_(-2.0)
                    model.b.add_(1.0)
                    torch.testing.assert_close(fast(x), model(x), **tolerance(torch.float32))
                self.assertEqual(fast.how, how)
                self.assertGreater(fast.stats()["fused_launches"], 0)

    def test_aten_trace_takes_checks_skipped_while_compiling(self):
        """The ATen trace runs with torch.compiler.is_compiling() true, as torch.export's does:
        a check of tensor values skipped while compiling (Hugging Face's masks) leaves the
        general path, which is right for every value of the mask."""
        if not hasattr(torch, "compiler") or not hasattr(torch.compiler, "is_compiling"):
            self.skipTest("this torch has no torch.compiler.is_compiling")

        class MaskedRows(torch.nn.Module):
            def forward(self, x, mask):
                if not torch.compiler.is_compiling() and bool((mask == 1).all()):
                    return torch.softmax(x * 0.5, -1)  # nothing masked
                return torch.softmax((x * 0.5).masked_fill(mask == 0, float("-inf")), -1)

        model = MaskedRows()
        fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
        x = torch.randn(64, 512, device="cuda")
        with torch.no_grad(), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for masked in (0.0, 0.3):
                mask = (torch.rand(64, 512, device="cuda") >= masked).float()
                mask[:, 0] = 1  # no row fully masked
                torch.testing.assert_close(fast(x, mask), model(x, mask),
                                           **tolerance(torch.float32))
                x = torch.randn_like(x)
        self.assertEqual(fast.how, "aten")
        self.assertFalse(torch.compiler.is_compiling())
        # The trace's own graph edits warn nothing (a constant is a registered buffer).
        self.assertEqual([str(w.message) for w in seen if "torchfuse" in w.filename], [])

    def test_hugging_face_language_models_without_dynamo(self):
        """GPT-2 and LLaMA from small configs, random weights: torchfuse.compile(model,
        dynamo=False) traces them at the ATen level once they are built with use_cache=False
        (their outputs are then tensors in a model output); with the key/value cache in the
        output they run eagerly, with a warning that names the cache."""
        try:
            from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
        except ImportError:
            self.skipTest("transformers is not installed")
        configs = {
            "gpt2": (GPT2LMHeadModel, GPT2Config(n_layer=2, n_embd=128, n_head=4,
                                                   n_positions=256, vocab_size=1000)),
            "llama": (LlamaForCausalLM, LlamaConfig(hidden_size=128, intermediate_size=352,
                                                     num_hidden_layers=2, num_attention_heads=4,
                                                     num_key_value_heads=2, vocab_size=1000,
                                                     max_position_embeddings=256)),
        }
        for name, (cls, cfg) in configs.items():
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(model=name, dtype=str(dtype)):
                    torch.manual_seed(0)
                    cfg.use_cache = False
                    cfg._attn_implementation = "eager"
                    model = cls(cfg).cuda().eval().to(dtype)
                    fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
                    with torch.no_grad():
                        for _ in range(2):
                            ids = torch.randint(0, 1000, (2, 96), device="cuda")
                            got = fast(ids)
                            self.assertEqual(type(got).__name__, type(model(ids)).__name__)
                            if dtype == torch.float32:  # attention rewritten: 1e-4
                                torch.testing.assert_close(got.logits, model(ids).logits,
                                                           atol=1e-4, rtol=1e-3)
                            else:
                                self.assert_matches_eager(got.logits, Logits(model), ids)
                    self.assertEqual(fast.how, "aten")
                    self.assertGreater(fast.stats()["fused_launches"], 0)
            cfg.use_cache = True
            model = cls(cfg).cuda().eval()
            fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
            ids = torch.randint(0, 1000, (2, 64), device="cuda")
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = fast(ids)
            torch.testing.assert_close(got.logits, model(ids).logits)
            text = " ".join(str(w.message) for w in caught)
            self.assertIn("DynamicCache", text)
            self.assertIn("use_cache=False", text)

    def test_torchfuse_compile_on_bench_workloads(self):
        def make(model):
            fast = torchfuse.compile(model, cache_dir=self.cache_dir)
            return fast
        self.check(make, "torchfuse.compile")

    def test_gelu_after_a_linear_layer_runs_in_the_products_epilogue(self):
        """GPT-2's MLP in bf16 (Conv1D: addmm of the flattened input, viewed back; gelu_new
        written out), through Dynamo and without it: the GELU is its product's cuBLASLt
        epilogue, so no kernel of torchfuse's runs, explain says so, and the output is eager's
        within bf16's tolerance. With TORCHFUSE_MATMUL_EPILOGUE=0 the GELU is one kernel."""
        class Gpt2Mlp(torch.nn.Module):
            def __init__(self, d):
                super().__init__()
                self.w1 = torch.nn.Parameter(torch.randn(d, 4 * d) * d ** -0.5)
                self.b1 = torch.nn.Parameter(torch.randn(4 * d))
                self.w2 = torch.nn.Parameter(torch.randn(4 * d, d) * (4 * d) ** -0.5)
                self.b2 = torch.nn.Parameter(torch.randn(d))

            def forward(self, x):
                h = torch.addmm(self.b1, x.view(-1, x.size(-1)), self.w1)
                h = h.view(*x.shape[:-1], h.size(-1))
                h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                                (h + 0.044715 * torch.pow(h, 3.0))))
                return torch.addmm(self.b2, h.view(-1, h.size(-1)), self.w2).view(x.shape)

        model = Gpt2Mlp(256).cuda().to(torch.bfloat16)
        for dynamo in ([True, False] if HAS_DYNAMO else [False]):
            for epilogue in ("1", "0"):
                with self.subTest(dynamo=dynamo, epilogue=epilogue), \
                        scoped_env(TORCHFUSE_MATMUL_EPILOGUE=epilogue), torch.no_grad():
                    if HAS_DYNAMO:
                        torch._dynamo.reset()
                    fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=dynamo)
                    x = torch.randn(4, 96, 256, device="cuda", dtype=torch.bfloat16)
                    torch.testing.assert_close(fast(x), model(x), **tolerance(x.dtype))
                    stats = fast.stats(last_call=True)
                    self.assertEqual(stats["fused_launches"], 0 if epilogue == "1" else 1)
                    self.assertEqual(stats["torch_ops"], 2)
        found = torchfuse.explain(model, x)
        self.assertEqual(sum(e["kernels"] for e in found), 0)
        products = [l for e in found for l in e["left_to_torch"] if "product" in l["why"]]
        self.assertEqual(len(products), 2)
        self.assertEqual(sum("GELU (tanh) in cuBLASLt's epilogue" in l["why"]
                             for l in products), 1)

    def test_calls_take_the_per_call_path_and_decline_autograd(self):
        class TwoOut(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.rand(256, device="cuda") + 0.5)

            def forward(self, x):
                y = torch.tanh(x) * self.w
                return y, y.sum(-1)

        for model, dynamo in ((HandGelu(), False), (TwoOut(), False), (ShapeBranch(), False),
                              (BiasGelu(256).cuda(), True)):
            with self.subTest(model=type(model).__name__, dynamo=dynamo):
                fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=dynamo)
                with torch.no_grad():
                    for _ in range(3):
                        x = torch.randn(32, 256, device="cuda")
                        got, want = fast(x), model(x)
                        if isinstance(want, tuple):
                            self.assertIsInstance(got, tuple)
                            self.assertEqual(len(got), len(want))
                            for g, w in zip(got, want):
                                torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)
                        else:
                            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
                if dynamo:
                    calls = sum(g._direct.calls for g in fast._backend.graphs)
                    self.assertEqual(calls, 3)
                    continue
                # Every call ran through the per-call path, the first after capturing.
                self.assertEqual(fast._direct.calls, 3)
                # A call that records autograd is declined and runs the module eagerly.
                x = torch.randn(32, 256, device="cuda", requires_grad=True)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = fast(x)
                out = out[0] if isinstance(out, tuple) else out
                self.assertIsNotNone(out.grad_fn)
                self.assertTrue(any("records autograd" in str(w.message) for w in caught))
                self.assertEqual(fast._direct.calls, 3)
                self.assertGreaterEqual(fast._direct.declined, 1)

    def test_compiled_module_reports_its_kernels(self):
        fast = torchfuse.compile(HandGelu(), cache_dir=self.cache_dir)
        x = torch.randn(64, 1024, device="cuda")
        fast(x)
        stats = fast.stats(last_call=True)
        self.assertEqual(stats["fused_launches"], 1)
        self.assertEqual(stats["torch_ops"], 0)
        sources = fast.kernel_sources()
        self.assertEqual(len(sources), 1)
        self.assertIn("tanh", next(iter(sources.values())))
        self.assertEqual(list(fast.kernel_variants()), list(sources))

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_torch_compile_backend_on_bench_workloads(self):
        def make(model):
            torch._dynamo.reset()
            return torch.compile(model, backend="torchfuse")
        self.check(make, "torch.compile(backend=torchfuse)")

    def torch_ops_win(self, dynamo):
        """With a margin that favours a group's own torch ops (TORCHFUSE_TUNE_TORCH_MARGIN),
        the tuner's timing makes them win, and the compiled module runs them instead of a
        kernel, with eager's results."""
        with scoped_env(TORCHFUSE_TUNE_TORCH_MARGIN="-0.99"), torch.no_grad():
            if dynamo:
                torch._dynamo.reset()
            model = BiasGelu(1024).cuda()
            fast = torchfuse.compile(model, cache_dir=tempfile.mkdtemp(dir=self.cache_dir),
                                     tune_mode="sync", dynamo=dynamo)
            for _ in range(2):
                x = torch.randn(256, 1024, device="cuda")
                torch.testing.assert_close(fast(x), model(x), **tolerance(x.dtype))
                stats = fast.stats(last_call=True)
                self.assertEqual(stats["torch_groups"], 1)
                self.assertEqual(stats["fused_launches"], 0)

    def test_lazy_tuning_runs_torch_ops_until_the_kernels_compile(self):
        """tune_mode="lazy", named, from TORCHFUSE_TUNE, or the default where neither names
        a mode: the first call of a group without
        a record runs its own torch ops while its heuristic's kernel compiles (or that kernel,
        where it compiled ahead, while Dynamo finished), then that kernel; once every candidate
        has compiled, one call times them, and the tuned kernels run from then on. The torch ops
        run under a Python dispatch mode of the caller's too (a pass-through one here): the
        gelu's `x ** 3` takes its wrapped 3 as a number, where item() would hand the mode the
        number in place of a tensor, and so do comparisons with a number (`x != 0.5`), whose
        .Tensor overloads the mode's re-dispatch would refuse a number for."""
        from torch.utils._python_dispatch import TorchDispatchMode

        class PassThrough(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        x = torch.randn(4096, 1024, device="cuda")
        paths = [(False, "torchfuse.compile, FX", False),
                 (False, "torchfuse.compile, FX, under a dispatch mode", True)] + \
            ([(True, "dynamo", False)] if HAS_DYNAMO else [])
        for tune_mode, env in (("lazy", None), (None, "lazy"), (None, None)):
            for dynamo, label, mode in paths:
                for model in (HandGelu(), Softmax(), Compared()):
                    with self.subTest(tune_mode=tune_mode, path=label,
                                      model=type(model).__name__), \
                            scoped_env(TORCHFUSE_TUNE=env), torch.no_grad():
                        if HAS_DYNAMO:
                            torch._dynamo.reset()
                        cache = tempfile.mkdtemp(dir=self.cache_dir)
                        # No record of an earlier subtest's tuning in this process either.
                        torchfuse._C.reset_process_caches()
                        fast = torchfuse.compile(model, cache_dir=cache, tune_mode=tune_mode,
                                                 dynamo=dynamo)
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            if mode:
                                fast._ensure((x,))  # captured outside the mode
                                with PassThrough():
                                    y = fast(x)
                            else:
                                y = fast(x)
                        self.assert_matches_eager(y, model, x)
                        self.assertFalse([w for w in caught if "failed" in str(w.message)],
                                         [str(w.message) for w in caught])
                        first = fast.stats(last_call=True)
                        # The torch ops, or the heuristic's kernel where it compiled first.
                        self.assertEqual(first["lazy_groups"] + first["fused_launches"], 1, first)
                        self.assertEqual(first["torch_groups"], 0, first)
                        torchfuse.wait_for_compiles()
                        self.assert_matches_eager(fast(x), model, x)
                        self.assert_matches_eager(fast(x), model, x)
                        settled = fast.stats(last_call=True)
                        self.assertEqual(settled["lazy_groups"], 0, settled)
                        self.assertEqual(settled["fused_launches"] + settled["torch_groups"], 1)

    def test_a_groups_torch_ops_run_where_tuning_times_them_faster(self):
        self.torch_ops_win(dynamo=False)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_a_groups_torch_ops_run_where_tuning_times_them_faster_under_dynamo(self):
        # The group's pow node (`y ** 3`, an integer wrapped exponent) runs in the torch
        # candidate under the torch.compile backend too: the reference executor reads the
        # wrapped number in place (ReferenceExecutorOpsTest.PowOfWrappedNumbers in C++).
        self.torch_ops_win(dynamo=True)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_dynamo_calls_skip_module_call_only_while_it_has_no_hooks(self):
        # Without hooks a call goes to the compiled forward; a forward hook, a pre-hook and a
        # global hook each make nn.Module's __call__ run, through the compiled module, and
        # their effects show; removed, the compiled forward again. Every call is torchfuse's.
        torch.manual_seed(0)
        model = Block().cuda().eval()
        fast = torchfuse.compile(model)
        seen = []

        def call(x):
            with torch.no_grad():
                return fast(x)

        x = torch.randn(32, 64, device="cuda")
        plain = call(x)
        with torch.no_grad():
            torch.testing.assert_close(plain, model(x), **tolerance(x.dtype))
        self.assertIs(fast._dynamo_callable(), fast._compiled_forward)
        hooks = [model.register_forward_hook(lambda m, i, o: o * 2),
                 model.register_forward_pre_hook(lambda m, i: seen.append(1))]
        self.assertIs(fast._dynamo_callable(), fast._compiled)
        for _ in range(2):
            before = len(seen)
            torch.testing.assert_close(call(x), 2 * plain, **tolerance(x.dtype))
            self.assertEqual(len(seen), before + 1)
        for h in hooks:
            h.remove()
        # A global hook (here acting on the block only: Dynamo, as torch.compile, does not
        # see global hooks on the submodules its graph inlined).
        glob = torch.nn.modules.module.register_module_forward_hook(
            lambda m, i, o: o + 1 if m is model else o)
        try:
            self.assertIs(fast._dynamo_callable(), fast._compiled)
            with torch.no_grad():
                torch.testing.assert_close(call(x), model(x), **tolerance(x.dtype))
                torch.testing.assert_close(model(x), plain + 1, **tolerance(x.dtype))
        finally:
            glob.remove()
        self.assertIs(fast._dynamo_callable(), fast._compiled_forward)
        y = torch.randn(32, 64, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(call(y), model(y), **tolerance(y.dtype))
        self.assertGreater(fast.stats(last_call=True)["fused_launches"], 0)
        self.assertEqual(fast.how, "dynamo")

    def test_swiglu_through_chunk_is_one_kernel_and_correct(self):
        class SwiGLU(torch.nn.Module):
            def forward(self, x):
                a, b = x.chunk(2, dim=-1)
                return torch.nn.functional.silu(a) * b

        x = torch.randn(8192, 22016, device="cuda", dtype=torch.bfloat16)
        paths = [("torchfuse.compile", torchfuse.compile(SwiGLU(), cache_dir=self.cache_dir))]
        if HAS_DYNAMO:
            torch._dynamo.reset()
            paths.append(("torch.compile", torch.compile(SwiGLU(), backend="torchfuse")))
        for label, fast in paths:
            with self.subTest(path=label), torch.no_grad():
                self.assert_matches_eager(fast(x), SwiGLU(), x)
                self.assertEqual(self.count_kernels(fast, x), 1)

    def test_cuda_graphs_replay_whole_calls_with_fresh_inputs_and_outputs(self):
        """cuda_graphs=True: from a signature's second call, the whole call (torch's matmul
        and torchfuse's kernels) replays as one CUDA graph that reads each call's inputs; the
        results are the caller's, so a later call leaves earlier results as they were. In
        background and lazy tuning (where the first call ran the groups' torch ops, and the
        capture's rehearsal swaps in the kernels and tunes them), from empty caches."""
        class Mlp(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.up, self.down = torch.nn.Linear(n, 4 * n), torch.nn.Linear(4 * n, n)
                self.norm = LayerNorm(n)

            def forward(self, x, scale=1.0):
                h = torch.nn.functional.gelu(self.up(self.norm(x)), approximate="tanh")
                return Softmax()(self.down(h) * scale), h.sum(-1)

        for tune_mode, dtype in itertools.product(("background", "lazy"),
                                                  (torch.float32, torch.bfloat16)):
            with self.subTest(tune_mode=tune_mode, dtype=dtype), torch.no_grad():
                if HAS_DYNAMO:
                    torch._dynamo.reset()
                torchfuse._C.reset_process_caches()
                model = Mlp(256).cuda().to(dtype).eval()
                fast = torchfuse.compile(model, cache_dir=tempfile.mkdtemp(dir=self.cache_dir),
                                         cuda_graphs=True, tune_mode=tune_mode)
                kept = []
                for shape in ((8, 64, 256), (8, 64, 256), (8, 64, 256), (2, 32, 256),
                              (8, 64, 256), (2, 32, 256), (2, 32, 256)):
                    x = torch.randn(*shape, device="cuda", dtype=dtype)
                    got = fast(x, scale=0.5)
                    want = model(x, scale=0.5)
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g, w, **tolerance(dtype))
                    kept.append((got, want))
                for got, want in kept:  # still the values each call returned
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g, w, **tolerance(dtype))
                stats = fast.stats()
                self.assertEqual(stats["cuda_graphs"], 2)
                self.assertEqual(stats["graph_replays"], 5)
                # A replay does not run the compiled graphs call by call.
                x = torch.randn(8, 64, 256, device="cuda", dtype=dtype)
                for _ in range(3):
                    torch.testing.assert_close(fast(x, scale=0.5)[0], model(x, scale=0.5)[0],
                                               **tolerance(dtype))
                after = fast.stats()
                self.assertEqual(after["calls"], stats["calls"])
                self.assertEqual(after["graph_replays"], 8)
                # torchfuse's kernels ran (in lazy tuning, from the capture's rehearsal on), and
                # no call after the compiles ran a group's torch ops in their place.
                self.assertGreater(after["fused_launches"], 0)
                self.assertEqual(fast.stats(last_call=True)["lazy_groups"], 0)

    def test_cuda_graphs_leave_what_cannot_replay_to_plain_calls(self):
        """Calls a graph cannot replay run as usual, correct, with a warning saying why."""
        class Syncs(torch.nn.Module):  # reads a value on the host: no capture
            def forward(self, x):
                return torch.tanh(x) * float(x.abs().max())

        class HostWait(torch.nn.Module):  # waits for the device mid-call
            def forward(self, x):
                y = torch.tanh(x)
                torch.cuda.synchronize()
                return y * 2

        class WritesItsInput(torch.nn.Module):
            def forward(self, x):
                x.mul_(2)
                return torch.exp(x)

        class TakesAnObject(torch.nn.Module):
            def forward(self, x, options=None):
                return torch.exp(x) * options.scale

        options = type("Options", (), {"scale": 3.0})()

        host = ("waits for the GPU on the host", "capturing it failed")
        cases = [("Syncs", Syncs(), True, host), ("HostWait", HostWait(), True, host),
                 ("WritesItsInput", WritesItsInput(), True, ("writes to its inputs",)),
                 ("grad", LayerNorm(128).cuda(), False, ("records autograd",)),
                 ("TakesAnObject", TakesAnObject(), True, ("of type Options",))]
        for label, model, no_grad, why in cases:
            extra = {"options": options} if label == "TakesAnObject" else {}
            with self.subTest(case=label):
                if HAS_DYNAMO:
                    torch._dynamo.reset()
                fast = torchfuse.compile(model, cache_dir=self.cache_dir, cuda_graphs=True)
                with warnings.catch_warnings(record=True) as seen, \
                        torch.set_grad_enabled(not no_grad):
                    warnings.simplefilter("always")
                    for _ in range(3):
                        x = torch.randn(16, 128, device="cuda")
                        want = model(x.clone(), **extra)
                        got = fast(x.clone(), **extra)
                        torch.testing.assert_close(got, want, **tolerance(x.dtype))
                self.assertTrue(any(reason in str(w.message) for w in seen for reason in why),
                                [str(w.message) for w in seen])
                self.assertEqual(fast._graphs.stats()["graph_replays"], 0)
                # Random draws still work on the device (a failed capture can break them).
                self.assertTrue(torch.isfinite(torch.randn(4, device="cuda")).all())

    def _own_kernels(self, fn, *args):
        """torchfuse's kernels of one call, once background tuning has settled."""
        return [n for n in self.kernel_names(fn, *args, settle=True) if n.startswith("tf_")]

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_channels_last_blocks_keep_eagers_layouts(self):
        """ConvNeXt's block: a depthwise conv, a layer norm over channels-last activations,
        an MLP, then gamma * x + shortcut back in NCHW. Pointwise results are laid out as
        eager lays them out (here channels last), so the next convolution and layer norm see
        eager's layouts: the norm reads whole rows, the conv runs its channels-last kernel."""
        class Block(torch.nn.Module):
            def __init__(self, c):
                super().__init__()
                self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
                self.norm = torch.nn.LayerNorm(c)
                self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
                self.gamma = torch.nn.Parameter(torch.rand(c) + 0.5)

            def forward(self, x):
                y = self.norm(self.dw(x).permute(0, 2, 3, 1))
                y = self.fc2(torch.nn.functional.gelu(self.fc1(y))).permute(0, 3, 1, 2)
                return x + y * self.gamma.reshape(1, -1, 1, 1)

        class Stack(torch.nn.Module):
            def __init__(self, c):
                super().__init__()
                self.blocks = torch.nn.Sequential(Block(c), Block(c), Block(c))

            def forward(self, x):
                return self.blocks(x)

        torch.manual_seed(0)
        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=str(dtype)), torch.no_grad(), fused_only():
                model = Stack(96).cuda().eval().to(dtype)
                x = torch.randn(4, 96, 28, 28, device="cuda", dtype=dtype).to(
                    memory_format=torch.channels_last)
                torch._dynamo.reset()
                fast = torch.compile(model, backend="torchfuse")
                for inp in (x, torch.randn_like(x)):
                    got, want = fast(inp), model(inp)
                    self.assertEqual(got.stride(), want.stride())
                    if dtype == torch.float32:
                        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
                    else:
                        ref = copy.deepcopy(model).float()(inp.float())
                        eager_err = (want.float() - ref).abs().max().item()
                        err = (got.float() - ref).abs().max().item()
                        self.assertLessEqual(err, max(2 * eager_err, 2e-2))
                names = self._own_kernels(fast, x)
                self.assertGreaterEqual(len(names), 6, names)
                # Every layer norm reads rows of 96 contiguous values with vector loads.
                norms = [n for n in names if "_mean_" in n or "_layer_norm_" in n]
                self.assertEqual(len(norms), 3, names)
                self.assertFalse([n for n in norms if "_v1_" in n], names)
                # Each convolution's bias is added inside the norm's kernel (or the residual
                # add's): no add kernel of ATen's is left.
                every = self.kernel_names(fast, x, settle=True)
                self.assertFalse([n for n in every if "Functor_add" in n], every)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_a_models_own_fused_attention_leaves_the_rest_fused(self):
        """A ViT block calls F.scaled_dot_product_attention itself: AOTAutograd hands over
        ATen's choice (_scaled_dot_product_{flash,efficient,cudnn}_attention, whose results
        include integers), which runs in torch while the norms and pointwise ops around it
        fuse."""
        class Attention(torch.nn.Module):
            def __init__(self, d, heads):
                super().__init__()
                self.heads = heads
                self.norm = torch.nn.LayerNorm(d)
                self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

            def forward(self, x):
                b, t, d = x.shape
                qkv = self.qkv(self.norm(x)).reshape(b, t, 3, self.heads, d // self.heads)
                q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
                return x + self.proj(o.transpose(1, 2).reshape(b, t, d))

        torch.manual_seed(0)
        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=str(dtype)), torch.no_grad(), fused_only():
                model = Attention(256, 4).cuda().eval().to(dtype)
                x = torch.randn(8, 197, 256, device="cuda", dtype=dtype)
                torch._dynamo.reset()
                fast = torch.compile(model, backend="torchfuse")
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = fast(x)
                self.assertFalse([w for w in caught if "eagerly" in str(w.message)],
                                 [str(w.message) for w in caught])
                self._assert_attention_close(got, model, (x,))
                # The norm and the residual add at least (the whole graph in torch: none).
                names = self._own_kernels(fast, x)
                self.assertGreaterEqual(len(names), 2, names)

    @staticmethod
    def _attention_models(t_max=256):
        """(name, model, number of mask inputs): eager attentions as models write them."""
        class CausalBuffer(torch.nn.Module):  # a bool causal buffer sliced to T, masked_fill
            def __init__(self):
                super().__init__()
                self.register_buffer("causal", torch.ones(t_max, t_max, dtype=torch.bool).tril())

            def forward(self, q, k, v):
                t = q.shape[-2]
                s = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
                s = s.masked_fill(~self.causal[:t, :t], float("-inf"))
                return torch.softmax(s, dim=-1) @ v

        class PaddingMask(torch.nn.Module):  # an additive mask from an input, softmax in f32
            def forward(self, q, k, v, mask):
                s = torch.matmul(q, k.transpose(2, 3)) * 0.125 + mask
                return torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), v)

        class Unmasked(torch.nn.Module):  # scaled scores only
            def forward(self, q, k, v):
                return torch.softmax(q @ k.transpose(-2, -1) * 0.3, -1) @ v

        class GroupedQuery(torch.nn.Module):  # LLaMA's repeat_kv: 2 key/value heads for 4
            @staticmethod
            def repeat_kv(x):
                b, h, t, d = x.shape
                return x[:, :, None].expand(b, h, 2, t, d).reshape(b, 2 * h, t, d)

            def forward(self, q, k, v):
                k, v = self.repeat_kv(k[:, :2]), self.repeat_kv(v[:, :2])
                s = torch.matmul(q, k.transpose(2, 3)) * 0.125
                return torch.matmul(torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), v)

        return [("causal buffer", CausalBuffer().cuda(), 0), ("padding mask", PaddingMask(), 1),
                ("unmasked", Unmasked(), 0), ("grouped query", GroupedQuery(), 0)]

    @staticmethod
    def _attention_inputs(masks, dtype, t=200):
        q, k, v = (torch.randn(2, 4, t, 64, device="cuda", dtype=dtype) for _ in range(3))
        if not masks:
            return (q, k, v)
        # Each sequence keeps a random number of leading keys.
        keep = torch.arange(t, device="cuda")[None, :] < torch.tensor([[t], [t // 3]],
                                                                         device="cuda")
        mask = torch.zeros(2, 1, 1, t, device="cuda", dtype=dtype).masked_fill(
            ~keep[:, None, None, :], torch.finfo(dtype).min)
        return (q, k, v, mask)

    def _assert_attention_close(self, got, model, args):
        """f32: eager's answer; bf16: as close to the f32 run as eager's bf16 run is (fused
        attention rounds once, where eager rounds the scores and probabilities)."""
        want = model(*args)
        if got.dtype == torch.float32:
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            return
        ref = copy.deepcopy(model).float()(*(a.float() for a in args))
        eager_err = (want.float() - ref).abs().max().item()
        err = (got.float() - ref).abs().max().item()
        self.assertLessEqual(err, max(2 * eager_err, 1e-2))

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_attention_rewrite_matches_the_pattern_and_eager(self):
        """The rewrite itself, on AOT-style ATen graphs from make_fx: one fused attention and
        no batched product left; a constant causal mask becomes is_causal; the graph still
        computes eager's result."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _attention
        for name, model, masks in self._attention_models():
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(model=name, dtype=str(dtype)), torch.no_grad():
                    args = self._attention_inputs(masks, dtype)
                    gm = make_fx(model)(*args)
                    self.assertEqual(_attention.fuse_attention(gm), 1, gm.code)
                    sdpa = [n for n in gm.graph.nodes if n.target ==
                            torch.ops.aten.scaled_dot_product_attention.default]
                    self.assertEqual(len(sdpa), 1)
                    self.assertFalse(any(n.target == torch.ops.aten.bmm.default
                                         for n in gm.graph.nodes), gm.code)
                    self.assertEqual(sdpa[0].kwargs.get("is_causal", False),
                                     name == "causal buffer")
                    self.assertEqual("attn_mask" in sdpa[0].kwargs, name == "padding mask")
                    self._assert_attention_close(gm(*args), model, args)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_constant_masks_are_checked_once_on_the_cpu(self):
        """A constant mask (built on the GPU from positions and a buffer, as transformers'
        causal masks) is evaluated on the CPU, to the value the GPU computes, and a mask that
        layers share is checked once: three attentions over one causal mask are each
        rewritten with is_causal, and over one padding-style mask each keep it. Past
        CPU_MASK_ELEMENTS the mask is evaluated on the GPU, with the same rewrite."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _attention

        class Layers(torch.nn.Module):
            def __init__(self, causal):
                super().__init__()
                self.causal = causal
                self.register_buffer("window", torch.ones(256, 256, dtype=torch.bool))

            def forward(self, q, k, v):
                t = q.shape[-2]
                p = torch.arange(t, device=q.device)
                keep = self.window[:t, :t] & ((p[None, :] <= p[:, None]) if self.causal
                                              else (p[None, :] < t - 3))
                mask = torch.where(keep, 0.0, torch.finfo(q.dtype).min).to(q.dtype)
                for _ in range(3):
                    s = q @ k.transpose(-1, -2) * 0.125 + mask
                    q = torch.softmax(s, -1) @ v
                return q

        real_is_causal, real_evaluate = _attention._is_causal, _attention._evaluate
        for causal in (True, False):
            for limit in (_attention.CPU_MASK_ELEMENTS, 0):
                with self.subTest(causal=causal, limit=limit), torch.no_grad(), \
                        mock.patch.object(_attention, "CPU_MASK_ELEMENTS", limit):
                    model = Layers(causal).cuda()
                    args = self._attention_inputs(0, torch.float32, 64)
                    gm = make_fx(model)(*args)
                    checks, devices = [], []

                    def counted(masks, value_of, tq, tk):
                        checks.append((tq, tk))
                        return real_is_causal(masks, value_of, tq, tk)

                    def evaluated(gm_, node, cone, given=None, on_cpu=False):
                        v = real_evaluate(gm_, node, cone, given, on_cpu)
                        if isinstance(v, torch.Tensor) and v.dim() == 2:
                            devices.append(v.device.type)
                            # The GPU's value of the same mask.
                            want = real_evaluate(gm_, node, cone, given)
                            torch.testing.assert_close(v.cpu(), want.cpu(), rtol=0, atol=0)
                        return v
                    with mock.patch.object(_attention, "_is_causal", counted), \
                            mock.patch.object(_attention, "_evaluate", evaluated):
                        self.assertEqual(_attention.fuse_attention(gm), 3, gm.code)
                    self.assertEqual(checks, [(64, 64)])
                    self.assertEqual(devices, ["cpu" if limit else "cuda"])
                    sdpa = [n for n in gm.graph.nodes if n.target ==
                            torch.ops.aten.scaled_dot_product_attention.default]
                    self.assertEqual(len(sdpa), 3)
                    for n in sdpa:
                        self.assertEqual(n.kwargs.get("is_causal", False), causal)
                        self.assertEqual("attn_mask" in n.kwargs, not causal)
                    self._assert_attention_close(gm(*args), model, args)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_attention_over_few_keys_is_rewritten_only_where_the_fused_kernel_is_faster(self):
        """Over fewer than MEASURE_BELOW_KEYS keys the rewrite times ATen's fused attention,
        its memory-efficient kernel and the two products with a softmax, once per set of
        sizes, and writes the fastest (timings made up here): attention as written where the
        unfused form is faster, scaled_dot_product_attention or the memory-efficient kernel
        (with its mask padded, or is_causal) where they are; eager's answer each time; longer
        keys are not timed. Windowed attention (Swin's 49 keys, a bias and a mask per window)
        through torch.compile is timed and matches eager, whichever wins."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _attention
        real = _attention._time_ms
        # Timed here each time: no choice another test recorded in the cache.
        uncached = mock.patch.object(_attention, "_recorded_form",
                                     lambda key, device, options, time: time({}))
        efficient = "aten._scaled_dot_product_efficient_attention.default"
        sdpa = "aten.scaled_dot_product_attention.default"
        try:
            uncached.start()
            for name, model, masks in self._attention_models()[:2]:
                for times, wrote in (
                        ({"sdpa": 1.0, "efficient": 1.0,
                          "products": 0.5 * _attention.UNFUSED_MARGIN}, None),
                        ({"sdpa": 1.0, "efficient": 2.0, "products": 1.2}, sdpa),
                        ({"sdpa": 1.0, "efficient": 0.5, "products": 1.2}, efficient)):
                    timed = []

                    def fake(fn, *a, **k):
                        timed.append(fn.__name__)
                        return times[fn.__name__]
                    _attention._time_ms = fake
                    _attention._timed.clear()
                    for t in (49, 49, _attention.MEASURE_BELOW_KEYS):
                        with self.subTest(model=name, wrote=wrote, t=t), torch.no_grad():
                            args = self._attention_inputs(masks, torch.bfloat16, t)
                            gm = make_fx(model)(*args)
                            want = wrote if t < _attention.MEASURE_BELOW_KEYS else sdpa
                            self.assertEqual(_attention.fuse_attention(gm), int(bool(want)),
                                             gm.code)
                            for op in (sdpa, efficient):
                                self.assertEqual(op in gm.code, op == want, gm.code)
                            if want == efficient:  # a causal mask is is_causal
                                self.assertEqual("is_causal = True" in gm.code, not masks,
                                                 gm.code)
                            self._assert_attention_close(gm(*args), model, args)
                    # 49 keys once (each form once); 256 never.
                    self.assertEqual(sorted(timed), ["efficient", "products", "sdpa"])
        finally:
            uncached.stop()
            _attention._time_ms = real

        # Each form through torch.compile (the window mask folded into the fused forms' mask,
        # padded for the memory-efficient kernel), then with real timing.
        model = WindowAttention().cuda().to(torch.bfloat16)
        args = tuple(torch.randn(512, 3, 49, 32, device="cuda", dtype=torch.bfloat16)
                     for _ in range(3))
        for form in (_attention.SDPA, _attention.EFFICIENT, _attention.UNFUSED, None):
            forced = mock.patch.object(_attention, "_time_forms", lambda *a, f=form: f) \
                if form else contextlib.nullcontext()
            with self.subTest(window=form), torch.no_grad(), forced, uncached:
                _attention._timed.clear()
                torch._dynamo.reset()
                fast = torch.compile(model, backend="torchfuse")
                self._assert_attention_close(fast(*args), model, args)
                # One set of sizes, timed once (all 512 windows alike).
                self.assertEqual(len(_attention._timed), 1, _attention._timed)
                if form:
                    self.assertEqual(list(_attention._timed.values()), [form])

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_timed_attention_forms_are_kept_in_the_cache(self):
        """The form timed for windowed attention is a tuning record of the cache (kind
        attention, this GPU's name, every form's time): a process that starts afresh with that
        cache takes it from there and times nothing; an empty cache times again. Eager's answer
        each time."""
        from torchfuse import _C, _attention, cache
        from torchfuse._backend import Backend

        options = torchfuse._options(cache_dir=self.cache_dir)
        model = WindowAttention().cuda().to(torch.bfloat16)
        args = tuple(torch.randn(256, 3, 49, 32, device="cuda", dtype=torch.bfloat16)
                     for _ in range(3))
        timed = []
        real = _attention._time_forms

        def counted(*a):
            timed.append(1)
            return real(*a)

        def fresh_process():
            _attention._timed.clear()
            _C.reset_process_caches()
            torch._dynamo.reset()

        with mock.patch.object(_attention, "_time_forms", counted), torch.no_grad():
            for run, (clear, times) in enumerate(((False, 1), (False, 1), (True, 2))):
                with self.subTest(run=run):
                    if clear:
                        cache.clear(self.cache_dir)
                    fresh_process()
                    fast = torch.compile(model, backend=Backend(options))
                    self._assert_attention_close(fast(*args), model, args)
                    self.assertEqual(len(timed), times)
                    records = [e for e in cache.ls(self.cache_dir) if e["kernel"] == "attention"]
                    self.assertEqual(len(records), 1, records)
                    self.assertIn(records[0]["variant"], (_attention.SDPA, _attention.EFFICIENT,
                                                          _attention.UNFUSED))
                    self.assertEqual(records[0]["gpu"], torch.cuda.get_device_name())
                    self.assertTrue(records[0]["tuned"])
                    self.assertGreater(records[0]["ms"], 0)
                    self.assertEqual(list(_attention._timed.values()), [records[0]["variant"]])

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_causal_masks_made_from_positions_are_causal_at_every_size(self):
        """A graph for every length whose mask is built from positions alone (transformers'
        causal masks) passes is_causal to the fused attention instead of the mask; a mask that
        shifts positions (a sliding window, causal only while the length is short) stays a
        mask the fused attention reads."""
        import re

        from torchfuse import _C
        from torchfuse._backend import Backend

        class PositionsMask(torch.nn.Module):
            def __init__(self, window=None):
                super().__init__()
                self.window = window

            def forward(self, q, k, v):
                p = torch.arange(q.shape[-2], device=q.device)
                keep = p[None, :] <= p[:, None]
                if self.window is not None:
                    keep = keep & (p[:, None] - p[None, :] < self.window)
                s = q @ k.transpose(-1, -2) * 0.125
                s = s + torch.where(keep, 0.0, torch.finfo(q.dtype).min)
                return torch.softmax(s, -1) @ v

        sdpa = re.compile(r"opaque\(([^)]*)\) \{handle=\d+, "
                          r"target=\"aten::scaled_dot_product_attention\"\}")
        for window, operands in ((None, 3), (4, 4)):
            with self.subTest(window=window), torch.no_grad():
                model = PositionsMask(window)
                torch._dynamo.reset()
                be = Backend(keep=True)
                fast = torch.compile(model, backend=be, dynamic=True)
                for t in (64, 200, 33, 7):
                    args = self._attention_inputs(0, torch.float32, t)
                    self._assert_attention_close(fast(*args), model, args)
                # Each graph Dynamo hands over (it may guard on a length and hand over
                # another) compiles one plan for every length.
                compiled = [c for g in be.symbolic for c in g.whole.values() if c is not None]
                self.assertEqual(len(compiled), len(be.symbolic),
                                 [g.per_size for g in be.symbolic])
                self.assertGreaterEqual(len(compiled), 1)
                for c in compiled:
                    text = _C.last_graph(c.handle)
                    calls = sdpa.findall(text)
                    self.assertEqual(len(calls), 1, text)
                    # q, k and v; and the mask where it is not causal at every size.
                    self.assertEqual(calls[0].count("%"), operands, text)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_a_failing_attention_rewrite_leaves_attention_as_written(self):
        """A rewrite that raises half-way (here: after its fused attention node is made)
        warns, leaves no node of it behind, and the graph still computes eager's result."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _attention
        name, model, masks = self._attention_models()[0]
        args = self._attention_inputs(masks, torch.float32)
        with torch.no_grad():
            gm = make_fx(model)(*args)
            gm.graph.eliminate_dead_code()
            nodes = len(gm.graph.nodes)
            real = torch.fx.Node.replace_all_uses_with

            def broken(node, *a, **k):
                raise RuntimeError("matcher bug")
            torch.fx.Node.replace_all_uses_with = broken
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    self.assertEqual(_attention.fuse_attention(gm), 0)
            finally:
                torch.fx.Node.replace_all_uses_with = real
            self.assertTrue([w for w in caught if "matcher bug" in str(w.message)],
                            [str(w.message) for w in caught])
            self.assertEqual(len(gm.graph.nodes), nodes, gm.code)
            self.assertFalse([n for n in gm.graph.nodes if n.target ==
                              torch.ops.aten.scaled_dot_product_attention.default], gm.code)
            self._assert_attention_close(gm(*args), model, args)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_attention_the_fused_kernel_would_change_stays_as_written(self):
        """A masked_fill with a value that does not drown the scores (0, -1e4) is not an
        additive mask, and f16's lowest value does not drown them either: such attention is
        kept as written, and still matches eager."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torchfuse import _attention

        class Filled(torch.nn.Module):
            def __init__(self, fill):
                super().__init__()
                self.fill = fill

            def forward(self, q, k, v, keep):
                s = (q @ k.transpose(-1, -2) * 0.125).masked_fill(~keep, self.fill)
                return torch.softmax(s, dim=-1) @ v

        padding = self._attention_models()[1]
        cases = [(f"fill {f}", Filled(f), torch.float32) for f in (0.0, -1e4)] + \
            [("f16 padding mask", padding[1], torch.float16)]
        for name, model, dtype in cases:
            with self.subTest(case=name), torch.no_grad():
                q, k, v = (torch.randn(2, 4, 48, 64, device="cuda", dtype=dtype)
                           for _ in range(3))
                if isinstance(model, Filled):
                    extra = torch.rand(2, 1, 48, 48, device="cuda") > 0.3
                else:
                    extra = self._attention_inputs(1, dtype, 48)[3]
                args = (q, k, v, extra)
                gm = make_fx(model)(*args)
                self.assertEqual(_attention.fuse_attention(gm), 0, gm.code)
                torch.testing.assert_close(gm(*args), model(*args))

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_eager_attention_compiles_to_fused_attention(self):
        """Through torch.compile: eager's answer (bf16: as close to an f32 run as eager is),
        ATen's fused attention in the graph and no batched product; a graph that needs grad
        keeps eager attention (its backward reads the probabilities)."""
        for name, model, masks in self._attention_models():
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(model=name, dtype=str(dtype)):
                    args = self._attention_inputs(masks, dtype)
                    with torch.no_grad():
                        torch._dynamo.reset()
                        fast = torch.compile(model, backend="torchfuse")
                        self._assert_attention_close(fast(*args), model, args)
                    found = torchfuse.explain(model, *args)
                    ops = [l["op"] for g in found for l in g["left_to_torch"]]
                    self.assertIn("aten::scaled_dot_product_attention", ops)
                    self.assertNotIn("aten::bmm", ops)
                    self.assertFalse(any(g["warning"] for g in found), found)
        # Symbolic sizes: the graph specialized for each length is rewritten too.
        from torchfuse import _C
        from torchfuse._backend import Backend
        for name, model, masks in self._attention_models():
            with self.subTest(model=name, dynamic=True), torch.no_grad():
                torch._dynamo.reset()
                be = Backend(keep=True)
                fast = torch.compile(model, backend=be, dynamic=True)
                for t in (64, 200, 33):
                    args = self._attention_inputs(masks, torch.bfloat16, t)
                    self._assert_attention_close(fast(*args), model, args)
                # Each graph Dynamo hands over goes to the C++ side once, for every length,
                # and compiles one plan: a scale of the dynamic head dim is the fused
                # attention's default, a causal buffer cut to the length its mask.
                compiled = [c for g in be.symbolic for c in g.whole.values()]
                self.assertEqual(len(compiled), len(be.symbolic),
                                 [g.per_size for g in be.symbolic])
                for c in compiled:
                    text = _C.last_graph(c.handle)
                    self.assertEqual(_C.stats(c.handle, False)["specializations"], 1, text)
                    self.assertIn("aten::scaled_dot_product_attention", text)
                    self.assertNotIn("matmul(", text)
                    self.assertNotIn("aten::bmm", text)
                    self.assertNotIn("convert_element_type", text)
        name, model, masks = self._attention_models()[0]
        q, k, v = (a.requires_grad_() for a in self._attention_inputs(masks, torch.float32))
        torch._dynamo.reset()
        out = torch.compile(model, backend="torchfuse")(q, k, v)
        out.sum().backward()
        want = [a.grad.clone() for a in (q, k, v)]
        for a in (q, k, v):
            a.grad = None
        model(q, k, v).sum().backward()
        for g, w in zip(want, (q.grad, k.grad, v.grad)):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_flash_attention_kernel_when_asked(self):
        """TORCHFUSE_ATTENTION_KERNEL=flash: a rewritten attention that reads no mask (causal
        or unmasked) in bf16 calls ATen's flash kernel itself, whose first use in a process
        compiles nothing (cuDNN's, ATen's pick on Hopper, compiles its kernel at run time);
        with a mask, or in f32, ATen picks as before. Eager's answer every time (bf16: as
        close to an f32 run as eager is)."""
        flash = "aten::_scaled_dot_product_flash_attention"
        for name, model, masks in self._attention_models(t_max=320):
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(model=name, dtype=str(dtype)), torch.no_grad(), \
                        mock.patch.dict(os.environ, {"TORCHFUSE_ATTENTION_KERNEL": "flash"}):
                    args = self._attention_inputs(masks, dtype, t=320)
                    found = torchfuse.explain(model, *args)
                    ops = [l["op"] for g in found for l in g["left_to_torch"]]
                    # Dynamo hands the causal buffer over as a graph input: its mask is data
                    # there, not a constant made causal, and the attention reads it.
                    takes = dtype == torch.bfloat16 and name in ("unmasked", "grouped query")
                    self.assertEqual(flash in ops, takes, ops)
                    self.assertEqual("aten::scaled_dot_product_attention" in ops, not takes, ops)
                    torch._dynamo.reset()
                    fast = torch.compile(model, backend="torchfuse")
                    for _ in range(2):  # fresh inputs each call
                        args = self._attention_inputs(masks, dtype, t=320)
                        self._assert_attention_close(fast(*args), model, args)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_window_attention_as_written_runs_bias_mask_and_softmax_in_one_kernel(self):
        """Swin's shifted-window attention kept as written (the rewrite off): the two
        products run in torch, the q scale and the bias + window mask + softmax are
        torchfuse's two kernels; eager's answer in f32 and bf16."""
        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=dtype), torch.no_grad(), \
                    mock.patch.dict(os.environ, {"TORCHFUSE_ATTENTION": "0"}):
                model = WindowAttention().cuda().to(dtype)
                args = tuple(torch.randn(64, 3, 49, 32, device="cuda", dtype=dtype)
                             for _ in range(3))
                torch._dynamo.reset()
                fast = torch.compile(model, backend="torchfuse")
                self._assert_attention_close(fast(*args), model, args)
                found = torchfuse.explain(model, *args)
                left = [l["op"] for g in found for l in g["left_to_torch"]]
                self.assertEqual(sorted(left), ["aten::bmm", "aten::bmm"], found)
                self.assertEqual(sum(g["kernels"] for g in found), 2, found)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_roll_is_read_in_place_by_the_kernel_after_it(self):
        """torch.roll over two dims (Swin's shifted windows) reaches torchfuse whole (not an
        index_select per dim) and is read in place by the activation's kernel: one kernel,
        nothing left to torch; eager's answer."""

        class Shift(torch.nn.Module):
            def forward(self, x):
                return torch.nn.functional.gelu(torch.roll(x, (-3, -3), (1, 2))) * 2

        model = Shift()
        x = torch.randn(4, 14, 14, 96, device="cuda")
        with torch.no_grad():
            torch._dynamo.reset()
            fast = torch.compile(model, backend="torchfuse")
            torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=1e-5)
        found = torchfuse.explain(model, x)
        self.assertEqual([l["op"] for g in found for l in g["left_to_torch"]], [], found)
        self.assertEqual(sum(g["kernels"] for g in found), 1, found)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_attention_with_a_gathered_bias_runs_fused_attention(self):
        """A window attention as Swin writes it: a relative position bias gathered from a
        table, permuted to [heads, N, N] and made contiguous, added to the scores; in the
        shifted blocks also a mask per window, added to the scores viewed as [images, windows,
        heads, N, N]. torchfuse may hand the bias to ATen in its gathered layout (heads
        innermost); ATen's fused kernels take only masks whose rows are contiguous, so the
        attention op gets them so. Each call runs a fused attention kernel, not the math
        form's softmax, with eager's answer. The memory-efficient kernel reads the mask with
        its rows padded: torchfuse's kernel of the mask's ops writes them so, and no op of
        torch's copies, pads or fills a mask-sized tensor on the way (once the mask's
        kernel wrote the bias with its heads innermost, and torch padded it and copied it
        twice more)."""
        from torch.profiler import ProfilerActivity, profile

        from torchfuse import _attention

        class WindowAttention(torch.nn.Module):
            def __init__(self, windows, dim=96, heads=3, n=49):
                super().__init__()
                self.heads, self.scale = heads, (dim // heads) ** -0.5
                self.qkv = torch.nn.Linear(dim, 3 * dim)
                self.table = torch.nn.Parameter(torch.randn(169, heads) * 0.5)
                self.register_buffer("index", torch.randint(0, 169, (n, n)))
                # Swin's shifted-window mask: 0 within a region, -100 across two.
                mask = None
                if windows:
                    region = torch.randint(0, 3, (windows, n))
                    mask = (region[:, :, None] != region[:, None, :]).float() * -100.0
                self.register_buffer("mask", mask)

            def forward(self, x):
                b, n, c = x.shape
                qkv = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
                q, k, v = qkv.unbind(0)
                scores = (q * self.scale) @ k.transpose(-2, -1)
                bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
                scores = scores + bias.contiguous().unsqueeze(0)
                if self.mask is not None:
                    w = self.mask.shape[0]
                    scores = scores.view(-1, w, self.heads, n, n) + \
                        self.mask.unsqueeze(1).unsqueeze(0)
                    scores = scores.view(-1, self.heads, n, n)
                return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)

        copies = ("aten::constant_pad_nd", "aten::clone", "aten::contiguous", "aten::copy_",
                  "aten::fill_", "aten::cat")
        for form in (_attention.SDPA, _attention.EFFICIENT):
            picked = mock.patch.object(_attention, "_pick_form", lambda *a, f=form: f)
            for windows in (0, 16):
                for dtype in (torch.float32, torch.bfloat16):
                    with self.subTest(form=form, windows=windows, dtype=str(dtype)), \
                            torch.no_grad(), picked:
                        model = WindowAttention(windows).cuda().to(dtype).eval()
                        x = torch.randn(64, 49, 96, device="cuda", dtype=dtype)
                        torch._dynamo.reset()
                        fast = torch.compile(model, backend="torchfuse")
                        self._assert_attention_close(fast(x), model, (x,))
                        names = [n.lower() for n in self.kernel_names(fast, x)]
                        self.assertTrue(any(w in n for n in names for w in (
                            "fmha", "attention", "flash", "sdpa")), names)
                        self.assertFalse(any("softmax" in n for n in names), names)
                        if form != _attention.EFFICIENT:
                            continue
                        torchfuse.wait_for_compiles()
                        fast(x)
                        with profile(activities=[ProfilerActivity.CPU],
                                     record_shapes=True) as prof:
                            fast(x)
                        mask_size = 64 * 3 * 49 * 49
                        big = [(e.name, e.input_shapes) for e in prof.events()
                               if e.name in copies and any(
                                   s and math.prod(s) >= mask_size for s in e.input_shapes
                                   if isinstance(s, list) and all(isinstance(d, int) for d in s))]
                        self.assertEqual(big, [])

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_sdpa_math_form_becomes_fused_attention_again(self):
        """scaled_dot_product_attention traced where ATen picks its math form (transformers'
        masks under torch.compile: a bool mask expanded along the keys): Q and K^T each scaled
        by the scale's square root, f32 copies of bf16 operands, the mask added, and
        _safe_softmax (rows whose every key is masked give zeros). Where the mask keeps every
        key, the rewrite gives back one fused attention on the operands as they are, without
        the mask; a mask of data (a padding mask) stays as written, as it may mask every key
        of a row, where _safe_softmax gives zeros. Eager's math-form answer either way, zero
        rows included."""
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from torchfuse import _attention
        from torchfuse._backend import _decompositions

        class AllKept(torch.nn.Module):  # transformers' mask when nothing is padded
            def forward(self, q, k, v):
                b, _, t, _ = q.shape
                p = torch.arange(t, device=q.device)
                mask = (p[None, None, :, None] >= 0).expand(b, 1, t, t)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        class Padded(torch.nn.Module):  # a bool padding mask from an input, scale given
            def forward(self, q, k, v, keep):
                b, _, t, _ = q.shape
                mask = keep[:, None, None, :].expand(b, 1, t, t)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                         scale=0.2)

        torch.manual_seed(0)
        t = 96
        keep = torch.rand(3, t, device="cuda") > 0.3
        keep[1] = False  # every key of the second sequence masked: its rows are zeros
        for name, model, extra in (("all kept", AllKept(), ()), ("padded", Padded(), (keep,))):
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(model=name, dtype=str(dtype)), torch.no_grad():
                    q, k, v = (torch.randn(3, 4, t, 64, device="cuda", dtype=dtype)
                               for _ in range(3))
                    args = (q, k, v) + extra
                    with sdpa_kernel(SDPBackend.MATH):
                        gm = make_fx(model, decomposition_table=_decompositions(False))(*args)
                        want = model(*args)
                    gm.graph.eliminate_dead_code()  # as AOTAutograd's graphs come
                    gm.recompile()
                    self.assertTrue(any(n.target == torch.ops.aten.bmm.default
                                        for n in gm.graph.nodes), gm.code)
                    rewritten = _attention.fuse_attention(gm)
                    self.assertEqual(rewritten, int(name == "all kept"), gm.code)
                    sdpa = [n for n in gm.graph.nodes if n.target ==
                            torch.ops.aten.scaled_dot_product_attention.default]
                    self.assertEqual(len(sdpa), rewritten, gm.code)
                    if rewritten:
                        names = {str(n.target) for n in gm.graph.nodes}
                        for gone in ("aten.bmm.default", "aten.any.dim",
                                     "aten._softmax.default"):
                            self.assertNotIn(gone, names, gm.code)
                        self.assertNotIn("attn_mask", sdpa[0].kwargs)
                        self.assertEqual([a.meta["val"].dtype for a in sdpa[0].args],
                                         [dtype] * 3)
                    got = gm(*args)
                    self.assertEqual(got.dtype, dtype)
                    if name == "padded":
                        self.assertEqual(got[1].abs().max().item(), 0.0)
                        self.assertEqual(want[1].abs().max().item(), 0.0)
                    tol = 1e-4 if dtype == torch.float32 else 2e-2
                    torch.testing.assert_close(got, want, atol=tol, rtol=tol)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_bert_attention_is_fused_attention(self):
        """transformers' BERT under torch.compile: its attention reaches the graph in ATen's
        math form and runs as fused attention again (no batched product, no rows test left to
        torch); the output matches eager."""
        try:
            from transformers import BertConfig, BertForMaskedLM
        except Exception as e:  # noqa: BLE001  (transformers is on the GPU machine)
            self.skipTest(f"transformers: {e}")
        torch.manual_seed(0)
        cfg = BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                         intermediate_size=512, vocab_size=1000)
        model = BertForMaskedLM(cfg).cuda().eval()
        x = torch.randint(0, 1000, (2, 128), device="cuda")
        with torch.no_grad():
            want = model(x).logits
            torch._dynamo.reset()
            got = torch.compile(model, backend="torchfuse")(x).logits
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
        found = torchfuse.explain(model, x)
        ops = [l["op"] for g in found for l in g["left_to_torch"]]
        self.assertFalse([op for op in ops if op in ("aten::bmm", "aten::any",
                                                     "aten::full_like")], ops)
        self.assertTrue([op for op in ops if "scaled_dot_product" in op], ops)

    @staticmethod
    def _profiled_call(fn, x):
        """fn(x) once more after a first call, under the profiler: its output and the names of
        the CUDA kernels it ran."""
        fn(x)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            got = fn(x)
            torch.cuda.synchronize()
        return got, [e.name for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA]

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_convolutional_networks_run_on_channels_last_activations(self):
        """A bf16 residual network with NCHW weights and an NCHW image: compiled, its
        convolutions read channels-last activations (no cuDNN layout transposes in the profile
        of a call), it gives eager's answer, its feature map as contiguous as eager's, and
        nothing but the convolutions is left to torch."""
        class Res(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = torch.nn.Conv2d(3, 32, 7, stride=2, padding=3, bias=False)
                self.bn1 = torch.nn.BatchNorm2d(32)
                self.conv2 = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)
                self.bn2 = torch.nn.BatchNorm2d(32)
                self.conv3 = torch.nn.Conv2d(32, 64, 1)

            def forward(self, x):
                y = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
                z = torch.relu(self.bn2(self.conv2(y)) + y)
                f = self.conv3(z)
                return f, f.mean((2, 3))

        torch.manual_seed(0)
        model = Res().cuda().eval()
        with torch.no_grad():
            for bn in (model.bn1, model.bn2):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
        model = model.to(torch.bfloat16)
        x = torch.randn(8, 3, 64, 64, device="cuda", dtype=torch.bfloat16)
        torch._dynamo.reset()
        # Through Dynamo, and without it (the ATen trace, which a module with convolutions
        # called on CUDA tensors takes before FX's capture, for these rewrites).
        ways = {"dynamo": torch.compile(model, backend="torchfuse"),
                "aten": torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)}
        for way, compiled in ways.items():
            with self.subTest(way=way), torch.no_grad():
                want = model(x)
                got, kernels = self._profiled_call(compiled, x)
                self.assertTrue(kernels)
                self.assertEqual([k for k in kernels if "nchwToNhwc" in k or "nhwcToNchw" in k],
                                 [], kernels)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, atol=3e-2, rtol=3e-2)
                    self.assertEqual(g.stride(), w.stride())
        self.assertEqual((ways["aten"].how, ways["aten"]._capture.failed), ("aten", []))
        found = torchfuse.explain(model, x)
        ops = [l["op"] for g in found for l in g["left_to_torch"]]
        self.assertEqual(sorted(set(ops)), ["aten::contiguous", "aten::convolution",
                                            "aten::max_pool2d_with_indices"], found)
        # The conversion is torchfuse's choice: listed with its reason, not warned about.
        self.assertTrue(all("aten::contiguous" not in g["warning"] for g in found), found)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_depthwise_convolutions_run_as_torchfuse_kernels(self):
        """A ConvNeXt block (a 7x7 depthwise convolution, a layer norm over channels through
        a permute, the MLP, the layer scale, the residual) and a MobileNetV2 block (1x1, batch
        norm, ReLU6, a 3x3 depthwise convolution of stride 2), with NCHW weights and image, in
        bf16 (channels-last activations) and f32 (NCHW ones): compiled through Dynamo and
        without it, every depthwise convolution runs as torchfuse's kernel (three in the
        profile of a call, three in its stats), the answer is eager's, and only the 1x1
        convolutions are listed as left to torch, not the depthwise ones nor the ReLU6s."""
        class ConvNeXtBlock(torch.nn.Module):
            def __init__(self, c=64):
                super().__init__()
                self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
                self.norm = torch.nn.LayerNorm(c)
                self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
                self.gamma = torch.nn.Parameter(torch.rand(c))

            def forward(self, x):
                y = self.norm(self.dw(x).permute(0, 2, 3, 1))
                y = self.fc2(torch.nn.functional.gelu(self.fc1(y))) * self.gamma
                return x + y.permute(0, 3, 1, 2)

        class InvertedResidual(torch.nn.Module):
            def __init__(self, c=64, e=96):
                super().__init__()
                self.expand = torch.nn.Conv2d(c, e, 1, bias=False)
                self.bn1, self.bn2 = torch.nn.BatchNorm2d(e), torch.nn.BatchNorm2d(e)
                self.dw = torch.nn.Conv2d(e, e, 3, stride=2, padding=1, groups=e, bias=False)
                self.project = torch.nn.Conv2d(e, c, 1, bias=False)

            def forward(self, x):
                y = torch.nn.functional.relu6(self.bn1(self.expand(x)))
                return self.project(torch.nn.functional.relu6(self.bn2(self.dw(y))))

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b, self.c = ConvNeXtBlock(), ConvNeXtBlock(), InvertedResidual()

            def forward(self, x):
                return self.c(self.b(self.a(x)))

        torch.manual_seed(0)
        model = Net().cuda().eval()
        with torch.no_grad():
            for bn in (model.c.bn1, model.c.bn2):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)
        from torchfuse._backend import Backend
        for dtype, tol in ((torch.float32, 1e-3), (torch.bfloat16, 5e-2)):
            model = model.to(dtype)
            backend = Backend(keep=True)
            torch._dynamo.reset()
            ways = {"dynamo": torch.compile(model, backend=backend),
                    "aten": torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)}
            for way, compiled in ways.items():
                with self.subTest(dtype=dtype, way=way), torch.no_grad():
                    x = torch.randn(4, 64, 28, 28, device="cuda", dtype=dtype)
                    want = model(x)
                    got, kernels = self._profiled_call(compiled, x)
                    self.assertEqual(len([k for k in kernels if "tf_depthwise_conv" in k]), 3,
                                     kernels)
                    # NCHW kernels in f32, channels-last ones in bf16.
                    self.assertEqual(len([k for k in kernels if "_nchw_" in k]),
                                     3 if dtype == torch.float32 else 0, kernels)
                    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
                    if way == "dynamo":
                        launches = sum(torchfuse._C.stats(g.handle, True)["conv_launches"]
                                       for g in backend.graphs)
                    else:
                        launches = compiled.stats(last_call=True)["conv_launches"]
                    self.assertEqual(launches, 3)
        found = torchfuse.explain(model, torch.randn(4, 64, 28, 28, device="cuda",
                                                     dtype=torch.bfloat16))
        left = [l for g in found for l in g["left_to_torch"]]
        convs = [l for l in left if "conv" in l["op"]]
        # Only the inverted residual's two 1x1 convolutions (groups 1) are torch's; its
        # ReLU6s (hardtanh) fuse.
        self.assertTrue(convs, found)
        self.assertTrue(all(",1,1]" in str(l["types"]) for l in convs), convs)
        self.assertFalse([l for l in left if "hardtanh" in l["op"] or "relu6" in l["op"]],
                         found)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_convolution_blocks_fuse_their_norms_and_pools(self):
        """Vision blocks: an inference batch norm joins the activation after its convolution;
        a squeeze-excite's mean and a global max pool over H and W of the channels-last (bf16)
        activation are one column kernel over its NHWC view (no row kernel); GRN's vector norm
        over the spatial dims (channels last) is a column kernel. Eager's answer, and no such
        node left to torch."""
        class ConvBnAct(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(16, 32, 3, padding=1, bias=False)
                self.bn = torch.nn.BatchNorm2d(32)

            def forward(self, x):
                y = torch.nn.functional.silu(self.bn(self.conv(x)))
                return y * torch.sigmoid(y.mean((2, 3), keepdim=True)), y.amax((-2, -1))

        class Grn(torch.nn.Module):  # ConvNeXt-V2's global response norm, channels last
            def __init__(self):
                super().__init__()
                self.gamma = torch.nn.Parameter(torch.randn(1, 1, 1, 32) * 0.1)
                self.beta = torch.nn.Parameter(torch.randn(1, 1, 1, 32) * 0.1)

            def forward(self, x):
                g = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
                n = g / (g.mean(dim=-1, keepdim=True) + 1e-6)
                return x + self.gamma * (x * n) + self.beta

        torch.manual_seed(0)
        bn_model = ConvBnAct().cuda().eval()
        with torch.no_grad():  # running statistics other than 0 and 1
            bn_model.bn.running_mean.uniform_(-1, 1)
            bn_model.bn.running_var.uniform_(0.5, 2)
            bn_model.bn.weight.uniform_(0.5, 1.5)
            bn_model.bn.bias.uniform_(-0.5, 0.5)
        cases = (("conv bn act", bn_model, lambda: torch.randn(4, 16, 14, 14, device="cuda")),
                 ("grn", Grn().cuda(), lambda: torch.randn(4, 7, 7, 32, device="cuda")))
        for name, model, make in cases:
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(model=name, dtype=str(dtype)), torch.no_grad():
                    m = copy.deepcopy(model).to(dtype)
                    x = make().to(dtype)
                    want = m(x)
                    torch._dynamo.reset()
                    compiled = torch.compile(m, backend="torchfuse")
                    got = compiled(x)
                    if name == "conv bn act" and dtype == torch.bfloat16:  # channels-last
                        torch.cuda.synchronize()
                        with torch.profiler.profile(
                                activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                            compiled(x)
                            torch.cuda.synchronize()
                        kernels = [e.name for e in prof.events()
                                   if e.device_type == torch.autograd.DeviceType.CUDA]
                        self.assertEqual(len([k for k in kernels if "column_" in k]), 1,
                                         kernels)
                        self.assertEqual([k for k in kernels if "row_" in k], [], kernels)
                    want = want if isinstance(want, tuple) else (want,)
                    got = got if isinstance(got, tuple) else (got,)
                    tol = 1e-4 if dtype == torch.float32 else 3e-2
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g, w, atol=tol, rtol=tol)
                    found = torchfuse.explain(m, x)
                    ops = [l["op"] for g in found for l in g["left_to_torch"]
                           if l["op"] != "aten::contiguous"]  # channels-last, on purpose
                    self.assertEqual([op for op in ops if op != "aten::convolution"], [],
                                     found)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_full_like_fuses_into_its_reader(self):
        """A safe softmax (rows of -inf give zeros, as _safe_softmax and T5's math-form attention
        write it) and a constant offset: full_like/zeros_like/ones_like are constants read
        inside the kernels, not torch launches; eager's answer, zero rows included."""
        class SafeSoftmax(torch.nn.Module):
            def forward(self, s):
                p = torch.softmax(s, -1)
                dead = torch.isneginf(s).all(-1, keepdim=True)
                return torch.where(dead, torch.zeros_like(p), p) + torch.full_like(s, 0.25) * \
                    torch.ones_like(s)

        torch.manual_seed(0)
        for dtype in (torch.float32, torch.bfloat16):
            with self.subTest(dtype=str(dtype)), torch.no_grad():
                s = torch.randn(64, 200, device="cuda", dtype=dtype)
                s[3] = float("-inf")
                model = SafeSoftmax()
                want = model(s)
                torch._dynamo.reset()
                got = torch.compile(model, backend="torchfuse")(s)
                tol = 1e-5 if dtype == torch.float32 else 1e-2
                torch.testing.assert_close(got, want, atol=tol, rtol=tol)
                found = torchfuse.explain(model, s)
                ops = [l["op"] for g in found for l in g["left_to_torch"]]
                self.assertFalse([op for op in ops if op.endswith("_like")], found)

    def _dynamic_models(self):
        """(name, model, make_input(T)): models whose inputs change length T."""
        torch.manual_seed(0)

        class ScaledSoftmax(torch.nn.Module):  # a row of length T
            def forward(self, x):
                return torch.softmax(x * 0.125, dim=-1)

        class RowNorm(torch.nn.Module):  # a layer norm over a row of length T
            def forward(self, x):
                return torch.nn.functional.layer_norm(x, x.shape[-1:]) * 2.0 + 1.0

        models = [
            ("softmax", ScaledSoftmax(), lambda t: torch.randn(12, t, device="cuda")),
            ("row norm", RowNorm(), lambda t: torch.randn(12, t, device="cuda")),
            ("layer norm", LayerNorm(64).cuda(), lambda t: torch.randn(2, t, 64, device="cuda"))]
        try:
            from transformers import GPT2Config
            from transformers.models.gpt2.modeling_gpt2 import GPT2Block
            cfg = GPT2Config(n_embd=64, n_head=4, n_positions=2048, resid_pdrop=0.0,
                             embd_pdrop=0.0, attn_pdrop=0.0)
            cfg._attn_implementation = "eager"

            class Gpt2Block(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.block = GPT2Block(cfg, layer_idx=0)

                def forward(self, h):
                    out = self.block(h)
                    return out[0] if isinstance(out, tuple) else out

            models.append(("gpt2 block", Gpt2Block().cuda().eval(),
                           lambda t: torch.randn(2, t, 64, device="cuda")))
        except Exception as e:  # noqa: BLE001  (transformers is on the GPU machine)
            print(f"gpt2 block dynamic check not run: {e}")
        return models

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_dynamic_sizes_stay_fused_with_one_graph(self):
        """torch.compile(dynamic=True): Dynamo compiles one graph for every length, torchfuse
        compiles it once, for every length, and matches eager at each; a second round over the
        same lengths runs no NVRTC compile and no tuning."""
        from torch.profiler import ProfilerActivity, profile

        from torchfuse import _C
        from torchfuse._backend import Backend
        lengths = [7, 1000, 1023, 64, 256, 33]
        for name, model, make in self._dynamic_models():
            with self.subTest(model=name), torch.no_grad():
                torch._dynamo.reset()
                be = Backend(keep=True)
                fast = torch.compile(model, backend=be, dynamic=True)
                inputs = {t: make(t) for t in lengths}
                for t in lengths:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        got = fast(inputs[t])
                    for w in caught:
                        if "torchfuse" in str(w.message):
                            print(f"dynamic {name} T={t}: {w.message}")
                    torch.testing.assert_close(got, model(inputs[t]),
                                               atol=1e-4, rtol=1e-4, msg=f"{name} T={t}")
                    if t == lengths[0]:
                        graphs = be.count
                    torchfuse.wait_for_compiles()
                    fast(inputs[t])  # background tuning finishes
                print(f"dynamic {name}: {be.count} graph(s) compiled, static {len(be.graphs)}, "
                      f"symbolic {[(len(g.whole), len(g.compiled), g.per_size) for g in be.symbolic]}")
                self.assertEqual(be.count, graphs, f"{name}: Dynamo compiled again")
                self.assertEqual(len(be.symbolic), 1, f"{name}: no graph with symbolic sizes")
                graph = be.symbolic[0]
                self.assertIsNone(graph.per_size, name)
                self.assertEqual(len(graph.compiled), 0, f"{name}: compiled per size")
                compiled = list(graph.whole.values())
                self.assertEqual(len(compiled), 1)
                stats = _C.stats(compiled[0].handle, False)
                self.assertEqual(stats["specializations"], 1, f"{name}: {stats}")
                self.assertEqual(stats["eager_calls"], 0, f"{name}: {stats}")
                before = _C.process_counters()
                for t in lengths:
                    torch.testing.assert_close(fast(inputs[t]), model(inputs[t]),
                                               atol=1e-4, rtol=1e-4, msg=f"{name} T={t}")
                after = _C.process_counters()
                self.assertEqual(after["nvrtc_compiles"], before["nvrtc_compiles"], name)
                self.assertEqual(after["tuning_runs"], before["tuning_runs"], name)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    fast(inputs[1023])
                    torch.cuda.synchronize()
                kernels = [e.name for e in prof.events()
                           if e.device_type == torch.autograd.DeviceType.CUDA
                           and not e.name.startswith(("Memcpy", "Memset"))]
                own = [k for k in kernels if k.startswith("tf_")]
                print(f"dynamic {name}: {len(own)} of {len(kernels)} kernels torchfuse's, "
                      f"{stats['specializations']} plan(s), {be.count} Dynamo graph(s)")
                self.assertGreaterEqual(len(own), 1)
                # Dynamo specializes lengths 0 and 1: a graph of its own, still right.
                one = make(1)
                torch.testing.assert_close(fast(one), model(one), atol=1e-4, rtol=1e-4)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_dynamic_masks_expanded_to_the_batch_stay_fused(self):
        """A mask made from positions alone and expanded to a dynamic batch (as transformers
        builds its causal masks): the kernel that writes it takes the batch from the call's
        sizes, not from its inputs, and runs fused at every size."""
        from torchfuse import _C
        from torchfuse._backend import Backend

        class BatchMask(torch.nn.Module):
            def forward(self, x):
                b, t, _ = x.shape
                p = torch.arange(t, device=x.device)
                keep = (p[None, :] <= p[:, None])[None].expand(b, t, t)
                return torch.where(keep, 0.0, -1e9), torch.tanh(x)

        model = BatchMask()
        torch._dynamo.reset()
        be = Backend(keep=True)
        fast = torch.compile(model, backend=be, dynamic=True)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for b, t in ((2, 8), (3, 17), (5, 64), (2, 100)):
                x = torch.randn(b, t, 16, device="cuda")
                for got, want in zip(fast(x), model(x)):
                    torch.testing.assert_close(got, want, msg=f"{b}x{t}")
        unfused = [str(w.message) for w in caught if "unfused" in str(w.message)]
        self.assertEqual(unfused, [])
        self.assertEqual(len(be.symbolic), 1)
        compiled = list(be.symbolic[0].whole.values())
        self.assertEqual(len(compiled), 1, be.symbolic[0].per_size)
        stats = _C.stats(compiled[0].handle, False)
        self.assertEqual(stats["specializations"], 1, stats)
        self.assertEqual(stats["unfused_groups"], 0, stats)
        self.assertEqual(stats["eager_calls"], 0, stats)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    @untimed_attention
    def test_rewritten_inference_graphs_run_in_torch_as_they_were_rewritten(self):
        """An inference graph whose attention the backend rewrote: the graph module itself
        (run by the check mode, and where torch runs the graph) runs its rewritten graph,
        whose code is regenerated once, when it first runs, and gives torchfuse's answer."""
        from torchfuse import _backend
        from torchfuse._backend import Backend

        class Attention(torch.nn.Module):
            def forward(self, q, k, v):
                return torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1) @ v

        model = Attention()
        args = [torch.randn(2, 4, 512, 64, device="cuda") for _ in range(3)]
        seen = []
        original = _backend.inference_passes

        def passes(gm, options="", recompile=True):
            changed = original(gm, options, recompile)
            seen.append((gm, changed, gm.code))
            return changed

        torch._dynamo.reset()
        be = Backend(check=True)
        _backend.inference_passes = passes
        try:
            fast = torch.compile(model, backend=be)
            with torch.no_grad():
                for _ in range(2):
                    torch.testing.assert_close(fast(*args), model(*args), atol=1e-4,
                                               rtol=1e-4)
        finally:
            _backend.inference_passes = original
        self.assertEqual(be.mismatches, [])
        self.assertEqual(len(seen), 1)
        gm, changed, code = seen[0]
        self.assertEqual(changed, 1)
        self.assertNotIn("scaled_dot_product_attention", code)  # not regenerated by the passes
        self.assertIn("scaled_dot_product_attention", gm.code)  # the check's run regenerated it

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_backend_builds_the_first_calls_plan_when_it_compiles_the_graph(self):
        """The backend builds an inference graph's plan for its example inputs when it compiles
        it (its kernels compile while Dynamo finishes): the first call finds it and counts it,
        and the calls match eager; a graph of CPU tensors prepares nothing and runs in torch."""
        from torchfuse import _C
        from torchfuse._backend import Backend

        model = Softmax()
        torch._dynamo.reset()
        be = Backend(keep=True)
        compile_graph = be.compile
        seen = []

        def compile_and_look(gm, example_inputs, kind="forward"):
            run = compile_graph(gm, example_inputs, kind=kind)
            seen.append(_C.stats(be.graphs[-1].handle, False) if be.graphs else None)
            return run

        be.compile = compile_and_look
        fast = torch.compile(model, backend=be)
        with torch.no_grad():
            x = torch.randn(64, 1000, device="cuda")
            torch.testing.assert_close(fast(x), model(x))
            first = _C.stats(be.graphs[0].handle, True)
            x = torch.randn(64, 1000, device="cuda")
            torch.testing.assert_close(fast(x), model(x))
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["specializations"], 1, seen[0])
        self.assertEqual(seen[0]["calls"], 0, seen[0])
        self.assertEqual(first["specializations"], 1, first)
        self.assertEqual(first["fused_launches"], 1, first)
        stats = _C.stats(be.graphs[0].handle, False)
        self.assertEqual((stats["calls"], stats["specializations"], stats["eager_calls"]),
                         (2, 1, 0), stats)
        x = torch.randn(8, 100)
        prepared = be.graphs[0].prepare([x])  # CPU tensors: explained, nothing built
        self.assertEqual(_C.stats(be.graphs[0].handle, False)["specializations"], 1)
        self.assertIn("warning", prepared)

    def _training_models(self, dtype=torch.float32):
        """(name, model, make_input): an MLP block, and 2-layer GPT-2 and LLaMA models where
        transformers is installed, with dropout off."""
        torch.manual_seed(0)

        class MlpBlock(torch.nn.Module):
            def __init__(self, h=256):
                super().__init__()
                self.fc1, self.fc2 = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)
                self.ln = torch.nn.LayerNorm(h)

            def forward(self, x):
                return self.ln(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))))

        models = [("mlp", MlpBlock().cuda().to(dtype),
                   lambda: torch.randn(64, 256, device="cuda", dtype=dtype))]
        try:
            from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaModel
            cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=128, vocab_size=512,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
            cfg._attn_implementation = "eager"
            models.append(("gpt2", GPT2Model(cfg).cuda().to(dtype),
                           lambda: torch.randint(0, 512, (2, 64), device="cuda")))
            cfg = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=4, vocab_size=512,
                              max_position_embeddings=128)
            cfg._attn_implementation = "eager"
            models.append(("llama", LlamaModel(cfg).cuda().to(dtype),
                           lambda: torch.randint(0, 512, (2, 64), device="cuda")))
        except Exception as e:  # noqa: BLE001  (transformers is on the GPU machine)
            print(f"gpt2/llama gradient checks not run: {e}")
        return models

    @staticmethod
    def _grads(model, fn, x, proj):
        """Every parameter's gradient (and the input's, for a float input) of a fixed random
        projection of fn(x): mean(out ** 2) after a layer norm hardly depends on the norm's
        input, so its gradient would be rounding noise."""
        model.zero_grad(set_to_none=True)
        if x.is_floating_point():
            x = x.detach().clone().requires_grad_()
        out = fn(x)
        out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
        if "r" not in proj:
            proj["r"] = torch.randn(out.shape, device=out.device)
        (out.float() * proj["r"]).sum().backward()
        grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}
        if x.is_floating_point():
            grads["input"] = x.grad.detach().float().clone()
        return grads

    @staticmethod
    def _error(got, want):
        return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()

    def test_training_gradients_match_eager(self):
        """f32: every parameter's and the input's gradient after a compiled forward and
        backward is within 1e-5 of eager's, through both entry points, with the backward
        graph compiled by torchfuse."""
        paths = [("torchfuse.compile", lambda m: torchfuse.compile(m, cache_dir=self.cache_dir))]
        backend = None
        if HAS_DYNAMO:
            from torchfuse._backend import Backend
            backend = Backend(keep=True)
            paths.append(("torch.compile", lambda m: torch.compile(m, backend=backend)))
        models = self._training_models()
        for name, model, make_input in models:
            for label, make in paths:
                with self.subTest(model=name, path=label):
                    torch._dynamo.reset() if HAS_DYNAMO else None
                    compiled = copy.deepcopy(model)
                    x, proj = make_input(), {}
                    want = self._grads(model, model, x, proj)
                    got = self._grads(compiled, make(compiled), x, proj)
                    self.assertEqual(set(got), set(want))
                    for k in want:
                        err = self._error(got[k], want[k])
                        self.assertLessEqual(err, 1e-5, f"{name} {label} {k}: {err}")
        if backend is not None:
            kinds = {g.name.split(":")[1].split()[0] for g in backend.graphs}
            self.assertIn("backward", kinds, "no backward graph reached torchfuse")
            if any(name in ("gpt2", "llama") for name, _, _ in models):
                # The embeddings' backward (index_put with accumulate) is the scatter-add kernel.
                scatters = sum(torchfuse._C.stats(g.handle, False)["scatter_launches"]
                               for g in backend.graphs)
                self.assertGreater(scatters, 0, "no embedding backward ran as a scatter-add")

    def test_lazy_tuning_trains_as_eager_does(self):
        """Lazy tuning from empty caches: a training step's first call runs the groups' torch
        ops while their kernels compile, the step after the compiles swaps the kernels in
        (forward and backward graphs) and tunes them, and later steps run the tuned kernels;
        every step's gradients are within 1e-5 of eager's (f32)."""
        for name, model, make_input in self._training_models()[:1]:  # the MLP block
            if HAS_DYNAMO:
                torch._dynamo.reset()
            torchfuse._C.reset_process_caches()
            compiled = copy.deepcopy(model)
            fast = torchfuse.compile(compiled, cache_dir=tempfile.mkdtemp(dir=self.cache_dir),
                                     tune_mode="lazy")
            x, proj = make_input(), {}
            want = self._grads(model, model, x, proj)
            for step in range(4):
                got = self._grads(compiled, fast, x, proj)
                self.assertEqual(set(got), set(want))
                for k in want:
                    err = self._error(got[k], want[k])
                    self.assertLessEqual(err, 1e-5, f"{name} step {step} {k}: {err}")
                if step == 0:
                    first = fast.stats(last_call=True)
                    self.assertGreater(first["lazy_groups"] + first["fused_launches"], 0, first)
                    torchfuse.wait_for_compiles()
            settled = fast.stats(last_call=True)
            self.assertEqual(settled["lazy_groups"], 0, settled)
            self.assertGreater(settled["fused_launches"] + settled["torch_groups"], 0, settled)

    @staticmethod
    def _vision_blocks():
        """(name, model, make_input): small f32 vision blocks in training mode: convolutions
        with batch norms (their running statistics are updated in place) and a residual; a
        ConvNeXt block (depthwise convolution, a channels-last layer norm, GELU, a layer
        scale); a ViT block (patch embedding, position embedding, layer norms, fused
        attention, GELU MLP)."""
        torch.manual_seed(0)
        nn, F = torch.nn, torch.nn.functional

        class ResBlock(nn.Module):
            def __init__(self, c=16):
                super().__init__()
                self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
                self.bn0 = nn.BatchNorm2d(c)
                self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
                self.bn1 = nn.BatchNorm2d(c)
                self.head = nn.Linear(c, 10)

            def forward(self, x):
                x = F.relu(self.bn0(self.stem(x)))
                x = F.relu(x + self.bn1(self.conv(x)))
                return self.head(x.mean((2, 3)))

        class ConvNeXtBlock(nn.Module):
            def __init__(self, c=16):
                super().__init__()
                self.stem = nn.Conv2d(3, c, 4, stride=4)
                self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
                self.norm = nn.LayerNorm(c, eps=1e-6)
                self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
                self.gamma = nn.Parameter(torch.rand(c) + 0.5)

            def forward(self, x):
                x = self.stem(x)
                y = self.norm(self.dw(x).permute(0, 2, 3, 1))
                y = self.gamma * self.fc2(F.gelu(self.fc1(y)))
                return x + y.permute(0, 3, 1, 2)

        class VitBlock(nn.Module):
            def __init__(self, d=32, heads=4, patches=16):
                super().__init__()
                self.heads = heads
                self.embed = nn.Conv2d(3, d, 4, stride=4)
                self.pos = nn.Parameter(torch.randn(1, patches, d) * 0.1)
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
                self.head = nn.Linear(d, 10)

            def forward(self, x):
                x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
                b, t, d = x.shape
                q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, -1).permute(
                    2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v)
                x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
                x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
                return self.head(x.mean(1))

        return [("resnet", ResBlock().cuda(), lambda: torch.randn(8, 3, 16, 16, device="cuda")),
                ("convnext", ConvNeXtBlock().cuda(),
                 lambda: torch.randn(4, 3, 32, 32, device="cuda")),
                ("vit", VitBlock().cuda(), lambda: torch.randn(4, 3, 16, 16, device="cuda"))]

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_vision_blocks_train_as_eager_does(self):
        """f32 training of convolution, batch norm, ConvNeXt and ViT blocks: the first step's
        gradients (every parameter's and the input's) within 1e-5 of eager's, then three
        optimizer steps whose losses, parameters and batch-norm running statistics (updated in
        place by the compiled forward) stay within 1e-4 of eager's, through both entry points;
        backward graphs reach torchfuse, and no graph (the ViT's backward with fused
        attention's backward in it, in f32 and in bf16) is left whole to torch."""
        from torchfuse._backend import Backend
        backend = Backend(keep=True)
        paths = [("torch.compile", lambda m: torch.compile(m, backend=backend)),
                 ("torchfuse.compile", lambda m: torchfuse.compile(m, cache_dir=self.cache_dir))]
        tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False  # convolutions in f32 on both sides
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                for name, model, make_input in self._vision_blocks():
                    for label, make in paths:
                        with self.subTest(model=name, path=label):
                            torch._dynamo.reset()
                            eager, compiled = copy.deepcopy(model), copy.deepcopy(model)
                            fast = make(compiled)
                            x, proj = make_input(), {}
                            want = self._grads(eager, eager, x, proj)
                            got = self._grads(compiled, fast, x, proj)
                            self.assertEqual(set(got), set(want))
                            for k in want:
                                err = self._error(got[k], want[k])
                                self.assertLessEqual(err, 1e-5,
                                                     f"{name} {label} gradient {k}: {err}")
                            batch = make_input()
                            for m, fn in ((eager, eager), (compiled, fast)):
                                opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
                                m.losses = []
                                for _ in range(3):
                                    opt.zero_grad(set_to_none=True)
                                    loss = (fn(batch).float() * proj["r"]).sum()
                                    loss.backward()
                                    opt.step()
                                    m.losses.append(loss.item())
                            for a, b in zip(eager.losses, compiled.losses):
                                self.assertLessEqual(
                                    abs(a - b), 1e-4 * max(abs(a), 1.0),
                                    f"{name} {label}: {eager.losses} vs {compiled.losses}")
                            want_state, got_state = eager.state_dict(), compiled.state_dict()
                            for k, w in want_state.items():
                                g = got_state[k]
                                if w.is_floating_point():
                                    err = self._error(g.float(), w.float())
                                    self.assertLessEqual(err, 1e-4, f"{name} {label} {k}: {err}")
                                else:  # num_batches_tracked
                                    self.assertEqual(g.item(), w.item(), f"{name} {label} {k}")
                # bf16: the fused attention's backward (flash, cuDNN or memory-efficient, whose
                # bias argument is None) runs inside a compiled backward graph too.
                vit, make_input = self._vision_blocks()[2][1:]
                torch._dynamo.reset()
                vit = vit.to(torch.bfloat16)
                out = torch.compile(vit, backend=backend)(make_input().to(torch.bfloat16))
                out.float().square().sum().backward()
                for n, p in vit.named_parameters():
                    self.assertTrue(bool(p.grad.isfinite().all()), n)
            finally:
                torch.backends.cudnn.allow_tf32 = tf32
        kinds = {g.name.split(":")[1].split()[0] for g in backend.graphs}
        self.assertIn("backward", kinds, "no backward graph reached torchfuse")
        # Every graph reached torchfuse: none was left whole to torch (a node it cannot take
        # runs in torch inside the compiled graph).
        self.assertEqual(backend.count, len(backend.graphs) + len(backend.symbolic))
        whole = [str(w.message) for w in seen
                 if re.search(r"graph \d+ runs in torch", str(w.message))]
        self.assertEqual(whole, [])

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_training_graphs_decompose_softmax_and_loss_gradients_scatter_in_kernels(self):
        """A training step's softmax and log_softmax reach torchfuse decomposed (amax, exp,
        sum: the partitioner may keep statistics instead of probabilities) and the loss's
        gradient scatter runs in torchfuse's kernels, not in torch; the gradients match
        eager's. Without grad, the graph keeps _softmax (the attention rewrite reads it)."""
        from torchfuse._backend import Backend

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(64, 64)
                self.head = torch.nn.Linear(64, 300)

            def forward(self, x, target):
                s = self.proj(x) @ x.transpose(-1, -2) * 0.125
                h = torch.softmax(s.float(), dim=-1).to(x.dtype) @ x
                return torch.nn.functional.cross_entropy(self.head(h).flatten(0, 1).float(),
                                                         target.flatten(), ignore_index=-100)

        torch.manual_seed(0)
        eager = Net().cuda()
        compiled = copy.deepcopy(eager)
        x = torch.randn(4, 32, 64, device="cuda")
        target = torch.randint(0, 300, (4, 32), device="cuda")
        target[0, :3] = -100
        torch._dynamo.reset()
        backend = Backend(keep=True, check=True)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            compiled_loss = torch.compile(compiled, backend=backend)(x, target)
            compiled_loss.backward()
        loss = eager(x, target)
        loss.backward()
        self.assertLess(self._error(compiled_loss.detach(), loss.detach()), 1e-5)
        for (n, p), q in zip(eager.named_parameters(), compiled.parameters()):
            self.assertLess(self._error(q.grad, p.grad), 1e-5, n)
        self.assertEqual(backend.mismatches, [])
        codes = "\n".join(backend.codes.values())
        self.assertIn("backward", " ".join(backend.codes))
        self.assertNotIn("aten._softmax.default", codes)
        self.assertNotIn("aten._log_softmax.default", codes)
        self.assertIn("aten.amax.default", codes)
        self.assertIn("aten.scatter", codes)  # nll_loss_backward's decomposition
        torch_run = [str(w.message) for w in seen if "scatter" in str(w.message)]
        self.assertEqual(torch_run, [], "the gradient's scatter ran in torch")

        torch._dynamo.reset()
        inference = Backend(keep=True, check=True)
        with torch.no_grad():
            torch.compile(compiled, backend=inference)(x, target)
        self.assertIn("aten._softmax.default", "\n".join(inference.codes.values()))

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_bf16_gradients_are_as_close_to_f32_as_eagers(self):
        """bf16: each gradient's error against an f32 run is at most twice eager's own."""
        for (name, m32, make_input), (_, m16, _) in zip(self._training_models(torch.float32),
                                                       self._training_models(torch.bfloat16)):
            with self.subTest(model=name):
                torch._dynamo.reset()
                m16.load_state_dict({k: v.to(torch.bfloat16) for k, v in m32.state_dict().items()})
                compiled = copy.deepcopy(m16)
                x, proj = make_input(), {}
                exact = self._grads(m32, m32, x.float() if x.is_floating_point() else x, proj)
                x16 = x.to(torch.bfloat16) if x.is_floating_point() else x
                eager = self._grads(m16, m16, x16, proj)
                got = self._grads(compiled, torch.compile(compiled, backend="torchfuse"), x16, proj)
                for k in exact:
                    e_eager = self._error(eager[k], exact[k])
                    e_got = self._error(got[k], exact[k])
                    self.assertLessEqual(e_got, 2 * e_eager + 1e-6,
                                         f"{name} {k}: {e_got} vs eager's {e_eager}")

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_fifty_optimizer_steps_track_eagers_loss_curve(self):
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"transformers: {e}")
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=128, vocab_size=512,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        cfg._attn_implementation = "eager"
        eager = GPT2LMHeadModel(cfg).cuda()
        compiled = copy.deepcopy(eager)
        fast = torch.compile(compiled, backend="torchfuse")
        batches = [torch.randint(0, 512, (4, 64), device="cuda") for _ in range(5)]
        curves = []
        for model, fn in ((eager, eager), (compiled, fast)):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            losses = []
            for step in range(50):
                x = batches[step % len(batches)]
                opt.zero_grad(set_to_none=True)
                loss = fn(x, labels=x).loss
                loss.backward()
                opt.step()
                losses.append(loss.item())
            curves.append(losses)
        for step, (a, b) in enumerate(zip(*curves)):
            self.assertLessEqual(abs(a - b), 1e-3 * abs(a), f"step {step}: eager {a}, torchfuse {b}")
        self.assertLess(curves[1][-1], 0.8 * curves[1][0])  # it learns

    def test_transposed_operands_are_read_through_shared_tiles(self):
        """A pointwise kernel that reads an operand transposed (contiguous along another dim
        than the output's innermost) walks 32x32 tiles and stages that operand in shared
        memory; its results equal eager's on sizes that leave partial tiles, through cat
        guards, for a transposing copy and an NCHW -> NHWC permute, with tile rows moved as
        vectors where sizes and alignment allow and element by element where not."""
        cases = [
            ("x.t() + y", lambda x, y: torch.tanh(y) + x.t() * 0.5, [(45, 70), (70, 45)]),
            ("y * x.t()", lambda x, y: y * x.t(), [(1000, 33), (33, 1000)]),
            ("inner swap", lambda x, y: (x.permute(0, 2, 1) - y).relu(), [(3, 50, 33), (3, 33, 50)]),
            ("cat of slices", lambda x, y: torch.cat([x[:, 20:], x[:, :20]], 1).t() + y,
             [(64, 100), (100, 64)]),
            ("copy", lambda x: x.t().contiguous(), [(129, 257)]),
            ("rows as vectors", lambda x, y, b: y * x.t() + b, [(96, 256), (256, 96), (256, 1)]),
            ("vectors, 3-d", lambda x, y: y - x.transpose(1, 2), [(4, 64, 48), (4, 48, 64)]),
            ("sliced one in", lambda x, y: x[:, 1:].t() + y, [(64, 97), (96, 64)]),
            ("copy as vectors", lambda x: x.t().contiguous(), [(512, 384)]),
            ("nchw -> nhwc", lambda x, y: y + x.permute(0, 2, 3, 1) * 2.0,
             [(2, 96, 17, 19), (2, 17, 19, 96)]),
        ]
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            for name, fn, shapes in cases:
                with self.subTest(case=name, dtype=str(dtype)):
                    model = Fn(fn)
                    fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=False)
                    with torch.no_grad():
                        for _ in range(2):
                            args = [torch.randn(*s, device="cuda", dtype=dtype) for s in shapes]
                            got, want = fast(*args), model(*args)
                            self.assertEqual(got.shape, want.shape)
                            torch.testing.assert_close(got, want, atol=1e-6 if dtype != torch.bfloat16 else 1e-2,
                                                       rtol=1e-6 if dtype != torch.bfloat16 else 1e-2)
                    sources = fast.kernel_sources()
                    self.assertTrue(any("__shared__" in src and "tile" in src
                                        for src in sources.values()), list(sources))

    def test_pointwise_results_have_eagers_strides_through_copies(self):
        """A pointwise result of `x.contiguous()` (or a clone to contiguous_format) is laid out
        as that copy, contiguous, as eager's is, whatever x's strides; of a plain view or a
        clone that preserves the layout, as x. Values and strides against eager, in both the
        FX and the torch.compile path, and the result views as eager's does."""
        cases = [
            ("contiguous * 2", lambda x: x.t().contiguous() * 2.0, (256, 384)),
            ("nhwc contiguous + 1", lambda x: x.permute(0, 2, 3, 1).contiguous() + 1.0,
             (2, 64, 12, 20)),
            ("clone to contiguous", lambda x: torch.clone(x.t(), memory_format=torch.contiguous_format)
             .exp(), (128, 96)),
            ("clone preserving", lambda x: torch.clone(x.t()).exp(), (128, 96)),
            ("view * 2", lambda x: x.t() * 2.0, (256, 384)),
        ]
        for dynamo in (False, True) if HAS_DYNAMO else (False,):
            for name, fn, shape in cases:
                with self.subTest(case=name, dynamo=dynamo):
                    if dynamo:
                        torch._dynamo.reset()
                    model = Fn(fn)
                    fast = torchfuse.compile(model, cache_dir=self.cache_dir, dynamo=dynamo)
                    with torch.no_grad():
                        for _ in range(2):
                            x = torch.randn(*shape, device="cuda")
                            got, want = fast(x), model(x)
                            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
                            self.assertEqual(got.stride(), want.stride())
                            if want.is_contiguous():
                                self.assertEqual(got.view(-1).shape, want.view(-1).shape)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_inference_layer_norms_reach_the_importer_whole(self):
        """An inference graph's layer norm over its last dim is traced as native_layer_norm
        itself (the importer writes its row reductions); one over two dims, or with a bias and
        no weight, is decomposed by the trace, and a training graph's is decomposed (its mean
        and rstd are saved for the backward). Each matches eager on fresh inputs, and no
        inference layer norm is left to torch."""
        from torchfuse._backend import Backend
        F = torch.nn.functional
        whole = torch.ops.aten.native_layer_norm.default

        class Seen(Backend):
            def compile(self, gm, example_inputs, kind="forward"):
                self.seen.append((kind, {n.target for n in gm.graph.nodes
                                         if n.op == "call_function"}))
                return super().compile(gm, example_inputs, kind)

        class Norm(torch.nn.Module):
            def __init__(self, shape, weight, bias, dtype):
                super().__init__()
                make = lambda: torch.nn.Parameter(  # noqa: E731
                    torch.randn(shape, device="cuda", dtype=dtype))
                self.shape = shape
                self.w = make() if weight else None
                self.b = make() if bias else None

            def forward(self, x):
                y = F.layer_norm(x * 1.5 + 0.25, self.shape, self.w, self.b, 1e-5)
                return F.gelu(y) * 2.0

        cases = [
            # name, normalized shape, weight, bias, dtype, no_grad, traced whole
            ("f32, weight and bias", (384,), True, True, torch.float32, True, True),
            ("bf16, weight and bias", (384,), True, True, torch.bfloat16, True, True),
            ("f32, no affine", (384,), False, False, torch.float32, True, True),
            ("f32, weight only", (384,), True, False, torch.float32, True, True),
            ("f32, bias only", (384,), False, True, torch.float32, True, False),
            ("f32, two dims", (6, 384), True, True, torch.float32, True, False),
            ("f32, training", (384,), True, True, torch.float32, False, False),
        ]
        for name, shape, weight, bias, dtype, no_grad, traced_whole in cases:
            with self.subTest(case=name):
                torch._dynamo.reset()
                model = Norm(shape, weight, bias, dtype)
                be = Seen(f"cache_dir={self.cache_dir}", keep=True)
                be.seen = []
                fast = torch.compile(model, backend=be, dynamic=False)
                mode = torch.no_grad() if no_grad else contextlib.nullcontext()
                for _ in range(3):
                    x = torch.randn(8, 6, 384, device="cuda", dtype=dtype)
                    with mode:
                        got, want = fast(x), model(x)
                    torch.testing.assert_close(got, want, **tolerance(dtype))
                forwards = [ops for kind, ops in be.seen if kind != "backward"]
                self.assertEqual(len(forwards), 1, be.seen)
                self.assertEqual(whole in forwards[0], traced_whole)
                if traced_whole:
                    found = [g.explain(a) for g, a in zip(be.graphs, be.example_inputs)]
                    self.assertEqual([l for e in found for l in e["left_to_torch"]], [])
                    self.assertGreater(sum(e["kernels"] for e in found), 0)

    @unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch >= 2.0")
    def test_inference_graphs_are_called_without_aotautograds_wrappers(self):
        """A graph that records no autograd, mutates no input and returns no alias of one is
        traced for torchfuse and called by Dynamo directly: by make_fx alone where it has no
        side effect (`traced`), else by AOTAutograd's export (which functionalizes an
        intermediate's mutation); graphs that mutate an input, return a view of one or record
        autograd go through aot_autograd. Each gives eager's outputs (and eager's input
        mutation) on fresh inputs."""
        from torchfuse._backend import Backend

        def mutates(x):
            x.mul_(2.0)
            return torch.tanh(x) + 1.0

        def mutates_intermediate(x):
            y = torch.tanh(x) * 3.0
            y.add_(x)
            return torch.sigmoid(y)

        def views_one_base(x):
            y = torch.exp(x) * 2.0
            return y, y.view(-1)

        def autocast_regions(x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = torch.matmul(x, x.t() * 0.05)  # in bf16
            with torch.autocast("cuda", enabled=False):
                z = torch.tanh(y.float()) * 2.0
            return z + x[:, :64]

        cases = [
            # name, fn, no_grad, params, exported, traced
            ("plain", lambda x: torch.tanh(x) * x + 1.0, True, False, 1, 1),
            ("grad on, nothing requires grad", lambda x: torch.tanh(x) * x + 1.0, False, False,
             1, 1),
            ("layer norm and a view", lambda x: torch.nn.functional.layer_norm(
                x.view(64, 8, 64), (64,)).transpose(0, 1) * 2.0, True, False, 1, 1),
            ("autocast regions", autocast_regions, True, False, 1, 1),
            ("mutates its input", mutates, True, False, 0, 0),
            ("mutates an intermediate", mutates_intermediate, True, False, None, 0),
            ("two outputs of one base", views_one_base, True, False, None, 0),
            # (Dynamo may return the view itself, leaving the graph nothing to alias.)
            ("returns a view of its input", lambda x: (x.view(-1), torch.exp(x) * 2.0), True,
             False, None, 0),
            ("a parameter requires grad", None, False, True, 0, 0),
        ]
        for name, fn, no_grad, params, exported, traced in cases:
            with self.subTest(case=name):
                torch._dynamo.reset()
                model = BiasGelu(512).cuda() if params else Fn(fn)
                be = Backend(f"cache_dir={self.cache_dir}")
                fast = torch.compile(copy.deepcopy(model), backend=be, dynamic=False)
                mode = torch.no_grad() if no_grad else contextlib.nullcontext()
                for _ in range(3):
                    x = torch.randn(64, 512, device="cuda")
                    x_eager = x.clone()
                    with mode:
                        got, want = fast(x), model(x_eager)
                    got = got if isinstance(got, tuple) else (got,)
                    want = want if isinstance(want, tuple) else (want,)
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
                        self.assertEqual(g.requires_grad, w.requires_grad)
                    torch.testing.assert_close(x, x_eager)
                    if name.startswith("returns a view"):
                        self.assertEqual(got[0].data_ptr(), x.data_ptr())
                if exported is not None:
                    self.assertEqual(be.exported, exported)
                self.assertEqual(be.traced, traced)
                self.assertGreater(be.count, 0)
                # Each graph that reached the trace and was not traced says why.
                if traced:
                    self.assertEqual(be.untraced, [])
                elif not params:
                    self.assertTrue(be.untraced and all(be.untraced), be.untraced)
                self.assertFalse(torch.is_autocast_enabled("cuda"))
                if params:
                    got[0].float().square().sum().backward()
                    want[0].float().square().sum().backward()
                    for p, q in zip(fast.parameters(), model.parameters()):
                        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
        # A trace that fails inside an autocast region leaves autocast's state as it was.
        from torchfuse import _backend
        dtype = torch.get_autocast_dtype("cuda")
        with self.assertRaises(ValueError):
            with _backend._autocast_restored_on_error():
                torch.autocast("cuda", dtype=torch.bfloat16 if dtype != torch.bfloat16 else
                               torch.float16).__enter__()
                self.assertTrue(torch.is_autocast_enabled("cuda"))
                raise ValueError("in the region")
        self.assertFalse(torch.is_autocast_enabled("cuda"))
        self.assertEqual(torch.get_autocast_dtype("cuda"), dtype)

    def test_precompile_on_the_gpu_tunes(self):
        out = torchfuse.precompile(RmsNorm(1024).cuda(), "f32[256,1024]",
                                   cache_dir=self.cache_dir)
        self.assertIn("run and tuned on this GPU", out)
        tuning = [e for e in torchfuse.cache.ls(self.cache_dir) if e["type"] == "tuning"]
        self.assertEqual(len(tuning), 1)
        self.assertTrue(tuning[0]["gpu"])
        # The tuning run's trials and phases: the chosen variant among the timed trials, at
        # the record's time.
        trials = tuning[0]["trials"]
        self.assertGreater(len(trials), 1)
        timed = {t["variant"]: t["ms"] for t in trials if "ms" in t}
        self.assertIn(tuning[0]["variant"], timed)
        self.assertAlmostEqual(timed[tuning[0]["variant"]], tuning[0]["ms"], places=3)
        self.assertIn("timing=", tuning[0]["phases"])


if __name__ == "__main__":
    unittest.main()
