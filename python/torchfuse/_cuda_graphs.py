"""CUDA-graph mode: whole calls of a compiled module replayed as CUDA graphs.

At small batches a model's time goes to launching its kernels (a GPT-2 forward launches ~140);
a CUDA graph replays all of them, torchfuse's and torch's alike, with one launch. Each call
signature (the tensors' sizes, strides, dtypes and devices, and the values of the other
arguments) gets its own graph:

- its first call runs the module as usual (compiling it);
- its second waits for torchfuse's background compiles, runs once more (so that each kernel
  is the tuned one and nothing is left to time), then captures the call into a graph whose
  inputs are copies the graph owns, and replays it;
- later calls copy their tensors into those inputs and replay.

The results are copies of the graph's outputs, so that they stay the caller's: a later call
does not overwrite them. A signature that cannot be graphed runs as usual, with a warning that
says why: a call that records autograd, arguments or results other than tensors and plain
values, a module that writes to its inputs, a capture that fails (a host sync inside the model,
such as `.item()`), or more signatures than `max_graphs`. What replays is what the capture
launched: Python side effects of the module do not repeat, and parameters must keep their
storage (in-place updates are seen; reassigned tensors are not).
"""
import torch
from torch.utils import _pytree as pytree

from . import _C, _runtime

_PLAIN = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device)


def _is_plain(v):
    return isinstance(v, _PLAIN)


def _reset_generator(device):
    """A capture that fails leaves the device's default generator in its capturing state, in
    which every later random draw on the device raises: give the generator a fresh state
    with the same seed and offset (torch >= 2.4 can)."""
    try:
        generator = torch.cuda.default_generators[torch.device(device).index or 0]
        generator.graphsafe_set_state(generator.clone_state())
    except (AttributeError, RuntimeError):
        pass


class _Graph:
    """One signature's graph: the inputs it reads, the outputs it writes."""

    def __init__(self, graph, inputs, outputs, spec):
        self.graph = graph
        self.inputs = inputs  # the graph's own input tensors, in leaf order
        self.outputs = outputs  # output leaves (tensors the graph writes, or plain values)
        self.spec = spec  # their structure; None: one tensor


