#!/usr/bin/env python3
"""Drives every chapter program with random combinations of flags, good and bad, and small
files, for a bounded time, and checks that each run ends the way docs/pages/bad_inputs.md says
every run ends: within its time limit, with exit code 0, 1 or 2, and on failure one line on
stderr that names the problem.

  tests/cli/random_flags.py BIN_DIR [--seconds S] [--seed N] [--timeout T]

(ctest: RandomFlags.EveryRunEndsCleanly, in the simulator and sanitizer builds.) The runs are
seeded, so a failure repeats: the script prints the failing command line, ready to paste into a
shell. Each finding is kept as a regression test of its own (tests/cli/test_cli_failures.cpp), not
as a seed here.
"""
import argparse
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time

PROGRAMS = ["ch01_cpu_reference", "ch02_contiguous_gpu", "ch03_paged_blocks",
            "ch04_cow_prefix_sharing", "ch05_batched_scheduler", "ch01_kv_calculator"]

# Values for each flag: most good, some bad. The tiny model has 128 tokens and 96 positions.
COMMON = {
    "--prompt-ids": ["1,2", "1,5,9", "1,128", "", "1,,2", "x", "1,2147483648", "-1", "0"],
    "--max-new-tokens": ["0", "1", "4", "95", "97", "-1", "ten", ""],
    "--num-seqs": ["1", "2", "3", "0", "65537", "99999999999"],
    "--kv-budget-mb": ["0", "0.001", "0.02", "0.05", "1", "1e7", "nan", "-1", "1e13", "1e-9"],
    "--temperature": ["0", "0.7", "1", "-1", "nan", "inf"],
    "--top-p": ["0.9", "1", "0", "1.5"],
    "--seed": ["0", "7", "-1", "99999999999999999999"],
    "--threads": ["1", "2", "0", "-1", "100000"],
    "--kv-dtype": ["fp32", "bf16", "fp16", "int4"],
    "--weight-dtype": ["fp32", "bf16"],
    "--bf16-products": ["widen", "pairs", "pairs", "fast"],
    "--device": ["cpu", "cpu", "cpu", "cuda", "tpu"],
    "--json": None,
    "--ignore-eos": None,
    "--top2-gaps": None,
    "--frobnicate": None,
}
PAGED = {
    "--block-size": ["1", "4", "16", "96", "97", "0", "-3"],
    "--shuffle-seed": ["0", "3"],
}
OWN = {
    "ch04_cow_prefix_sharing": {"--samples": ["1", "2", "4", "0", "65537"]},
    "ch05_batched_scheduler": {"--max-batch-tokens": ["1", "8", "64", "0"],
                               "--max-running": ["1", "4", "0"],
                               "--arrival-interval": ["0", "1", "-1"]},
    "ch03_paged_blocks": {"--pool-map": ["MAP", "/dev/full", ""]},
}
CALCULATOR = {
    "--kv-dtype": ["fp32", "bf16", "int4"],
    "--context": ["1", "48", "96", "0", "97", "-5"],
    "--memory-gb": ["1", "0.5", "1e-6", "0", "-1", "nan", "inf", "2e6"],
    "--list-presets": None,
}


def files(tmp):
    """Small workload and prompts files, good and bad, in `tmp`."""
    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path
    workloads = [
        write("good.jsonl", '{"prompt_ids": [1, 4], "max_new_tokens": 0}\n'
                            '{"prompt_ids": [1, 2, 3], "max_new_tokens": 3}\n'),
        write("steps.jsonl", '{"prompt_ids": [1, 2], "max_new_tokens": 2, "arrival_step": 0}\n'
                             '{"prompt_ids": [1, 9], "max_new_tokens": 3, "arrival_step": 4}\n'),
        write("clock.jsonl", '{"prompt_ids": [1, 2], "max_new_tokens": 2, "arrival_s": 0.2}\n'),
        write("far.jsonl", '{"prompt_ids": [1, 2], "max_new_tokens": 2, "arrival_s": 1e308}\n'),
        write("bad.jsonl", '{"prompt_ids": [1, 2], "max_new_token": 2}\n'),
        write("empty.jsonl", ""),
        write("binary.jsonl", "\x00\x01\xff{\n"),
    ]
    prompts = [
        write("prompts.txt", "1,2\n1,3,5\n"),
        write("bad_prompts.txt", "1,2\n1,999\n"),
        write("text_prompts.txt", "Once upon a time\n"),
    ]
    return workloads, prompts


def command(rng, program, workloads, prompts, tmp):
    if program == "ch01_kv_calculator":
        args = ["--model", rng.choice(["tiny", "llama-3-8b", "stories15m", "nope"])]
        for flag in rng.sample(sorted(CALCULATOR), rng.randint(0, 3)):
            values = CALCULATOR[flag]
            args += [flag] if values is None else [flag, rng.choice(values)]
        return args
    args = ["--model", "tiny", "--no-peak"]
    pool = dict(COMMON)
    if program in ("ch03_paged_blocks", "ch04_cow_prefix_sharing", "ch05_batched_scheduler"):
        pool.update(PAGED)
    pool.update(OWN.get(program, {}))
    for flag in rng.sample(sorted(pool), rng.randint(1, 6)):
        values = pool[flag]
        if values is None:
            args.append(flag)
            continue
        value = rng.choice(values)
        args += [flag, os.path.join(tmp, "map.svg") if value == "MAP" else value]
    source = rng.random()
    if source < 0.25:
        args += ["--workload", rng.choice(workloads)]
    elif source < 0.4:
        args += ["--prompts", rng.choice(prompts)]
    if rng.random() < 0.05:  # a repeated flag
        args += ["--max-new-tokens", "2", "--max-new-tokens", "3"]
    return args


def check(program, args, proc, elapsed, timeout):
    """A list of what is wrong with one run (empty: it ended cleanly)."""
    if proc is None:
        return [f"did not end within {timeout} s"]
    problems = []
    if proc.returncode not in (0, 1, 2):
        problems.append(f"exit code {proc.returncode}")
    err = proc.stderr.decode("utf-8", "replace")
    # The serving loop's own progress and waiting lines are not messages.
    lines = [l for l in err.splitlines() if ": waiting for request " not in l
             and " requests done, " not in l]
    if proc.returncode in (1, 2):
        if len(lines) != 1:
            problems.append(f"{len(lines)} message lines on stderr, expected 1")
        elif "internal error" in lines[0]:
            problems.append("an internal error")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds one run may take")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    failures = 0
    runs = 0
    codes = {}
    with tempfile.TemporaryDirectory(prefix="kvheap_random_flags_") as tmp:
        workloads, prompts = files(tmp)
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            program = rng.choice(PROGRAMS)
            args = command(rng, program, workloads, prompts, tmp)
            exe = os.path.join(a.bin_dir, program)
            start = time.monotonic()
            try:
                proc = subprocess.run([exe] + args, capture_output=True, timeout=a.timeout,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                proc = None
            elapsed = time.monotonic() - start
            runs += 1
            if proc is not None:
                codes[proc.returncode] = codes.get(proc.returncode, 0) + 1
            problems = check(program, args, proc, elapsed, a.timeout)
            if problems:
                failures += 1
                print(f"FAIL: {'; '.join(problems)} ({elapsed:.1f} s):\n  "
                      f"{shlex.join([exe] + args)}")
                if proc is not None:
                    print("  stderr: " + proc.stderr.decode("utf-8", "replace")[-2000:]
                          .replace("\n", "\n  stderr: "))
    print(f"random_flags: {runs} runs, seed {a.seed}, exit codes "
          + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items())) + f"; {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
