"""Writes the example TorchScript models (scripted and traced) into a folder.

Usage: python3 make_models.py OUT_DIR [--hidden N] [--mlp-hidden N]

Each model is saved twice, as NAME_scripted.pt and NAME_traced.pt, and listed in
OUT_DIR/manifest.txt as `NAME FILE SPEC[;SPEC...]`, SPEC being the example input type
(f32[8,1024]). Runs with torch 1.13 (Debian) and 2.x.
"""
import argparse
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")


def hand_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


class Gelu(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


class GeluHelper(nn.Module):
    """Calls a helper function: scripting records prim::CallFunction."""

    def forward(self, x):
        return hand_gelu(x)


class Softmax(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.max(dim=-1, keepdim=True)[0])
        return e / e.sum(-1, keepdim=True)


class BiasGelu(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        y = x + self.bias
        return 0.5 * y * (1.0 + torch.tanh(0.79788456 * (y + 0.044715 * y ** 3)))


class Mlp(nn.Module):
    def __init__(self, n, layers=4):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(n, n) for _ in range(layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            x = 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))
        return x


class LayerNormHand(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class RmsNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.weight


class BroadcastChain(nn.Module):
    """x[B,N] * w[N] + b[1,N]."""

    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.b = nn.Parameter(torch.randn(1, n))

    def forward(self, x):
        return x * self.w + self.b


class TorchSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class LogSoftmax(nn.Module):
    def forward(self, x):
        return F.log_softmax(x * 0.125, dim=-1)


class LayerNormModule(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = nn.LayerNorm(n)
        with torch.no_grad():
            self.norm.weight.normal_()
            self.norm.bias.normal_()

    def forward(self, x):
        return self.norm(x)


class BiasResidualLayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))
        self.norm = nn.LayerNorm(n)

    def forward(self, x, residual):
        return self.norm(x + self.bias + residual)


class FGelu(nn.Module):
    def forward(self, x):
        return F.gelu(x) + F.gelu(x, approximate="tanh")


class Mixed(nn.Module):
    """Elementwise ops around an op with no IR equivalent (cumsum), plus var/std, clamp,
    where, sigmoid, silu and a cast."""

    def forward(self, x):
        y = torch.sigmoid(x) * 2.0 - 1.0
        z = torch.cumsum(y, dim=-1)
        w = torch.where(z > 0.0, F.silu(z), torch.clamp(z, min=-0.5))
        s = w.var(-1, keepdim=True) + w.std(-1, keepdim=True, unbiased=False)
        return (w - s).to(torch.float64).to(torch.float32).abs()


class Layout(nn.Module):
    """Views, transposes and broadcasting."""

    def forward(self, x, b):
        y = x.transpose(0, 1).contiguous().view(-1, 8)
        z = y.unsqueeze(0).expand(2, -1, -1) * b.view(1, 1, 8)
        return z.sum(0) + y.permute(1, 0).t()


class TwoOutputs(nn.Module):
    def forward(self, x):
        return x * 2.0, torch.relu(x) - 1.0


class SwiGLU(nn.Module):
    """SwiGLU through chunk: two slices of one input, read by one kernel."""

    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


class EndAlignedMaskSoftmax(nn.Module):
    """A mask buffer's last T rows and columns (queries that end a longer sequence): where the
    slice starts depends on the length."""

    def __init__(self, n=128):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(n, n, dtype=torch.bool)))

    def forward(self, s):
        t = s.size(-1)
        m = self.mask[-t:, -t:]
        return torch.softmax(s.masked_fill(~m, float("-inf")), -1)


class MaskedSoftmax(nn.Module):
    """Attention-style softmax: a boolean causal mask buffer sliced to the input's length."""

    def __init__(self, n=128):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(n, n, dtype=torch.bool)))

    def forward(self, s):
        t = s.size(-1)
        m = self.mask[:t, :t]
        return torch.softmax((s * 0.125).masked_fill(~m, float("-inf")), -1)


