#!/usr/bin/env python3
"""Write a tiny Qwen2 GGUF with random weights and a real tokenizer.

The model is for protocol tests only: llama-server loads it and answers
with real token ids, log-probs, chat-template rendering and grammar-
constrained (json_schema) output, but its text is gibberish. The tokenizer
and chat template are copied from llama.cpp's vocab-only
models/ggml-vocab-qwen2.gguf, so prompts tokenize as they would for a real
Qwen2 model; the weights come from a fixed seed, so the file is the same
byte for byte on every machine.

Usage (gguf-py from the same llama.cpp tree on PYTHONPATH, numpy installed):
    PYTHONPATH=llama.cpp/gguf-py python3 make_gguf.py \
        --vocab llama.cpp/models/ggml-vocab-qwen2.gguf --out tiny-qwen2.gguf
"""

import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

ARCH = "qwen2"
N_LAYER = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX = 8192
SEED = 20170701  # any fixed value: the weights must not change between runs
EMBD_STD = 0.05  # token embeddings (tied to the output layer)
WEIGHT_STD = 0.1  # every other matrix and bias
# Output bias of the tokens a random model must not emit on its own: pieces
# of a multi-byte character (llama-server's chat parser answers 500 to text
# that ends in a broken UTF-8 sequence, which a truncated random answer
# often would), and control tokens or text that looks like one ("</s>",
# which llama.cpp treats as end of generation). A grammar can still force
# them: it masks every other token out.
AVOID_BIAS = -30.0


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the character that stands for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def output_bias(tokens: list[str], types: list[int]) -> np.ndarray:
    """AVOID_BIAS for tokens to avoid (see AVOID_BIAS), 0 for the rest."""
    dec = byte_decoder()
    bias = np.zeros(len(tokens), dtype=np.float32)
    for i, (tok, typ) in enumerate(zip(tokens, types)):
        if typ != 1 or (len(tok) > 2 and tok.startswith("<") and tok.endswith(">")):
            bias[i] = AVOID_BIAS
            continue
        try:
            bytes(dec[c] for c in tok).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            bias[i] = AVOID_BIAS
    return bias


def copy_tokenizer(reader: GGUFReader, writer: GGUFWriter) -> int:
    """Copy every tokenizer.* key; return the vocabulary size."""
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[-1]
            values = field.contents()
            writer.add_key_value(key, values, vtype, sub_type=sub)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        else:
            writer.add_key_value(key, field.contents(), vtype)
    if n_vocab == 0:
        raise SystemExit("vocab file has no tokenizer.ggml.tokens")
    if "tokenizer.chat_template" not in reader.fields:
        raise SystemExit("vocab file has no tokenizer.chat_template")
    return n_vocab


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True, help="vocab-only GGUF to take the tokenizer from")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    args = ap.parse_args()

    reader = GGUFReader(args.vocab)
    arch = reader.fields["general.architecture"].contents()
    if arch != ARCH:
        raise SystemExit(f"{args.vocab}: architecture {arch!r}, want {ARCH!r}")

    w = GGUFWriter(args.out, ARCH)
    w.add_name("troupe-tiny-qwen2-random")
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all F32
    n_vocab = copy_tokenizer(reader, w)

    rng = np.random.default_rng(SEED)

    def rand(*shape: int, std: float = WEIGHT_STD) -> np.ndarray:
        # numpy shapes are the reverse of GGUF's {ne0, ne1}.
        return (rng.standard_normal(shape) * std).astype(np.float32)

    head_dim = N_EMBD // N_HEAD
    n_kv = head_dim * N_HEAD_KV
    # A wide spread of embeddings keeps the logits from being flat, so greedy
    # decoding and top log-probs are well defined rather than ties.
    w.add_tensor("token_embd.weight", rand(n_vocab, N_EMBD, std=EMBD_STD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    # No output.weight: llama.cpp ties it to token_embd, as Qwen2-0.5B does.
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    bias = output_bias(tokens, types)
    w.add_tensor("output.bias", bias)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", rand(n_kv, N_EMBD))
        w.add_tensor(p + "attn_v.weight", rand(n_kv, N_EMBD))
        w.add_tensor(p + "attn_q.bias", rand(N_EMBD))
        w.add_tensor(p + "attn_k.bias", rand(n_kv))
        w.add_tensor(p + "attn_v.bias", rand(n_kv))
        w.add_tensor(p + "attn_output.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    avoided = int((bias != 0).sum())
    print(f"wrote {args.out}: {ARCH}, {N_LAYER} layers, {N_EMBD} wide, vocab {n_vocab} ({avoided} tokens avoided)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
