#!/usr/bin/env python3
"""The rate sweep: chapters 3, 4 and 5 on the ladder's workload at a range of Poisson arrival
rates, in the ladder's KV budget, and what each gives in tokens/s and TTFT p99 at each rate.

The rates are multiples of chapter 3's saturated request rate (every request arriving at once),
measured first in the same run, unless --rates names them. The table goes to
docs/results/sweep-<cpu>.md under a line naming the machine, the plot to
docs/images/sweep-<cpu>.png. Not part of the tour: it takes several minutes.

  python3 scripts/sweep.py --bin build/cpu/bin
"""
import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvheap_runs import (BUDGET_RESERVATIONS, WORKLOAD, compare_ids, cpu_name,  # noqa: E402
                         machine_line, model_config, results_path, run_chapter, workload_text,
                         write_temp)

SWEPT = ["03_paged_blocks", "04_cow_prefix_sharing", "05_batched_scheduler"]
MULTIPLES = [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]


def flags(chapter, args, workload, budget_mb):
    f = ["--model", args.model, "--workload", workload, "--kv-budget-mb", f"{budget_mb:.6f}",
         "--ignore-eos", "--temperature", "0", "--device", args.device, "--no-peak"]
    if chapter == "04_cow_prefix_sharing":
        f += ["--samples", "1"]
    if chapter == SWEPT[0]:
        f.append("--top2-gaps")  # chapter 3 is the reference here: its ids equal chapter 1's
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/cpu/bin", help="folder with the chapter programs")
    ap.add_argument("--model", default="stories15m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--requests", type=int, default=WORKLOAD["requests"])
    ap.add_argument("--rates", help="comma-separated requests/s (default: multiples of chapter "
                                    "3's saturated rate: " + ", ".join(map(str, MULTIPLES)) + ")")
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--images", default="docs/images")
    ap.add_argument("--out", help="the file to write instead of RESULTS/sweep-<cpu>.md")
    args = ap.parse_args()
    machine = machine_line()
    path = args.out or results_path(args.results, machine, "sweep")
    slug = re.sub(r"^sweep-|\.md$", "", os.path.basename(path))
    model = model_config(args.bin, args.model)
    budget_mb = BUDGET_RESERVATIONS * model["max_seq_len"] * model["kv_bytes_per_token"] / 1e6
    overrides = {"requests": args.requests}
    results = {c: [] for c in SWEPT}
    with tempfile.TemporaryDirectory() as tmp:
        sat = write_temp(workload_text(model, 0, overrides), tmp, "saturating.jsonl")
        saturated = run_chapter(args.bin, SWEPT[0], flags(SWEPT[0], args, sat, budget_mb), "sweep")
        base = saturated["serving"]["requests_per_s"]
        rates = ([float(r) for r in args.rates.split(",")] if args.rates else
                 [float(f"{m * base:.2g}") for m in MULTIPLES])
        for rate in rates:
            w = write_temp(workload_text(model, rate, overrides), tmp, f"rate-{rate:g}.jsonl")
            runs = {c: run_chapter(args.bin, c, flags(c, args, w, budget_mb), "sweep")
                    for c in SWEPT}
            for c in SWEPT[1:]:
                ties, diffs = compare_ids(runs[SWEPT[0]], runs[c], f"{rate:g} req/s, ch{c}",
                                          "chapter 3")
                for line in ties:
                    print("sweep: " + line, file=sys.stderr)
                if diffs:
                    sys.exit("sweep: chapters disagree on greedy ids:\n  " + "\n  ".join(diffs))
            for c in SWEPT:
                s = runs[c]["serving"]
                results[c].append((rate, s["generated_tokens_per_s"], 1e3 * s["ttft_s"]["p99"],
                                   1e3 * s["ttft_s"]["p50"], s["peak_running"]))

    lines = [f"# kvheap rate sweep on {cpu_name()}", "", machine, "",
             f"Model `{args.model}`, {args.device}, KV budget {budget_mb:.3f} MB "
             f"({BUDGET_RESERVATIONS} max_seq_len reservations), the ladder's workload "
             f"(`scripts/kvheap_runs.py`) with {args.requests} requests arriving as a Poisson "
             f"process at each rate. Chapter 3's saturated rate (all at once): {base:.1f} "
             "requests/s.", "",
             "| requests/s | " + " | ".join(f"ch{c[:2]} tokens/s | ch{c[:2]} TTFT p50 ms | "
                                             f"ch{c[:2]} TTFT p99 ms" for c in SWEPT) + " |",
             "|---:|" + "---:|" * (3 * len(SWEPT))]
    for i, rate in enumerate(rates):
        cells = [f"{rate:g}"]
        for c in SWEPT:
            _, tps, p99, p50, _ = results[c][i]
            cells += [f"{tps:.0f}", f"{p50:.0f}", f"{p99:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        for c in SWEPT:
            xs = [r[0] for r in results[c]]
            a.plot(xs, [r[1] for r in results[c]], marker="o", label=f"ch{c}")
            b.plot(xs, [r[2] for r in results[c]], marker="o", label=f"ch{c}")
        a.set_xlabel("arrival rate, requests/s")
        a.set_ylabel("generated tokens/s")
        b.set_xlabel("arrival rate, requests/s")
        b.set_ylabel("TTFT p99, ms")
        b.set_yscale("log")
        a.legend(fontsize=8)
        fig.suptitle(f"kvheap rate sweep, {args.model}, KV budget {budget_mb:.2f} MB, "
                     f"{cpu_name()}", fontsize=9)
        fig.tight_layout()
        os.makedirs(args.images, exist_ok=True)
        image = os.path.join(args.images, f"sweep-{slug}.png")
        fig.savefig(image, dpi=110)
        rel = os.path.relpath(image, os.path.dirname(os.path.abspath(path)))
        lines += ["", f"![sweep]({rel})"]
    except ImportError:
        print("sweep: no matplotlib (python3-matplotlib): no plot", file=sys.stderr)
    text = "\n".join(lines) + "\n"
    print(text)
    with open(path, "w") as f:
        f.write(text)
    print(f"sweep: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
