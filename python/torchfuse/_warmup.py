"""cuDNN's attention, readied on a side thread while AOTAutograd traces a graph that will call it.

A process's first call of ATen's fused attention on a GPU of compute capability 9.0 or later,
in bf16 or f16, runs cuDNN's kernel (ATen's first choice there), and that first call pays for
cuDNN's set-up: 454 ms on an H200 host (torch 2.11, 4 x 32 x 1024 x 64 bf16, causal), where
flash attention's first call took 13 ms and a second shape on cuDNN 38 ms. The first call of a
compiled transformer (GPT-2, LLaMA, ViT) would pay it inside its compiled graph's first run.
Where the graph Dynamo hands the backend calls fused attention, or has a softmax that the
inference rewrite (_attention) may turn into it, on bf16/f16 CUDA tensors, `start` runs one
tiny cuDNN attention on a thread of its own, on a side stream, once per process, and the
backend joins that thread before it returns: the set-up then overlaps AOTAutograd's trace and
torchfuse's compile. The tensors are constants (no random numbers: the caller's generator is
left as it was), and nothing global (torch's backend flags) is changed. TORCHFUSE_WARM_CUDNN=0
turns it off. `state()` says what happened.
"""
import os
import threading
import time

import torch

from . import _runtime

# Call targets (their names) that are attention or may become it: fused attention itself, a
# multi-head attention module's functional form (which calls it), and softmax (eager
# attention, rewritten to fused attention in inference graphs).
FUSED = {"scaled_dot_product_attention", "multi_head_attention_forward"}
SOFTMAX = {"softmax", "_softmax"}

_lock = threading.Lock()
_state = {"started": False, "ms": None, "error": None, "dtype": None}


def state():
    """What the warm-up did in this process: started (bool), ms (its duration once it has
    run, else None), error (why it failed, else None) and dtype."""
    with _lock:
        return dict(_state)


def _name(gm, node):
    if node.op == "call_function":
        return getattr(node.target, "__name__", "")
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_module":
        try:
            module = gm.get_submodule(node.target)
        except AttributeError:
            return ""
        if isinstance(module, torch.nn.Softmax):
            return "softmax"
        if isinstance(module, torch.nn.MultiheadAttention):
            return "multi_head_attention_forward"
    return ""


def _half_cuda(value):
    """(device, dtype) of a bf16/f16 CUDA tensor (or a stand-in with is_cuda, device, dtype),
    else None."""
    if getattr(value, "is_cuda", False) and \
            getattr(value, "dtype", None) in (torch.bfloat16, torch.float16):
        return value.device, value.dtype
    return None


def target(gm, example_inputs, rewrite):
    """The (device, dtype) that `gm`'s attention runs in, or None: where a node calls fused
    attention (or, with `rewrite`, a softmax), the first bf16/f16 CUDA tensor among that
    node's example value and its arguments' (Dynamo's node.meta["example_value"]), else among
    the graph's example inputs."""
    names = FUSED | (SOFTMAX if rewrite else set())
    found = False
    for node in gm.graph.nodes:
        if _name(gm, node) not in names:
            continue
        found = True
        for n in [node] + [a for a in node.args if isinstance(a, torch.fx.Node)]:
            t = _half_cuda(n.meta.get("example_value"))
            if t is not None:
                return t
    if not found:
        return None
    for v in example_inputs:
        t = _half_cuda(v)
        if t is not None:
            return t
    return None


def _arguments(op, q):
    """The positional arguments of ATen's cuDNN attention for query, key and value `q`, from its
    schema (which differs between torch versions): its required arguments (the tensors, no
    bias, no log-sum-exp where those are required; the others where a version requires them),
    up to the first with a default; those keep their defaults (no dropout, not causal)."""
    given = {"query": q, "key": q, "value": q, "attn_bias": None, "compute_log_sumexp": False,
             "dropout_p": 0.0, "is_causal": True, "return_debug_mask": False}
    args = []
    for a in op._schema.arguments:
        if a.kwarg_only or a.has_default_value():
            break
        if a.name not in given:
            raise ValueError(f"cuDNN attention has an argument it was not expected to: {a.name}")
        args.append(given[a.name])
    return args


def _run(device, dtype):
    t0 = time.perf_counter()
    error = None
    try:
        op = torch.ops.aten._scaled_dot_product_cudnn_attention.default
        with torch.cuda.device(device):
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                q = torch.ones(1, 1, 64, 64, device=device, dtype=dtype)
                op(*_arguments(op, q))
            stream.synchronize()
    except Exception as e:  # noqa: BLE001  (the real call sets cuDNN up instead)
        error = f"{type(e).__name__}: {_runtime.first_line(e)}"
    with _lock:
        _state["ms"] = (time.perf_counter() - t0) * 1e3
        _state["error"] = error


def _wanted(device):
    if os.environ.get("TORCHFUSE_WARM_CUDNN", "1") == "0":
        return False
    if not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
        return False
    enabled = getattr(torch.backends.cuda, "cudnn_sdp_enabled", None)
    if enabled is None or not enabled():
        return False
    if not hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention"):
        return False
    # Never beside a CUDA graph capture: a side thread's allocation or synchronization would
    # invalidate the caller's capture.
    if torch.cuda.is_current_stream_capturing():
        return False
    return torch.cuda.get_device_capability(device) >= (9, 0)


def start(gm, example_inputs, rewrite):
    """Starts the warm-up where `gm` will call cuDNN's attention (see target) and no earlier
    graph of this process started it; returns the thread to join, else None."""
    try:
        t = target(gm, example_inputs, rewrite)
        if t is None or not _wanted(t[0]):
            return None
    except Exception:  # noqa: BLE001  (a graph it cannot read: no warm-up)
        return None
    with _lock:
        if _state["started"]:
            return None
        _state["started"] = True
        _state["dtype"] = t[1]
    thread = threading.Thread(target=_run, args=t, name="torchfuse-cudnn-warmup", daemon=True)
    thread.start()
    return thread
