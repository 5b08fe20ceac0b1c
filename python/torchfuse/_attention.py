"""Eager attention in an ATen-level inference graph, rewritten to ATen's fused attention.

Models written for eager attention (GPT-2's and LLaMA's `eager_attention_forward`, most
hand-written transformers) compute `softmax(q @ k^T * scale + mask) @ v` op by op: two batched
matrix products and a softmax over a [batch, heads, query, key] tensor that is written to
memory and read back. `scaled_dot_product_attention` computes the same without that tensor
(flash or memory-efficient kernels, in fp32 inside). The rewrite matches, in AOTAutograd's
graphs:

    bmm(view(Q), view(K^T)) -> view -> [mul/div by a scalar]* -> [add mask | where/masked_fill
    with -inf or a value <= -1e30]* -> [_to_copy]* -> _softmax(-1) -> [_to_copy | clone]*
    -> expand -> view -> bmm(., view(V)) -> view

with every node between the two products used only by the next (the probabilities are not
also an output). Scales must come before masks, as eager attention applies them. The masks
become one additive mask in the query's dtype (masked entries clamped to its lowest finite
value, as transformers' `finfo.min` masks, so that a row with every key masked gets the mean of
the values, as eager gives it with such masks; with -inf masks eager's row is NaN there). In
f16, whose lowest value does not drown the scores, attention with such masks is kept as
written.
A mask computed from constants alone (a causal mask built from `arange`, or a buffer the graph
holds as a constant; Dynamo hands buffers over as graph inputs, whose masks stay data) is
evaluated at compile time, on the CPU up to CPU_MASK_ELEMENTS (no kernel loads on the GPU),
and checked once for all the layers that share it: when it is the causal pattern (0 on and
below the diagonal, at most -1e30 or -inf above it) the rewrite passes `is_causal=True`
instead and no mask is read.
Without a mask, ATen picks the kernel at run time: cuDNN's on Hopper, which compiles on its
first use in a process (about a second on an H200 with an empty CUDA compute cache).
TORCHFUSE_ATTENTION_KERNEL=flash calls the flash kernel itself there, in 16 bits: a faster
first call, later calls 2-8 % slower on GPT-2 and a LLaMA-style model (README).

SDPA's own math form matches too: where a model calls scaled_dot_product_attention with a
mask that makes ATen pick its math kernel when traced (transformers' boolean masks expanded
along the keys under torch.compile, as in BERT), the graph holds Q and K^T each scaled by the
scale's square root, f32 copies of bf16/f16 operands cast back after the second product, and
`_safe_softmax` (a where that zeroes rows whose every score is -inf). Its scales are taken,
its casts dropped (the fused kernels read the operands as they are), and it is rewritten
where the mask keeps every key (then no mask is passed) or is causal; with a mask of data it
stays as written. Any rewrite is skipped where ATen, asked with empty tensors of the
operands' sizes and strides, would pick its math form (`_fused_sdp_choice`). Over fewer than
MEASURE_BELOW_KEYS keys the fused kernel ATen picks is not always the fastest (Swin's
windows of 49 keys): there the rewrite times it, ATen's memory-efficient kernel called by
itself and the unfused form once per process for each set of sizes, and keeps the fastest.

Only inference graphs are rewritten: a training forward saves the probabilities for its
backward graph, which this rewrite does not change.
"""
import operator
import os
import threading
import time

import torch
import torch.fx

from ._fx import CONVERT_ELEMENT_TYPE, attribute, meta_tensor

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_CONVERT = CONVERT_ELEMENT_TYPE
# A masked entry of an additive causal mask: at most this (HF's finfo(f32/bf16).min, -inf).
_MASKED = -1e30


def enabled():
    """TORCHFUSE_ATTENTION=0 keeps eager attention as written (for measurements). Needs
    scaled_dot_product_attention with a `scale` argument (torch >= 2.1)."""
    if os.environ.get("TORCHFUSE_ATTENTION", "1") == "0":
        return False
    op = getattr(aten, "scaled_dot_product_attention", None)
    return op is not None and any(a.name == "scale" for a in op.default._schema.arguments)


# Per thread: the size symbols' values of the graph being rewritten (a graph with symbolic
# sizes specialized for one binding keeps its nodes' symbolic metadata).
_sizes = threading.local()


def _shape(n):
    v = meta_tensor(n)
    if v is None:
        return None
    shape = []
    for s in v.shape:
        if isinstance(s, int):
            shape.append(s)
            continue
        try:
            shape.append(int(s.node.expr.xreplace(getattr(_sizes, "subs", None) or {})))
        except (TypeError, AttributeError):
            return None  # a size this binding does not give
    return tuple(shape)


def _dtype(n):
    v = meta_tensor(n)
    return None if v is None else v.dtype


def _call(n, *targets):
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def _single_use(n):
    return len(n.users) == 1


def _is_cast(n):
    """A dtype conversion between floating types and nothing else: _to_copy with a dtype only
    (or the device it is on), or prims.convert_element_type (graphs traced with symbolic
    sizes)."""
    if _call(n, _CONVERT) and len(n.args) == 2 and not n.kwargs:
        pass
    elif _call(n, aten._to_copy.default) and len(n.args) == 1 and \
            set(n.kwargs) <= {"dtype", "layout", "device"}:
        if n.kwargs.get("layout", torch.strided) != torch.strided:
            return False
        if "device" in n.kwargs and torch.device(n.kwargs["device"]) != \
                n.args[0].meta["val"].device:
            return False
    else:
        return False
    src, out = _dtype(n.args[0]), _dtype(n)
    return src is not None and out is not None and src.is_floating_point and \
        out.is_floating_point


def _is_identity_clone(n):
    return _call(n, aten.clone.default) and len(n.args) == 1 and \
        set(n.kwargs) <= {"memory_format"}


def _strip_4d(n):
    """The 4-D tensor a bmm operand `n` is a view of ([B*H, x, y] from [B, H, x, y]), past
    contiguous copies and expands that change nothing, or None."""
    if not _call(n, *_VIEWS):
        return None
    x = n.args[0]
    shape, out = _shape(x), _shape(n)
    if shape is None or out is None or len(shape) != 4 or len(out) != 3 or \
            shape[0] * shape[1] != out[0] or shape[2:] != out[1:]:
        return None
    while True:
        if _is_identity_clone(x):
            x = x.args[0]
        elif _call(x, aten.expand.default) and _shape(x.args[0]) == _shape(x):
            x = x.args[0]
        else:
            return x


