#!/usr/bin/env python3
"""Writes a Hugging Face model folder with random weights around a real tokenizer, to try the
tokenizer paths without downloading a checkpoint:

    scripts/make_synthetic_folder.py OUT_DIR --tokenizer tests/data/tokenizers/qwen16k.tokenizer.json \
        --model-type qwen2 --vocab-size 16448

OUT_DIR gets config.json, model.safetensors (F32, the tiny preset's shape: 2 layers, dim 64,
4 query and 2 KV heads, 96 positions) and tokenizer.json. The weights are noise, so the text a
chapter program prints is noise too; the token ids and their text are real. Python's standard
library only.
"""
import argparse
import json
import random
import shutil
import struct
from array import array
from pathlib import Path

DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, POSITIONS = 64, 160, 2, 4, 2, 16, 96


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="a tokenizer.json (or tiktoken file) to copy")
    ap.add_argument("--model-type", default="qwen2", choices=["llama", "mistral", "qwen2", "qwen3"])
    ap.add_argument("--vocab-size", type=int, required=True,
                    help="embedding rows: at least the tokenizer's largest id + 1")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    qwen2, qwen3 = args.model_type == "qwen2", args.model_type == "qwen3"
    shapes = {"model.embed_tokens.weight": [args.vocab_size, DIM], "model.norm.weight": [DIM]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": [DIM], p + "post_attention_layernorm.weight": [DIM],
                   p + "self_attn.q_proj.weight": [HEADS * HEAD_DIM, DIM],
                   p + "self_attn.k_proj.weight": [KV_HEADS * HEAD_DIM, DIM],
                   p + "self_attn.v_proj.weight": [KV_HEADS * HEAD_DIM, DIM],
                   p + "self_attn.o_proj.weight": [DIM, HEADS * HEAD_DIM],
                   p + "mlp.gate_proj.weight": [HIDDEN, DIM], p + "mlp.up_proj.weight": [HIDDEN, DIM],
                   p + "mlp.down_proj.weight": [DIM, HIDDEN]}
        if qwen3:  # an RMSNorm gain per head dimension, for q and for k, applied before RoPE
            shapes |= {p + "self_attn.q_norm.weight": [HEAD_DIM],
                       p + "self_attn.k_norm.weight": [HEAD_DIM]}
        if qwen2:
            shapes |= {p + "self_attn.q_proj.bias": [HEADS * HEAD_DIM],
                       p + "self_attn.k_proj.bias": [KV_HEADS * HEAD_DIM],
                       p + "self_attn.v_proj.bias": [KV_HEADS * HEAD_DIM]}
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        norm = name.endswith("norm.weight")
        data = array("f", (1.0 if norm else rng.uniform(-0.08, 0.08) for _ in range(n))).tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    config = {"model_type": args.model_type, "hidden_size": DIM, "intermediate_size": HIDDEN,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "vocab_size": args.vocab_size,
              "max_position_embeddings": POSITIONS, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "hidden_act": "silu"}
    if qwen3:  # Qwen3 states head_dim, whose default is not hidden / heads
        config |= {"head_dim": HEAD_DIM, "attention_bias": False}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    name = "tokenizer.json" if args.tokenizer.endswith(".json") else "tokenizer.model"
    shutil.copyfile(args.tokenizer, out / name)
    print(f"wrote {out}: config.json, model.safetensors ({offset} bytes of weights), {name}")


if __name__ == "__main__":
    main()
