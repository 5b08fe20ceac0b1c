"""torch.compile(model, backend="torchfuse").

Dynamo hands over a torch-level FX graph. AOTAutograd turns it into functionalized ATen-level
graphs (a forward, and a backward when anything requires grad), with composite ops decomposed
to the core ATen ops torchfuse fuses, and torchfuse compiles each whole. A node it cannot
express runs in torch inside the compiled graph while the rest still fuses; each graph that
leaves such nodes warns once, naming them. Gradients are AOTAutograd's: the compiled forward
is a plain function of tensors inside its autograd.Function, and the backward graph (backward
ops decomposed, cheap pointwise values recomputed rather than saved) is compiled the same way:
its pointwise ops, row reductions and column reductions (bias and norm-weight gradients) fuse.
TORCHFUSE_COMPILE_BACKWARD=0 (or Backend(compile_backward=False)) leaves the backward graph to
torch. Dropout in training is native_dropout run by torch; its neighbours fuse. A graph with
symbolic sizes (dynamic shapes) is compiled for each size it is called with (_symbolic).
An inference graph that mutates no input and returns no alias of one is traced by
AOTAutograd's export instead, or by make_fx alone where it has no side effect at all, and
Dynamo calls it without AOTAutograd's runtime wrappers (Backend._inference_export).
"""
import contextlib
import functools
import operator
import os

import torch

from . import _C, _runtime


def _decompositions(backward, training=False):
    """Core ATen decompositions. Backward ops (gelu_backward, native_layer_norm_backward, ...)
    are decomposed only where torchfuse compiles the backward graph (`backward`), which fuses
    their pointwise ops, row and column reductions; where torch runs that graph, its fused
    backward kernels beat their decompositions run op by op. Each call gets its own copy of a
    table built once per process: building it lists every CompositeImplicitAutograd op of
    every namespace (~0.2 s on torch 2.x, more than the rest of a small graph's compile).

    A `training` graph (traced with its backward, which torchfuse compiles) has its softmax
    and log_softmax decomposed too (max, exp, sum), so that the partitioner may keep the
    softmax's input and two per-row statistics for the backward, which recomputes the
    probabilities in its row kernel, instead of the f32 probabilities themselves, written by
    the forward and read back by the backward (an attention's [batch, heads, query, key], a
    loss's [tokens, vocabulary]). Whole, the op's output is all it can keep. Its heuristics
    decide per softmax: in a two-layer LLaMA step on torch 2.11, the loss and the second
    layer's attention kept statistics, the first layer's its f32 probabilities. Inference
    graphs keep them whole: the attention rewrite matches _softmax. They keep their layer
    norms whole too where the importer takes them (_layer_norm_inference)."""
    table = dict(_decomposition_table(backward))
    if training and backward:
        table.update(_row_op_decompositions())
    if not training:
        table[torch.ops.aten.native_layer_norm.default] = _layer_norm_inference
    return table


def _layer_norm_inference(x, normalized_shape, weight, bias, eps):
    """An inference graph's native_layer_norm: left whole (NotImplemented: make_fx records the
    op itself) where the importer takes it, over a last dim of static size of a floating
    tensor, with no bias without a weight; its decomposition otherwise. The importer writes the
    same row reductions as the decomposition (DecomposeRowOps, in f32 for 16-bit inputs), and
    the trace skips the decomposition's reference ops: each layer norm took ~10 ms of
    fake-tensor tracing under cProfile, the 25 of a ViT-B/16 graph about a quarter of its trace
    on an H200 host. Nothing reads the mean and rstd in an inference graph; where something
    did, the importer would leave the op to torch, which computes them."""
    if len(normalized_shape) == 1 and isinstance(normalized_shape[0], int) and \
            x.is_floating_point() and (bias is None or weight is not None):
        return NotImplemented
    from torch._decomp import decomposition_table
    return decomposition_table[torch.ops.aten.native_layer_norm.default](
        x, normalized_shape, weight, bias, eps)


@functools.lru_cache(maxsize=None)
def _row_op_decompositions():
    from torch._decomp import get_decompositions
    aten = torch.ops.aten
    return get_decompositions([aten._softmax, aten._log_softmax])


