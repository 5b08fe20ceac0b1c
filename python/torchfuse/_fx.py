"""FX graphs to the JSON that torchfuse's C++ FX importer reads.

Every node becomes a call of an aten op ("aten::gelu"), a placeholder, a get_attr or the output;
call_method and call_module are normalized here. A node with no aten equivalent raises
Unsupported, naming it; torch.compile's backend then leaves it to torch.
"""
import json
import math
import operator

import torch
import torch.fx

FORMAT = "torchfuse-fx"
VERSION = 1


# prims.convert_element_type, the dtype cast decompositions write (None where torch has no
# prims).
CONVERT_ELEMENT_TYPE = getattr(
    getattr(getattr(torch.ops, "prims", None), "convert_element_type", None), "default", None)


def meta_tensor(n):
    """The (fake) tensor an FX node's `meta["val"]` holds, or None (not a node, no tensor)."""
    v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


class Unsupported(Exception):
    """A graph node torchfuse cannot express."""


_OPERATORS = {
    operator.add: "aten::add", operator.sub: "aten::sub", operator.mul: "aten::mul",
    operator.truediv: "aten::div", operator.pow: "aten::pow", operator.neg: "aten::neg",
    operator.matmul: "aten::matmul", operator.eq: "aten::eq", operator.ne: "aten::ne",
    operator.lt: "aten::lt", operator.le: "aten::le", operator.gt: "aten::gt",
    operator.ge: "aten::ge", operator.and_: "aten::__and__", operator.or_: "aten::__or__",
    operator.xor: "aten::__xor__", operator.invert: "aten::bitwise_not",
}
# Bitwise operators, taken between tensors only: aten's Scalar overloads type a Python bool
# operand as an integer in some callers (torch.ops), where eager keeps a bool mask bool.
_BITWISE = {"aten::__and__", "aten::__or__", "aten::__xor__", "aten::bitwise_not"}

# Functions whose name is not their aten op's, or whose Python arguments differ.
_RENAMED = {"true_divide": "div", "multiply": "mul", "subtract": "sub", "divide": "div",
            "clip": "clamp", "absolute": "abs", "negative": "neg"}

# Results that are tuples of tensors (getitem on them is allowed).
_TUPLE_RESULTS = {"aten::var_mean", "aten::std_mean", "aten::max", "aten::min", "aten::sort",
                  "aten::topk", "aten::native_layer_norm", "aten::chunk", "aten::split",
                  "aten::split_with_sizes", "aten::unbind", "aten::tensor_split"}


def _returns_several(op):
    """Whether an OpOverload returns a tuple or a list of tensors (getitem applies)."""
    returns = op._schema.returns
    return len(returns) > 1 or (len(returns) == 1 and "[]" in str(returns[0].type))

_ACTIVATIONS = {
    torch.nn.ReLU: "aten::relu", torch.nn.SiLU: "aten::silu", torch.nn.Tanh: "aten::tanh",
    torch.nn.Sigmoid: "aten::sigmoid", torch.nn.ReLU6: "aten::relu6",
    torch.nn.Hardswish: "aten::hardswish", torch.nn.Hardsigmoid: "aten::hardsigmoid",
}


def _aten_name(name):
    name = _RENAMED.get(name, name)
    if hasattr(torch.ops.aten, name):
        return "aten::" + name
    return None


def _per_dim(v, rank):
    """A module's size argument (an int for every dim, or one per dim) as one per dim."""
    return [v] * rank if isinstance(v, int) else list(v)


def attribute(module, target):
    """What a get_attr node's dotted `target` names in `module`."""
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


class _Ref:
    """A reference to a node made here (a module's parameter)."""

    def __init__(self, name):
        self.name = name


def _is_scalar(a):
    return isinstance(a, (int, float, bool)) and not isinstance(a, torch.fx.Node)


