"""Convolutions in inference graphs: their bias as an add of its own, and channels-last
activations.

ATen's cuDNN convolution adds its bias with a separate kernel that reads and writes the whole
output once more. In inference graphs torchfuse compiles, `aten.convolution(x, w, b, ...)`
becomes `aten.convolution(x, w, None, ...) + b.view(1, -1, 1, ...)`: the add fuses into the
kernel that reads the convolution's output next (a layer norm over channels-last activations,
as ConvNeXt's, reads it through its permute; a residual add or an activation), as Inductor does.
A depthwise convolution that torchfuse's own kernel runs keeps its bias: that kernel adds it.

cuDNN's convolutions on tensor cores run NHWC kernels; on NCHW tensors each convolution
transposes its input to NHWC and its output back. `channels_last` gives the convolutions
channels-last inputs, so the network runs channels-last from the first convolution on (what
Inductor's layout optimization does). Reductions over the positions of channels-last values (a
squeeze-excite's mean) then read them as they lie in memory: as column reductions of the NHWC
view.
"""
import operator

import torch
import torch.fx

from . import _C, _runtime
from ._fx import meta_tensor

aten = torch.ops.aten


def _kernel_takes_depthwise(conv, devices):
    """Whether `conv` (an aten.convolution) is a depthwise 2-d one torchfuse's kernel runs on
    one of `devices`: not transposed, of static 2-d geometry and channels, and one that
    runtime::ConvRunner takes (asked through the extension: groups == channels, a [C, 1, kh,
    kw] weight, f32, f16 or bf16, filter, stride and dilation limits). That kernel adds the
    bias where it writes its output, so the bias stays in the convolution."""
    x, w = meta_tensor(conv.args[0]), meta_tensor(conv.args[1])
    if x is None or w is None or x.dim() != 4 or w.dim() != 4 or len(conv.args) < 9:
        return False
    stride, padding, dilation, transposed, _, groups = conv.args[3:9]
    geometry = [v for pair in (stride, padding, dilation) for v in pair] + [groups]
    sizes = [x.shape[1]] + list(w.shape)
    if (x.device.type not in devices or transposed or x.dtype not in _runtime._DTYPES
            or len(geometry) != 7
            or not all(isinstance(v, int) and not isinstance(v, bool)
                       for v in geometry + sizes)):
        return False
    return _C.depthwise_conv_takes(_runtime._DTYPES[x.dtype], x.shape[1], list(w.shape),
                                   geometry)


def split_conv_bias(gm, recompile=True, kernel_devices=("cuda",)):
    """Takes the bias out of each `aten.convolution` of `gm` (in place) as an add after it,
    but for the depthwise ones torchfuse's kernel runs on `kernel_devices`, which add their
    bias themselves; returns how many (`recompile`: whether gm's code is regenerated after a
    change)."""
    graph = gm.graph
    split = 0
    for conv in list(graph.nodes):
        if conv.op != "call_function" or conv.target != aten.convolution.default:
            continue
        args = list(conv.args)
        if len(args) < 4 or not isinstance(args[2], torch.fx.Node):
            continue
        if _kernel_takes_depthwise(conv, kernel_devices):
            continue
        bias, spatial = args[2], len(args[3])
        users = list(conv.users)
        args[2] = None
        conv.args = tuple(args)
        with graph.inserting_after(conv):
            view = graph.call_function(aten.view.default, (bias, [1, -1] + [1] * spatial))
        with graph.inserting_after(view):
            add = graph.call_function(aten.add.Tensor, (conv, view))
        add.meta = dict(conv.meta)  # the same value as the convolution with its bias
        for u in users:
            u.replace_input_with(conv, add)
        split += 1
    if split:
        graph.lint()
        if recompile:
            gm.recompile()
    return split


# Half-precision convolutions: cuDNN runs them on tensor cores in NHWC kernels, and on NCHW
# tensors transposes the input and the output around each. (f32 convolutions gained as much in
# eager ResNet-50 on an H100, but there cuDNN's channels-last kernels are TF32 ones, whose
# rounding differs from the f32 kernels eager runs on NCHW tensors: f32 stays as it is.)
CHANNELS_LAST_DTYPES = (torch.float16, torch.bfloat16)


def _is_2d_conv(node, dtypes, devices):
    if node.op != "call_function" or node.target != aten.convolution.default:
        return False
    x, w = meta_tensor(node.args[0]), meta_tensor(node.args[1])
    return (x is not None and w is not None and x.dim() == 4 and w.dim() == 4
            and x.device.type in devices and x.dtype in dtypes)


