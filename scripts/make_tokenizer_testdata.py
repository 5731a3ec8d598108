#!/usr/bin/env python3
"""Writes the tokenizer test data in tests/data/tokenizers/ and its reference ids.

Run once, by hand, when the cases or the formats change; the tests read what it wrote and need no
Python. It needs pip (for two pinned wheels that ship real vocabularies) and a Python with
tiktoken, tokenizers, sentencepiece, protobuf and mistral-common:

    python3 -m venv /tmp/tokvenv
    /tmp/tokvenv/bin/pip install tiktoken tokenizers sentencepiece protobuf mistral-common==1.13.1
    /tmp/tokvenv/bin/python scripts/make_tokenizer_testdata.py

What it writes (tests/data/tokenizers/README.md says where each vocabulary comes from):

  qwen16k.tiktoken          the first 16384 ranks of dashscope's qwen.tiktoken (Qwen's byte-level
                            BPE, the vocabulary of Qwen2, Qwen2.5 and Qwen3), in tiktoken format
  qwen16k.tokenizer.json    the same ranks as a Qwen2-style Hugging Face tokenizer.json, built with
                            the tokenizers library (the tiktoken -> tokenizer.json conversion that
                            transformers uses: every split of a token into two tokens is a merge)
  llama3.overlay.json       keys that turn qwen16k.tokenizer.json into a Llama 3-style file
  gpt2.overlay.json         keys that turn it into a GPT-2-style file
  mistral_subset.tokenizer.json  a subset of Mistral's SentencePiece v1 vocabulary (mistral-common's
                            tokenizer.model.v1) as a Llama 2 / Mistral-style tokenizer.json
  metaspace.overlay.json    keys that turn it into the newer Metaspace form of the same format
  reference.json            the cases, and per tokenizer the ids and decoded text of every case
                            from the independent libraries, the chat formats' ids, and the
                            reference libraries' encoding rate

An overlay replaces the base file's top-level keys with its own, except "model", whose keys it
replaces one by one; tests/common/test_tokenizer_reference.cpp applies it the same way.
"""
import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import sentencepiece as spm
import tiktoken
import tiktoken.load
from sentencepiece import sentencepiece_model_pb2 as sp_pb2
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors

ROOT = Path(__file__).resolve().parent.parent
QWEN_RANKS = 16384
MISTRAL_HEAD = 6000  # pieces kept from the front of Mistral's vocabulary (plus every character)
WHEELS = {  # the pinned wheels, and the vocabulary file each ships
    "dashscope==2.0.2": "dashscope/resources/qwen.tiktoken",
    "mistral-common==1.13.1": "mistral_common/data/tokenizer.model.v1",
}

# The split patterns, as the model families' tokenizer.json files and tiktoken definitions state
# them.
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Llama 3.1's 256 special tokens, in id order after the mergeable ranks (its tokenizer.json).
LLAMA3_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                    "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"] +
                   [f"<|reserved_special_token_{i}|>" for i in range(3, 248)])
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_ADDED = ["<think>", "</think>"]  # Qwen3's added tokens that are not special

