#!/usr/bin/env python3
"""Runs every built chapter on one model and prints a table comparing their cache policies.

Each chapter program prints one JSON object with --json; this script only collects and formats
those numbers. It writes the same table to docs/results/tour-<cpu>.md, headed by a line that
names the machine; where another machine wrote that file, it keeps it and writes a name of this
machine's own (--out names the file outright).
"""
import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys

# A 48-token prompt for the rows that serve several sequences of one prompt: three full blocks of
# 16 that chapter 4 can share. The ids only need to be in the vocabulary, and the smallest built-in
# one, the tiny model's, has 128 tokens.
LONG_PROMPT = ",".join(["1"] + [str(2 + 2 * i) for i in range(47)])

# (chapter, policy, extra flags). Every chapter decodes the same single sequence [BOS]; chapter 3
# also serves eight at once in the memory chapter 2 would reserve for them, and eight copies of a
# longer prompt, which chapter 4 serves as eight forks of one and chapter 5 as eight requests that
# find the prompt's blocks in the prefix index, prefilled in chunks beside the others' decoding.
CHAPTERS = [
    ("01_cpu_reference", "reserve max_seq_len per sequence (CPU)", []),
    ("02_contiguous_gpu", "the same reservation, on the device or the CPU twins", []),
    ("03_paged_blocks", "block pool + page tables, block size 16", ["--num-seqs", "1"]),
    ("03_paged_blocks", "8 sequences in 8 reservations' memory", ["--num-seqs", "8"]),
    ("03_paged_blocks", "8 copies of a 48-token prompt", ["--num-seqs", "8", "--prompt-ids", LONG_PROMPT]),
    ("04_cow_prefix_sharing", "the same 8 as forks of one prompt (copy-on-write)",
     ["--samples", "8", "--prompt-ids", LONG_PROMPT]),
    ("05_batched_scheduler", "8 requests of that prompt, continuous batching, 16 rows per pass",
     ["--num-seqs", "8", "--prompt-ids", LONG_PROMPT, "--max-batch-tokens", "16"]),
]


def cpu_name():
    """The CPU's model name without trademark signs, clock or the words CPU and Processor."""
    name = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1]
                    break
    except OSError:
        pass
    name = re.sub(r"\((R|TM)\)|@.*$|\b(CPU|Processor)\b", " ", name, flags=re.IGNORECASE)
    return " ".join(name.split()) or "cpu"


def cpu_model_numbers():
    """'family F, model M' from /proc/cpuinfo (x86), or '' where it does not say."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break  # the first processor's block is enough
    except OSError:
        pass
    if "cpu family" in fields and "model" in fields:
        return f"family {fields['cpu family']}, model {fields['model']}"
    return ""


def last_level_cache_bytes():
    """The size of the CPU's largest cache level, from sysfs, or 0 where it does not say."""
    best = (0, 0)  # (level, bytes)
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        indices = [i for i in os.listdir(base) if i.startswith("index")]
    except OSError:
        return 0
    for index in indices:
        try:
            with open(os.path.join(base, index, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, index, "size")) as f:
                size = f.read().strip()  # "491520K"
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        if size.rstrip("KMG").isdigit():
            best = max(best, (level, int(size.rstrip("KMG")) * scale))
    return best[1]


