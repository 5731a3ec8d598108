#!/usr/bin/env python3
"""Writes the GGUF test data in tests/data/gguf/ from llama.cpp and its gguf package.

Run once, by hand, through scripts/make-gguf-testdata.sh, which builds llama.cpp's Python binding
from its source distribution (it vendors llama.cpp) in a virtual environment; the tests read what
this wrote and need neither. What it writes:

  quants.gguf       for each tensor type kvheap reads, 4 rows of random blocks (`q.<TYPE>`), and
                    beside each the values the gguf package dequantizes them to (`f.<TYPE>`, F32)
  smollm2.json      for SmolLM2-135M-Instruct.Q4_1.gguf: llama.cpp's token ids of every text case
                    (parse_special on: control tokens written in the text become their ids); the
                    chat prompts as the file's own chat template renders them (Jinja, as llama.cpp's
                    server does) with their ids; llama.cpp's greedy ids with the gap between the two
                    largest logits at every step (relative to the largest |logit|), on the F32 file
                    that llama.cpp's quantize tool writes from the Q4_1 one (the weights kvheap
                    computes with after dequantizing); and llama.cpp's ids of every text case with
                    Llama 2's SentencePiece vocabulary (llama2.c's tokenizer.bin) as a GGUF
                    tokenizer of model `llama`

Usage: make_gguf_testdata.py --model MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
       --tokenizer-bin MODELS/tokenizer.bin --out tests/data/gguf
       [--work DIR] (where the 540 MB F32 file goes; a temporary folder by default)
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
import llama_cpp
import jinja2

SEED = 20261205
TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# Byte offsets of the f16 scales in each block: random bytes there could be NaN or Inf, whose
# products carry no information, so those fields get finite halves instead.
SCALE_OFFSETS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
                 "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}

TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see what they've done.",
    "english_caps": "I'M SURE YOU'RE RIGHT. HE'D SAY SO, WOULDN'T HE?",
    "question": "What is the capital of France?",
    "story": "Once upon a time, there was a little girl named Lily who loved to play outside.",
    "code_python": "def encode(text: str) -> list[int]:\n    return [ord(c) for c in text if c != \"\\t\"]  # TODO\n",
    "code_c": "\tint main() { return x->y[0] >= 1 && z != 0; }\n",
    "code_json": "{\"name\": \"kvheap\", \"blocks\": [16, 32, 64], \"ok\": true}",
    "digits": "Call 0123456789 or 3.14159, 1,000,000 and 2024-06-30: 42nd x1000y 7",
    "digit_run": "99999999999999999999999999999999 1234567890123",
    "whitespace": "a  b   c\n\n\n  d\t\t e    \r\n  \n   x ",
    "leading_space": "  two leading spaces and a trailing newline\n",
    "only_spaces": "     ",
    "newlines": "\n\n\n",
    "tabs": "\t\tindented\twith\ttabs",
    "cjk": "你好，世界！日本語のテキスト。한국어 문장입니다.",
    "cjk_mixed": "The word 東京 means eastern capital; 北京 is the northern one.",
    "emoji": "Thumbs 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 ok ✅!",
    "accents": "Café or Café, Ångström, ﬁne; naïve façade.",
    "cyrillic": "Привет, как дела? Всё хорошо.",
    "arabic": "مرحبا بالعالم",
    "punctuation": "Wait... what?! (Really) [yes] {no} <maybe> --- ***",
    "urls": "See https://example.com/path?a=1&b=2#frag or mail me@example.org.",
    "math": "E = mc^2, ∫x dx = x²/2 + C, α+β≥γ",
    "contractions": "don't can't won't shouldn't y'all it's we're they'd I've",
    "long_word": "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "repeated": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ==================== !!!!!!!!",
    "markdown": "# Title\n\n- item one\n- item two\n\n```bash\nls -la\n```\n",
    "special_im": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "special_mixed": "text<|endoftext|>more <repo_name>kvheap<file_sep> end",
    "special_partial": "<|im_start <|im_end|x <|endoftext|",
    "empty": "",
}

CHAT = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.",
    "List three primary colors.",
    "How many legs does a spider have?",
]
PLAIN = [
    "Once upon a time",
    "The theory of relativity",
    "def fibonacci(n):",
    "The three most important things in life are",
]
NEW_TOKENS = 48


def write_quants(out_dir, rng):
    w = gguf.GGUFWriter(os.path.join(out_dir, "quants.gguf"), "kvheap-quant-test")
    for name in TYPES:
        qtype = T[name]
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        rows, cols = 4, 512
        if name == "F32":
            raw = rng.standard_normal((rows, cols)).astype(np.float32)
            w.add_tensor(f"q.{name}", raw)
            w.add_tensor(f"f.{name}", raw.copy())
            continue
        nbytes = cols // block * type_size
        raw = rng.integers(0, 256, size=(rows, nbytes), dtype=np.uint8)
        if name == "F16":
            raw = rng.standard_normal((rows, cols)).astype(np.float16).view(np.uint8)
        elif name == "BF16":
            raw = raw.view(np.uint16)
            raw = np.where((raw & 0x7F80) == 0x7F80, raw & 0xBFFF, raw).astype(np.uint16).view(np.uint8)
        else:
            blocks = raw.reshape(rows, cols // block, type_size)
            for off in SCALE_OFFSETS[name]:
                halves = (rng.standard_normal(blocks.shape[:2]) * 0.05).astype(np.float16)
                blocks[:, :, off:off + 2] = halves.view(np.uint8).reshape(*blocks.shape[:2], 2)
            raw = blocks.reshape(rows, nbytes)
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        w.add_tensor(f"q.{name}", raw, raw_shape=(rows, nbytes), raw_dtype=qtype)
        w.add_tensor(f"f.{name}", values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokenize(llm, text, add_special=True):
    return llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)


def render_chat(template, message):
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    return env.from_string(template).render(
        messages=[{"role": "user", "content": message}], add_generation_prompt=True)


def greedy(llm, prompt_ids, n):
    """Greedy ids, and each step's top-2 gap relative to the largest |logit| (kvheap's top2_gap)."""
    llm.reset()
    llm.eval(prompt_ids)
    ids, gaps = [], []
    for _ in range(n):
        logits = np.array(llm.eval_logits[-1], dtype=np.float64)
        top2 = np.argsort(logits)[-2:]
        ids.append(int(top2[1]))
        gaps.append(float((logits[top2[1]] - logits[top2[0]]) / np.max(np.abs(logits))))
        llm.eval([ids[-1]])
    return ids, gaps


def write_spm_vocab(tokenizer_bin, path):
    """A vocabulary-only GGUF of tokenizer.model `llama` (SentencePiece BPE) from llama2.c's
    tokenizer.bin: its pieces with " " written back as "\u2581" (the export replaced it), ids 0-2
    <unk>, <s>, </s>, and the <0xNN> byte tokens typed as bytes. tests/common/test_gguf.cpp builds
    the same file with the same rules."""
    data = open(tokenizer_bin, "rb").read()
    pos = 4
    tokens, scores, types = [], [], []
    while pos < len(data):
        score, n = np.frombuffer(data[pos:pos + 8], dtype="<f4")[0], int.from_bytes(data[pos + 4:pos + 8], "little")
        piece = data[pos + 8:pos + 8 + n].decode("utf-8")
        pos += 8 + n
        i = len(tokens)
        if i == 0:
            piece, kind = "<unk>", 2
        elif i in (1, 2):
            piece, kind = ["<s>", "</s>"][i - 1], 3
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            kind = 6
        else:
            piece, kind = piece.replace(" ", "\u2581"), 1
        tokens.append(piece)
        scores.append(float(score))
        types.append(kind)
    w = gguf.GGUFWriter(path, "llama")
    for key, value in [("context_length", 512), ("embedding_length", 64), ("block_count", 1),
                       ("feed_forward_length", 128), ("attention.head_count", 4)]:
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-bin", required=True, help="llama2.c's tokenizer.bin (Llama 2's vocabulary)")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    write_quants(args.out, rng)

    work = args.work or tempfile.mkdtemp()
    f32 = os.path.join(work, "SmolLM2-135M-Instruct.F32.gguf")
    if not os.path.exists(f32):
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
        params.allow_requantize = True
        params.nthread = 2
        rc = llama_cpp.llama_model_quantize(args.model.encode(), f32.encode(), ctypes.byref(params))
        if rc != 0:
            sys.exit(f"llama_model_quantize failed with {rc}")

    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    template = gguf.GGUFReader(args.model).fields["tokenizer.chat_template"].contents()
    tokens = [{"name": k, "text": v, "ids": tokenize(vocab, v)} for k, v in TEXTS.items()]
    chats = []
    for m in CHAT:
        text = render_chat(template, m)
        chats.append({"message": m, "text": text, "ids": tokenize(vocab, text, add_special=False)})

    spm_path = os.path.join(work, "llama2-vocab.gguf")
    write_spm_vocab(args.tokenizer_bin, spm_path)
    spm = llama_cpp.Llama(model_path=spm_path, vocab_only=True, verbose=False)
    spm_tokens = [{"name": k, "text": v, "ids": tokenize(spm, v)} for k, v in TEXTS.items()]

    llm = llama_cpp.Llama(model_path=f32, n_ctx=512, n_batch=512, n_threads=2, logits_all=True,
                          verbose=False, seed=0)
    generations = []
    for c in chats:
        ids, gaps = greedy(llm, c["ids"], NEW_TOKENS)
        generations.append({"chat": c["message"], "prompt_ids": c["ids"], "ids": ids, "top2_gaps": gaps})
    for p in PLAIN:
        prompt_ids = tokenize(vocab, p)
        ids, gaps = greedy(llm, prompt_ids, NEW_TOKENS)
        generations.append({"prompt": p, "prompt_ids": prompt_ids, "ids": ids, "top2_gaps": gaps})

    result = {
        "provenance": {
            "engine": f"llama.cpp through llama-cpp-python {llama_cpp.__version__}",
            "gguf": f"gguf {gguf.__version__}" if hasattr(gguf, "__version__") else "gguf",
            "model": os.path.basename(args.model),
            "generation_weights": "the Q4_1 file requantized to F32 by llama_model_quantize",
            "new_tokens": NEW_TOKENS,
            "threads": 2,
        },
        "tokenizer": tokens,
        "spm_tokenizer": spm_tokens,
        "chat": chats,
        "generation": generations,
    }
    with open(os.path.join(args.out, "smollm2.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
