#!/usr/bin/env python3
"""The ladder: one workload served by every chapter, in one KV budget, on one device.

Each chapter program serves the same requests (scripts/kvheap_runs.py's default workload) with
--json; this script checks that every chapter gave every request chapter 1's greedy ids (near ties
reported, anything else fails), and prints one table, a row per chapter with its ratio to the row
above. Tokens/s comes from a saturating load (every request at the start), TTFT p99 from a second
run at a stated rate below saturation: half of chapter 3's saturated request rate unless --rate
says otherwise. The table goes to docs/results/ladder-<cpu>.md, headed by a line naming the
machine (another machine's file is kept: see results_path), and the plots to docs/images/.
"""
import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvheap_runs import (BUDGET_RESERVATIONS, CHAPTERS, CHAT_MAX_NEW, CHAT_MODELS,  # noqa: E402
                         CHAT_QUESTIONS, WORKLOAD, chat_workload_text, compare_ids, cpu_name,
                         machine_line, model_config, results_path, run_chapter, workload_text,
                         write_temp)

IDEAS = {
    "01_cpu_reference": "reserve max_seq_len per request",
    "02_contiguous_gpu": "the same reservation on the device",
    "03_paged_blocks": "block pool + page tables, worst case admitted",
    "04_cow_prefix_sharing": "+ shared prefix blocks, computed and read once",
    "05_batched_scheduler": "+ continuous batching, admission by free blocks",
}


def chapter_flags(chapter, args, workload, budget_mb, device):
    flags = ["--model", args.model, "--workload", workload, "--kv-budget-mb", f"{budget_mb:.6f}",
             "--temperature", "0", "--device", "cpu" if chapter == CHAPTERS[0] else device,
             "--kv-dtype", args.kv_dtype]
    if args.model not in CHAT_MODELS:  # synthetic ids: every output runs to its length
        flags.append("--ignore-eos")
    if chapter != CHAPTERS[0]:  # chapter 1 is the oracle: it always computes with fp32 weights
        flags += ["--weight-dtype", args.weight_dtype]
    if chapter == "04_cow_prefix_sharing":
        flags += ["--samples", "1"]
    if chapter == CHAPTERS[0]:
        flags.append("--top2-gaps")  # the reference: near ties are told apart by its gaps
    if args.no_peak:
        flags.append("--no-peak")
    return flags


def serve_all(args, workload, budget_mb, device, label, oracle_workload=None):
    """Runs every chapter on `workload` (chapter 1 on `oracle_workload` where given: the first
    requests of it); returns {chapter: json}, and fails loudly on ids that differ from chapter
    1's (a planted difference included, for the test of this check)."""
    runs = {}
    for chapter in CHAPTERS:
        served = oracle_workload if chapter == CHAPTERS[0] and oracle_workload else workload
        runs[chapter] = run_chapter(args.bin, chapter,
                                    chapter_flags(chapter, args, served, budget_mb, device))
        if args.plant_difference and chapter.startswith(args.plant_difference):
            seqs = runs[chapter]["sequences"]
            seqs[0]["generated_ids"][0] = (seqs[0]["generated_ids"][0] + 1) % 3 + 3
    failed = []
    reference = runs[CHAPTERS[0]]
    for chapter in CHAPTERS[1:]:
        other = runs[chapter]
        if oracle_workload:  # compare the requests chapter 1 served
            n = len(reference["sequences"])
            other = dict(other, sequences=other["sequences"][:n])
        ties, diffs = compare_ids(reference, other, f"{label}, ch{chapter}")
        for line in ties:
            print("tour: " + line, file=sys.stderr)
        failed += diffs
    if failed:
        sys.exit("tour: chapters disagree on greedy ids, which must be equal:\n  " +
                 "\n  ".join(failed))
    return runs


def ratio(value, above, higher_is_better=True):
    if above is None or not above or value is None:
        return ""
    r = value / above
    return f" ({r:.2f}x)"