class CudaGraphs:
    """The graphs of one compiled module, by call signature (see the module docstring)."""

    def __init__(self, owner, max_graphs=8):
        self.owner = owner  # names the module in warnings
        self.max_graphs = max_graphs
        self.graphs = {}  # signature -> _Graph, or a str: why that signature is not graphed
        self.seen = set()  # signatures called once (compiled, not yet captured)
        self.replays = 0

    def _refuse(self, key, why):
        if key is not None:
            self.graphs[key] = why
        _runtime.warn_once(("cuda_graphs", id(self), why),
                           f"torchfuse: {self.owner}: this call runs without a CUDA graph: {why}")

    @staticmethod
    def _signature(leaves):
        key = []
        for v in leaves:
            if isinstance(v, torch.Tensor):
                key.append((v.shape, v.stride(), v.dtype, v.device, v.requires_grad))
            elif _is_plain(v):
                key.append((type(v), v))
            else:
                return None
        return tuple(key)

    def __call__(self, fn, args, kwargs, module=None):
        """fn(*args, **kwargs), from a graph where the call's signature allows; calls whose
        tensors are not all on CUDA run fn as they are. `module`: whose parameters decide
        whether the call records autograd."""
        if not kwargs and all(type(a) is torch.Tensor for a in args):
            leaves, spec = args, None  # the common call, without pytree's cost
        else:
            leaves, spec = pytree.tree_flatten((args, kwargs))
        tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
        if not _runtime.all_cuda(tensors):
            return fn(*args, **kwargs)
        if _runtime.needs_grad(tensors, module):
            self._refuse(None, "it records autograd (call it under torch.no_grad() or "
                               "torch.inference_mode())")
            return fn(*args, **kwargs)
        key = self._signature(leaves)
        if key is None:
            bad = next(type(v).__name__ for v in leaves
                       if not isinstance(v, torch.Tensor) and not _is_plain(v))
            self._refuse(None, f"an argument of type {bad} is neither a tensor nor a plain value")
            return fn(*args, **kwargs)
        key = (spec, key)
        entry = self.graphs.get(key)
        if entry.__class__ is _Graph:
            return self._replay(entry, tensors)
        if isinstance(entry, str):
            return fn(*args, **kwargs)
        if len({t.device for t in tensors}) != 1:
            self._refuse(key, "its tensors are not all on one CUDA device")
            return fn(*args, **kwargs)
        if key not in self.seen:
            self.seen.add(key)
            return fn(*args, **kwargs)
        if len(self.graphs) >= self.max_graphs:
            self._refuse(key, f"the module already has {self.max_graphs} graphs (max_graphs)")
            return fn(*args, **kwargs)
        graph = self._capture(key, fn, leaves, spec, tensors[0].device)
        if graph is None:
            return fn(*args, **kwargs)
        self.graphs[key] = graph
        return self._replay(graph, tensors)

    def _capture(self, key, fn, leaves, spec, device):
        # The graph reads its own copies of the tensors, laid out as the caller's.
        inputs = []
        static = []
        for v in leaves:
            if isinstance(v, torch.Tensor):
                own = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
                try:
                    own.copy_(v)
                except RuntimeError:
                    self._refuse(key, "an input tensor overlaps itself (an expanded view)")
                    return None
                inputs.append(own)
                static.append(own)
            else:
                static.append(v)
        args, kwargs = (tuple(static), {}) if spec is None else pytree.tree_unflatten(static, spec)
        # Every kernel the call launches is compiled and tuned before the capture: the tuning
        # of a kernel times candidates (host syncs), which cannot happen inside a graph.
        _C.wait_for_compiles()
        versions = [t._version for t in inputs]
        # A rehearsal on a side stream, as torch's capture wants, with torch's host syncs made
        # errors: a call that waits for the GPU (.item(), a copy to the host) cannot be
        # captured, and finding that out inside a capture would break torch's RNG.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        sync_mode = torch.cuda.get_sync_debug_mode()
        try:
            with torch.cuda.device(device), torch.cuda.stream(side):
                torch.cuda.set_sync_debug_mode("error")
                fn(*args, **kwargs)
        except RuntimeError as e:
            self._refuse(key, f"it waits for the GPU on the host ({_runtime.first_line(e)})")
            return None
        finally:
            torch.cuda.set_sync_debug_mode(sync_mode)
            torch.cuda.current_stream(device).wait_stream(side)
        if [t._version for t in inputs] != versions:
            self._refuse(key, "the module writes to its inputs")
            return None
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.device(device):
                try:
                    capture = torch.cuda.graph(graph, capture_error_mode="thread_local")
                except TypeError:  # torch < 2.1
                    capture = torch.cuda.graph(graph)
                with capture:
                    out = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (the signature runs without a graph)
            self._refuse(key, f"capturing it failed: {_runtime.first_line(e)}")
            _reset_generator(device)
            torch.cuda.synchronize(device)
            return None
        if isinstance(out, torch.Tensor):
            return _Graph(graph, inputs, [out], None)
        outputs, out_spec = pytree.tree_flatten(out)
        bad = [type(v).__name__ for v in outputs
               if not isinstance(v, torch.Tensor) and not _is_plain(v)]
        if bad:
            self._refuse(key, f"its result holds a {bad[0]}, which cannot be copied out")
            return None
        return _Graph(graph, inputs, outputs, out_spec)

    def _replay(self, graph, tensors):
        for own, v in zip(graph.inputs, tensors):
            own.copy_(v)
        graph.graph.replay()
        self.replays += 1
        if graph.spec is None:
            return graph.outputs[0].clone()
        outputs = [v.clone() if isinstance(v, torch.Tensor) else v for v in graph.outputs]
        return pytree.tree_unflatten(outputs, graph.spec)

    def stats(self):
        return {"cuda_graphs": sum(isinstance(g, _Graph) for g in self.graphs.values()),
                "graph_replays": self.replays}