def _scalar(gm, a):
    """The value of a Python number or of a 0-dim node computed from constants alone
    (scalar_tensor, full([]), a lifted constant, arithmetic on them), else None."""
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return float(a)
    if not isinstance(a, torch.fx.Node):
        return None
    if _call(a, aten.lift_fresh_copy.default):
        a = a.args[0]
    if a.op == "get_attr":  # read from the tensor: a specialized graph's carry no metadata
        t = getattr(gm, a.target, None)
        return float(t.item()) if isinstance(t, torch.Tensor) and t.dim() == 0 else None
    if _shape(a) != ():
        return None
    if _call(a, aten.scalar_tensor.default) and isinstance(a.args[0], (int, float)):
        return float(a.args[0])
    if _call(a, aten.full.default) and list(a.args[0]) == [] and \
            isinstance(a.args[1], (int, float)):
        return float(a.args[1])
    # Computed from constants (a head dim's square root, traced with symbolic sizes).
    v = _constant_value(gm, a)
    return float(v.item()) if isinstance(v, torch.Tensor) and v.numel() == 1 else None


_SIZE_OPS = tuple(op for op in (aten.size.int, getattr(getattr(aten, "sym_size", None), "int",
                                                         None)) if op is not None)


def _size_cone(node, allowed):
    """(cone, size reads) of `node`: the nodes it is computed from, down to reads of the
    graph's tensors' sizes (aten.size, sym_size), which are in both; None where a node of the
    cone that is not a size read is not `allowed` (a predicate)."""
    seen, stack, reads = set(), [node], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if _call(n, *_SIZE_OPS) and isinstance(n.args[1], int):
            reads.append(n)
            continue
        if not allowed(n):
            return None
        stack.extend(n.all_input_nodes)
    return seen, reads


def _read_sizes(reads):
    """Each size read's value in the binding being rewritten for ({node: int}), or None where
    one has none."""
    sizes = {}
    for r in reads:
        shape = _shape(r.args[0])
        if shape is None:
            return None
        sizes[r] = shape[r.args[1]]
    return sizes


def _sized_scalar(gm, a):
    """(value, symbolic) of a 0-dim node computed from constants and sizes of the graph's
    tensors (`x.shape[-1] ** 0.5` traced with symbolic sizes: a scalar_tensor of the size,
    cast, raised and cast back), each size at its value in the binding being rewritten for;
    `symbolic` when a size read is a symbol. None when it depends on anything else."""
    if not isinstance(a, torch.fx.Node) or _shape(a) != ():
        return None
    found = _size_cone(a, lambda n: n.op in ("call_function", "get_attr"))
    if found is None or not found[1]:
        return None
    cone, reads = found
    sizes = _read_sizes(reads)
    if sizes is None:
        return None
    symbolic = any(not isinstance(r.args[0].meta["val"].shape[r.args[1]], int) for r in reads)
    v = _evaluate(gm, a, cone, sizes)
    if not isinstance(v, torch.Tensor) or v.numel() != 1:
        return None
    return float(v.item()), symbolic


def _drowns(fill):
    """Whether a where/masked_fill value masks as an added one would: -inf, or low enough
    (-1e30) that adding it to any score gives itself, so that an additive mask computes what
    the fill does."""
    return fill is not None and fill <= _MASKED


class _Match:
    def __init__(self):
        self.scale = 1.0
        # Factors of the scale that are computed from dynamic sizes, at the binding's values:
        # together they must be the fused attention's default, 1/sqrt(head dim).
        self.sized = []
        self.masks = []  # in the order eager applies them: ("add", M), or ("where", cond, fill,
        # keep_true): entries where cond is keep_true keep the scores, the others are fill; or
        # ("add", M, (B', W)): M added to the scores viewed as [B', W, H, Tq, Tk] (Swin's
        # shifted-window mask, one per window W of each of B' images)
        self.out = None  # the node the fused attention replaces
        self.q = self.kt = self.v = None
        # The probabilities are `_safe_softmax`'s (SDPA's math form): a row whose every key is
        # masked gives zeros, as the fused kernels give it.
        self.safe = False


def _peel_scale(gm, x, m):
    """`x` past a multiplication by a constant (SDPA's math form scales Q and K^T each by the
    square root of the scale before the product), the factor taken into m.scale."""
    if _call(x, aten.mul.Scalar, aten.mul.Tensor) and _single_use(x) and len(x.args) == 2 and \
            not x.kwargs and _shape(x.args[0]) == _shape(x):
        c = _scalar(gm, x.args[1])
        if c:
            m.scale *= c
            return x.args[0]
    return x


def _upcast_source(n):
    """What `n` is an f32 copy of (a single-use cast from f16/bf16), or None."""
    if not (_is_cast(n) and _single_use(n) and _dtype(n) == torch.float32):
        return None
    src = n.args[0]
    return src if _dtype(src) in (torch.float16, torch.bfloat16) else None


def _safe_softmax(w):
    """The `_softmax` and `eq` nodes of `_safe_softmax`'s decomposition ending at `w`, or None:

        where(logical_not(any(logical_not(eq(x, -inf)), -1, keepdim)), full_like(p, 0), p)
        with p = _softmax(x, -1)"""
    if not _call(w, aten.where.self) or len(w.args) != 3:
        return None
    cond, zeros, p = w.args
    if not _call(p, aten._softmax.default) or set(p.users) != {zeros, w}:
        return None
    if not (_call(zeros, aten.full_like.default) and zeros.args[0] is p and
            zeros.args[1] == 0 and _single_use(zeros)):
        return None
    x = p.args[0]
    chain = cond
    for op in (aten.logical_not.default, aten.any.dim, aten.logical_not.default):
        if not _call(chain, op) or not _single_use(chain):
            return None
        if op == aten.any.dim and chain.args[1] not in (-1, len(_shape(x) or ()) - 1):
            return None
        chain = chain.args[0]
    if not (_call(chain, aten.eq.Scalar) and chain.args[0] is x and
            chain.args[1] == float("-inf") and _single_use(chain)):
        return None
    return p, chain