CASES = [
    ("empty", b""),
    ("english", b"The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see what "
                b"they've done, and I'M SURE you'Re right."),
    ("code", b'def encode(text: str) -> list[int]:\n    return [ord(c) for c in text if c != "\\t"]'
             b'  # TODO\n\tint main() { return x->y[0] >= 1 && z != 0; }\n'),
    ("numbers", b"Call 0123456789 or 3.14159, 1,000,000 and 2024-06-30: 42nd x1000y 7"),
    ("whitespace", b"a  b   c\n\n\n  d\t\t e    \r\n  \n   x \xc2\x85y\xe1\xa0\x8ez\xe3\x80\x80w"
                   b"\xc2\xa0v   "),
    # U+180E left White_Space in Unicode 6.3; PCRE2's own \s still matches it.
    ("mongolian_separator", "sep\u180e\u180e end\u180e \u180e\u180e".encode()),
    ("leading_space", b"  two leading spaces and a trailing newline\n"),
    ("emoji", "Thumbs 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 ok ✅!".encode()),
    ("cjk", "你好，世界！日本語のテキスト。한국어 문장입니다.".encode()),
    ("nfc", "Cafe\u0301 or Café, A\u030angstr\u00f6m, \ufb01ne".encode()),
    ("invalid_utf8", b"ok \xff\xfe bad \xe2\x82 cut \xc0\xaf overlong \xed\xa0\x80 surrogate end\xe2"),
    ("special_tokens", b"<|im_start|>user\nhi<|im_end|>\n<|endoftext|> <think>x</think> "
                       b"<|begin_of_text|><|start_header_id|>a<|end_header_id|><|eot_id|> "
                       b"<s>[INST] q [/INST]</s><unk> <|im_start|"),
    ("long_runs", b"a" * 300 + b" " + b"=" * 100 + b" " + b"9" * 50),
]


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) +
          list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def fetch(spec, member, workdir):
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", workdir,
                    spec], check=True)
    name = spec.split("==")[0].replace("-", "_")
    wheel = next(Path(workdir).glob(f"{name}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        return z.read(member), wheel.name


def apply_overlay(base, overlay):
    out = dict(base)
    for k, v in overlay.items():
        if k == "model":
            out["model"] = dict(base["model"]) | v
        else:
            out[k] = v
    return out


def overlay_of(base, full):
    """The keys of `full` that differ from `base`, in the overlay form."""
    ov = {k: v for k, v in full.items() if k != "model" and base.get(k) != v}
    model = {k: v for k, v in full["model"].items() if base["model"].get(k) != v}
    if model:
        ov["model"] = model
    assert apply_overlay(base, ov) == full
    return ov


def byte_level_tokenizer(ranks, pattern, specials, added, ignore_merges, gpt2=False, nfc=False,
                         bos=None):
    enc = bytes_to_unicode()
    to_str = lambda b: "".join(enc[x] for x in b)
    vocab = {to_str(t): r for t, r in ranks.items()}
    merges = []
    for t, r in ranks.items():
        local = [(t[:i], t[i:], r) for i in range(1, len(t)) if t[:i] in ranks and t[i:] in ranks]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    merges = [(to_str(a), to_str(b)) for a, b, _ in merges]
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    if gpt2:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in added])
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, len(ranks))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def mistral_subset(model_bytes):
    """Mistral's v1 SentencePiece model cut to its first MISTRAL_HEAD pieces plus every single
    character (SentencePiece lists the characters last, and BPE starts from them), renumbered."""
    m = sp_pb2.ModelProto()
    m.ParseFromString(model_bytes)
    keep = [p for i, p in enumerate(m.pieces)
            if i < MISTRAL_HEAD or (len(p.piece) == 1 and p.type == sp_pb2.ModelProto.SentencePiece.NORMAL)]
    del m.pieces[:]
    m.pieces.extend(keep)
    return m