def _core_table():
    """The core ATen decompositions without the entries for CompositeImplicitAutograd ops,
    where this torch keeps that table apart (2.6 on): AOTAutograd's tracing decomposes those
    ops by their own kernels anyway, and listing them, which core_aten_decompositions() does
    over every op of every namespace, took ~0.2 s of each process's first compile."""
    try:
        from torch._decomp import _core_aten_decompositions_post_autograd
        return _core_aten_decompositions_post_autograd()
    except ImportError:
        from torch._decomp import core_aten_decompositions
        return core_aten_decompositions()


@functools.lru_cache(maxsize=None)
def _decomposition_table(backward):
    from torch._decomp import get_decompositions
    table = _core_table()
    # A training graph's layer norm is native_layer_norm (its mean and rstd are saved for the
    # backward), which the core table keeps whole: decomposed, it fuses into one row kernel
    # that also writes the two per-row statistics.
    table.update(get_decompositions([torch.ops.aten.native_layer_norm]))
    # Ops the core table keeps whole whose decompositions are pointwise ops and reductions
    # torchfuse fuses: a vector norm (GRN's norm over the spatial dims), and an inference
    # batch norm (a scale and shift per channel, which joins the activation after the
    # convolution).
    aten = torch.ops.aten
    if hasattr(aten, "linalg_vector_norm"):
        table.update(get_decompositions([aten.linalg_vector_norm]))
    if hasattr(aten, "_native_batch_norm_legit_no_training"):
        table[aten._native_batch_norm_legit_no_training.default] = _batch_norm_inference
    # roll stays one op, which the importer reads in place (slices and a cat per rolled dim);
    # its decomposition is an index_select per rolled dim, each a pass over the tensor.
    if hasattr(aten, "roll"):
        table.pop(aten.roll.default, None)
    if backward:
        return table
    return {op: fn for op, fn in table.items() if "backward" not in str(op)}


def _batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    """aten._native_batch_norm_legit_no_training as pointwise ops: (x - mean) * rsqrt(var +
    eps) * weight + bias per channel (dim 1), in f32 for f16/bf16 inputs as ATen computes it;
    the other two results are what CUDA's kernel returns (the mean and 1/std)."""
    del momentum  # no statistics are updated
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    shape = [1, -1] + [1] * (x.dim() - 2)
    mean = running_mean.to(compute)
    invstd = torch.rsqrt(running_var.to(compute) + eps)
    out = (x.to(compute) - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        out = out * weight.to(compute).reshape(shape)
    if bias is not None:
        out = out + bias.to(compute).reshape(shape)
    return out.to(x.dtype), mean, invstd


def inference_passes(gm, options="", recompile=True):
    """The rewrites of an ATen-level inference graph (nothing reads its values in a backward),
    in place: eager attention becomes ATen's fused attention (_attention), a convolution's bias
    joins the pointwise ops after it, and convolutions run channels-last (_conv;
    TORCHFUSE_CHANNELS_LAST=0 leaves their layouts). Returns how many rewrites changed the
    graph. With `recompile` false, only `gm.graph` changes (its Python code is not
    regenerated: for a caller that reads only the graph, or regenerates it where gm runs; a
    GPT-2's code took ~0.05-0.1 s to generate each time)."""
    from . import _attention, _conv
    changed = _attention.fuse_attention(gm, options=options, recompile=False)
    changed += _conv.split_conv_bias(gm, recompile=False)
    if os.environ.get("TORCHFUSE_CHANNELS_LAST", "1") != "0":
        changed += _conv.channels_last(gm, recompile=False)
    if changed and recompile:
        gm.recompile()
    return changed


def drop_metadata_asserts(gm, recompile=True):
    """Removes the export's checks of each cast's input against the metadata it was traced
    with (aten._assert_tensor_metadata), where the caller fixes those sizes and dtypes;
    returns how many (`recompile`: as inference_passes)."""
    check = getattr(torch.ops.aten, "_assert_tensor_metadata", None)
    if check is None:
        return 0
    dropped = 0
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is check.default and not n.users:
            gm.graph.erase_node(n)
            dropped += 1
    if dropped and recompile:
        gm.recompile()
    return dropped


# In-place Python operators (`x += y` on a tensor) a Dynamo graph may call.
_INPLACE_OPERATORS = {getattr(operator, f"i{name}") for name in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
    "lshift", "rshift", "concat")} | {operator.setitem, operator.delitem}