def _match_scores(gm, s, m, masks=(), scaled=False, users=None):
    """Walks back from `s` (first the softmax input) to the first product, collecting masks
    (last applied first) and scales; fills m.masks, m.scale, m.q and m.kt. False when the
    chain is not attention's. `users`: the nodes `s` may feed (else one node)."""
    if not (_single_use(s) if users is None else set(s.users) <= users):
        return False
    if _is_cast(s):
        return _match_scores(gm, s.args[0], m, masks, scaled)
    if _call(s, aten.add.Tensor) and len(s.args) == 2 and not s.kwargs and not scaled:
        for chain, mask in (s.args, tuple(reversed(s.args))):
            if isinstance(chain, torch.fx.Node) and isinstance(mask, torch.fx.Node) and \
                    _shape(chain) == _shape(s) and _shape(mask) is not None and \
                    _dtype(mask).is_floating_point and \
                    _match_scores(gm, chain, m, masks + (("add", mask),), scaled):
                return True
        return False
    if _call(s, aten.where.self) and not scaled:
        cond, a, b = s.args
        if _dtype(cond) != torch.bool:
            return False
        for chain, fill, keep_true in ((a, b, True), (b, a, False)):
            if _shape(chain) == _shape(s):
                fill = _scalar(gm, fill)
                if _drowns(fill):
                    return _match_scores(gm, chain, m,
                                         masks + (("where", cond, fill, keep_true),), scaled)
        return False
    if _call(s, aten.masked_fill.Scalar, aten.masked_fill.Tensor) and not scaled:
        x, cond, fill = s.args
        fill = _scalar(gm, fill)
        if not _drowns(fill) or _dtype(cond) != torch.bool or _shape(x) != _shape(s):
            return False
        return _match_scores(gm, x, m, masks + (("where", cond, fill, False),), scaled)
    if _call(s, aten.mul.Tensor, aten.div.Tensor) and len(s.args) == 2 and not s.kwargs:
        orders = [(s.args[0], s.args[1])]
        if s.target == aten.mul.Tensor:
            orders.append((s.args[1], s.args[0]))
        for chain, c in orders:
            if not isinstance(chain, torch.fx.Node) or _shape(chain) != _shape(s):
                continue
            value, sized = _scalar(gm, c), None
            if value is None:
                sized = _sized_scalar(gm, c)
                if sized is None:
                    continue
                value, symbolic = sized
                if not symbolic:
                    sized = None  # sizes that are constants: a constant
            if not value:
                continue
            factor = value if s.target == aten.mul.Tensor else 1.0 / value
            scale, sized_factors = m.scale, list(m.sized)
            if sized is None:
                m.scale = scale * factor
            else:
                m.sized.append(factor)
            if _match_scores(gm, chain, m, masks, True):
                return True
            m.scale, m.sized = scale, sized_factors
        return False
    if _call(s, *_VIEWS) and _call(s.args[0], aten.add.Tensor) and not scaled:
        # A mask added to the scores viewed with the batch split in two, then viewed back:
        # view(view(scores, [B', W, H, Tq, Tk]) + M, [B, H, Tq, Tk]).
        return _match_window_mask(gm, s, m, masks)
    # s: the scores, view(bmm(Q, K^T)) as [B, H, Tq, Tk].
    if not _call(s, *_VIEWS) or not _call(s.args[0], aten.bmm.default) or \
            not _single_use(s.args[0]):
        return False
    shape = _shape(s)
    if shape is None or len(shape) != 4:
        return False
    bmm = s.args[0]
    q, kt = _strip_4d(bmm.args[0]), _strip_4d(bmm.args[1])
    if q is None or kt is None:
        return False
    q, kt = _peel_scale(gm, q, m), _peel_scale(gm, kt, m)
    b, h, tq, tk = shape
    qs, ks = _shape(q), _shape(kt)
    if qs[:3] != (b, h, tq) or ks[0:2] != (b, h) or ks[3] != tk or ks[2] != qs[3]:
        return False
    m.q, m.kt, m.masks = q, kt, list(reversed(masks))
    return True


def _match_window_mask(gm, s, m, masks):
    """_match_scores for `s` = view(add(view(scores, [B', W, H, Tq, Tk]), M), [B, H, Tq, Tk])
    with static sizes, B' * W = B and M broadcasting to the 5-D shape."""
    add, shape = s.args[0], _shape(s)
    wide = _shape(add)
    if shape is None or wide is None or len(shape) != 4 or len(wide) != 5 or \
            not all(isinstance(d, int) for d in shape + wide) or \
            wide[0] * wide[1] != shape[0] or wide[2:] != shape[1:] or \
            not _single_use(add) or len(add.args) != 2 or add.kwargs:
        return False
    for split, mask in (add.args, tuple(reversed(add.args))):
        if not (isinstance(split, torch.fx.Node) and isinstance(mask, torch.fx.Node)):
            continue
        ms = _shape(mask)
        if not _call(split, *_VIEWS) or _shape(split) != wide or not _single_use(split) or \
                _shape(split.args[0]) != shape or ms is None or len(ms) != 5 or \
                not all(isinstance(d, int) for d in ms) or \
                _dtype(mask) is None or not _dtype(mask).is_floating_point:
            continue
        try:
            if torch.broadcast_shapes(ms, wide) != wide:
                continue
        except RuntimeError:
            continue
        return _match_scores(gm, split.args[0], m,
                             masks + (("add", mask, (wide[0], wide[1])),), False)
    return False


def _mask_shape(entry):
    """The shape of a mask entry's tensor as it applies to [B, H, Tq, Tk]: a window mask's
    [B', W, ...] folded to [B' * W, ...]."""
    ms = _shape(entry[1])
    if entry[0] == "add" and len(entry) > 2 and ms is not None:
        return (entry[2][0] * entry[2][1],) + tuple(ms[2:])
    return ms


def _masks_shape(m):
    """The shape the masks of match `m` add up to (each as it applies to [B, H, Tq, Tk])."""
    return torch.broadcast_shapes(*[_mask_shape(e) for e in m.masks])


