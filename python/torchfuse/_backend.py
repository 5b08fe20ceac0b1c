"""torch.compile(model, backend="torchfuse").

Dynamo hands over an FX graph per captured region. The nodes torchfuse can express are split
into submodules (torch.fx's capability-based partitioner) that torchfuse compiles; the rest
run through torch.
"""
import torch

from . import _fx, _runtime


class _Fused(torch.nn.Module):
    """A graph torchfuse compiled; CUDA calls run its kernels, others the graph itself."""

    def __init__(self, gm, options=""):
        super().__init__()
        self.gm = gm
        self.handle, self.returns_tuple = _runtime.compile_graph_module(gm, options)

    def forward(self, *args):
        if not _runtime.all_cuda(args):
            return self.gm(*args)
        return _runtime.run(self.handle, args, self.returns_tuple)

    def __del__(self):
        try:
            from . import _C
            _C.release(self.handle)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


def backend(gm, example_inputs, **kwargs):
    """The torch.compile backend: returns a callable that runs `gm` with fused kernels."""
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return gm.forward  # symbolic sizes (dynamic shapes): left to torch
    ok = _fx.supported_nodes(gm)
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    if not calls:
        return gm.forward
    if all(n in ok for n in calls):
        return _Fused(gm).forward
    try:
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupportBase
    except ImportError:
        return gm.forward

    class _Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return node in ok

    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    split = partitioner.fuse_partitions(partitioner.propose_partitions())
    for name, sub in list(split.named_children()):
        if name.startswith("fused_") and isinstance(sub, torch.fx.GraphModule):
            try:
                setattr(split, name, _Fused(sub))
            except Exception:  # noqa: BLE001  (a partition torchfuse cannot take runs in torch)
                pass
    return split.forward


try:
    from torch._dynamo import register_backend as _register

    _register(name="torchfuse")(backend)
except Exception:  # noqa: BLE001  (torch < 2.0 has no Dynamo)
    pass