# The operator module's other functions, which compute without writing their arguments.
_OPERATORS = {f for f in vars(operator).values() if callable(f)} - _INPLACE_OPERATORS


# Dynamo's autocast regions (`with torch.autocast(...)`): make_fx runs them as the export
# does, entering and leaving the region around the ops it records, so each op is recorded with
# the casts that autocast adds. A graph holds them in pairs.
_AUTOCAST_SWITCHES = {"_enter_autocast", "_exit_autocast"}


def _side_effect(gm):
    """The first node of Dynamo graph `gm` that may mutate a tensor or change a global state as
    it runs, described, or None: an in-place method or function (its name ends in one
    underscore), an in-place operator or item assignment, a mutable ATen op, an `inplace=True`
    argument, a higher-order op, a grad-mode switch, or a module call (whose forward the graph
    does not show). Autocast regions (_AUTOCAST_SWITCHES) are not side effects."""
    for n in gm.graph.nodes:
        if n.kwargs.get("inplace") is True:
            return f"{n.name} ({n.target}) runs in place"
        if n.op == "call_module":
            return f"{n.name} calls module {n.target}"
        if n.op == "call_method":
            name = n.target
        elif n.op == "call_function":
            t = n.target
            if isinstance(t, torch._ops.OpOverload):
                if t._schema.is_mutable:
                    return f"{n.name} ({t}) mutates its arguments"
                continue
            if isinstance(t, getattr(torch._ops, "HigherOrderOperator", ())):
                return f"{n.name} calls higher-order op {t}"
            if t in _INPLACE_OPERATORS:
                return f"{n.name} ({t.__name__}) assigns in place"
            if t in _OPERATORS:  # `&`, `|`, `not`: and_, or_, not_ are not in place
                continue
            name = getattr(t, "__name__", "") or ""
            if name in _AUTOCAST_SWITCHES:
                continue
            if "autocast" in name or "grad_enabled" in name:
                return f"{n.name} ({name}) switches a global mode"
        else:
            continue
        if name.endswith("_") and not name.endswith("__"):
            return f"{n.name} ({name}) runs in place"
    return None


@contextlib.contextmanager
def _autocast_restored_on_error():
    """A context that puts autocast's global state (per device type: enabled, dtype; its cache
    and nesting) back as it found it when an exception leaves it: a trace that fails inside
    an autocast region of the graph does not leave the region entered."""
    devices = ("cuda", "cpu")
    try:
        state = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in devices]
        cache = torch.is_autocast_cache_enabled()
        nesting = torch.autocast_increment_nesting() - 1
        torch.autocast_decrement_nesting()
    except (AttributeError, TypeError, RuntimeError):  # a torch without per-device state
        yield
        return
    try:
        yield
    except BaseException:
        for d, enabled, dtype in state:
            torch.set_autocast_enabled(d, enabled)
            torch.set_autocast_dtype(d, dtype)
        torch.set_autocast_cache_enabled(cache)
        level = torch.autocast_increment_nesting() - 1
        torch.autocast_decrement_nesting()
        while level > nesting:
            level = torch.autocast_decrement_nesting()
        if level == 0:
            torch.clear_autocast_cache()
        raise


# Torch-level functions and methods whose result may be their first argument or a view of it
# (`to`, `float`, `contiguous` and the like return the tensor itself where nothing changes).
_MAY_ALIAS = {
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "expand", "expand_as",
    "unsqueeze", "squeeze", "flatten", "unflatten", "t", "narrow", "select", "getitem", "chunk",
    "split", "split_with_sizes", "tensor_split", "unbind", "detach", "alias", "as_strided",
    "contiguous", "movedim", "moveaxis", "swapaxes", "swapdims", "diagonal", "unfold",
    "view_as_real", "view_as_complex", "real", "imag", "to", "type", "type_as", "float",
    "half", "bfloat16", "double", "int", "long", "bool", "cuda", "cpu"}