def _match(gm, bmm2):
    """The attention whose second product is `bmm2`, or None."""
    m = _Match()
    p = bmm2.args[0]
    if not _call(p, *_VIEWS):
        return None
    p = _strip_4d(p)
    if p is None:
        return None
    # Past the casts and dropout's clone (eval) to the softmax.
    while _single_use(p) and (_is_cast(p) or _is_identity_clone(p)):
        p = p.args[0]
    users = None
    safe = _safe_softmax(p) if _single_use(p) else None
    if safe is not None:
        m.safe = True
        # The scores feed the softmax and its own test for rows of -inf, nothing else.
        p, eq = safe
        users = {p, eq}
    elif not _call(p, aten._softmax.default) or not _single_use(p):
        return None
    shape = _shape(p)
    if shape is None or len(shape) != 4 or p.args[1] not in (-1, 3):
        return None
    if not _match_scores(gm, p.args[0], m, users=users):
        return None
    m.v = _strip_4d(bmm2.args[1])
    vs = _shape(m.v) if m.v is not None else None
    if vs is None or vs[:3] != (shape[0], shape[1], shape[3]):
        return None
    dtypes = {_dtype(m.q), _dtype(m.kt), _dtype(m.v)}
    if len(dtypes) != 1 or dtypes.pop() not in (torch.float16, torch.bfloat16, torch.float32):
        return None
    if m.sized:
        # A scale of dynamic sizes is the fused attention's default (1/sqrt(the query's head
        # dim)) or not expressible: `scale` takes a number.
        factor = 1.0
        for f in m.sized:
            factor *= f
        if abs(m.scale - 1.0) > 1e-12 or \
                abs(factor * _shape(m.q)[3] ** 0.5 - 1.0) > 1e-6:
            return None
        m.scale = None
    out = (shape[0], shape[1], shape[2], vs[3])
    users = list(bmm2.users)
    if len(users) == 1 and _call(users[0], *_VIEWS) and _shape(users[0]) == out:
        m.out = users[0]
    else:
        m.out = bmm2
    for k in m.masks:
        ms = _mask_shape(k)
        if ms is None or len(ms) > 4:
            return None
        try:
            if torch.broadcast_shapes(ms, shape) != shape:
                return None
        except RuntimeError:
            return None
    return m


def _cone(node):
    """The nodes `node` is computed from, in graph order, or None when a placeholder is among
    them (the value is not a constant of the graph)."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        if n.op == "placeholder":
            return None
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return [n for n in node.graph.nodes if n in seen]


def _constant_value(gm, node, inspected=False):
    """The value of `node` when it depends on no graph input (computed now), else None.
    `inspected`: a mask the rewrite only inspects (_keeps_all, _is_causal), computed on the
    CPU where it is small enough (CPU_MASK_ELEMENTS)."""
    nodes = _cone(node)
    if nodes is None or any(n.op != "call_function" and n.op != "get_attr" for n in nodes):
        return None
    return _evaluate(gm, node, set(nodes), on_cpu=inspected and _cpu_sized(gm, nodes))


# A mask that the rewrite only inspects (_keeps_all, _is_causal) is computed on the CPU where
# no value of its cone has more elements than this. On the GPU each op's first use in a
# process loads its kernel: on an H200, with the CUDA compute cache empty, GPT-2's mask
# (38 ops, [8, 1, 1024, 1024]) took 191 ms there the first time and 5 ms the next, and 10 ms
# on the CPU; LLaMA-style's ([4, 1, 1024, 1024]) 129 ms against 9.
CPU_MASK_ELEMENTS = 1 << 24


def _cpu_sized(gm, nodes):
    """Whether every value of `nodes` (of graph module `gm`) has known sizes and at most
    CPU_MASK_ELEMENTS elements."""
    for n in nodes:
        vals = attribute(gm, n.target) if n.op == "get_attr" else n.meta.get("val")
        for v in vals if isinstance(vals, (tuple, list)) else (vals,):
            if isinstance(v, torch.Tensor):
                if not all(isinstance(d, int) for d in v.shape) or \
                        v.numel() > CPU_MASK_ELEMENTS:
                    return False
            elif v is not None and not isinstance(v, (int, float, bool)):
                return False
    return True


def _evaluate(gm, node, cone, given=None, on_cpu=False):
    """The value of `node`, computed now from the nodes of `cone` (those in `given` taking
    its values instead), or None where that fails (it stays a tensor of the graph). With
    `on_cpu`, computed on the CPU first (the nodes' devices and the graph's tensors they read,
    buffers and constants, moved there), and where the graph computes it where that fails."""
    v = _computed(gm, node, cone, given or {}, True) if on_cpu else None
    return v if v is not None else _computed(gm, node, cone, given or {}, False)


def _computed(gm, node, cone, given, on_cpu):
    """_evaluate's value, computed on the CPU (`on_cpu`) or where the graph computes it."""
    g = torch.fx.Graph()
    env = {}
    root = {} if on_cpu else gm
    cpu = torch.device("cpu")
    try:
        for n in node.graph.nodes:
            if n in given:
                env[n] = given[n]
            elif n in cone:
                c = g.node_copy(n, lambda a: env[a])
                if on_cpu:
                    if isinstance(c.kwargs.get("device"), (torch.device, str)):
                        c.kwargs = dict(c.kwargs, device=cpu)
                    if n.op == "get_attr":
                        t = attribute(gm, n.target)
                        root[n.target] = t.to(cpu) if isinstance(t, torch.Tensor) else t
                env[n] = c
        g.output(env[node])
        from ._backend import _real_tensors
        with _real_tensors():
            v = torch.fx.GraphModule(root, g)()
        if on_cpu and isinstance(v, torch.Tensor) and v.device != cpu:
            return None  # a device the copy did not move (given positionally)
        return v
    except Exception:  # noqa: BLE001  (not computable here)
        return None


def _operands(q, k, v, m, causal, dtype, k_transposed, random=False):
    """(q, k, v, mask, kwargs) of the attention the rewrite would write, as tensors of the
    operands' sizes and strides (K^T transposed back where the product reads it so; the mask
    as the kernel making it writes it: contiguous, in the query's dtype): empty ones, or random
    values with `random`. None where the sizes or strides are symbolic."""
    vals = [meta_tensor(n) for n in (q, k, v)]
    shapes = [_shape(n) for n in (q, k, v)]
    if None in vals or None in shapes or \
            any(not all(isinstance(d, int) for d in t.stride()) for t in vals):
        return None

    def make(t, shape):
        if not random:
            return torch.empty_strided(shape, t.stride(), dtype=t.dtype, device=t.device)
        # A storage that holds every element the strides reach (views may overlap it).
        span = 1 + sum((n - 1) * st for n, st in zip(shape, t.stride()) if n > 0)
        return torch.randn(span, dtype=t.dtype, device=t.device).as_strided(shape, t.stride())

    qt, kt, vt = (make(t, s) for t, s in zip(vals, shapes))
    if k_transposed:  # K^T as the product reads it
        kt = kt.transpose(-2, -1)
    mask = None
    if m.masks and not causal:
        mask = (torch.randn if random else torch.empty)(_masks_shape(m), dtype=dtype,
                                                          device=qt.device)
    kwargs = {"attn_mask": mask, "is_causal": causal}
    if m.scale is not None:
        kwargs["scale"] = m.scale
    return qt, kt, vt, kwargs


