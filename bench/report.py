"""The bench's reports: tables and charts.

    python3 bench/report.py TORCHFUSE.csv BASELINE.csv   # torchfuse_bench's CSV joined with
                                                         # compile_baseline.py's: a markdown table
    python3 bench/report.py plots DIR                    # charts of DIR's results (matplotlib)

`plots` reads DIR/side_by_side.csv (bench/side_by_side.py) and draws, per dtype, eager /
torch.compile / torchfuse bars of each workload's % of the copy bandwidth with the 100 % copy
line (side_by_side_<dtype>.png); and DIR/models.json (bench/models.py) and draws kernels per
forward (and per training step) of each real model, eager / Inductor / torchfuse with
torchfuse's own kernels marked, next to the time per call (models.png).
"""
import csv
import json
import os
import sys


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        print("matplotlib not found: no charts", file=sys.stderr)
        return None


def plot_side_by_side(rows, out_dir, title):
    """rows: dicts with workload, dtype and {eager,compile,torchfuse}_copy_pct (numbers)."""
    plt = _pyplot()
    if plt is None:
        return []
    written = []
    for dtype in sorted({r["dtype"] for r in rows}):
        sel = [r for r in rows if r["dtype"] == dtype]
        fig, ax = plt.subplots(figsize=(12, 4.5))
        width = 0.27
        for i, (system, label) in enumerate([("eager", "eager"), ("compile", "torch.compile"),
                                             ("torchfuse", "torchfuse")]):
            xs = [j + (i - 1) * width for j in range(len(sel))]
            ax.bar(xs, [float(r[f"{system}_copy_pct"]) for r in sel], width, label=label)
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([r["workload"] for r in sel], rotation=20, ha="right")
        ax.set_ylabel("% of device-to-device copy bandwidth")
        ax.set_ylim(0, 115)
        ax.axhline(100, color="gray", linewidth=0.8, linestyle="--", label="copy bandwidth")
        ax.set_title(f"{dtype} on {title}")
        ax.legend(loc="upper left", ncol=4)
        fig.tight_layout()
        path = os.path.join(out_dir, f"side_by_side_{dtype}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def plot_models(doc, out_dir):
    """doc: models.json. Kernels per forward/step and ms per call, side by side per model."""
    plt = _pyplot()
    if plt is None:
        return []
    rows = [r for r in doc["forward"] if "error" not in r]
    rows += [dict(r, model=r["model"] if r["model"].endswith("train") else r["model"] + " train")
             for r in doc.get("train", []) if "error" not in r]
    if not rows:
        return []
    fig, (kern, ms) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.27
    systems = [("eager", "eager"), ("inductor", "Inductor"), ("torchfuse", "torchfuse")]
    for i, (system, label) in enumerate(systems):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        bars = kern.bar(xs, [r[f"{system}_kernels"] for r in rows], width, label=label)
        ms.bar(xs, [r[f"{system}_ms"] for r in rows], width, label=label)
        if system == "torchfuse":
            kern.bar(xs, [r["torchfuse_own"] for r in rows], width, color="none",
                     edgecolor="black", hatch="//", label="torchfuse's own kernels")
            for b, r in zip(bars, rows):
                kern.annotate(str(r["torchfuse_kernels"]), (b.get_x() + b.get_width() / 2,
                              b.get_height()), ha="center", va="bottom", fontsize=8)
    for ax, ylabel in ((kern, "kernels per forward (per step: train)"), (ms, "ms per call")):
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r["model"] for r in rows])
        ax.set_ylabel(ylabel)
    kern.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"real models, bf16, on {doc.get('device', '?')} ({doc.get('commit', '?')})")
    fig.tight_layout()
    path = os.path.join(out_dir, "models.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plots(out_dir):
    written = []
    bench = os.path.join(out_dir, "side_by_side.csv")
    if os.path.exists(bench):
        rows = list(csv.DictReader(open(bench)))
        title_file = os.path.join(out_dir, "side_by_side.md")
        title = open(title_file).readline().split(",")[0] if os.path.exists(title_file) else "GPU"
        written += plot_side_by_side(rows, out_dir, title)
    models = os.path.join(out_dir, "models.json")
    if os.path.exists(models):
        written += plot_models(json.load(open(models)), out_dir)
    for path in written:
        print("wrote", path)
    return 0 if written else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "plots":
        return plots(sys.argv[2])
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    fused = {(r["workload"], r["dtype"]): r for r in csv.DictReader(open(sys.argv[1]))}
    base = {(r["workload"], r["dtype"]): r for r in csv.DictReader(open(sys.argv[2]))}
    print("| workload | dtype | eager ms | torch.compile ms | torchfuse ms | torchfuse % copy "
          "| torch.compile % copy | torchfuse / torch.compile time |")
    print("|---|---|---|---|---|---|---|---|")
    for key, f in fused.items():
        b = base.get(key)
        copy = float(f["copy_tbs"])
        if b is None:
            print(f"| {key[0]} | {key[1]} | {float(f['eager_ms']):.4f} | — | "
                  f"{float(f['torchfuse_ms']):.4f} | {float(f['torchfuse_pct_copy']):.1f} | — | — |")
            continue
        ratio = float(f["torchfuse_ms"]) / float(b["compile_ms"])
        print(f"| {key[0]} | {key[1]} | {float(f['eager_ms']):.4f} | {float(b['compile_ms']):.4f} | "
              f"{float(f['torchfuse_ms']):.4f} | {float(f['torchfuse_pct_copy']):.1f} | "
              f"{100 * float(b['compile_tbs']) / copy:.1f} | {ratio:.3f} |")

    if not any("cold_compile_ms" in f for f in fused.values()):
        return
    print()
    print("| workload | dtype | torchfuse cold compile ms | torchfuse warm start ms | kernels "
          "| torch.compile first call ms | cold / first call | variants |")
    print("|---|---|---|---|---|---|---|---|")
    for key, f in fused.items():
        b = base.get(key)
        first = float(b["compile_first_call_ms"]) if b else None
        cold = float(f["cold_compile_ms"])
        print(f"| {key[0]} | {key[1]} | {cold:.1f} | {float(f['warm_compile_ms']):.2f} | "
              f"{f['kernels']} | {'—' if first is None else f'{first:.0f}'} | "
              f"{'—' if first is None else f'{cold / first:.2f}'} | {f['variants']} |")


if __name__ == "__main__":
    sys.exit(main())