def _may_alias_by_name(n):
    """Whether torch-level node `n` calls a function or method of _MAY_ALIAS on a tensor."""
    if n.op not in ("call_method", "call_function") or not n.args or \
            not isinstance(n.args[0], torch.fx.Node):
        return False
    name = n.target if n.op == "call_method" else getattr(n.target, "__name__", None)
    return name in _MAY_ALIAS


def _aliased_output(gm, is_view):
    """The first output of graph `gm` that is an input, a view of one, or shares its base with
    an earlier output, described (None where there is none), where `is_view(node)` says that a
    node's result may be its first argument or a view of it."""
    bases = {}
    for n in gm.graph.nodes:
        if n.op != "output":
            continue
        outputs = []
        torch.fx.node.map_arg(n.args[0], outputs.append)
        for i, out in enumerate(outputs):
            base = out
            while is_view(base):
                base = base.args[0]
            if base.op == "placeholder":
                return f"output {i} ({out.name}) is input {base.name} or a view of it"
            if base in bases:
                return f"outputs {bases[base]} and {i} ({out.name}) share the base {base.name}"
            bases[base] = i
    return None


def _may_return_aliases(gm):
    """Why torch-level graph `gm` (Dynamo's) may return an input, a view of one, or two
    outputs of one base, judged by names alone (_MAY_ALIAS), or None: such a graph goes to the
    export without a make_fx trace that _impurity would discard."""
    return _aliased_output(gm, _may_alias_by_name)


def _aliases(n):
    """Whether ATen node `n` returns a view of its first argument (or an element of a list of
    views, through getitem)."""
    if n.op != "call_function":
        return False
    t = n.target
    if t is operator.getitem and isinstance(n.args[0], torch.fx.Node):
        return _aliases(n.args[0])
    if not isinstance(t, torch._ops.OpOverload) or not t._schema.returns:
        return False
    info = t._schema.returns[0].alias_info
    return (info is not None and not info.is_write) or t is torch.ops.aten._unsafe_view.default


def _trace_inference(gm, example_inputs):
    """(the ATen-level graph of Dynamo's inference graph `gm` traced by make_fx alone, None),
    or (None, why not) where that trace would not compute the same as AOTAutograd's export.
    The export functionalizes: a pass over the graph to collect what it mutates and aliases,
    then the trace. A graph with no side effect (_side_effect) needs no functionalization, and
    one trace is enough: in a probe on an H200 host (a trace without the Python dispatcher), 0.37
    against the export's 0.58 s for a 4-layer LLaMA-style graph, 0.04 against 0.06 s for the
    side-by-side MLP. The trace must hold no mutable op (a decomposition may write
    one; one that restrides a value no one else reads becomes a view first:
    _metadata_writes_as_views) and return no view of an input (what the export refuses), nor
    two outputs of one base (each would come back as its own tensor, no longer a view of the
    other)."""
    try:
        from torch._dispatch.python import enable_python_dispatcher
        from torch._guards import detect_fake_mode
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.fx.experimental.proxy_tensor import make_fx
    except ImportError:
        return None, "this torch has no make_fx with fake tensors"
    effect = _side_effect(gm)
    if effect is not None:
        return None, f"side effect: {effect}"
    alias = _may_return_aliases(gm)
    if alias is not None:
        return None, f"an output may alias: {alias}"
    try:
        mode = detect_fake_mode(example_inputs)
        if mode is None:
            return None, "no fake-tensor mode among the inputs"
        # The Python dispatcher, as AOTAutograd traces: it runs the Python kernels some ops
        # have for their composite forms (an inference batch norm becomes
        # _native_batch_norm_legit_no_training, not native_batch_norm).
        with mode, enable_python_dispatcher(), _autocast_restored_on_error():
            fake = [a if isinstance(a, FakeTensor) else mode.from_tensor(a)
                    for a in example_inputs]
            traced = make_fx(gm, decomposition_table=_decompositions(False))(*fake)
    except Exception as e:  # noqa: BLE001  (the export decides, or aot_autograd)
        if type(e).__module__.startswith("torch._dynamo"):
            raise
        return None, f"make_fx failed: {type(e).__name__}: {_runtime.first_line(e)}"
    _metadata_writes_as_views(traced)
    impurity = _impurity(traced)
    if impurity is not None:
        return None, f"the traced graph {impurity}"
    return traced, None


