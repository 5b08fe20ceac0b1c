"""Writes the torch.export test archives (.pt2) and their expected outputs.

torch.export needs torch >= 2.1, so this runs on the GPU machine (torch 2.11); the files are
committed under tests/data, where the C++ tests read them with any LibTorch.

    python3 scripts/make_export_fixtures.py tests/data
"""
import json
import os
import sys

import torch


class MlpBlock(torch.nn.Module):
    """Linear, hand-written GeLU, LayerNorm, softmax: one matmul and one fused row kernel."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)

    def forward(self, x):
        y = self.lin(x)
        y = 0.5 * y * (1 + torch.tanh(0.7978845608 * (y + 0.044715 * y ** 3)))
        return torch.softmax(self.ln(y), dim=-1)


class RmsNormPair(torch.nn.Module):
    """Hand-written RMSNorm with a weight buffer, returning two outputs."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.linspace(0.5, 1.5, 64))

    def forward(self, x):
        r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return r, torch.relu(x) - 1.0


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name, model, shape in [("mlp_block", MlpBlock(), (4, 16)),
                               ("rmsnorm_pair", RmsNormPair(), (3, 64))]:
        model.eval()
        x = torch.randn(*shape)
        program = torch.export.export(model, (x,))
        torch.export.save(program, os.path.join(out, f"{name}.pt2"))
        with torch.no_grad():
            y = model(x)
        outputs = list(y) if isinstance(y, tuple) else [y]
        with open(os.path.join(out, f"{name}.io.json"), "w") as f:
            json.dump({"torch": torch.__version__, "input": x.flatten().tolist(),
                       "shape": list(shape),
                       "outputs": [{"shape": list(o.shape), "values": o.flatten().tolist()}
                                   for o in outputs]}, f)
        print(f"wrote {name}.pt2 ({os.path.getsize(os.path.join(out, name + '.pt2'))} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
