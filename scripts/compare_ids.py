#!/usr/bin/env python3
"""Checks that two runs of kvheap's chapter programs gave every request the same greedy ids.

    scripts/compare_ids.py REFERENCE.json OTHER.json

Both files are a chapter program's --json output for the same requests; REFERENCE must have been
run with --top2-gaps. A request whose ids first differ where the reference's top-2 logit gap is
under its near-tie threshold is a near tie: printed, and not a failure. Any other difference is
printed and fails (exit 1); a file that cannot be read or holds no ids exits 2.
"""
import json
import sys

from kvheap_runs import compare_ids


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    runs = []
    for path in sys.argv[1:]:
        try:
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"compare_ids: cannot read {path}: {e}", file=sys.stderr)
            return 2
        if "generated_ids" not in runs[-1] and "sequences" not in runs[-1]:
            print(f"compare_ids: {path} holds no generated ids (not a chapter program's --json)",
                  file=sys.stderr)
            return 2
    if "near_tie_gap" not in runs[0]:
        print(f"compare_ids: {sys.argv[1]} was not run with --top2-gaps, so near ties cannot be "
              "told apart", file=sys.stderr)
        return 2
    ties, diffs = compare_ids(runs[0], runs[1], sys.argv[2], reference_name=sys.argv[1])
    for line in ties + diffs:
        print(line)
    n = len(runs[0].get("sequences", [None]))
    print(f"compare_ids: {n} requests, {len(ties)} near ties, {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
