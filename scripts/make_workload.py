#!/usr/bin/env python3
"""Writes a seeded workload for the chapter programs' --workload flag (docs/pages/workloads.md).

Every request's prompt is [BOS] + a system prompt all requests share + (for some) one of a few
documents + a question of its own; prompt-question and output lengths are lognormal, arrivals
Poisson at --rate requests per second, or all at once. The same arguments always write the same
file. A summary goes to stderr.

  scripts/make_workload.py --requests 128 --rate 20 --out /tmp/w.jsonl
"""
import argparse
import json
import math
import random
import sys

BOS = 1
FIRST_ID = 3  # ids 0-2 are <unk>, BOS and EOS in the llama2.c vocabularies


def lognormal_length(rng, median, sigma, lo, hi):
    """A lognormal draw around `median` (sigma of its log), rounded and clipped to [lo, hi]."""
    return max(lo, min(hi, int(round(rng.lognormvariate(math.log(median), sigma)))))


def make(args):
    """The requests, as dicts of the workload format, in arrival order."""
    if args.vocab <= FIRST_ID:
        sys.exit(f"make_workload: --vocab {args.vocab} leaves no ids from {FIRST_ID} to draw")
    rng = random.Random(args.seed)
    ids = lambda n: [rng.randrange(FIRST_ID, args.vocab) for _ in range(n)]
    system = ids(args.system_tokens)
    documents = [ids(args.document_tokens) for _ in range(args.documents)]
    out, t = [], 0.0
    for _ in range(args.requests):
        prompt = [BOS] + system
        if documents and rng.random() < args.document_share:
            prompt += rng.choice(documents)
        room = args.max_seq_len - len(prompt)  # positions left for the question and the output
        if room < 2:
            sys.exit(f"make_workload: the shared prefix ({len(prompt)} tokens) leaves no room in "
                     f"a context of {args.max_seq_len}")
        question = lognormal_length(rng, args.question_median, args.question_sigma, 1, room - 1)
        prompt += ids(question)
        # A generation stores prompt + new - 1 positions, which the context must hold.
        most = args.max_seq_len - len(prompt) + 1
        new = lognormal_length(rng, args.output_median, args.output_sigma, 1, most)
        request = {"prompt_ids": prompt, "max_new_tokens": new}
        if args.rate > 0:
            t += rng.expovariate(args.rate)
            request["arrival_s"] = round(t, 6)
        out.append(request)
    return out


def parser():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--requests", type=int, default=128, help="requests to write (default 128)")
    add("--seed", type=int, default=1, help="seed of every draw (default 1)")
    add("--vocab", type=int, default=32000, help="the model's vocabulary size (default 32000)")
    add("--max-seq-len", type=int, default=256, help="the model's context (default 256)")
    add("--system-tokens", type=int, default=31,
        help="the system prompt every request starts with, after BOS (default 31)")
    add("--documents", type=int, default=4, help="documents several requests ask about (default 4)")
    add("--document-tokens", type=int, default=16, help="tokens of each document (default 16)")
    add("--document-share", type=float, default=0.25,
        help="fraction of requests that ask about a document (default 0.25)")
    add("--question-median", type=float, default=8, help="median question length (default 8)")
    add("--question-sigma", type=float, default=0.5, help="sigma of its log (default 0.5)")
    add("--output-median", type=float, default=16, help="median max_new_tokens (default 16)")
    add("--output-sigma", type=float, default=0.7, help="sigma of its log (default 0.7)")
    add("--rate", type=float, default=0,
        help="Poisson arrivals at this many requests per second; 0: all at the start (default)")
    add("--out", help="file to write (default: standard output)")
    return ap


def main():
    args = parser().parse_args()
    for name in ("requests", "max_seq_len", "system_tokens", "document_tokens"):
        if getattr(args, name) < (1 if name in ("requests", "max_seq_len") else 0):
            sys.exit(f"make_workload: --{name.replace('_', '-')} must not be negative or zero")
    if not 0 <= args.document_share <= 1 or args.rate < 0 or args.documents < 0:
        sys.exit("make_workload: --document-share must be in [0, 1], --rate and --documents >= 0")
    if min(args.question_median, args.output_median) <= 0:
        sys.exit("make_workload: the medians must be positive")
    requests = make(args)
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in requests)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    prompts = [len(r["prompt_ids"]) for r in requests]
    outputs = [r["max_new_tokens"] for r in requests]
    span = requests[-1].get("arrival_s", 0.0)
    print(f"make_workload: {len(requests)} requests, prompts {min(prompts)}-{max(prompts)} tokens "
          f"(mean {sum(prompts) / len(prompts):.1f}), max_new_tokens {min(outputs)}-{max(outputs)} "
          f"(mean {sum(outputs) / len(outputs):.1f}), arrivals over {span:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