class _Writer:
    def __init__(self, gm):
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.nodes = []
        self.attrs = {}
        self.kinds = {}  # node name -> aten op it calls
        self.several = set()  # nodes whose results are a tuple or list (getitem indexes them)
        self.outputs = None  # for a graph returning a tuple: ("tensor", k) or ("value", v) each
        self.fresh = 0

    # ---- arguments ----
    def arg(self, a, node):
        if isinstance(a, (torch.fx.Node, _Ref)):
            return {"node": a.name}
        if isinstance(a, float) and not math.isfinite(a):
            return {"float": repr(a)}  # JSON has no inf or nan: "inf", "-inf", "nan"
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        if isinstance(a, torch.dtype):
            return {"dtype": str(a)}
        if isinstance(a, torch.device):
            return {"device": str(a)}
        if isinstance(a, torch.memory_format):
            return {"memory_format": str(a)}
        if isinstance(a, torch.layout):
            return {"layout": str(a)}
        if isinstance(a, (list, tuple)):  # torch.Size too
            return [self.arg(x, node) for x in a]
        raise Unsupported(f"node {node.name}: argument of type {type(a).__name__}")

    def emit(self, name, target, args, kwargs=None, node=None):
        self.nodes.append({"name": name, "op": "call_function", "target": target,
                           "args": [self.arg(a, node) for a in args],
                           "kwargs": {k: self.arg(v, node) for k, v in (kwargs or {}).items()}})
        self.kinds[name] = target

    def temp(self, base):
        self.fresh += 1
        return f"{base}__tf{self.fresh}"

    def get_attr(self, name, target):
        value = attribute(self.gm, target)
        if not isinstance(value, torch.Tensor):
            raise Unsupported(f"get_attr {target} is a {type(value).__name__}, not a tensor")
        self.attrs[target] = value.detach()
        self.nodes.append({"name": name, "op": "get_attr", "target": target})

    def alias(self, name, source):
        # An identity (dropout in eval, nn.Identity): aten::alias keeps one node per FX node.
        self.emit(name, "aten::alias", [source])

    # ---- nodes ----
    def call_function(self, n):
        t, args, kwargs = n.target, list(n.args), dict(n.kwargs)
        if t is operator.getitem:
            src = args[0]
            if (isinstance(src, torch.fx.Node) and isinstance(args[1], int)
                    and (self.kinds.get(src.name) in _TUPLE_RESULTS or src.name in self.several)):
                self.nodes.append({"name": n.name, "op": "call_function", "target": "getitem",
                                   "args": [{"node": src.name}, args[1]], "kwargs": {}})
                return
            return self.index(n, src, args[1])
        if t is CONVERT_ELEMENT_TYPE and len(args) == 2 and not kwargs:
            # Decompositions' dtype cast: a Python-defined op that LibTorch alone does not
            # know; aten's _to_copy with a dtype computes the same.
            return self.emit(n.name, "aten::_to_copy", args[:1], {"dtype": args[1]}, n)
        if isinstance(t, torch._ops.OpOverload):
            self.emit(n.name, t._schema.name, args, kwargs, n)
            if _returns_several(t):
                self.several.add(n.name)
            return None
        if isinstance(t, torch._ops.OpOverloadPacket):
            return self.emit(n.name, t._qualified_op_name, args, kwargs, n)
        if t in _OPERATORS:
            op = _OPERATORS[t]
            if op in _BITWISE and not all(isinstance(a, torch.fx.Node) for a in args):
                raise Unsupported(f"node {n.name}: {t.__name__} with an operand that is not a "
                                  f"tensor of the graph")
            if len(args) == 2 and _is_scalar(args[0]) and isinstance(args[1], torch.fx.Node):
                # Scalar first: aten takes the tensor first.
                if op in ("aten::add", "aten::mul"):
                    args = [args[1], args[0]]
                elif op == "aten::sub":
                    op, args = "aten::rsub", [args[1], args[0]]
                elif op == "aten::div":
                    recip = self.temp(n.name)
                    self.emit(recip, "aten::reciprocal", [args[1]], node=n)
                    self.nodes.append({"name": n.name, "op": "call_function", "target": "aten::mul",
                                       "args": [{"node": recip}, args[0]], "kwargs": {}})
                    return
            return self.emit(n.name, op, args, kwargs, n)
        name = getattr(t, "__name__", None)
        module = getattr(t, "__module__", "") or ""
        if name in ("dropout", "feature_dropout"):
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if not training:
                return self.alias(n.name, args[0])
        if name in ("relu", "silu", "gelu", "softmax", "log_softmax", "sigmoid", "tanh") and \
                "functional" in module:
            # F.relu(x, inplace=False), F.softmax(x, dim, _stacklevel, dtype)...
            inplace = kwargs.pop("inplace", False)
            kwargs.pop("_stacklevel", None)
            if name in ("relu", "silu") and len(args) > 1:
                inplace = args[1]
                args = args[:1]
            if name in ("relu", "silu") and inplace:
                # The in-place op: the importer makes it functional where later reads of x see
                # its result (x is a fresh value), and refuses it otherwise (x is the module's
                # input, or a view), rather than leave x unchanged.
                return self.emit(n.name, f"aten::{name}_", args, {}, n)
            if name in ("softmax", "log_softmax"):
                dim = kwargs.pop("dim", args[1] if len(args) > 1 else None)
                dtype = kwargs.pop("dtype", args[3] if len(args) > 3 else None)
                if dim is None:
                    raise Unsupported(f"node {n.name}: softmax without dim")
                return self.emit(n.name, "aten::" + name, [args[0], dim, dtype], {}, n)
        if name in ("hardtanh", "relu6", "hardswish", "hardsigmoid") and "functional" in module:
            # F.hardtanh(x, min_val, max_val, inplace), F.relu6(x, inplace), ...: the in-place
            # flag, positional or a keyword, picks the op (made functional at import, as above).
            last = 3 if name == "hardtanh" else 1
            inplace = kwargs.pop("inplace", False)
            if len(args) > last:
                inplace, args = args[last], args[:last]
            return self.emit(n.name, f"aten::{name}_" if inplace else f"aten::{name}", args,
                             kwargs, n)
        if name == "layer_norm" and "functional" in module:
            return self.emit(n.name, "aten::layer_norm", args, kwargs, n)
        op = _aten_name(name) if name else None
        if op is None:
            raise Unsupported(f"node {n.name}: {module}.{name} has no aten equivalent")
        return self.emit(n.name, op, args, kwargs, n)

    def index(self, n, src, index):
        """x[...] with ints, slices, None and one Ellipsis, as select, slice and unsqueeze.
        Items after the Ellipsis count dims from the end, so the rank need not be known."""
        if not isinstance(src, torch.fx.Node):
            raise Unsupported(f"node {n.name}: indexing a constant")
        items = list(index) if isinstance(index, tuple) else [index]
        for it in items:
            ok = it is None or it is Ellipsis or isinstance(it, int) or (
                isinstance(it, slice) and all(b is None or isinstance(b, int)
                                              for b in (it.start, it.stop, it.step)))
            if not ok or isinstance(it, bool):
                raise Unsupported(f"node {n.name}: indexing a tensor with {type(it).__name__}")
        if items.count(Ellipsis) > 1:
            raise Unsupported(f"node {n.name}: several Ellipsis in an index")
        cut = items.index(Ellipsis) if Ellipsis in items else len(items)
        steps = []  # (aten op, dim, extra args), applied in order
        dim = -1
        for it in reversed(items[cut + 1:]):  # from the last dim backwards
            if it is None:
                steps.append(("aten::unsqueeze", dim, []))
                dim -= 1
            elif isinstance(it, int):
                steps.append(("aten::select", dim, [it]))
            else:
                steps.append(("aten::slice", dim, [it.start, it.stop, 1 if it.step is None
                                                   else it.step]))
                dim -= 1
        dim = 0
        for it in items[:cut]:
            if it is None:
                steps.append(("aten::unsqueeze", dim, []))
                dim += 1
            elif isinstance(it, int):
                steps.append(("aten::select", dim, [it]))
            else:
                steps.append(("aten::slice", dim, [it.start, it.stop, 1 if it.step is None
                                                   else it.step]))
                dim += 1
        if not steps:
            return self.alias(n.name, src)
        cur = src
        for k, (op, d, extra) in enumerate(steps):
            name = n.name if k == len(steps) - 1 else self.temp(n.name)
            self.emit(name, op, [cur, d] + extra, node=n)
            cur = _Ref(name)
        return None

    def call_method(self, n):
        name, args, kwargs = n.target, list(n.args), dict(n.kwargs)
        if name in ("float", "half", "bfloat16", "double"):
            dtype = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
                     "double": torch.float64}[name]
            return self.emit(n.name, "aten::to", [args[0], dtype], {}, n)
        if name in ("view", "reshape", "expand", "permute", "repeat") and len(args) > 2:
            args = [args[0], list(args[1:])]  # varargs sizes -> one list
        op = _aten_name(name)
        if op is None:
            raise Unsupported(f"node {n.name}: method {name}")
        return self.emit(n.name, op, args, kwargs, n)

    def call_module(self, n):
        m = self.modules[n.target]
        x = n.args[0] if n.args else None
        attr = lambda p: self.param(n, f"{n.target}.{p}") if getattr(m, p, None) is not None else None  # noqa: E731
        if len(n.args) != 1 or n.kwargs:
            raise Unsupported(f"node {n.name}: module {type(m).__name__} called with "
                              f"{len(n.args)} positional and {len(n.kwargs)} keyword arguments")
        # A subclass that overrides its torch.nn class's forward computes something else.
        base = next((c for c in type(m).__mro__ if c.__module__.startswith("torch.nn")), None)
        if base is None or base.forward is not type(m).forward:
            raise Unsupported(f"node {n.name}: module {type(m).__name__} with its own forward")
        if isinstance(m, torch.nn.Linear):
            return self.emit(n.name, "aten::linear", [x, attr("weight"), attr("bias")], {}, n)
        if isinstance(m, torch.nn.GELU):
            return self.emit(n.name, "aten::gelu", [x], {"approximate": m.approximate}, n)
        if isinstance(m, torch.nn.LayerNorm):
            return self.emit(n.name, "aten::layer_norm",
                             [x, list(m.normalized_shape), attr("weight"), attr("bias"), m.eps],
                             {}, n)
        if isinstance(m, (torch.nn.Softmax, torch.nn.LogSoftmax)):
            if m.dim is None:
                raise Unsupported(f"node {n.name}: {type(m).__name__} without dim")
            op = "aten::softmax" if isinstance(m, torch.nn.Softmax) else "aten::log_softmax"
            return self.emit(n.name, op, [x, m.dim, None], {}, n)
        if isinstance(m, torch.nn.Dropout):
            if m.training and m.p > 0:
                op = "aten::dropout_" if m.inplace else "aten::dropout"
                return self.emit(n.name, op, [x, m.p, True], {}, n)
            return self.alias(n.name, x)
        if isinstance(m, torch.nn.Identity):
            return self.alias(n.name, x)
        for cls, op in _ACTIVATIONS.items():
            if isinstance(m, cls):
                # nn.ReLU(inplace=True): the in-place op, as F.relu's above.
                return self.emit(n.name, op + "_" if getattr(m, "inplace", False) else op,
                                 [x], {}, n)
        # Modules torch runs as the aten op their forward calls (what follows them fuses).
        rank = {torch.nn.Conv1d: 1, torch.nn.Conv2d: 2, torch.nn.Conv3d: 3}.get(base)
        if rank is not None:
            if m.padding_mode != "zeros":
                raise Unsupported(f"node {n.name}: {type(m).__name__} with padding_mode "
                                  f"{m.padding_mode!r}")
            padding = m.padding if isinstance(m.padding, str) else list(m.padding)
            return self.emit(n.name, f"aten::conv{rank}d",
                             [x, attr("weight"), attr("bias"), list(m.stride), padding,
                              list(m.dilation), m.groups], {}, n)
        if base is torch.nn.Flatten:
            return self.emit(n.name, "aten::flatten", [x, m.start_dim, m.end_dim], {}, n)
        rank = {torch.nn.AdaptiveAvgPool1d: 1, torch.nn.AdaptiveAvgPool2d: 2,
                torch.nn.AdaptiveAvgPool3d: 3}.get(base)
        if rank is not None:
            size = _per_dim(m.output_size, rank)
            if any(s is None for s in size):
                raise Unsupported(f"node {n.name}: {type(m).__name__} keeping an input size")
            return self.emit(n.name, f"aten::adaptive_avg_pool{rank}d", [x, size], {}, n)
        rank = {torch.nn.MaxPool1d: 1, torch.nn.MaxPool2d: 2, torch.nn.MaxPool3d: 3}.get(base)
        if rank is not None:
            if m.return_indices:
                raise Unsupported(f"node {n.name}: {type(m).__name__} returning indices")
            return self.emit(n.name, f"aten::max_pool{rank}d",
                             [x] + [_per_dim(v, rank) for v in (m.kernel_size, m.stride,
                                                                m.padding, m.dilation)]
                             + [m.ceil_mode], {}, n)
        if base is torch.nn.AvgPool2d:
            return self.emit(n.name, "aten::avg_pool2d",
                             [x] + [_per_dim(v, 2) for v in (m.kernel_size, m.stride, m.padding)]
                             + [m.ceil_mode, m.count_include_pad, m.divisor_override], {}, n)
        if base in (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d):
            if m.training or m.running_mean is None:
                raise Unsupported(f"node {n.name}: {type(m).__name__} outside eval with running "
                                  "statistics")
            return self.emit(n.name, "aten::batch_norm",
                             [x, attr("weight"), attr("bias"), attr("running_mean"),
                              attr("running_var"), False, 0.0, m.eps, True], {}, n)
        raise Unsupported(f"node {n.name}: module {type(m).__name__}")

    def param(self, n, target):
        name = self.temp(n.name)
        self.get_attr(name, target)
        return _Ref(name)

    def write(self):
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                self.nodes.append({"name": n.name, "op": "placeholder"})
            elif n.op == "get_attr":
                self.get_attr(n.name, n.target)
            elif n.op == "call_function":
                self.call_function(n)
            elif n.op == "call_method":
                self.call_method(n)
            elif n.op == "call_module":
                self.call_module(n)
            elif n.op == "output":
                out = n.args[0]
                if isinstance(out, (list, tuple)):
                    # Tensors come back from the compiled graph; other results (None for the
                    # gradients of inputs that need none, numbers) are put back in Python.
                    ret, self.outputs = [], []
                    for o in out:
                        if isinstance(o, (torch.fx.Node, _Ref)):
                            self.outputs.append(("tensor", len(ret)))
                            ret.append({"node": o.name})
                        elif o is None or isinstance(o, (bool, int, float)):
                            self.outputs.append(("value", o))
                        else:
                            raise Unsupported("the graph returns something other than tensors")
                    if not ret:
                        raise Unsupported("the graph returns no tensor")
                elif isinstance(out, torch.fx.Node):
                    ret = {"node": out.name}
                else:
                    raise Unsupported("the graph returns something other than tensors")
                self.nodes.append({"name": "output", "op": "output", "args": [ret]})
            else:
                raise Unsupported(f"node {n.name}: op {n.op}")
        return {"format": FORMAT, "version": VERSION, "nodes": self.nodes}


class Serialized:
    """An FX graph as torchfuse's C++ side reads it.

    text: the JSON document; attrs: {attribute name: tensor}; returns_tuple: whether the graph
    returns a tuple; outputs: for a tuple, ("tensor", k) for the compiled graph's k-th output or
    ("value", v) for a constant (None) each, in order."""

    def __init__(self, text, attrs, returns_tuple, outputs):
        self.text, self.attrs, self.returns_tuple, self.outputs = text, attrs, returns_tuple, outputs


def serialize(gm):
    """The Serialized form of an FX GraphModule; raises Unsupported naming a node it cannot
    express."""
    w = _Writer(gm)
    doc = w.write()
    ret = doc["nodes"][-1]["args"][0]
    return Serialized(json.dumps(doc), w.attrs, isinstance(ret, list), w.outputs)