def table(rows):
    """The ladder's markdown rows: a chapter each, with ratios to the row above."""
    head = ("| chapter | idea | requests at once | KV held per request KB | waste % | "
            "prefill rows | KV read/step MB | tokens/s | TTFT p99 ms |")
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    above = None
    for r in rows:
        cells = [r["chapter"], IDEAS[r["chapter"]]]
        for key, fmt in (("running", "{:.0f}"), ("held_kb", "{:.0f}"), ("waste", "{:.1f}"),
                         ("prefill_rows", "{:.0f}"), ("kv_read_mb", "{:.3f}"),
                         ("tokens_per_s", "{:.0f}"), ("ttft_p99_ms", "{:.0f}")):
            text = fmt.format(r[key])
            if key != "waste":
                text += ratio(r[key], above[key] if above else None)
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
        above = r
    return lines


def per_request_at_peak(timeline, key):
    """timeline[key] / requests running, at the pass where timeline[key] is largest (the first)."""
    values = timeline[key]
    i = max(range(len(values)), key=lambda k: (values[k], -k))
    return values[i] / max(timeline["running"][i], 1)


def row(chapter, saturated, rated):
    s, t = saturated["serving"], rated["serving"]
    return {
        "chapter": chapter,
        "running": s["peak_running"],
        "held_kb": per_request_at_peak(saturated["timeline"], "kv_held_bytes") / 1e3,
        "waste": 100 * saturated["metrics"]["kv_waste_fraction"],
        "prefill_rows": s["prefill_rows"],
        "kv_read_mb": s["kv_bytes_per_step"] / 1e6,
        "tokens_per_s": s["generated_tokens_per_s"],
        "ttft_p99_ms": 1e3 * t["ttft_s"]["p99"],
        "seconds": s["seconds"],
        "gbps": s["gbps"], "peak_gbps": s["peak_gbps"], "weight_mb": s["weight_bytes_per_step"] / 1e6,
        "preemptions": s["preemptions"], "hit_rate": s["prefix_hit_rate"],
        "rows_per_pass": (s["prefill_rows"] + s["decode_rows"]) / max(s["passes"], 1),
        # The report's napkin math: a row multiplies by every matrix weight once, 2 FLOPs a weight,
        # over the time in passes (attention over at most 256 positions adds under 3 %).
        "gflops": s["matmul_gflops"], "peak_gflops": s["peak_gflops"],
        "rated_tokens_per_s": t["generated_tokens_per_s"], "ttft_p50_ms": 1e3 * t["ttft_s"]["p50"],
    }


