#!/usr/bin/env python3
"""Writes a whisper.cpp ggml model file (legacy single-file format, magic "ggml") from a
CTranslate2 Whisper directory, so that whisper.cpp runs on exactly the weights polyattn runs.

    ct2_to_ggml.py MODEL_DIR OUT.bin

MODEL_DIR holds CTranslate2's model.bin and vocabulary.txt (the registry package's tiny.en).
The file is laid out as whisper.cpp's models/convert-pt-to-ggml.py writes it with use_f16:
matrices float16, vectors, conv biases (as (d, 1)) and positional embeddings float32, and every
value is the CT2 value converted exactly (float16 -> float16, float16 -> float32). CT2 fuses
attention projections; they are split back into PyTorch's query/key/value (CT2's key bias must be
zero: Whisper's key has none) and cross-attention's key/value. CT2 does not store the encoder's
sinusoids; they are computed as openai-whisper's `sinusoids` does. The mel filters are librosa's
slaney filters (bench/whisper/whisper_vs_ctranslate2.py, cross-checked against ../shared when present);
the vocabulary is the GPT-2 byte-level tokens below the first special token, as raw bytes.

Check the result with polyattn's loader: `whisper --model OUT.bin --audio ...` must give the
tokens of `--model MODEL_DIR` (bench/whisper/ggml_peer_model.sh does). Exit 2 on bad input.
"""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from whisper_vs_ctranslate2 import check_filters, mel_filters_slaney  # noqa: E402

CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: np.uint16}  # 5: bfloat16 bits


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def read_ct2_model_bin(path):
    """{name: ndarray} of a CTranslate2 model.bin (binary versions 4..6), aliases resolved."""
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string():
        nonlocal pos
        (n,) = take("H")
        s = data[pos:pos + n].rstrip(b"\0").decode()
        pos += n
        return s

    (version,) = take("I")
    if not 4 <= version <= 6:
        fail(f"{path}: CTranslate2 binary version {version} (expected 4..6)")
    if string() != "WhisperSpec":
        fail(f"{path}: not a Whisper model")
    take("I")  # spec revision
    (n_vars,) = take("I")
    tensors = {}
    for _ in range(n_vars):
        name = string()
        (rank,) = take("B")
        shape = take(f"{rank}I")
        (dtype,) = take("B")
        (n_bytes,) = take("I")
        if dtype == 5:
            fail(f"{path}: '{name}' is bfloat16; convert the model to float16 or float32")
        array = np.frombuffer(data, dtype=CT2_DTYPES[dtype], count=n_bytes // np.dtype(CT2_DTYPES[dtype]).itemsize, offset=pos)
        tensors[name] = array.reshape(shape)
        pos += n_bytes
    (n_aliases,) = take("I")
    for _ in range(n_aliases):
        alias, target = string(), string()
        tensors[alias] = tensors[target]
    return tensors


def gpt2_byte_decoder():
    """The inverse of GPT-2's bytes_to_unicode: byte-level character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def sinusoids(length, channels, max_timescale=10000):
    """openai-whisper's encoder positional embedding (model.py `sinusoids`)."""
    increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = np.exp(-increment * np.arange(channels // 2))
    scaled = np.arange(length)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def whisper_tensors(ct2):
    """PyTorch-named tensors (openai-whisper's state dict) from CTranslate2's variables."""
    out = {}
    d = ct2["encoder/conv1/weight"].shape[0]

    def linear(dst, src):
        out[dst + ".weight"] = ct2[src + "/weight"]
        out[dst + ".bias"] = ct2[src + "/bias"]

    def layer_norm(dst, src):
        out[dst + ".weight"] = ct2[src + "/gamma"]
        out[dst + ".bias"] = ct2[src + "/beta"]

    def split(dst, src, parts):
        """A fused CT2 projection split row-wise into the named PyTorch projections; 'key' has no bias."""
        w, b = ct2[src + "/weight"], ct2[src + "/bias"]
        for i, part in enumerate(parts):
            out[f"{dst}.{part}.weight"] = w[i * d:(i + 1) * d]
            if part == "key":
                if np.any(b[i * d:(i + 1) * d]):
                    fail(f"'{src}/bias' has a non-zero key bias, which Whisper's key projection cannot hold")
            else:
                out[f"{dst}.{part}.bias"] = b[i * d:(i + 1) * d]

    out["encoder.conv1.weight"] = ct2["encoder/conv1/weight"]
    out["encoder.conv1.bias"] = ct2["encoder/conv1/bias"].reshape(-1, 1)
    out["encoder.conv2.weight"] = ct2["encoder/conv2/weight"]
    out["encoder.conv2.bias"] = ct2["encoder/conv2/bias"].reshape(-1, 1)
    n_audio_ctx = ct2["encoder/position_encodings/encodings"].shape[0] if "encoder/position_encodings/encodings" in ct2 else 1500
    out["encoder.positional_embedding"] = sinusoids(n_audio_ctx, d)
    n_layer = {"encoder": 0, "decoder": 0}
    for side in n_layer:
        while f"{side}/layer_{n_layer[side]}/ffn/linear_0/weight" in ct2:
            n_layer[side] += 1

    def self_attention(p, q):  # ggml block prefix p, CT2 layer prefix q
        layer_norm(p + ".attn_ln", q + "/self_attention/layer_norm")
        split(p + ".attn", q + "/self_attention/linear_0", ["query", "key", "value"])
        linear(p + ".attn.out", q + "/self_attention/linear_1")

    def mlp(p, q):
        layer_norm(p + ".mlp_ln", q + "/ffn/layer_norm")
        linear(p + ".mlp.0", q + "/ffn/linear_0")
        linear(p + ".mlp.2", q + "/ffn/linear_1")

    for i in range(n_layer["encoder"]):
        p, q = f"encoder.blocks.{i}", f"encoder/layer_{i}"
        self_attention(p, q)
        mlp(p, q)
    layer_norm("encoder.ln_post", "encoder/layer_norm")
    out["decoder.token_embedding.weight"] = ct2["decoder/embeddings/weight"]
    out["decoder.positional_embedding"] = ct2["decoder/position_encodings/encodings"]
    for i in range(n_layer["decoder"]):
        p, q = f"decoder.blocks.{i}", f"decoder/layer_{i}"
        self_attention(p, q)
        layer_norm(p + ".cross_attn_ln", q + "/attention/layer_norm")
        linear(p + ".cross_attn.query", q + "/attention/linear_0")
        split(p + ".cross_attn", q + "/attention/linear_1", ["key", "value"])
        linear(p + ".cross_attn.out", q + "/attention/linear_2")
        mlp(p, q)
    layer_norm("decoder.ln", "decoder/layer_norm")
    hparams = [ct2["decoder/embeddings/weight"].shape[0], n_audio_ctx, d, d // 64, n_layer["encoder"],
               ct2["decoder/position_encodings/encodings"].shape[0], d, d // 64, n_layer["decoder"],
               ct2["encoder/conv1/weight"].shape[1]]
    for side, idx in (("encoder", 3), ("decoder", 7)):
        if f"{side}/num_heads" in ct2:
            hparams[idx] = int(ct2[f"{side}/num_heads"].reshape(-1)[0])
    return out, hparams


def main():
    if len(sys.argv) != 3:
        fail("usage: ct2_to_ggml.py MODEL_DIR OUT.bin")
    model_dir, out_path = sys.argv[1:]
    for f in ("model.bin", "vocabulary.txt"):
        if not os.path.exists(os.path.join(model_dir, f)):
            fail(f"{model_dir}/{f} is missing")
    tensors, hparams = whisper_tensors(read_ct2_model_bin(os.path.join(model_dir, "model.bin")))
    vocab = open(os.path.join(model_dir, "vocabulary.txt"), encoding="utf-8").read().split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    n_text = vocab.index("<|endoftext|>")  # whisper.cpp adds the special tokens itself
    decoder = gpt2_byte_decoder()
    tokens = [bytes(decoder[c] for c in token) for token in vocab[:n_text]]
    filters = mel_filters_slaney(n_mels=hparams[9]).astype(np.float32)
    check_filters(filters)

    with open(out_path, "wb") as f:
        f.write(struct.pack("<i", 0x67676D6C))
        f.write(struct.pack("<11i", *hparams, 1))  # ftype 1: float16 matrices
        f.write(struct.pack("<2i", *filters.shape))
        f.write(filters.astype("<f4").tobytes())
        f.write(struct.pack("<i", len(tokens)))
        for t in tokens:
            f.write(struct.pack("<i", len(t)) + t)
        for name, array in tensors.items():
            keep_f32 = array.ndim < 2 or name.endswith("conv1.bias") or name.endswith("conv2.bias") or "positional" in name
            data = np.ascontiguousarray(array, dtype="<f4" if keep_f32 else "<f2")
            encoded = name.encode()
            f.write(struct.pack("<3i", data.ndim, len(encoded), 0 if keep_f32 else 1))
            f.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))  # ggml order: fastest first
            f.write(encoded)
            f.write(data.tobytes())
    print(f"{out_path}: {len(tensors)} tensors, {len(tokens)} tokens, hparams {hparams}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
