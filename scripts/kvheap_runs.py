"""What the tour and the rate sweep share: naming this machine and its results files, writing the
default workload, running a chapter program on it, and checking that two runs gave every request
the same greedy ids.
"""
import hashlib
import json
import os
import platform
import random
import re
import subprocess
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_workload  # noqa: E402

CHAPTERS = ["01_cpu_reference", "02_contiguous_gpu", "03_paged_blocks", "04_cow_prefix_sharing",
            "05_batched_scheduler"]

# The default workload, chosen for the story before the first ladder ran: a chat service whose
# requests all start with one system prompt (two full blocks of 16 with BOS), a quarter of them
# asking about one of four short documents, with short questions and outputs of varied length.
# Mean prompt about 44 tokens and mean output about 22: a request uses about a quarter of
# stories15m's 256-position context, as chat requests use a small part of a long context. The
# budget holds 4 max_seq_len reservations, so that reservation fits only a few requests.
WORKLOAD = dict(requests=128, seed=1, system_tokens=31, documents=4, document_tokens=16,
                document_share=0.25, question_median=8, question_sigma=0.5, output_median=16,
                output_sigma=0.7)
BUDGET_RESERVATIONS = 4


def workload_text(model, rate, overrides=None):
    """The default workload (with `overrides`) for `model`'s vocabulary and context, arriving at
    `rate` requests per second (0: all at once), as JSONL text."""
    params = dict(WORKLOAD, **(overrides or {}))
    args = SimpleNamespace(vocab=model["vocab_size"], max_seq_len=model["max_seq_len"], rate=rate,
                           **params)
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in make_workload.make(args))


# The real model's workload: chat questions, each wrapped in SmolLM2's chat template (ChatML with
# the default system message its template writes, which every request shares: 21 tokens), with
# up to CHAT_MAX_NEW tokens of answer, ending where the model ends its turn.
CHAT_MODELS = {"smollm2": "You are a helpful AI assistant named SmolLM, trained by Hugging Face"}
CHAT_MAX_NEW = 64
CHAT_QUESTIONS = [
    "What is the capital of France?", "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.", "List three primary colors.",
    "How many legs does a spider have?", "What is the boiling point of water?",
    "Name a planet in our solar system.", "What does a bee make?",
    "Give me a synonym for happy.", "What is 12 times 12?",
    "Why is the sky blue?", "Suggest a name for a pet cat.",
    "What language is spoken in Brazil?", "Write one sentence about autumn.",
    "What is the largest ocean on Earth?", "How do plants make food?",
    "Tell me a fun fact about octopuses.", "What is a prime number?",
    "Translate 'good morning' into Spanish.", "What is the opposite of cold?",
    "Who wrote Romeo and Juliet?", "What do you call a baby dog?",
    "Describe a rainbow in a few words.", "What is the freezing point of water in Fahrenheit?",
    "Name two fruits that are red.", "What is photosynthesis?",
    "How many days are in a leap year?", "What is the tallest animal?",
    "Give a tip for sleeping well.", "What is the chemical symbol for gold?",
    "Write a short greeting for a birthday card.", "What is gravity?",
]


def chat_workload_text(model, requests, rate, seed):
    """`requests` chat questions (cycling through CHAT_QUESTIONS) in `model`'s chat format, as
    JSONL text of prompts, arriving at `rate` requests per second (0: all at once)."""
    system = CHAT_MODELS[model]
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(requests):
        question = CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)]
        prompt = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}"
                  "<|im_end|>\n<|im_start|>assistant\n")
        request = {"prompt": prompt, "max_new_tokens": CHAT_MAX_NEW}
        if rate > 0:
            t += rng.expovariate(rate)
            request["arrival_s"] = round(t, 6)
        out.append(json.dumps(request, separators=(",", ":")) + "\n")
    return "".join(out)


def write_temp(text, folder, name):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def run_chapter(bin_dir, chapter, flags, label=None):
    """Runs ch<chapter> with `flags` and --json; returns its JSON, or exits naming the failure."""
    exe = os.path.join(bin_dir, "ch" + chapter)
    cmd = [exe, *flags, "--json"]
    shown = " ".join(cmd)
    print("$", shown if len(shown) < 200 else shown[:197] + "...", file=sys.stderr)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{label or 'tour'}: ch{chapter} failed (exit status {done.returncode}):\n"
                 f"{done.stderr.strip()}")
    return json.loads(done.stdout)


def model_config(bin_dir, model):
    """vocab_size, max_seq_len and kv_bytes_per_token of `model`, as chapter 1 reads it."""
    j = run_chapter(bin_dir, CHAPTERS[0], ["--model", model, "--prompt-ids", "1",
                                           "--max-new-tokens", "1", "--no-peak"])
    return j["model_config"]


def generated_ids(j):
    """Each request's generated ids, from a chapter's JSON."""
    if "sequences" in j:
        return [s["generated_ids"] for s in j["sequences"]]
    return [j["generated_ids"]]


def compare_ids(reference, other, name, reference_name="chapter 1"):
    """Checks that run `other` gave every request the ids of run `reference` (which recorded
    --top2-gaps). Returns (near ties, differences) as lines: a first differing token where the
    reference's top-2 logit gap is under its near-tie threshold is a near tie, reported, and the
    rest of that request is not compared; any other is a difference."""
    ref_ids, got_ids = generated_ids(reference), generated_ids(other)
    gaps = [s.get("top2_gaps") for s in reference.get("sequences", [])] or \
        [reference.get("top2_gaps")]
    tie = reference.get("near_tie_gap", 0.0)
    ties, diffs = [], []
    if len(ref_ids) != len(got_ids):
        return ties, [f"{name}: {len(got_ids)} requests where the reference has {len(ref_ids)}"]
    for i, (want, got) in enumerate(zip(ref_ids, got_ids)):
        if want == got:
            continue
        t = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]),
                 min(len(want), len(got)))
        gap = gaps[i][t] if gaps[i] is not None and t < len(gaps[i]) else None
        where = (f"{name}: request {i} token {t} is "
                 f"{got[t] if t < len(got) else 'missing'} where {reference_name} gives "
                 f"{want[t] if t < len(want) else 'nothing'}")
        if gap is not None and gap < tie and t < len(want) and t < len(got):
            ties.append(f"{where}: a near tie (top-2 gap {gap:.2g} < {tie:.2g})")
        else:
            diffs.append(where + (f" (top-2 gap {gap:.2g})" if gap is not None else ""))
    return ties, diffs


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


def results_path(folder, machine, kind="ladder"):
    """FOLDER/<kind>-<cpu>.md, or, when another machine wrote that file, a name of this machine's
    own: its CPU family, model and cache (ladder-<cpu>-f6-m167-480mib.md), else a hash of its
    machine line. Said on stderr, so that a reader knows where the table went."""
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_name().lower()).strip("-")
    plain = os.path.join(folder, f"{kind}-{slug}.md")
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
        path = os.path.join(folder, f"{kind}-{slug}-{suffix}.md")
        if not written_by_another_machine(path, machine):
            print(f"{kind}: {plain} holds another machine's results; this one's go to {path}",
                  file=sys.stderr)
            return path
    sys.exit(f"{kind}: {plain} and the names tried after it hold other machines' results; "
             "pass --out FILE")