def _aten_fuses(q, k, v, m, causal, dtype, k_transposed):
    """Whether ATen picks a fused kernel (flash, memory-efficient, cuDNN) for the attention
    the rewrite would write, asked with empty tensors of its operands' sizes and strides; True
    where that cannot be asked (symbolic sizes, no _fused_sdp_choice)."""
    choice = getattr(aten, "_fused_sdp_choice", None)
    if choice is None:
        return True
    from ._backend import _real_tensors
    try:
        with _real_tensors():
            ops = _operands(q, k, v, m, causal, dtype, k_transposed)
            if ops is None:
                return True
            qt, kt, vt, kwargs = ops
            picked = choice.default(qt, kt, vt, dropout_p=0.0, **kwargs)
        from torch.nn.attention import SDPBackend
        unfused = {SDPBackend.MATH.value}
        if hasattr(SDPBackend, "ERROR"):
            unfused.add(SDPBackend.ERROR.value)
        return picked not in unfused
    except Exception:  # noqa: BLE001  (an older torch: rewrite as before)
        return True


# Keys at least this long: the fused kernels win by far (H100, bf16: 3-8x faster than the two
# products and a softmax from 128 keys on, bench/results/attention_lengths_h100.md); below,
# the rewrite is timed.
MEASURE_BELOW_KEYS = 256
# The unfused form is kept only where it took at most this share of the fused kernel's time:
# it is timed with torch's softmax, which reads no mask and scale where torchfuse's kernel
# also reads them, and timings of short kernels move by a few percent from run to run.
UNFUSED_MARGIN = 0.9
# (sizes, strides, dtype, mask shape, causal, scale, device) -> the form that won.
_timed = {}
# The forms: ATen's pick (scaled_dot_product_attention), its memory-efficient kernel called
# by itself, the graph as written (two products and torchfuse's softmax kernel).
SDPA, EFFICIENT, UNFUSED = "sdpa", "efficient", "unfused"
# The memory-efficient kernel reads a mask whose rows start at multiples of this many
# elements (ATen's SDPA pads the mask so before calling it).
_MASK_ALIGN = 8


