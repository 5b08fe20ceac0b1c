"""Convolution bias as an add of its own, for the kernel after the convolution to fuse.

ATen's cuDNN convolution adds its bias with a separate kernel that reads and writes the whole
output once more. In inference graphs torchfuse compiles, `aten.convolution(x, w, b, ...)`
becomes `aten.convolution(x, w, None, ...) + b.view(1, -1, 1, ...)`: the add fuses into the
kernel that reads the convolution's output next (a layer norm over channels-last activations,
as ConvNeXt's, reads it through its permute; a residual add or an activation), as Inductor does.
"""
import torch
import torch.fx

aten = torch.ops.aten


def split_conv_bias(gm):
    """Takes the bias out of each `aten.convolution` of `gm` (in place) as an add after it;
    returns how many."""
    graph = gm.graph
    split = 0
    for conv in list(graph.nodes):
        if conv.op != "call_function" or conv.target != aten.convolution.default:
            continue
        args = list(conv.args)
        if len(args) < 4 or not isinstance(args[2], torch.fx.Node):
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
        gm.recompile()
    return split