# Pools: channels-last in, channels-last out (of another shape).
_POOLS = {aten.max_pool2d_with_indices.default, aten.avg_pool2d.default,
          aten._adaptive_avg_pool2d.default}


# Ops whose result of their operand's shape may be laid out otherwise than their operand, as
# torchfuse runs them: moved dims, or a copy to a memory format (torchfuse's clone and
# contiguous give contiguous tensors; a dtype cast keeps the layout unless it names another).
_RELAYOUTS = {aten.permute.default, aten.transpose.int, aten.as_strided.default,
              aten.clone.default, aten.contiguous.default, aten._to_copy.default}


def _follows(node, known):
    """Whether `node`'s value is channels-last when the nodes in `known` are: an op whose
    operands of its own 4-D shape (at least one) are all in `known` and which keeps their
    layout (ATen's ops make such results `empty_like` their operand, torchfuse's kernels lay
    them out as eager does), a pool's value of one, or a value channels-last in eager's graph
    (torchfuse keeps eager's layouts). An op misjudged here costs time, not correctness: a
    convolution reading a value this calls channels-last that is not runs as it did before
    this pass; one reading a value that is, through a conversion, reads x itself."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return node.args[0] in known and node.args[1] == 0
    if node.target in _POOLS:
        return node.args[0] in known
    out = meta_tensor(node)
    if out is None or out.dim() != 4:
        return False
    if out.is_contiguous(memory_format=torch.channels_last) and (
            not out.is_contiguous() or out.shape[2] * out.shape[3] == 1):
        # Channels-last in eager too (an NHWC result permuted to NCHW, as ConvNeXt's MLP
        # gives back), or 1x1 positions (a squeeze-excite's pooled input), where the two
        # layouts are one.
        return True
    fmt = node.kwargs.get("memory_format")
    if node.target in _RELAYOUTS:
        if fmt == torch.channels_last:
            return True
        if node.target != aten._to_copy.default or fmt not in (None, torch.preserve_format):
            return False
    full = [a for a in node.all_input_nodes
            if meta_tensor(a) is not None and tuple(meta_tensor(a).shape) == tuple(out.shape)]
    return bool(full) and all(a in known for a in full)


# Reductions over the positions (H and W, and maybe N) of a channels-last value.
_POSITION_REDUCTIONS = {aten.mean.dim, aten.sum.dim_IntList, aten.amax.default,
                        aten.amin.default}


def _positions_reduced(node, known):
    """The dims `node` reduces where it is a sum, mean, amax or amin over H and W (and maybe N)
    but not C of a 4-D value in `known` with more than one position; else None."""
    if (node.op != "call_function" or node.target not in _POSITION_REDUCTIONS
            or len(node.args) < 2 or node.args[0] not in known):
        return None
    x, dims = meta_tensor(node.args[0]), node.args[1]
    if x is None or x.dim() != 4 or not isinstance(dims, (list, tuple)):
        return None
    if any(not isinstance(d, int) for d in dims):
        return None
    dims = sorted({d % 4 for d in dims})
    if 1 in dims or not {2, 3} <= set(dims):
        return None
    h, w = x.shape[2], x.shape[3]
    if isinstance(h, int) and isinstance(w, int) and h * w == 1:
        return None  # one position: the two layouts are one
    return dims


def _reduce_positions_as_columns(graph, known, after):
    """Rewrites each reduction over the positions of a channels-last value x (a squeeze-excite's
    or a global pool's `x.mean((2, 3), keepdim=True)`) to the same reduction of
    `x.permute(0, 2, 3, 1)` over dims (1, 2) (then permuted back where it keeps its dims). In
    memory that view is contiguous, and it reduces leading dims, leaving C, the innermost: a
    column kernel reads it in coalesced vectors. Over x's NCHW dims it is a reduction of the
    last two, whose elements lie C apart: a row kernel reads them one by one. The value is the
    same whatever x's layout (so a misjudged `known` costs time only), and so are its
    strides: eager's reduction of a channels-last x keeps the channels-last order. The
    reductions of one x read one view of it (one kernel can read it once for all of them).
    Returns how many were rewritten."""
    rewritten = 0
    views = {}
    for node in list(graph.nodes):
        dims = _positions_reduced(node, known)
        if dims is None:
            continue
        x = node.args[0]
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        kwargs = {k: v for k, v in node.kwargs.items() if k != "keepdim"}
        if x not in views:
            with graph.inserting_after(x):
                views[x] = graph.call_function(aten.permute.default, (x, [0, 2, 3, 1]))
            _set_meta(views[x], lambda v: v.permute(0, 2, 3, 1), x)
        nhwc = views[x]
        nhwc_dims = [{0: 0, 2: 1, 3: 2}[d] for d in dims]  # N, H, W where the view has them
        with graph.inserting_before(node):
            red = graph.call_function(node.target, (nhwc, nhwc_dims, keepdim), kwargs)
            # Kept dims: (N, C) in both orders, or dims of 1 that the permute puts back.
            out = graph.call_function(aten.permute.default, (red, [0, 3, 1, 2])) if keepdim \
                else red
        _set_meta(red, lambda v: node.target(v, nhwc_dims, keepdim, **kwargs), nhwc)
        out.meta = dict(node.meta)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        for group in (known, after):
            if node in group:
                group.discard(node)
                group.add(out)
        rewritten += 1
    return rewritten


def _set_meta(node, fn, source):
    """`node.meta["val"]` as `fn` of `source`'s (fake) value, where that value is known and fn
    runs on it; else node has no metadata (as the other rewrites' new nodes)."""
    v = meta_tensor(source)
    if v is None:
        return
    try:
        node.meta["val"] = fn(v)
    except Exception:  # noqa: BLE001  (metadata is an aid, not needed by the importer)
        pass


def channels_last(gm, dtypes=CHANNELS_LAST_DTYPES, devices=("cuda",), recompile=True):
    """Runs the 2-D convolutions of `gm` (an inference graph, in place) on channels-last
    activations, as CNN inference on tensor cores wants: the input of each convolution that is
    not already channels-last by the rule of `_follows` becomes
    `x.contiguous(memory_format=channels_last)` (ATen's copy where it is not: the image, once;
    x itself where it is). cuDNN's convolution then gives channels-last results, the
    pointwise kernels and pools after it keep that layout, and the next convolution reads it
    as it is: no NCHW<->NHWC transposes around each one. Weights stay as the caller has them
    (ATen copies a non-1x1 weight to channels-last per call, small next to the activations;
    caching a copy would miss writes through `.data`). Graph outputs that eager gives
    contiguous and that depend on a convolution become contiguous (a view where they already
    are), so callers see eager's strides. A reduction over the positions of a channels-last
    value reduces its NHWC view (_reduce_positions_as_columns). Returns how many inputs were
    converted, or, where none was, how many reductions were rewritten, or 1 where outputs
    alone were made contiguous (`recompile`: whether gm's code is regenerated after a
    change)."""
    graph = gm.graph
    convs = {n for n in graph.nodes if _is_2d_conv(n, dtypes, devices)}
    if not convs:
        return 0
    known = set()  # nodes whose value is channels-last once the conversions run
    after = set()  # nodes that depend on a convolution
    converted = {}  # a convolution input: its channels-last form
    for node in list(graph.nodes):
        if node.op == "output":
            break
        if node in convs:
            x = node.args[0]
            if x not in known and x not in converted:
                # ATen's copy (torchfuse's layout ops keep values, not layouts), which returns
                # x itself where it is channels-last already.
                with graph.inserting_before(node):
                    cl = graph.call_function(aten.contiguous.default, (x,),
                                             {"memory_format": torch.channels_last})
                cl.meta = dict(x.meta)  # its shape and dtype (not its strides)
                converted[x] = cl
            if x in converted:
                node.update_arg(0, converted[x])
            known.add(node)
            after.add(node)
            continue
        if any(a in after for a in node.all_input_nodes):
            after.add(node)
        if _follows(node, known):
            known.add(node)
    reduced = _reduce_positions_as_columns(graph, known, after)
    output = next(n for n in graph.nodes if n.op == "output")

    def restore(a):
        v = meta_tensor(a)
        if a not in after or v is None or v.dim() < 2 or not v.is_contiguous():
            return a
        with graph.inserting_before(output):
            c = graph.call_function(aten.contiguous.default, (a,))
        c.meta = dict(a.meta)
        return c

    before = output.args[0]
    output.args = (torch.fx.node.map_arg(before, restore),)
    changed = len(converted) or reduced or int(output.args[0] != before)
    if changed:
        graph.lint()
        if recompile:
            gm.recompile()
    return changed