def _time_ms(fn, reps=10, trials=3):
    """The least mean device time of `fn` over `trials` runs of `reps` calls, in ms. Each run
    is queued behind a kernel that sleeps for twice the time its launches took to queue, so
    that the host's launch time does not count: several small kernels launched from Python can
    take longer to queue than to run, and what the choice weighs is what they cost the GPU."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    queued = time.perf_counter() - t0
    torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", None)
    best = float("inf")
    for _ in range(trials):
        if sleep is not None:
            sleep(int(4e9 * queued))  # cycles: twice the queueing time at clocks up to 2 GHz
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def _apply(op, *args, **kwargs):
    """Applies `op` to tensors: the default `call` of _aligned_mask and _efficient, which
    write graph nodes with _graph_call instead."""
    return op(*args, **kwargs)


def _graph_call(graph):
    """A `call` for _aligned_mask and _efficient that writes each op as a node of `graph`."""
    return lambda op, *args, **kwargs: graph.call_function(op, args, kwargs)


def _aligned_mask(mask, mask_shape, shape, call=_apply):
    """`mask` (of sizes `mask_shape`, broadcasting to `shape` [B, H, Tq, Tk]) as the
    memory-efficient kernel reads it: expanded to `shape`, its rows starting at multiples of
    _MASK_ALIGN elements, as ATen's SDPA hands a mask to that kernel. `call(op, *args)` applies
    an op (to tensors, or writing graph nodes: _graph_call). The room after each row is a cat
    of the mask with its first columns (whatever it holds is never read), so that the kernel
    torchfuse makes of the mask's ops writes the rows with their room, once, and the slice and
    expand after it stay views (torchfuse fuses no slice of a whole cat operand and ends no
    kernel with an expand that broadcasts). Where the mask is narrower than the room, torch
    pads it. A mask that still reaches the kernel unaligned is padded again by torchfuse's
    runtime (AttentionOperands in frontend_torch/reference_executor.cc)."""
    if len(mask_shape) < 4:
        mask_shape = (1,) * (4 - len(mask_shape)) + tuple(mask_shape)
        mask = call(aten.reshape.default, mask, list(mask_shape))
    tk = shape[-1]
    if mask_shape[-1] != tk:  # the same mask for every key
        mask_shape = tuple(mask_shape[:-1]) + (tk,)
        mask = call(aten.expand.default, mask, list(mask_shape))
    room = -tk % _MASK_ALIGN
    if room or tuple(mask_shape) != tuple(shape):
        room = room or _MASK_ALIGN
        if room <= tk:
            mask = call(aten.cat.default, [mask, call(aten.slice.Tensor, mask, -1, 0, room)], -1)
        else:
            mask = call(aten.constant_pad_nd.default, mask, [0, room])
        mask = call(aten.slice.Tensor, mask, -1, 0, tk)
    return call(aten.expand.default, mask, list(shape))


def _efficient(q, k, v, kwargs, call=_apply):
    """ATen's memory-efficient attention kernel called by itself (its output only), for the
    scaled_dot_product_attention keywords `kwargs` (attn_mask as _aligned_mask makes it)."""
    options = {"dropout_p": 0.0, "is_causal": kwargs.get("is_causal", False)}
    if kwargs.get("scale") is not None:
        options["scale"] = kwargs["scale"]
    out = call(aten._scaled_dot_product_efficient_attention.default, q, k, v,
               kwargs.get("attn_mask"), False, **options)
    return call(operator.getitem, out, 0)


def _flash(q, k, v, kwargs, call=_apply):
    """ATen's flash attention kernel called by itself (its output only), for the
    scaled_dot_product_attention keywords `kwargs` (no mask)."""
    options = {"scale": kwargs["scale"]} if kwargs.get("scale") is not None else {}
    out = call(aten._scaled_dot_product_flash_attention.default, q, k, v, 0.0,
               kwargs.get("is_causal", False), False, **options)
    return call(operator.getitem, out, 0)


def _flash_takes(q, k, v, m, causal, dtype, k_transposed):
    """Whether the attention the rewrite would write (no mask) is one to call the flash kernel
    for (TORCHFUSE_ATTENTION_KERNEL=flash): where ATen, asked with empty tensors of its
    operands' sizes and strides and the flash kernel alone enabled, picks it. Its checks are
    the kernel's own: 16-bit operands, a GPU of compute capability 8.0 or more, the head size,
    rows of contiguous elements, and no causal mask over unequal query and key lengths (the
    kernel would align that mask to the bottom right, where ATen's is_causal aligns it to the
    top left)."""
    if os.environ.get("TORCHFUSE_ATTENTION_KERNEL", "") != "flash" or \
            dtype not in (torch.float16, torch.bfloat16) or \
            not hasattr(aten, "_scaled_dot_product_flash_attention") or \
            not hasattr(aten, "_fused_sdp_choice"):
        return False
    from ._backend import _real_tensors
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with _real_tensors():
            ops = _operands(q, k, v, m, causal, dtype, k_transposed)
            if ops is None or ops[3]["attn_mask"] is not None or ops[0].device.type != "cuda":
                return False
            qt, kt, vt, kwargs = ops
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                picked = aten._fused_sdp_choice.default(qt, kt, vt, dropout_p=0.0, **kwargs)
        return picked == SDPBackend.FLASH_ATTENTION.value
    except Exception:  # noqa: BLE001  (cannot be asked here: ATen picks)
        return False


def _pick_form(q, k, v, m, causal, dtype, k_transposed, options=""):
    """The fastest of ATen's fused attention (SDPA), its memory-efficient kernel (EFFICIENT)
    and the unfused form (UNFUSED: the scores' product, a softmax, the values' product;
    torchfuse fuses the scale and mask into its softmax kernel) for attention over fewer than
    MEASURE_BELOW_KEYS keys, timed once per process for each set of sizes on random tensors.
    Short windows (Swin's 49 keys of 3-24 heads) are where ATen's pick can lose: on an H100
    cuDNN's kernel took 0.32 ms for Swin's first windows (2048 x 3 heads, strided operands),
    the operand copies, products and a softmax 0.24 ms, the memory-efficient kernel 0.11 ms
    (bench/results/attention_lengths_h100.md). The unfused form is kept only where it took at
    most UNFUSED_MARGIN of the faster fused time. SDPA where nothing can be timed (not CUDA,
    symbolic sizes, a stream that is capturing a CUDA graph, 256 keys or more). Each choice
    is kept with the tuning records of the cache `options` name, for this GPU: a later
    process takes it from there instead of timing again (cleared and listed with them)."""
    shape = _shape(k)
    if shape is None or shape[-1 if k_transposed else -2] >= MEASURE_BELOW_KEYS:
        return SDPA
    val = meta_tensor(q)
    if val is None or val.device.type != "cuda" or \
            not torch.cuda.is_available() or torch.cuda.is_current_stream_capturing():
        return SDPA
    from ._backend import _real_tensors
    try:
        with _real_tensors(), torch.no_grad(), torch.cuda.device(val.device):
            ops = _operands(q, k, v, m, causal, dtype, k_transposed, random=True)
            if ops is None:
                return SDPA
            qt, kt, vt, kwargs = ops
            mask = kwargs["attn_mask"]
            key = (tuple(tuple(t.shape) + t.stride() for t in (qt, kt, vt)), dtype,
                   None if mask is None else tuple(mask.shape), causal, m.scale,
                   str(val.device))
            if key not in _timed:
                _timed[key] = _recorded_form(key, val.device, options,
                                             lambda times: _time_forms(qt, kt, vt, kwargs,
                                                                       dtype, times))
            return _timed[key]
    except Exception:  # noqa: BLE001  (cannot be timed here: rewrite as before)
        return SDPA


def _recorded_form(key, device, options, time_forms):
    """The form recorded in the cache for `key` (_pick_form's, less the device) on `device`,
    else `time_forms(times)`'s, recorded there with the times it fills in."""
    from . import _C
    problem = "attention forms " + repr(key[:-1])
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    try:
        form = _C.recorded_choice(options, "attention", problem, ordinal)
    except Exception:  # noqa: BLE001  (no usable cache: time it)
        form = None
    if form in (SDPA, EFFICIENT, UNFUSED):
        return form
    times = {}
    form = time_forms(times)
    if times.get(form) is not None:
        try:
            trials = ";".join(f"{f}={t:.6f}" for f, t in times.items())
            _C.record_choice(options, "attention", problem, ordinal, form, times[form], trials)
        except Exception:  # noqa: BLE001  (not kept: timed again by the next process)
            pass
    return form


def _time_forms(qt, kt, vt, kwargs, dtype, out=None):
    """_pick_form's timing, on tensors of the operands' sizes and strides and the keywords
    (_operands) of the attention the rewrite would write. `out` (a dict), where given,
    gets each form's median milliseconds."""
    low = torch.finfo(dtype).min
    mask = kwargs["attn_mask"]
    shape = (qt.shape[0], qt.shape[1], qt.shape[2], kt.shape[2])

    def sdpa():
        # With the mask the rewrite writes on each call (clamped, in full).
        kw = kwargs if mask is None else dict(kwargs, attn_mask=mask.clamp_min(low))
        return aten.scaled_dot_product_attention.default(qt, kt, vt, **kw)

    def efficient():
        if mask is None:
            return _efficient(qt, kt, vt, kwargs)
        bias = _aligned_mask(mask.clamp_min(low), tuple(mask.shape), shape)
        return _efficient(qt, kt, vt, dict(kwargs, attn_mask=bias))

    def products():
        # As the graph computes it unfused: each operand copied to the layout a batched
        # product reads (where it is not that already), the scores' product, a softmax, the
        # values' product.
        qc = qt.contiguous().flatten(0, -3)
        kc = kt.transpose(-2, -1).contiguous().flatten(0, -3)
        vc = vt.contiguous().flatten(0, -3)
        return torch.bmm(torch.softmax(torch.bmm(qc, kc), -1), vc)

    times = {SDPA: _time_ms(sdpa)}
    try:
        if hasattr(aten, "_scaled_dot_product_efficient_attention"):
            efficient()  # raises where the kernel does not take these operands
            times[EFFICIENT] = _time_ms(efficient)
    except Exception:  # noqa: BLE001  (not a candidate here)
        pass
    fused = min(times, key=times.get)
    unfused = _time_ms(products)
    if out is not None:
        out.update(times)
        out[UNFUSED] = unfused
    return UNFUSED if unfused <= UNFUSED_MARGIN * times[fused] else fused


def _keeps_all(masks, value_of):
    """Whether every mask is a constant that masks nothing (an added one all 0, a where's
    condition keeping every entry)."""
    for k in masks:
        v = value_of(k[1])
        if v is None:
            return False
        if k[0] == "add":
            if not (v.is_floating_point() and bool((v == 0).all())):
                return False
        elif not bool((v if k[3] else ~v).all()):
            return False
    return True


def _is_causal(masks, value_of, tq, tk):
    """Whether the masks, applied in order to the scores, are exactly the causal pattern:
    each a constant (an added one: its masked entries at most _MASKED, the others 0; a
    where's condition), masking exactly the keys after each query (top-left aligned)."""
    allowed = None
    for k in masks:
        v = value_of(k[1])
        if v is None:
            return False
        v = v.broadcast_to(v.shape[:-2] + (tq, tk)) if v.dim() >= 2 else v.broadcast_to((tq, tk))
        if k[0] == "add":
            if not v.is_floating_point():
                return False
            zero, low = v == 0, v <= _MASKED
            if not bool((zero | low).all()):
                return False
            keep = zero
        else:  # where/masked_fill: its fill drowns the scores (_drowns)
            keep = v if k[3] else ~v
        keep = keep.reshape(-1, tq, tk)
        if not bool((keep == keep[:1]).all()):
            return False  # differs across batch or heads
        keep = keep[0]
        allowed = keep if allowed is None else allowed & keep
    if allowed is None:
        return False
    tril = torch.ones(tq, tk, dtype=torch.bool, device=allowed.device).tril()
    return bool((allowed == tril).all())


# Ops a mask built from positions alone may be made of (transformers' causal masks: aranges of
# the length, compared, expanded to the batch, turned into 0 and the lowest value).
_INDEX_MASK_OPS = {getattr(getattr(aten, name), overload) for name, overload in (
    ("arange", "default"), ("arange", "start"), ("arange", "start_step"),
    ("unsqueeze", "default"), ("view", "default"), ("_unsafe_view", "default"),
    ("reshape", "default"), ("expand", "default"), ("slice", "Tensor"), ("select", "int"),
    ("le", "Tensor"), ("lt", "Tensor"), ("ge", "Tensor"), ("gt", "Tensor"),
    ("bitwise_not", "default"), ("logical_not", "default"), ("bitwise_and", "Tensor"),
    ("logical_and", "default"), ("where", "self"), ("where", "Scalar"),
    ("where", "ScalarSelf"), ("where", "ScalarOther"),
    ("scalar_tensor", "default"), ("full", "default"), ("clamp_min", "default"),
    ("clamp", "default"), ("_to_copy", "default"), ("lift_fresh_copy", "default"),
    ("clone", "default"), ("add", "Tensor"), ("sub", "Tensor"), ("add", "Scalar"))}
_INDEX_MASK_OPS.add(_CONVERT)
_INDEX_MASK_OPS.discard(None)
# The sizes a mask of symbolic sizes is evaluated at: each symbol 1, 2 and 7, and distinct
# small primes (a mask that depends on which of two symbols is larger shows it there).
_SMALL_SIZES = ((1,), (2,), (7,), (5, 11, 13, 17, 19, 23, 29, 31))


def _is_zero(gm, a):
    return a == 0 if isinstance(a, (int, float)) and not isinstance(a, bool) else \
        _scalar(gm, a) == 0


def _index_mask_cone(gm, node):
    """(cone, size reads) of a mask computed from the graph's sizes alone, with positions
    compared to positions and shifted by nothing (no window, no offset), else None."""
    def allowed(n):
        if n.op == "get_attr":
            t = getattr(gm, n.target, None)
            return isinstance(t, torch.Tensor) and t.dim() == 0
        if n.op != "call_function":
            return False
        if n.target in (operator.mul, operator.add, operator.floordiv):
            return True  # arithmetic of sizes (a product of dims)
        if n.target in (aten.add.Tensor, aten.sub.Tensor, aten.add.Scalar):
            return _is_zero(gm, n.args[1])  # else a shifted position (a window, an offset)
        return n.target in _INDEX_MASK_OPS
    return _size_cone(node, allowed)


def _causal_for_every_size(gm, m):
    """Whether masks made from the sizes alone (no tensor data) are the causal pattern at
    every size: made of positions compared with no shift, and causal at several small sizes
    of the symbols (evaluated there)."""
    subs = getattr(_sizes, "subs", None)
    if not subs or not m.masks:
        return False
    cones = {}
    for k in m.masks:
        found = _index_mask_cone(gm, k[1])
        if found is None:
            return False
        cones[k[1]] = found
    syms = list(subs)
    try:
        for small in _SMALL_SIZES:
            _sizes.subs = {s: small[i % len(small)] for i, s in enumerate(syms)}
            values = {}
            for node, (cone, reads) in cones.items():
                given = _read_sizes(reads)
                if given is None:
                    return False
                # Small sizes: on the CPU, where no kernel loads (CPU_MASK_ELEMENTS).
                values[node] = _evaluate(gm, node, cone, given, on_cpu=True)
            tq, tk = _shape(m.q)[2], _shape(m.kt)[3]
            if tq != tk or not _is_causal(m.masks, values.get, tq, tk):
                return False
        return True
    finally:
        _sizes.subs = subs


def fuse_attention(gm, sizes=None, options="", recompile=True):
    """Rewrites each eager attention of an inference graph `gm` (in place) to
    `aten.scaled_dot_product_attention`; returns how many. `sizes` maps size symbols to their
    values where the nodes' metadata is symbolic (a graph for every size passes distinct large
    primes, under which equal shapes are equal products of the symbols; the rewrite writes no
    size). Where the rewrite fails, the attentions not yet rewritten stay as written, with a
    warning, and the graph still compiles. `options` (torchfuse's options text) names the
    cache that keeps the timed choices of form (_pick_form). `recompile`: whether gm's code is
    regenerated after a change (not for callers that only read the graph)."""
    if not enabled():
        return 0
    _sizes.subs = dict(sizes or {})
    before = set(gm.graph.nodes)
    try:
        rewritten = _fuse_attention(gm, options)
        if rewritten and recompile:
            gm.recompile()
        return rewritten
    except Exception as e:  # noqa: BLE001  (a pattern this matcher misreads: keep it as written)
        from . import _runtime
        _runtime.warn_once(("attention", type(e).__name__, str(e)),
                           f"torchfuse: attention rewrite failed, attention runs as written: "
                           f"{type(e).__name__}: {e}")
        # Nodes made for an attention not yet rewired are unused: drop them (FX's dead-code
        # pass keeps scaled_dot_product_attention, an op seeded for dropout).
        for n in reversed(list(gm.graph.nodes)):
            if n not in before and not n.users:
                gm.graph.erase_node(n)
        gm.graph.eliminate_dead_code()  # what an attention rewritten before the failure left
        gm.recompile()
        return 0
    finally:
        _sizes.subs = None


def _fuse_attention(gm, options=""):
    graph = gm.graph
    rewritten = 0
    values = {}
    # Layers share their masks: each set of masks is checked once per query and key length.
    checked = {}

    def value_of(node):
        if node not in values:
            values[node] = _constant_value(gm, node, inspected=True)
        return values[node]

    def check(test, masks, *lengths):
        try:
            key = (test, tuple(masks)) + lengths
            hash(key)
        except TypeError:
            return test(masks, value_of, *lengths)
        if key not in checked:
            checked[key] = test(masks, value_of, *lengths)
        return checked[key]

    for bmm2 in list(graph.nodes):
        if not _call(bmm2, aten.bmm.default):
            continue
        m = _match(gm, bmm2)
        if m is None:
            continue
        tq = _shape(m.q)[2]
        tk = _shape(m.kt)[3]
        if m.masks and check(_keeps_all, m.masks):
            m.masks = []  # a constant mask that masks nothing (all True, all 0)
        causal = bool(m.masks) and (check(_is_causal, m.masks, tq, tk) or
                                    _causal_for_every_size(gm, m))
        if m.safe and m.masks and not causal:
            # SDPA's math form with a mask of data (T5's position bias, a padding mask): the
            # mask may drown every key of a row with -inf, where _safe_softmax gives zeros and
            # the rewrite's mask, clamped to the lowest finite value, would give the mean of
            # the values. (T5's rewritten attention was also seen running ATen's math form:
            # its position bias reached it with the heads innermost, which attention ops now
            # get as contiguous rows; not measured since.)
            continue
        q, v = m.q, m.v
        if _call(m.kt, aten.permute.default) and list(m.kt.args[1]) == [0, 1, 3, 2]:
            k = m.kt.args[0]
        else:
            k = None
        # SDPA's math form computes in f32 on copies of f16/bf16 Q, K and V and casts the
        # result back: the fused kernel reads them as they are (it accumulates in f32 inside).
        replaced = m.out
        sources = [_upcast_source(n) for n in (q, k, v)] if k is not None else [None]
        back = list(m.out.users)
        if None not in sources and len({_dtype(n) for n in sources}) == 1 and \
                len(back) == 1 and _is_cast(back[0]) and \
                _dtype(back[0]) == _dtype(sources[0]) and _shape(back[0]) == _shape(m.out):
            q, k, v = sources
            replaced = back[0]
        dtype = _dtype(q)
        if m.masks and not causal and dtype == torch.float16:
            # f16's lowest value (-65504) does not drown the scores: where every key of a row
            # is masked, eager's f16 sum rounds the scores away and the mask wins; f32 inside
            # the fused kernel keeps them. Kept as written.
            continue
        # The key operand as the checks see it: K, or K^T where no transpose of K was found.
        key, k_transposed = (m.kt, True) if k is None else (k, False)
        if not _aten_fuses(q, key, v, m, causal, dtype, k_transposed):
            continue  # ATen would run its math form: torchfuse's kernels do better
        form = _pick_form(q, key, v, m, causal, dtype, k_transposed, options)
        if form == UNFUSED:
            continue  # short keys: the products and torchfuse's softmax kernel are faster
        with graph.inserting_before(replaced):
            if k is None:
                k = graph.call_function(aten.transpose.int, (m.kt, -2, -1))
            kwargs = {} if m.scale is None else {"scale": m.scale}
            if causal:
                kwargs["is_causal"] = True
            elif m.masks:
                # Masked entries at the lowest finite value: a row with every key masked
                # gets the mean of the values, as eager with transformers' finfo.min masks.
                low = torch.finfo(dtype).min
                device = m.q.meta["val"].device
                mask = None
                for entry in m.masks:
                    if entry[0] == "add":
                        added = entry[1]
                        if len(entry) > 2:  # a window mask: [B', W, ...] to [B' * W, ...]
                            ms = _shape(added)
                            added = graph.call_function(
                                aten.expand.default, (added, list(entry[2]) + list(ms[2:])))
                            added = graph.call_function(
                                aten.reshape.default, (added, list(_mask_shape(entry))))
                        mask = added if mask is None else \
                            graph.call_function(aten.add.Tensor, (mask, added))
                    else:
                        _, cond, fill, keep_true = entry
                        if mask is None:
                            mask = graph.call_function(aten.scalar_tensor.default, (0.0,),
                                                       {"dtype": dtype, "device": device})
                        # An added mask's dtype where known (nodes made here carry none).
                        filled = graph.call_function(
                            aten.scalar_tensor.default, (max(fill, low),),
                            {"dtype": _dtype(mask) or dtype, "device": device})
                        mask = graph.call_function(
                            aten.where.self, (cond, mask, filled) if keep_true else
                            (cond, filled, mask))
                mask = graph.call_function(aten.clamp_min.default, (mask, low))
                mask = graph.call_function(aten._to_copy.default, (mask,), {"dtype": dtype})
                kwargs["attn_mask"] = mask
            if form == EFFICIENT:
                # Timed with static sizes only: the mask's sizes are numbers here.
                call = _graph_call(graph)
                if "attn_mask" in kwargs:
                    kwargs["attn_mask"] = _aligned_mask(
                        kwargs["attn_mask"], _masks_shape(m),
                        (*_shape(m.q)[:3], _shape(m.kt)[3]), call)
                sdpa = _efficient(q, k, v, kwargs, call)
            elif form == SDPA and "attn_mask" not in kwargs and \
                    _flash_takes(q, key, v, m, causal, dtype, k_transposed):
                sdpa = _flash(q, k, v, kwargs, _graph_call(graph))
            else:
                sdpa = graph.call_function(aten.scaled_dot_product_attention.default,
                                           (q, k, v), kwargs)
            if replaced is bmm2:
                # Back to bmm's [B*H, Tq, D], with no size written (they may be symbols).
                sdpa = graph.call_function(aten.flatten.using_ints, (sdpa, 0, 1))
        replaced.replace_all_uses_with(sdpa)
        rewritten += 1
    if rewritten:
        graph.eliminate_dead_code()
    return rewritten
