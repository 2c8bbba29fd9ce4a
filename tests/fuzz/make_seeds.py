#!/usr/bin/python3
"""make_seeds.py OUT_DIR: writes the fuzzers' seed corpora, one directory per
harness (manifest, ckpt_files, shard): valid inputs of each reader and a few
near misses, generated here so nothing binary is kept in the repository."""
import json
import os
import random
import struct
import sys


def params(layers, channels, seq_len, vocab):
    padded = (vocab + 127) // 128 * 128
    return padded * channels + seq_len * channels + layers * (12 * channels * channels + 13 * channels) + 2 * channels


def manifest(files, layers=2, heads=2, channels=32, seq_len=32, vocab=257, world=None, shards=1):
    """A manifest whose files split the model (each of `shards` model shards,
    sized like the whole here) in the given proportions."""
    total = params(layers, channels, seq_len, vocab)
    n = len(files) * shards
    entries = []
    for shard in range(shards):
        for i in range(len(files)):
            lo, hi = int(total * sum(files[:i])), int(total * sum(files[:i + 1]))
            entries.append({"name": f"rank_{len(entries):05d}.bin", "shard": shard, "offset": lo, "count": hi - lo,
                            "bytes": 64 + 12 * (hi - lo), "xxh64": f"{random.getrandbits(64):016x}"})
    return {
        "format": "batchscale-checkpoint", "version": 1, "step": 6, "seqs_consumed": 48, "tokens_consumed": 1536,
        "model": {"layers": layers, "heads": heads, "channels": channels, "seq_len": seq_len, "vocab": vocab},
        "layout": {"world": world or n, "dp": (world or n) // shards, "tp": shards, "pp": 1, "zero": 1,
                   "pp_split": ""},
        "optimizer": {"name": "adamw", "step": 6},
        "sample_rng": [f"{random.getrandbits(64):016x}" for _ in range(4)],
        "data": {"seed": "0000000000000539", "shuffle": True},
        "files": entries,
        "schedule": {"batch": "constant", "global_batch": 8, "current_batch": 0,
                     "noise_scale": ["3fefae147ae147ae", "0000000000000000", "0000000000000000", "0000000000000000"]},
    }


def shard(tokens, magic=20240520, version=1, count=None):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    return struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens)


def safetensors(layers=1, channels=8, seq_len=4, vocab=5, dtype="F32", prefix="transformer.", extra=None):
    """A GPT-2 safetensors file: header length, JSON header, the tensors' bytes (zeros)."""
    c = channels
    shapes = {"wte.weight": [vocab, c], "wpe.weight": [seq_len, c], "ln_f.weight": [c], "ln_f.bias": [c]}
    for i in range(layers):
        for name, shape in (("ln_1.weight", [c]), ("ln_1.bias", [c]), ("attn.c_attn.weight", [c, 3 * c]),
                            ("attn.c_attn.bias", [3 * c]), ("attn.c_proj.weight", [c, c]), ("attn.c_proj.bias", [c]),
                            ("ln_2.weight", [c]), ("ln_2.bias", [c]), ("mlp.c_fc.weight", [c, 4 * c]),
                            ("mlp.c_fc.bias", [4 * c]), ("mlp.c_proj.weight", [4 * c, c]), ("mlp.c_proj.bias", [c])):
            shapes[f"h.{i}.{name}"] = shape
    size = {"F32": 4, "BF16": 2, "F16": 2}[dtype]
    header, at = {"__metadata__": {"format": "pt", "n_head": "2"}}, 0
    for name, shape in shapes.items():
        n = size
        for d in shape:
            n *= d
        header[prefix + name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    header.update(extra or {})
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(at)


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    out = sys.argv[1]
    random.seed(20240520)
    d = os.path.join(out, "manifest")
    write(d, "one_file.json", json.dumps(manifest([1.0]), indent=2))
    write(d, "two_files.json", json.dumps(manifest([0.5, 0.5]), indent=2))
    write(d, "four_files.json", json.dumps(manifest([0.25] * 4)))
    write(d, "tp2.json", json.dumps(manifest([0.5, 0.5], shards=2)))
    write(d, "wide.json", json.dumps(manifest([0.3, 0.7], layers=1, heads=4, channels=64, seq_len=16, vocab=50257)))
    bad = manifest([0.5, 0.5])
    bad["files"][1]["offset"] -= 5  # overlapping ranges
    write(d, "overlap.json", json.dumps(bad))
    write(d, "truncated.json", json.dumps(manifest([1.0]))[:300])
    huge = manifest([1.0])  # 2^31-1 layers of 65536 channels: a parameter count that overflows 64 bits
    huge["model"].update(layers=2147483647, channels=65536, heads=1)
    huge["files"][0].update(offset=0, count=10, bytes=64 + 120)
    write(d, "huge_layers.json", json.dumps(huge))

    d = os.path.join(out, "ckpt_files")
    for i in range(8):
        write(d, f"random_{i}", bytes(random.getrandbits(8) for _ in range(random.randint(8, 64))))
    write(d, "whole_model", bytes([0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 0, 0, 0, 0xff, 0xff]))

    d = os.path.join(out, "shard")
    write(d, "valid", struct.pack("<H", 257) + shard([random.randrange(257) for _ in range(64)]))
    write(d, "unchecked", struct.pack("<H", 0) + shard([65535, 0, 1]))
    write(d, "out_of_vocab", struct.pack("<H", 10) + shard([3, 9, 10]))
    write(d, "bad_magic", struct.pack("<H", 257) + shard([1, 2], magic=20240326))
    write(d, "bad_count", struct.pack("<H", 257) + shard([1, 2, 3], count=4))
    write(d, "negative_count", struct.pack("<H", 257) + shard([], count=-1))
    write(d, "empty", struct.pack("<H", 257) + shard([]))

    d = os.path.join(out, "safetensors")
    write(d, "one_layer", safetensors())
    write(d, "two_layers_bf16", safetensors(layers=2, dtype="BF16", prefix=""))
    write(d, "f16_mask_buffer", safetensors(dtype="F16", extra={"transformer.h.0.attn.bias": {
        "dtype": "BOOL", "shape": [0], "data_offsets": [0, 0]}}))
    write(d, "truncated", safetensors()[:40])
    write(d, "control_char_name", safetensors(extra={"transformer.h.0\n.x": {  # must still be refused in one line
        "dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}))


if __name__ == "__main__":
    main()