@functools.lru_cache(maxsize=None)
def _metadata_writes():
    """In-place ops that change a tensor's sizes and strides only, never its data, each with
    the view op that gives the same tensor."""
    aten = torch.ops.aten
    writes = {aten.as_strided_.default: aten.as_strided.default,
              aten.unsqueeze_.default: aten.unsqueeze.default,
              aten.squeeze_.default: aten.squeeze.default,
              aten.squeeze_.dim: aten.squeeze.dim,
              aten.transpose_.default: aten.transpose.int,
              aten.t_.default: aten.t.default}
    if hasattr(aten.squeeze_, "dims") and hasattr(aten.squeeze, "dims"):  # torch >= 2.0
        writes[aten.squeeze_.dims] = aten.squeeze.dims
    return writes


def _metadata_writes_as_views(gm):
    """Rewrites in `gm` each in-place metadata op (_metadata_writes) on a value the graph
    computed (not an input) that nothing else reads into its view op. The decomposition of an
    adaptive average pool to 1 x 1 restrides its fresh mean so (as_strided_, ConvNeXt's head):
    no one can see the value before the write, so the view computes the same. Returns how many
    it rewrote."""
    writes = _metadata_writes()
    rewritten = 0
    for n in gm.graph.nodes:
        view = writes.get(n.target) if n.op == "call_function" else None
        if view is None or not n.args or not isinstance(n.args[0], torch.fx.Node):
            continue
        x = n.args[0]
        if x.op == "placeholder" or len(x.users) != 1:
            continue
        n.target = view
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


# Ops whose schemas do not say that they may write their arguments: a batch norm in training
# updates its running statistics.
_HIDDEN_MUTATIONS = {"aten::native_batch_norm", "aten::_native_batch_norm_legit",
                     "aten::cudnn_batch_norm", "aten::miopen_batch_norm",
                     "aten::_batch_norm_impl_index"}


def _impurity(gm):
    """Why ATen-level graph `gm` is not pure and fresh, or None where it mutates nothing (no
    mutable op, nor a batch norm that may update its statistics) and returns values of its own
    (no output that is, or is a view of, an input; no two outputs of one base)."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and (
                n.target._schema.is_mutable or n.target._schema.name in _HIDDEN_MUTATIONS):
            return f"mutates: {n.name} ({n.target})"
    alias = _aliased_output(gm, _aliases)
    return None if alias is None else f"aliases: {alias}"


def _real_tensors():
    """A context without the active fake-tensor mode, where torch has one."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        return unset_fake_temporarily()
    except ImportError:
        return contextlib.nullcontext()


def _boxed(fn):
    """AOTAutograd's calling convention: one list of arguments."""
    def run(args):
        return fn(*args)
    run._boxed_call = True
    return run


def _unboxed(run):
    """Dynamo's calling convention (one argument per graph input) for a boxed callable."""
    def call(*args):
        return run(args)
    call.__dict__.update((k, v) for k, v in run.__dict__.items() if k != "_boxed_call")
    return call


