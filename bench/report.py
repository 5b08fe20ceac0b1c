"""Joins torchfuse_bench's CSV with compile_baseline.py's into one markdown table.

Usage: python3 bench/report.py TORCHFUSE.csv BASELINE.csv
"""
import csv
import sys


def main():
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
    main()