def plot(rows, runs, rate, images, slug, title):
    """The ladder's bars and the KV occupancy of chapters 3-5 over the saturating run."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tour: no matplotlib (python3-matplotlib): no plots", file=sys.stderr)
        return []
    os.makedirs(images, exist_ok=True)
    written = []
    metrics = [("running", "requests at once"), ("prefill_rows", "prefill rows computed"),
               ("held_kb", "KV held per request"), ("tokens_per_s", "tokens/s"),
               ("ttft_p99_ms", f"TTFT p99 at {rate:g} req/s")]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(metrics)
    for k, (key, name) in enumerate(metrics):
        base = rows[0][key] or 1
        xs = [i + (k - len(metrics) / 2 + 0.5) * width for i in range(len(rows))]
        ax.bar(xs, [r[key] / base for r in rows], width, label=name)
    ax.set_yscale("log")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"ch{r['chapter'][:2]}" for r in rows])
    ax.set_ylabel(f"relative to chapter {int(rows[0]['chapter'][:2])} (log scale)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    path = os.path.join(images, f"ladder-{slug}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    shown = [c for c in CHAPTERS[2:] if c in runs]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 2.4 * len(shown)), sharex=True)
    for ax, chapter in zip(axes, shown):
        t = runs[chapter]["timeline"]
        mb = lambda key: [b / 1e6 for b in t[key]]  # noqa: E731
        ax.stackplot(t["seconds"], mb("kv_held_bytes"), mb("kv_cached_bytes"),
                     mb("kv_free_bytes"), labels=["held by running requests",
                                                  "cached (prefix index)", "free"],
                     colors=["#3b75af", "#ef8636", "#dddddd"], step="post")
        ax2 = ax.twinx()
        ax2.step(t["seconds"], t["running"], color="black", lw=0.8, where="post")
        ax2.set_ylabel("running", fontsize=8)
        ax.set_ylabel("KV MB", fontsize=8)
        ax.set_title(f"ch{chapter}", fontsize=9, loc="left")
    axes[0].legend(fontsize=7, loc="lower center", ncol=3, framealpha=0.9)
    axes[-1].set_xlabel("seconds (every request arrives at 0)")
    fig.tight_layout()
    path = os.path.join(images, f"occupancy-{slug}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/cpu/bin", help="folder with the chapter programs")
    ap.add_argument("--model", default="stories15m",
                    help="preset name, .bin file or safetensors folder; or smollm2, the real chat "
                         "model (scripts/fetch-model.sh smollm2), served real chat questions")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (chapter 1 always runs on the cpu)")
    ap.add_argument("--weight-dtype", default="fp32",
                    help="weights of chapters 2-5 (fp16 and bf16 need --device cuda; chapter 1, "
                         "the oracle, computes in fp32)")
    ap.add_argument("--kv-dtype", default="fp32", help="the KV cache's element type, every chapter")
    ap.add_argument("--oracle-requests", type=int, default=0,
                    help="chapter 1 serves only the first N requests, and the ids are compared on "
                         "those; its row leaves the table (for a model the CPU serves slowly)")
    ap.add_argument("--requests", type=int, default=0,
                    help=f"requests in the workload (default {WORKLOAD['requests']}; "
                         f"{len(CHAT_QUESTIONS)} for smollm2)")
    ap.add_argument("--rate", type=float, default=0,
                    help="arrival rate of the latency run, requests/s (default: half of chapter "
                         "3's saturated request rate)")
    ap.add_argument("--results", default="docs/results", help="where to write ladder-<cpu>.md")
    ap.add_argument("--images", default="docs/images", help="where to write the plots")
    ap.add_argument("--out", help="the file to write instead of RESULTS/ladder-<cpu>.md")
    ap.add_argument("--no-plots", action="store_true", help="write no plots")
    ap.add_argument("--no-peak", action="store_true",
                    help="skip each program's bandwidth and multiply-add probes (no %% of "
                         "peak columns)")
    ap.add_argument("--plant-difference", metavar="NN",
                    help="change one id of chapter NN's output before the check (to show that "
                         "the check fails)")
    args = ap.parse_args()
    chat = args.model in CHAT_MODELS
    if not args.requests:
        args.requests = len(CHAT_QUESTIONS) if chat else WORKLOAD["requests"]
    machine = machine_line()
    path = args.out or results_path(args.results, machine, f"ladder-{args.model}" if chat else "ladder")
    slug = re.sub(r"^ladder-|\.md$", "", os.path.basename(path))
    missing = [c for c in CHAPTERS if not os.path.exists(os.path.join(args.bin, "ch" + c))]
    if missing:
        sys.exit(f"tour: {args.bin} lacks ch{', ch'.join(missing)}; build them first "
                 "(scripts/tour.sh does)")

    model = model_config(args.bin, args.model)
    reservation = model["max_seq_len"] * model["kv_bytes_per_token"]
    budget_mb = BUDGET_RESERVATIONS * reservation / 1e6
    overrides = {"requests": args.requests}
    oracle = 0 < args.oracle_requests < args.requests
    first = lambda text: "".join(text.splitlines(True)[:args.oracle_requests])  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        make = (lambda r: chat_workload_text(args.model, args.requests, r, WORKLOAD["seed"])) if chat \
            else (lambda r: workload_text(model, r, overrides))
        text = make(0)
        saturating = write_temp(text, tmp, "saturating.jsonl")
        few = write_temp(first(text), tmp, "oracle.jsonl") if oracle else None
        runs = serve_all(args, saturating, budget_mb, args.device, "all at once", few)
        rate = args.rate or float(f"{runs['03_paged_blocks']['serving']['requests_per_s'] / 2:.2g}")
        text = make(rate)
        rated_path = write_temp(text, tmp, "rated.jsonl")
        few = write_temp(first(text), tmp, "oracle-rated.jsonl") if oracle else None
        rated = serve_all(args, rated_path, budget_mb, args.device, f"{rate:g} requests/s", few)
    shown = CHAPTERS[1:] if oracle else CHAPTERS
    rows = [row(c, runs[c], rated[c]) for c in shown]

    device = runs[CHAPTERS[1]]["metrics"]["device"]
    w = dict(WORKLOAD, requests=args.requests)
    lines = [f"# kvheap ladder on {cpu_name()}", "", machine, "",
             f"Model `{args.model}` ({model['max_seq_len']} positions, "
             f"{model['kv_bytes_per_token']} B of {args.kv_dtype} K and V per position), "
             f"{args.weight_dtype} weights, greedy, "
             f"{device}{' (chapter 1 on the cpu, fp32 weights)' if args.device != 'cpu' else ''}. "
             f"KV budget {budget_mb:.3f} MB: {BUDGET_RESERVATIONS} max_seq_len reservations.",
             "",
             (f"Workload (`scripts/kvheap_runs.py`): {args.requests} real chat questions, each in "
              "the model's chat template with the default system message it writes, which every "
              f"request shares; at most {CHAT_MAX_NEW} tokens of answer, ending where the model "
              "ends its turn." if chat else
              f"Workload (`scripts/kvheap_runs.py`, `scripts/make_workload.py`, seed {w['seed']}): "
              f"{w['requests']} requests, each [BOS] + a {w['system_tokens']}-token system prompt "
              f"they all share + (for {w['document_share']:.0%}) one of {w['documents']} "
              f"{w['document_tokens']}-token documents + a question of lognormal length (median "
              f"{w['question_median']}, sigma {w['question_sigma']}); max_new_tokens lognormal "
              f"(median {w['output_median']}, sigma {w['output_sigma']}), generated in full "
              "(--ignore-eos)."),
             "",
             "Requests at once (the most at one pass); KV held per request (the bytes held over "
             "the requests running, at the pass that held the most); waste (the share of what was "
             "held that holds no token, at the pass that stored the most); prefill rows; KV read "
             "per decode step; "
             "tokens/s (generated, over the whole run): every request "
             f"arriving at once (saturating). TTFT p99: Poisson arrivals at {rate:g} requests/s "
             "(half of chapter 3's saturated request rate unless --rate was given). "
             "In parentheses: the ratio to the row above.", ""]
    lines += table(rows)
    lines += ["", "Below, per saturating run: matmul GFLOP/s counts 2 FLOPs per matrix weight per "
                  "row, over the time in forward passes; GB/s is weights plus KV per decode step; "
                  "each program measured its read and fp32 multiply-add peaks at its start (the "
                  "two roofs of the roofline; a GPU's FMA peak is not measured).",
              "", "| chapter | run s | rows/pass | matmul GFLOP/s | preemptions | prefix hit rate "
                  "| weights MB/pass | GB/s | % of read peak | % of FMA peak | tokens/s at the rate "
                  "| TTFT p50 ms |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pct = f"{100 * r['gbps'] / r['peak_gbps']:.1f}" if r["peak_gbps"] else "-"
        fma = f"{100 * r['gflops'] / r['peak_gflops']:.1f}" if r["peak_gflops"] else "-"
        lines.append(f"| {r['chapter']} | {r['seconds']:.2f} | {r['rows_per_pass']:.1f} | "
                     f"{r['gflops']:.1f} | {r['preemptions']} | "
                     f"{100 * r['hit_rate']:.1f} % | {r['weight_mb']:.1f} | {r['gbps']:.2f} | "
                     f"{pct} | {fma} | {r['rated_tokens_per_s']:.0f} | {r['ttft_p50_ms']:.0f} |")
    if oracle:
        lines += ["", f"Chapter 1, the CPU oracle, served the first {args.oracle_requests} "
                      "requests of both runs, and its row is not in the table: every chapter gave "
                      "those requests chapter 1's greedy ids (near ties, if any, are listed on "
                      "stderr)."]
    else:
        lines += ["", "Every chapter gave every request chapter 1's greedy ids in both runs "
                      "(near ties, if any, are listed on stderr)."]
    if not args.no_plots:
        images = plot(rows, runs, rate, args.images, slug,
                      f"kvheap ladder, {args.model}, {w['requests']} requests, KV budget "
                      f"{budget_mb:.2f} MB, {device if args.device != 'cpu' else cpu_name()}")
        rel = [os.path.relpath(p, os.path.dirname(os.path.abspath(path))) for p in images]
        lines += [""] + [f"![{os.path.basename(p)}]({p})" for p in rel]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"tour: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