def machine_line():
    """One line that tells machines apart: two VMs may report the same CPU name ('Intel Xeon')
    while their processors, caches and memory differ, and their results must not mix."""
    name = cpu_name()
    numbers = cpu_model_numbers()
    parts = [f"{name} ({numbers})" if numbers else name, f"{os.cpu_count() or '?'} logical CPUs"]
    llc = last_level_cache_bytes()
    if llc >= 2**20:
        parts.append(f"{llc / 2**20:.0f} MiB last-level cache")
    elif llc:
        parts.append(f"{llc / 2**10:.0f} KiB last-level cache")
    try:
        parts.append(f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB memory")
    except (ValueError, OSError):
        pass
    return "machine: " + ", ".join(parts)


def written_by_another_machine(path, machine):
    """True when path exists and its machine line is not this one (or it has none: a file from
    before the line was written, or one a person edited, is kept too)."""
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return not any(line.strip() == machine for line in f)


def results_path(folder, machine):
    """FOLDER/tour-<cpu>.md, or, when another machine wrote that file, a name of this machine's
    own: its CPU family, model and cache (tour-<cpu>-f6-m167-480mib.md), else a hash of its
    machine line. Said on stderr, so that a reader knows where the table went."""
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_name().lower()).strip("-")
    plain = os.path.join(folder, f"tour-{slug}.md")
    if not written_by_another_machine(plain, machine):
        return plain
    numbers = re.findall(r"\d+", cpu_model_numbers())
    detail = [f"f{numbers[0]}-m{numbers[1]}"] if len(numbers) == 2 else []
    llc = last_level_cache_bytes()
    if llc >= 2**20:
        detail.append(f"{llc // 2**20}mib")
    suffixes = ["-".join(detail)] if detail else []
    suffixes.append(hashlib.sha1(machine.encode()).hexdigest()[:8])
    for suffix in suffixes:
        path = os.path.join(folder, f"tour-{slug}-{suffix}.md")
        if not written_by_another_machine(path, machine):
            print(f"tour: {plain} holds another machine's results; this one's go to {path}",
                  file=sys.stderr)
            return path
    sys.exit(f"tour: {plain} and the names tried after it hold other machines' results; "
             "pass --out FILE")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", default="build/cpu/bin", help="folder with the chapter programs")
    ap.add_argument("--model", default="stories15m", help="preset name, .bin file or safetensors folder")
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--results", default="docs/results", help="where to write tour-<cpu>.md")
    ap.add_argument("--out", help="the file to write instead of RESULTS/tour-<cpu>.md")
    ap.add_argument("--no-peak", action="store_true",
                    help="skip each program's bandwidth probe (no %% of peak column)")
    args = ap.parse_args()
    machine = machine_line()
    path = args.out or results_path(args.results, machine)

    rows = []
    for name, policy, extra in CHAPTERS:
        exe = os.path.join(args.bin, "ch" + name)
        if not os.path.exists(exe):
            continue
        prompt = [] if "--prompt-ids" in extra else ["--prompt-ids", "1"]
        cmd = [exe, "--model", args.model, "--max-new-tokens", str(args.max_new_tokens),
               "--temperature", "0", "--ignore-eos", "--json"] + prompt + extra
        if args.no_peak:
            cmd.append("--no-peak")
        print("$", " ".join(cmd if len(" ".join(cmd)) < 160 else cmd[:-1] + ["..."]), file=sys.stderr)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"tour: ch{name} failed (exit status {done.returncode}):\n{done.stderr.strip()}")
        out = done.stdout
        j = json.loads(out)
        m = j["metrics"]
        if "sequences_fit_paged" in m:
            policy += (f" (fits {m['sequences_fit_paged']} sequences where reservation fits "
                       f"{m['sequences_fit_contiguous']})")
        rows.append((name, policy, m))

    if not rows:
        sys.exit("tour: no chapter programs found in " + args.bin)
    device = rows[0][2]["device"]
    header = ("| chapter | policy | KV reserved MB | KV used MB | waste % | decode tokens/s | "
              "MB read/step | GB/s | % of peak |")
    lines = [f"# kvheap tour on {cpu_name()}", "", machine, "",
             f"model `{args.model}`, prompt [BOS] unless the row says otherwise, {args.max_new_tokens} new "
             f"tokens, greedy, {device}",
             "", header, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, policy, m in rows:
        mb_step = (m["weight_bytes_per_step"] + m["kv_bytes_per_step"]) / 1e6
        mark = "*" if m.get("step_partly_cached") else ""
        pct = f"{100.0 * m['decode_gbps'] / m['peak_gbps']:.1f}{mark}" if m["peak_gbps"] else "-"
        lines.append(f"| {name} | {policy} | {m['kv_reserved_bytes'] / 1e6:.2f} | "
                     f"{m['kv_used_bytes'] / 1e6:.2f} | {100 * m['kv_waste_fraction']:.1f} | "
                     f"{m['decode_tokens_per_s']:.1f} | {mb_step:.2f} | {m['decode_gbps']:.2f} | "
                     f"{pct} |")
    if rows[0][2]["peak_gbps"]:
        lines += ["", f"peak: {rows[0][2]['peak_kind']} measured by each program at start "
                      f"({rows[0][2]['peak_gbps']:.2f} GB/s for chapter 1)."]
    # One note per cache size: in a CUDA build chapter 1's peak is the CPU's, the others' the GPU's.
    notes = sorted({m["cache_note"] for _, _, m in rows if m.get("step_partly_cached")})
    for note in notes:
        lines += ["", f"\\* {note[0].upper()}{note[1:]}."]
    if any(name == "05_batched_scheduler" for name, _, _ in rows):
        lines += ["", "Chapter 5's passes mix prompt chunks and decode rows, so its tokens/s counts "
                      "every generated token over the whole run, prompts included, and its KV "
                      "columns are taken at the pass that held the most."]
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(table)
    print(f"tour: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
