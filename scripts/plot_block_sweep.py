#!/usr/bin/env python3
"""Plots the block-size sweep of bench_paged_attention_gpu(_cpu): attention time and tail waste vs
block size, one line per CSV.

The benchmarks write PREFIX.csv with the columns
    block_size, paged_ms, contiguous_ms, ratio, gbps, tail_waste_pct, slots, tokens
and this script turns one or more of them into a PNG (matplotlib, Agg backend, so no display is
needed). Left panel: paged attention time per block size, with the contiguous layout timed
alongside as a dashed line of the same colour. Right panel: the share of held slots left empty in
the sequences' last blocks.

    python3 scripts/plot_block_sweep.py docs/results/block_size_sweep_cpu.csv
    python3 scripts/plot_block_sweep.py cpu.csv gpu.csv --out docs/images/block_size_sweep.png
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: works on machines without a display
import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)

COLUMNS = ("block_size", "paged_ms", "contiguous_ms", "tail_waste_pct")


def read_sweep(path):
    """Returns the sweep's rows as a dict of column -> list, sorted by block size."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        sys.exit(f"{path}: missing columns {', '.join(missing)}; "
                 "is it a sweep written by bench_paged_attention_gpu(_cpu)?")
    rows.sort(key=lambda r: int(r["block_size"]))
    return {c: [float(r[c]) for r in rows] for c in COLUMNS}


def label_of(path):
    """'block_size_sweep_cpu.csv' -> 'cpu'."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return stem.replace("block_size_sweep_", "") or stem


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="sweep CSV files written by the benchmarks")
    ap.add_argument("--out", help="PNG to write (default: docs/images/<first CSV's name>.png)")
    ap.add_argument("--title", default="Paged attention: block size vs time and tail waste")
    args = ap.parse_args()

    out = args.out or os.path.join(
        "docs", "images", os.path.splitext(os.path.basename(args.csv[0]))[0] + ".png")
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, path in enumerate(args.csv):
        s = read_sweep(path)
        color = f"C{i}"
        name = label_of(path)
        ax_t.plot(s["block_size"], s["paged_ms"], "o-", color=color, label=f"{name}: paged")
        ax_t.plot(s["block_size"], s["contiguous_ms"], "--", color=color, alpha=0.7,
                  label=f"{name}: contiguous (same batch)")
        ax_w.plot(s["block_size"], s["tail_waste_pct"], "o-", color=color, label=name)

    sizes = sorted({int(b) for path in args.csv for b in read_sweep(path)["block_size"]})
    for ax in (ax_t, ax_w):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])  # 1, 2, 4, ... rather than 2^k
        ax.minorticks_off()
        ax.set_xlabel("block size (tokens per block)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    if len(args.csv) > 1:
        ax_t.set_yscale("log")  # devices differ by orders of magnitude
    else:
        ax_t.set_ylim(bottom=0)
    ax_t.set_ylabel("attention time per call (ms)")
    ax_t.set_title("time: small blocks scatter the reads")
    ax_w.set_ylabel("tail waste (% of held slots empty)")
    ax_w.set_ylim(bottom=0)
    ax_w.set_title("memory: large blocks strand their tails")
    fig.suptitle(args.title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