class Backend:
    """A torch.compile backend. With keep=True it keeps every graph it compiled (`graphs`), for
    torchfuse.compile's stats and kernel sources."""

    def __init__(self, options="", keep=False, compile_backward=None, check=False):
        self.options = options
        if compile_backward is None:
            compile_backward = os.environ.get("TORCHFUSE_COMPILE_BACKWARD", "1") != "0"
        self.compile_backward = compile_backward
        # Debugging: run each compiled graph in torch too and record, per output that differs,
        # (graph name, output index, node, error) in `mismatches`; `codes` has each graph's code.
        self.check = check
        self.mismatches = []
        self.codes = {}
        self.keep = keep
        self.graphs = []
        self.example_inputs = []  # per kept graph: the fake tensors it was compiled for
        self.symbolic = []  # kept graphs with symbolic sizes (_symbolic.SymbolicGraph)
        self.count = 0
        self.exported = 0  # inference graphs Dynamo calls directly (_inference_export)
        self.traced = 0  # of those, the ones traced without functionalization (_trace_inference)
        self.untraced = []  # per exported or refused graph not traced so: why (_trace_inference)

    def __call__(self, gm, example_inputs, **kwargs):
        from torch._dynamo.backends.common import aot_autograd
        # NVRTC warms up (or its worker processes start) while AOTAutograd traces the graph.
        _runtime.prepare_compiles()
        exported = self._inference_export(gm, example_inputs)
        if exported is not None:
            self.exported += 1
            return _unboxed(self.compile(exported, example_inputs, kind="inference"))
        kwargs = {}
        if self.compile_backward:
            bw = functools.partial(self.compile, kind="backward")
            # Recompute cheap pointwise values in the backward instead of saving them: fewer
            # bytes between the passes, and the recomputation fuses into the backward kernels.
            from torch._functorch.partitioners import min_cut_rematerialization_partition
            kwargs["partition_fn"] = min_cut_rematerialization_partition
        else:
            bw = lambda g, _: _boxed(g)  # noqa: E731
        # As AOTAutograd decides whether it traces a backward.
        training = _runtime.needs_grad(example_inputs)
        try:
            return aot_autograd(
                fw_compiler=functools.partial(self.compile, kind="forward"),
                bw_compiler=bw,
                inference_compiler=functools.partial(self.compile, kind="inference"),
                decompositions=_decompositions(self.compile_backward, training), **kwargs)(
                    gm, example_inputs)
        except Exception as e:  # noqa: BLE001  (a graph AOTAutograd cannot trace runs in torch)
            if type(e).__module__.startswith("torch._dynamo"):
                raise  # Dynamo's own signals (a restart of its analysis) and errors
            _runtime.warn_once(("trace", id(gm)),
                               f"torchfuse: a graph runs in torch: AOTAutograd could not trace "
                               f"it: {type(e).__name__}: {_runtime.first_line(e)}")
            return gm.forward

    def _inference_export(self, gm, example_inputs):
        """The ATen-level graph of an inference graph whose calling convention is Dynamo's own,
        or None. A graph that records no autograd (grad mode off, or no input requiring grad:
        Dynamo guards on both), takes plain tensors of fixed sizes, mutates no input and
        returns no alias of one needs none of AOTAutograd's runtime wrappers (6-7 us a call on
        an H100 host): it is traced by AOTAutograd's export, which refuses the graphs that would
        need them, and Dynamo calls the compiled graph directly; a graph without side effects
        is traced by make_fx alone (_trace_inference) where that trace qualifies. Every other
        graph goes through aot_autograd."""
        if os.environ.get("TORCHFUSE_INFERENCE_EXPORT", "1") == "0" or self.check:
            return None
        try:
            from torch._functorch.aot_autograd import aot_export_joint_simple
            from torch.utils._python_dispatch import is_traceable_wrapper_subclass
        except ImportError:
            return None
        from . import _symbolic
        if _symbolic.has_symbolic_sizes(gm, example_inputs):  # also: an input not a tensor
            return None
        grad = torch.is_grad_enabled()
        if any(is_traceable_wrapper_subclass(a) or (grad and a.requires_grad)
               for a in example_inputs):
            return None
        # Parameters, buffers and constants of the graph module itself (Dynamo lifts a
        # module's own as inputs) are left to aot_autograd, which lifts them.
        if any(n.op == "get_attr" for n in gm.graph.nodes):
            return None
        traced, why = _trace_inference(gm, example_inputs)
        if traced is not None:
            self.traced += 1
            return traced
        self.untraced.append(why)
        try:
            exported = aot_export_joint_simple(gm, list(example_inputs), trace_joint=False,
                                               decompositions=_decompositions(False))
        except Exception as e:  # noqa: BLE001  (mutations, aliases: aot_autograd's case)
            if type(e).__module__.startswith("torch._dynamo"):
                raise
            return None
        # The sizes and dtypes the export checks are the graph's own, fixed by Dynamo's guards.
        # Its code is not regenerated: where it runs (compile's fallbacks), its checks hold.
        drop_metadata_asserts(exported, recompile=False)
        return exported

    def compile(self, gm, example_inputs, kind="forward"):
        """Compiles one ATen-level graph; returns AOTAutograd's boxed callable."""
        self.count += 1
        name = f"torchfuse: {kind} graph {self.count}"
        if self.check:
            self.codes[name] = gm.code
        from . import _symbolic
        # An inference graph (nothing needs grad) has no backward that reads its attention
        # probabilities: eager attention becomes ATen's fused attention (_attention).
        rewrite = kind == "inference"
        if _symbolic.has_symbolic_sizes(gm, example_inputs):
            return self._compile_symbolic(gm, example_inputs, name, rewrite)
        # The rewrites change the graph only; gm's code is regenerated where gm itself runs
        # (a fallback to torch, a CPU call, the check), at most once. Where a pass raises
        # halfway, the code stays the original computation's.
        stale = False

        def runnable():
            nonlocal stale
            if stale:
                gm.recompile()
                stale = False
            return gm

        # AOTAutograd calls compilers under its fake-tensor mode: the graph's constants and the
        # compile itself must see real tensors.
        with _real_tensors():
            try:
                if rewrite and inference_passes(gm, self.options, recompile=False):
                    stale = True
                compiled = _runtime.Compiled(gm, self.options, name)
            except Exception as e:  # noqa: BLE001  (a graph torchfuse cannot take runs in torch)
                _runtime.warn_once(("graph", id(gm)), f"{name} runs in torch: {e}")
                return _boxed(runnable())
        try:
            # The first call's plan is built now and its kernels compile while Dynamo
            # finishes its own work.
            with _real_tensors():
                warning = compiled.prepare(example_inputs)["warning"]
            if warning:
                _runtime.warn_once(("nodes", id(gm)), f"{name}: {warning}")
        except Exception as e:  # noqa: BLE001  (the run will say what is wrong, or run in torch)
            _runtime.warn_once(("explain", id(gm)), f"{name}: cannot explain: {e}")
        if self.keep:
            self.graphs.append(compiled)
            self.example_inputs.append(list(example_inputs))

        def run(args):
            out = compiled.direct(args)  # the steady state: plain CUDA tensors
            if out is None:
                if not _runtime.all_cuda(args):
                    return runnable()(*args)
                out = compiled.through_op(args)
            if self.check:
                self._compare(name, runnable(), args, out)
            return out
        run._boxed_call = True
        run.torchfuse_graph = compiled
        return run

    def _compile_symbolic(self, gm, example_inputs, name, rewrite_attention=False):
        """A graph for a range of sizes: compiled for each size it is called with."""
        from . import _symbolic
        try:
            graph = _symbolic.SymbolicGraph(gm, example_inputs, self.options, name,
                                            rewrite_attention)
        except Exception as e:  # noqa: BLE001  (a graph torchfuse cannot take runs in torch)
            _runtime.warn_once(("graph", id(gm)), f"{name} (symbolic sizes) runs in torch: {e}")
            return _boxed(gm)
        if self.keep:
            self.symbolic.append(graph)

        def run(args):
            out = graph(args)
            if self.check:
                self._compare(name, gm, args, out)
            return out
        run._boxed_call = True
        run.torchfuse_symbolic = graph
        return run

    def _compare(self, name, gm, args, out):
        """Records each output of a compiled graph that differs from torch's run of it."""
        want = gm(*args)
        want = want if isinstance(want, (tuple, list)) else (want,)
        got = out if isinstance(out, (tuple, list)) else (out,)
        nodes = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        nodes = nodes if isinstance(nodes, (tuple, list)) else (nodes,)
        for i, (w, g) in enumerate(zip(want, got)):
            if not isinstance(w, torch.Tensor):
                continue
            if w.shape != g.shape or w.dtype != g.dtype:
                err = f"{g.dtype}{list(g.shape)} instead of {w.dtype}{list(w.shape)}"
            elif w.dtype == torch.bool or not w.is_floating_point():
                err = float((w != g).sum())
            else:
                w32, g32 = w.float(), g.float()
                err = ((w32 - g32).norm() / w32.norm().clamp_min(1e-30)).item()
            if isinstance(err, str) or err > (1e-5 if w.dtype == torch.float32 else 1e-2):
                self.mismatches.append((name, i, str(nodes[i]), err))


backend = Backend()

try:
    from torch._dynamo import register_backend as _register

    _register(name="torchfuse")(backend)
except Exception:  # noqa: BLE001  (torch < 2.0 has no Dynamo)
    pass