class LinearPositions(nn.Module):
    """The views around a transformer's matrix products: a normed [B, T, C] joined to
    [B*T, C] for a product, split back, positions from arange(T) added, a softmax over C, and
    the result joined again by a size computed as B*T."""

    def __init__(self, c):
        super().__init__()
        self.w = nn.Parameter(torch.randn(c, c) * c ** -0.5)

    def forward(self, x):
        b, t, c = x.shape
        h = (F.layer_norm(x, (c,)).view(-1, c) @ self.w).view(b, t, c)
        p = torch.arange(t, dtype=torch.float32, device=x.device).unsqueeze(-1) * 0.01
        return torch.softmax(h + p, dim=-1).reshape(b * t, c)


class GeluTransposed(nn.Module):
    def forward(self, x):
        return F.gelu(x.transpose(0, 1))


class ChannelsLastNorm(nn.Module):
    """ConvNeXt's norm: a bias added to NCHW activations, permuted to NHWC, normalized over C."""

    def __init__(self, c):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(c))
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        return self.ln((x + self.bias.view(1, -1, 1, 1)).permute(0, 2, 3, 1))


class LayerNormHeads(nn.Module):
    """Layer norm whose result is viewed to heads and permuted (views of the kernel's output)."""

    def __init__(self, h):
        super().__init__()
        self.ln = nn.LayerNorm(h)
        self.heads = max(1, h // 64)
        self.head_dim = h // self.heads

    def forward(self, x):
        b, t, _ = x.shape
        return self.ln(x).view(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)


class SliceSelect(nn.Module):
    """Indexing: a slice, a select, split and unbind, all read inside one kernel."""

    def forward(self, x):
        a, b = x.split(x.size(-1) // 2, dim=-1)
        first, second = x[:2].unbind(0)
        return a[1:] * b[:-1] + x[1:, 0:1] + (first - second)[: a.size(-1)]


class Rotary(nn.Module):
    """Rotary embedding: the rotated half through cat, with sin/cos buffers sliced to the length."""

    def __init__(self, dim=64, max_len=128):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        angles = torch.cat((pos * freq, pos * freq), -1)
        self.register_buffer("sin", angles.sin())
        self.register_buffer("cos", angles.cos())

    def forward(self, x):
        t, d = x.size(-2), x.size(-1) // 2
        rotated = torch.cat((-x[..., d:], x[..., :d]), -1)
        return rotated * self.sin[:t] + x * self.cos[:t]


class CatStack(nn.Module):
    """cat of computed parts along the last and a leading dim, stack, and a cat with an empty
    1-D tensor (as a KV cache's first step does), all inside one kernel."""

    def forward(self, x):
        a = torch.cat((torch.relu(x), x * 2.0, x[:, :3]), -1)
        b = torch.stack((x, -x), 0)[1] + torch.stack((x, x * 3.0), -1)[..., 1]
        c = torch.cat((torch.zeros(0, dtype=x.dtype, device=x.device), x), -1)
        d = torch.cat((x[:2], x.exp()), 0)[1:-1]
        return a[:, : x.size(1)] + b + c + d


class WindowShift(nn.Module):
    """Swin's shifted windows: a roll of two dims before a window partition, the inverse roll
    into the residual add, rolls of one dim by more than its size and by a negative shift, and
    a roll of the flattened tensor (torch's)."""

    def forward(self, x):
        b, h, w, c = x.shape
        y = torch.roll(x * 2.0, (-3, -3), (1, 2))
        win = y.view(b, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 2, 4, 5).contiguous()
        back = win.sigmoid().permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        out = x + torch.roll(back, (3, 3), (1, 2))
        return out, torch.roll(x, 13, 1) - torch.roll(x, -1, 0), torch.roll(x, 0, 3), \
            torch.roll(x, 5)


class PaddedRows(nn.Module):
    """Rows of 49 plus a table (Swin's position bias: passed with its heads innermost, through
    a permute), padded to 56 by a cat with their first columns (as memory-efficient attention's
    masks are), and rows rotated by 3: outputs of whole vectors whose loads are not aligned,
    split by boundaries that are not multiples of a vector."""

    def forward(self, x, table, y):
        m = x + table
        padded = torch.cat((m, m[..., :7]), -1)
        rotated = torch.cat((y[..., 3:], y[..., :3]), -1) * 2.0
        return padded, rotated


class TransposeCopy(nn.Module):
    """A contiguous copy of a permuted view (attention heads merged back): a copy kernel."""

    def forward(self, x):
        return x.permute(0, 2, 1, 3).contiguous()


class CopiesOfTorchResults(nn.Module):
    """Copies of permuted results of an op torch runs (atan keeps its operand's layout, as
    attention keeps its query's): `a.t()` is contiguous already, so its copy launches nothing;
    `b.t()` is not, and is copied."""

    def forward(self, x, w):
        a = torch.atan(x.t())
        b = torch.atan(x)
        return torch.mm(a.t().contiguous(), w) + torch.mm(b.t().contiguous(), w.t())


class ViewsBetweenTorchOps(nn.Module):
    """Views between ops torch runs: heads split out of a product (slices, reshapes, a
    permute, a transpose), a slice of an input expanded, and a reshape of a transposed result
    that has to copy."""

    def forward(self, x, w):
        y = torch.mm(x, w)
        q = y[:, :64].reshape(-1, 4, 16).permute(1, 0, 2)
        k = y[:, 64:128].reshape(-1, 4, 16).transpose(0, 1)
        s = torch.bmm(q, k.transpose(1, 2))
        v = torch.bmm(s, q)
        e = torch.bmm(q.transpose(1, 2), x[:, 1:17].unsqueeze(0).expand(4, -1, 16))
        c = torch.atan(y).t().reshape(-1, 32)
        return v.permute(1, 0, 2).reshape(-1, 64), e, torch.mm(c, w[:32, :16])


class EmbeddingLookups(nn.Module):
    """A transformer's first step, token and position embeddings summed and normalized, and a
    lookup in a table passed as an argument."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(1000, 96)
        self.pos = nn.Embedding(64, 96)
        self.ln = nn.LayerNorm(96)

    def forward(self, ids, table):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.ln(self.tok(ids) + self.pos(pos)), F.embedding(ids, table)


class IndexRows(nn.Module):
    """Rows of tensors picked by an index tensor (`table[indices]`, aten::index over the first
    dim): a Swin window's relative position bias, its table's rows at a constant index
    (7 x 7 windows, 3 heads) added to attention scores, and a lookup in a table of three dims
    by an argument's indices (negative ones count from the end); and the same table indexed in
    two dims by two index tensors (not rows: torch's)."""

    def __init__(self):
        super().__init__()
        coords = torch.stack(torch.meshgrid(torch.arange(7), torch.arange(7), indexing="ij"))
        coords = coords.flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + 6
        self.register_buffer("position_index", (rel[..., 0] * 13 + rel[..., 1]).flatten())

    def forward(self, ids, table, scores, bias_table):
        bias = bias_table[self.position_index].view(49, 49, 3).permute(2, 0, 1)
        return (scores + bias).softmax(-1), table[ids], table[ids, ids % 6]


class DepthwiseConvs(nn.Module):
    """Depthwise convolutions: ConvNeXt's 7x7 (padding 3, with a bias) and the layer norm over
    channels that reads it through a permute, MobileNet's 3x3 of stride 2 without a bias, a
    dilated 3x3 after a GELU, and an ordinary 1x1 convolution (groups 1), which stays torch's."""

    def __init__(self):
        super().__init__()
        self.dw7 = nn.Conv2d(32, 32, 7, padding=3, groups=32)
        self.norm = nn.LayerNorm(32)
        self.dw3 = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32, bias=False)
        self.dilated = nn.Conv2d(32, 32, 3, padding=2, dilation=2, groups=32)
        self.pw = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        y = self.norm(self.dw7(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        y = self.dilated(F.gelu(self.dw3(y)))
        return self.pw(y)


class HardActivations(nn.Module):
    """MobileNet's activations: hardswish, relu6, hardtanh with other bounds, hardsigmoid as a
    gate; pointwise, so one kernel."""

    def forward(self, x):
        y = F.relu6(F.hardswish(x) * 3.0)
        return F.hardtanh(y - x, -2.0, 2.5) * F.hardsigmoid(x)


class ConstantIndexRows(nn.Module):
    """A tensor indexed by buffers: a mask (the rows it selects, five of eight, are known at
    import) and row indices (one negative)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keep", torch.tensor([True, False, True, False, True, True, False,
                                                   True]))
        self.register_buffer("rows", torch.tensor([3, -1, 0, 2]))

    def forward(self, x):
        return x[self.keep] + 1, x[self.rows] * 2


class MaskedRows(nn.Module):
    """x[mask] by an argument's mask: how many rows it gives depends on the mask's values."""

    def forward(self, x, mask):
        return x[mask] * 2


class ValueSized(nn.Module):
    """A result whose size depends on x's values: nonzero, unique, bincount (its largest
    value) or masked_select."""

    def __init__(self, op: str):
        super().__init__()
        self.op = op

    def forward(self, x):
        if self.op == "nonzero":
            return torch.nonzero(x > 0).float() * 2
        if self.op == "unique":
            return torch.unique(x) * 2
        if self.op == "bincount":
            return torch.bincount(x.abs().long().flatten()).float()
        return torch.masked_select(x, x > 0) + 1


class IndexPutAccumulate(nn.Module):
    """An embedding's backward as AOTAutograd decomposes it: the rows of a gradient added into
    zeros at their indices (index_put with accumulate), the same onto a given tensor, and an
    index_put without accumulate."""

    def forward(self, ids, grad, base):
        zeros = torch.zeros_like(base)
        added = torch.index_put(zeros, [ids], grad, True)
        onto = torch.index_put(base, [ids], grad, True)
        rows = torch.arange(4, device=ids.device)
        replaced = torch.index_put(base, [rows], grad[0, :4])
        return added, onto, replaced


class ColumnSum(nn.Module):
    """A sum over the leading dim (a bias gradient): one column-reduction kernel."""

    def forward(self, x):
        return x.sum(dim=0)


class ProductColumnSum(nn.Module):
    """A product summed over the two leading dims (a norm-weight gradient)."""

    def forward(self, x, y):
        return (x * y).sum(dim=(0, 1))


class GeluColumnSum(nn.Module):
    """gelu's prologue and a column sum in one kernel."""

    def forward(self, x, g):
        return (F.gelu(x) * g).sum(dim=0)


class LmHead(nn.Module):
    """Products with an odd vocabulary dim (an LM head and its gradients)."""

    def forward(self, x, w, b, y, g):
        logits = F.linear(x, w)
        biased = torch.addmm(b, x.view(-1, x.size(-1)), w.t())
        grad_w = torch.mm(g.t(), y)
        return logits, biased, torch.softmax(logits.float(), -1), torch.mm(y, w.t()) * 2.0, grad_w


class Branchy(nn.Module):
    """Control flow that depends on tensor values: not supported."""

    def forward(self, x):
        if bool(x.sum() > 0):
            return x * 2.0
        return x - 1.0


def models(hidden, mlp_hidden):
    h = hidden
    return [
        ("gelu", Gelu(), [f"f32[8,{h}]"]),
        ("gelu_helper", GeluHelper(), [f"f32[8,{h}]"]),
        ("softmax", Softmax(), [f"f32[8,{h}]"]),
        ("bias_gelu", BiasGelu(h), [f"f32[8,{h}]"]),
        ("mlp", Mlp(mlp_hidden), [f"f32[8,{mlp_hidden}]"]),
        ("broadcast_chain", BroadcastChain(h), [f"f32[8,{h}]"]),
        ("layernorm", LayerNormHand(h), [f"f32[8,{h}]"]),
        ("rmsnorm", RmsNorm(h), [f"f32[8,{h}]"]),
        ("torch_softmax", TorchSoftmax(), [f"f32[8,{h}]"]),
        ("log_softmax", LogSoftmax(), [f"f32[8,{h}]"]),
        ("f_layer_norm", LayerNormModule(h), [f"f32[8,{h}]"]),
        ("bias_residual_layernorm", BiasResidualLayerNorm(h), [f"f32[8,{h}]", f"f32[8,{h}]"]),
        ("f_gelu", FGelu(), [f"f32[8,{h}]"]),
        ("mixed", Mixed(), [f"f32[8,{h}]"]),
        ("layout", Layout(), ["f32[8,4]", "f32[8]"]),
        ("two_outputs", TwoOutputs(), [f"f32[8,{h}]"]),
        ("swiglu", SwiGLU(), [f"f32[8,{2 * h}]"]),
        ("masked_softmax", MaskedSoftmax(), ["f32[2,64,64]"]),
        ("end_aligned_mask_softmax", EndAlignedMaskSoftmax(), ["f32[2,64,64]"]),
        ("gelu_transposed", GeluTransposed(), [f"f32[8,{h}]"]),
        ("linear_positions", LinearPositions(64), ["f32[2,8,64]"]),
        ("layernorm_heads", LayerNormHeads(h), [f"f32[2,8,{h}]"]),
        ("channels_last_norm", ChannelsLastNorm(32), ["f32[2,32,5,6]"]),
        ("slice_select", SliceSelect(), ["f32[8,64]"]),
        ("rotary", Rotary(), ["f32[2,4,64,64]"]),
        ("cat_stack", CatStack(), ["f32[8,64]"]),
        ("transpose_copy", TransposeCopy(), ["f32[2,64,4,32]"]),
        ("window_shift", WindowShift(), ["f32[2,8,12,16]"]),
        ("padded_rows", PaddedRows(), ["f32[2,3,49,49]", "f32[3,49,49]", "f32[8,64]"]),
        ("lm_head", LmHead(), ["f32[2,8,16]", "f32[37,16]", "f32[37]", "f32[8,16]", "f32[8,37]"]),
        ("copies_of_torch_results", CopiesOfTorchResults(), ["f32[64,64]", "f32[64,64]"]),
        ("views_between_torch_ops", ViewsBetweenTorchOps(), ["f32[64,64]", "f32[64,128]"]),
        ("embedding_lookups", EmbeddingLookups(), ["i64[4,16]", "f32[1000,100]"]),
        ("index_rows", IndexRows(), ["i64[4,16]", "f32[64,6,5]", "f32[2,3,49,49]",
                                     "f32[169,3]"]),
        ("constant_index_rows", ConstantIndexRows(), ["f32[8,4]"]),
        ("depthwise_convs", DepthwiseConvs(), ["f32[2,32,20,18]"]),
        ("hard_activations", HardActivations(), ["f32[64,96]"]),
        ("index_put_accumulate", IndexPutAccumulate(), ["i64[4,16]", "f32[4,16,100]",
                                                        "f32[1000,100]"]),
        ("column_sum", ColumnSum(), ["f32[64,32]"]),
        ("product_column_sum", ProductColumnSum(), ["f32[2,16,32]", "f32[2,16,32]"]),
        ("gelu_column_sum", GeluColumnSum(), ["f32[64,32]", "f32[64,32]"]),
    ]


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "f64": torch.float64, "i64": torch.int64}


def example(spec):
    dtype, dims = spec.split("[")
    sizes = [int(d) for d in dims.rstrip("]").split(",") if d]
    if dtype == "i64":
        return torch.randint(0, 64, sizes)
    return torch.randn(*sizes, dtype=DTYPES[dtype])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--mlp-hidden", type=int, default=256)
    parser.add_argument("--only", default="", help="comma-separated model names")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    only = set(filter(None, args.only.split(",")))
    lines = []
    for name, module, specs in models(args.hidden, args.mlp_hidden):
        if only and name not in only:
            continue
        module.eval()
        inputs = tuple(example(s) for s in specs)
        scripted = torch.jit.script(module)
        traced = torch.jit.trace(module, inputs, check_trace=False)
        for form, m in (("scripted", scripted), ("traced", traced)):
            path = os.path.join(args.out, f"{name}_{form}.pt")
            m.save(path)
            lines.append(f"{name}_{form} {path} {';'.join(specs)}")
    scripted_branchy = torch.jit.script(Branchy())
    path = os.path.join(args.out, "branchy_scripted.pt")
    scripted_branchy.save(path)
    # Not in the manifest (whose models all import): the import refuses x[mask]'s types.
    masked = MaskedRows().eval()
    torch.jit.script(masked).save(os.path.join(args.out, "masked_rows_scripted.pt"))
    torch.jit.trace(masked, (torch.randn(8, 4), torch.rand(8) > 0.5),
                    check_trace=False).save(os.path.join(args.out, "masked_rows_traced.pt"))
    for op in ("nonzero", "unique", "bincount", "masked_select"):
        torch.jit.script(ValueSized(op).eval()).save(os.path.join(args.out, f"{op}_scripted.pt"))
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "not_a_model.pt"), "w") as f:
        f.write("this is not a TorchScript archive\n")


if __name__ == "__main__":
    main()
