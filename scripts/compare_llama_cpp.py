#!/usr/bin/env python3
"""Decode speed of kvheap's chapter 1 against llama.cpp on SmolLM2-135M-Instruct, alternating.

kvheap widens the Q4_1 file to fp32 at load, so each decode step reads 538 MB of weights; llama.cpp
on the F32 requantization of the file reads the same bytes, and on the Q4_1 file itself the 98 MB
of its tensors, 5.5x fewer. Each round runs the three one after another on the same prompt and thread count, so that
the machine's state is shared; the table gives each one's median and the ratios of the medians.

Needs the virtual environment of scripts/make-gguf-testdata.sh (llama.cpp's Python binding):

    ~/.cache/kvheap/llama-cpp-venv/bin/python scripts/compare_llama_cpp.py \\
        --kvheap build/cpu/bin/ch01_cpu_reference --model MODELS/SmolLM2-135M-Instruct.Q4_1.gguf

It writes the F32 file next to a temporary folder of its own (540 MB) unless --f32 names one.
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

import llama_cpp

PROMPT = [6403, 1980, 253, 655]  # "Once upon a time" in SmolLM2's vocabulary


def kvheap_decode(binary, model, tokens, threads):
    out = subprocess.run(
        [binary, "--model", model, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens",
         str(tokens), "--ignore-eos", "--temperature", "0", "--threads", str(threads), "--no-peak",
         "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["metrics"]["decode_tokens_per_s"]


def llama_decode(llm, tokens):
    """Tokens/s of `tokens` greedy decode steps after the prompt, as kvheap counts them: every
    step after the first token (which the prompt's pass gives)."""
    llm.reset()
    llm.eval(PROMPT)
    token = int(llm.scores[llm.n_tokens - 1].argmax())
    start = time.perf_counter()
    for _ in range(tokens - 1):
        llm.eval([token])
        token = int(llm.scores[llm.n_tokens - 1].argmax())
    return (tokens - 1) / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvheap", required=True, help="the ch01_cpu_reference program")
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--f32", default=None, help="its F32 requantization (written when missing)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    f32 = args.f32 or os.path.join(tempfile.mkdtemp(), "SmolLM2-135M-Instruct.F32.gguf")
    if not os.path.exists(f32):
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
        params.allow_requantize = True
        if llama_cpp.llama_model_quantize(args.model.encode(), f32.encode(), ctypes.byref(params)):
            raise SystemExit("llama_model_quantize failed")
    ctx = dict(n_ctx=512, n_batch=512, n_threads=args.threads, n_threads_batch=args.threads,
               verbose=False)
    engines = {
        "kvheap ch01, fp32 weights": lambda: kvheap_decode(args.kvheap, args.model, args.tokens,
                                                           args.threads),
    }
    llm_f32 = llama_cpp.Llama(model_path=f32, **ctx)
    llm_q41 = llama_cpp.Llama(model_path=args.model, **ctx)
    engines["llama.cpp, F32 file"] = lambda: llama_decode(llm_f32, args.tokens)
    engines["llama.cpp, Q4_1 file"] = lambda: llama_decode(llm_q41, args.tokens)
    for run in engines.values():  # warm-up: page cache, first-touch of the weights
        run()
    rates = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, run in engines.items():
            rates[name].append(run())
    med = {name: statistics.median(r) for name, r in rates.items()}
    base = med["llama.cpp, F32 file"]
    print(f"SmolLM2-135M-Instruct, {args.tokens} greedy tokens after a 4-token prompt, "
          f"{args.threads} threads, {args.rounds} alternating rounds "
          f"({platform.processor() or platform.machine()}; llama-cpp-python "
          f"{llama_cpp.__version__})\n")
    print("| engine | weight bytes a step | decode tokens/s: median (min-max) | vs llama.cpp F32 |")
    print("|---|---|---|---|")
    weight_bytes = {"kvheap ch01, fp32 weights": "538 MB", "llama.cpp, F32 file": "538 MB",
                    "llama.cpp, Q4_1 file": "98 MB"}
    for name, r in rates.items():
        print(f"| {name} | {weight_bytes[name]} | {med[name]:.1f} ({min(r):.1f}-{max(r):.1f}) | "
              f"{med[name] / base:.2f}x |")


if __name__ == "__main__":
    main()