def sentencepiece_tokenizer(m, legacy=True):
    """A Llama 2 / Mistral-style tokenizer.json for SentencePiece model `m`, as transformers'
    converter builds it: merges from every split of a piece into two pieces, ordered by the
    merged piece's score."""
    pieces = [(p.piece, p.score) for p in m.pieces]
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    merges = []
    for merged, (piece, score) in zip(range(len(pieces)), pieces):
        local = [(piece[:i], piece[i:]) for i in range(1, len(piece))
                 if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges.extend((l, r, score) for l, r in local)
    merges.sort(key=lambda m_: -m_[2])  # stable: equal scores keep id order
    tok = Tokenizer(models.BPE(vocab, [(l, r) for l, r, _ in merges], unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    if legacy:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                               normalizers.Replace(" ", "\u2581")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                     split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return tok


def chat_formats():
    """The formats docs/pages/chat_formats.md states: lines 'family/variant: text' in its
    ```text blocks, with \\n for a newline."""
    page = (ROOT / "docs/pages/chat_formats.md").read_text()
    formats = {}
    for block in re.findall(r"```text\n(.*?)```", page, re.S):
        for line in block.splitlines():
            m = re.match(r"^(\w+)/(system|plain): (.*)$", line)
            if m:
                formats[(m[1], m[2])] = m[3].replace("\\n", "\n")
    return formats


CHAT_MESSAGES = [("You are a terse assistant.", "Hello, who are you?"),
                 ("  Answer in French.\n", "  What is 2+2?\n")]


def render(formats, family, system, message):
    if family == "llama3":  # its template trims each message
        system, message = system.strip(), message.strip()
    text = formats[(family, "system" if system else "plain")]
    return text.replace("{system}", system).replace("{message}", message)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/data/tokenizers"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    provenance = {}
    with tempfile.TemporaryDirectory() as work:
        raw = {}
        for spec, member in WHEELS.items():
            raw[spec], wheel = fetch(spec, member, work)
            provenance[member] = {"wheel": wheel, "sha256": hashlib.sha256(raw[spec]).hexdigest(),
                                  "bytes": len(raw[spec])}

    # Qwen: the first QWEN_RANKS lines of qwen.tiktoken (ranks 0..N-1, in order).
    lines = raw["dashscope==2.0.2"].splitlines()[:QWEN_RANKS]
    ranks = {}
    for i, line in enumerate(lines):
        b64, rank = line.split()
        assert int(rank) == i
        ranks[base64.b64decode(b64)] = i
    (out / "qwen16k.tiktoken").write_bytes(b"\n".join(lines) + b"\n")

    qwen = byte_level_tokenizer(ranks, QWEN_PATTERN, QWEN_SPECIALS, QWEN_ADDED, False, nfc=True)
    qwen_json = json.loads(qwen.to_str())
    llama3 = byte_level_tokenizer(ranks, LLAMA3_PATTERN, LLAMA3_SPECIALS, [], True,
                                  bos="<|begin_of_text|>")
    gpt2 = byte_level_tokenizer(ranks, None, ["<|endoftext|>"], [], False, gpt2=True)
    (out / "qwen16k.tokenizer.json").write_text(json.dumps(qwen_json, ensure_ascii=False) + "\n")
    overlays = {"llama3": overlay_of(qwen_json, json.loads(llama3.to_str())),
                "gpt2": overlay_of(qwen_json, json.loads(gpt2.to_str()))}

    sp_model = mistral_subset(raw["mistral-common==1.13.1"])
    sp = spm.SentencePieceProcessor(model_proto=sp_model.SerializeToString())
    mistral = sentencepiece_tokenizer(sp_model)
    mistral_json = json.loads(mistral.to_str())
    (out / "mistral_subset.tokenizer.json").write_text(
        json.dumps(mistral_json, ensure_ascii=False) + "\n")
    metaspace = sentencepiece_tokenizer(sp_model, legacy=False)
    overlays["metaspace"] = overlay_of(mistral_json, json.loads(metaspace.to_str()))
    for name, ov in overlays.items():
        (out / f"{name}.overlay.json").write_text(json.dumps(ov, ensure_ascii=False, indent=1) + "\n")

    # tiktoken with Llama 3's pattern and special tokens over the same ranks: the tiktoken reader's
    # oracle. It loads the file just written, so nothing is downloaded.
    tk = tiktoken.Encoding(
        "llama3-qwen16k", pat_str=LLAMA3_PATTERN,
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(out / "qwen16k.tiktoken")),
        special_tokens={s: QWEN_RANKS + i for i, s in enumerate(LLAMA3_SPECIALS)})

    hf = {"qwen2": qwen, "llama3": llama3, "gpt2": gpt2, "mistral": mistral, "metaspace": metaspace}
    ref = {"cases": {name: text.hex() for name, text in CASES}, "tokenizers": {}}
    for name, tok in hf.items():
        entry = {}
        for case, data in CASES:
            text = data.decode("utf-8", errors="replace")
            ids = tok.encode(text, add_special_tokens=False).ids
            entry[case] = {"ids": ids,
                           "with_bos": tok.encode(text, add_special_tokens=True).ids,
                           "decoded": tok.decode(ids, skip_special_tokens=False),
                           "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}
        ref["tokenizers"][name] = entry
    # The split patterns' pieces, the reference library's pre-tokenizer alone (on NFC text for
    # Qwen): digits, whitespace runs and contractions are decided here, before any merge.
    dec = {c: b for b, c in bytes_to_unicode().items()}
    splitters = {"qwen2": (pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"), True),
                 "llama3": (pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"), False),
                 "gpt2": (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False)}
    for name, (splitter, nfc) in splitters.items():
        for case, data in CASES:
            text = data.decode("utf-8", errors="replace")
            if nfc:
                text = normalizers.NFC().normalize_str(text)
            pieces = [p for p, _ in splitter.pre_tokenize_str(text)]
            if name == "gpt2":
                pieces = [bytes(dec[c] for c in p).decode() for p in pieces]
            ref["tokenizers"][name][case]["pieces"] = pieces
    entry = {}
    for case, data in CASES:
        text = data.decode("utf-8", errors="replace")
        ids = tk.encode(text, allowed_special="all")
        entry[case] = {"ids": ids, "decoded": tk.decode(ids)}
        # The two conversions of one vocabulary should agree; say so where they do not.
        hf_ids = hf["llama3"].encode(text, add_special_tokens=False).ids
        if hf_ids != ids:
            print(f"note: tiktoken and tokenizers differ on case {case}")
    ref["tokenizers"]["llama3_tiktoken"] = entry
    for case, data in CASES:  # SentencePiece itself, on the same subset (no special tokens)
        if case == "special_tokens":
            continue
        text = data.decode("utf-8", errors="replace")
        if sp.encode(text) != ref["tokenizers"]["mistral"][case]["ids"]:
            print(f"note: sentencepiece and the tokenizer.json differ on case {case}")

    # Chat formats: the stated text of each, encoded by the reference library.
    formats = chat_formats()
    chat_tok = {"llama3": llama3, "qwen2": qwen, "qwen3": qwen, "mistral": mistral}
    ref["chat"] = []
    for family, tok in chat_tok.items():
        for system, message in CHAT_MESSAGES + [("", "Hello, who are you?")]:
            text = render(formats, family, system, message)
            ref["chat"].append({"family": family, "system": system, "message": message,
                                "text": text,
                                "ids": tok.encode(text, add_special_tokens=False).ids})
    # The Mistral format against mistral-common's own v1 instruct tokenizer on the full vocabulary.
    from mistral_common.protocol.instruct.messages import SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    full = sentencepiece_tokenizer(mistral_subset_all(raw["mistral-common==1.13.1"]))
    mc = MistralTokenizer.v1()
    for system, message in CHAT_MESSAGES + [("", "Hello, who are you?")]:
        msgs = ([SystemMessage(content=system)] if system else []) + [UserMessage(content=message)]
        want = mc.encode_chat_completion(ChatCompletionRequest(messages=msgs)).tokens
        got = full.encode(render(formats, "mistral", system, message), add_special_tokens=False).ids
        assert got == want, f"the stated Mistral format disagrees with mistral-common: {got} {want}"

    # The reference libraries' encoding rate on the benchmark's text, one thread, in CPU time as
    # Google Benchmark reports it (a loaded machine stretches wall time, not CPU time).
    text = bench_text()
    rates = {}
    for name, fn in (("tiktoken (llama3 pattern)", lambda: tk.encode_ordinary(text)),
                     ("tokenizers (qwen2 tokenizer.json)",
                      lambda: qwen.encode(text, add_special_tokens=False)),
                     ("tokenizers (mistral tokenizer.json)",
                      lambda: mistral.encode(text, add_special_tokens=False))):
        best = min(timed(fn) for _ in range(3))
        rates[name] = round(len(text.encode()) / best / 1e6, 2)
    ref["reference_rates_mb_per_s"] = rates
    ref["provenance"] = provenance
    (out / "reference.json").write_text(json.dumps(ref, ensure_ascii=False, indent=1) + "\n")
    print("rates (MB/s):", rates)
    for p in sorted(out.iterdir()):
        print(f"{p.name}: {p.stat().st_size} bytes")


def mistral_subset_all(model_bytes):
    m = sp_pb2.ModelProto()
    m.ParseFromString(model_bytes)
    return m


def bench_text():
    """bench/bench_tokenizer.cpp's text: the files under /usr/share/common-licenses (Debian's
    base-files) in name order, symbolic links left out, each followed by a newline, repeated to exactly 1 MiB."""
    folder = Path("/usr/share/common-licenses")
    parts = [p.read_bytes() + b"\n" for p in sorted(folder.iterdir())
             if p.is_file() and not p.is_symlink()]
    one = b"".join(parts)
    data = (one * (2**20 // len(one) + 1))[:2**20]
    return data.decode("utf-8", errors="replace")


def timed(fn):
    t = time.process_time()
    fn()
    return time.process_time() - t


if __name__ == "__main__":
    main()
