#!/usr/bin/python3
"""test_errors.py: bad input gets one clear line naming the file or flag and a
non-zero exit; never a crash, a hang, or silent wrong output."""
import json
import os
import shutil
import struct
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import TempDir, make_corpus, run, tiny_train_args  # noqa: E402


# ---- load guard (issue 48): what is loaded, written and given is checked before any work ----

def rewrite_safetensors(src, dst, edit_header=None, edit_data=None):
    """Copies a safetensors file, the header (a dict) and the data area (a bytearray and the header) edited."""
    with open(src, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
    if edit_header:
        edit_header(header)
    if edit_data:
        edit_data(header, data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))


def xxh64(data, seed=0):
    """XXH64 as Yann Collet's specification (xxhash.com, doc/xxhash_spec.md) defines it: the checkpoint manifest's
    checksum, so a test can damage a value and keep the file's checksum right."""
    m, p1, p2, p3, p4, p5 = (1 << 64) - 1, 11400714785074694791, 14029467366897019727, 1609587929392839161, \
        9650029242287828579, 2870177450012600261

    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & m

    def rnd(acc, lane):
        return rotl((acc + lane * p2) & m, 31) * p1 & m

    def lane(i, size=8):
        return int.from_bytes(data[i:i + size], "little")
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed, (seed - p1) & m]
        while i + 32 <= n:
            v = [rnd(v[k], lane(i + 8 * k)) for k in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
        for x in v:
            h = ((h ^ rnd(0, x)) * p1 + p4) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, lane(i)), 27) * p1 + p4) & m
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (lane(i, 4) * p1 & m), 23) * p2 + p3) & m
        i += 4
    for b in data[i:]:
        h = rotl(h ^ (b * p5 & m), 11) * p1 & m
    for shift, mult in ((33, p2), (29, p3)):
        h = (h ^ (h >> shift)) * mult & m
    return h ^ (h >> 32)


class ErrorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.dir = cls.tmp.__enter__()
        cls.data = make_corpus(cls.dir, nbytes=50_000)
        cls.shard = os.path.join(cls.data, "train_000000.bin")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def fails(self, args, *needles):
        p = run(args, check=False, timeout=120)
        self.assertNotEqual(p.returncode, 0, f"expected failure: {args}\n{p.stdout}")
        self.assertGreater(p.returncode, 0, "killed by a signal (crash)")
        err = p.stderr.strip()
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, f"expected one line, got:\n{err}")
        self.assertTrue(lines[0].startswith("batchscale: error: "), lines[0])
        for n in needles:
            self.assertIn(n, lines[0])
        return lines[0]

    def shard_copy(self, name, mutate):
        path = os.path.join(self.dir, name)
        shutil.copy(self.shard, path)
        with open(path, "r+b") as f:
            mutate(f)
        return path

    def test_missing_data_file(self):
        self.fails(tiny_train_args(self.data, data="/nonexistent/train.bin"), "/nonexistent/train.bin")

    def test_truncated_shard(self):
        path = self.shard_copy("trunc.bin", lambda f: f.truncate(5000))
        self.fails(tiny_train_args(self.data, data=path), path, "truncated")

    def test_shard_shorter_than_header(self):
        path = self.shard_copy("tiny.bin", lambda f: f.truncate(100))
        self.fails(tiny_train_args(self.data, data=path), path, "header")

    def test_wrong_magic(self):
        def mutate(f):
            f.seek(0)
            f.write(np.int32(12345).tobytes())
        path = self.shard_copy("magic.bin", mutate)
        self.fails(tiny_train_args(self.data, data=path), path, "magic")

    def test_token_outside_vocab(self):
        def mutate(f):
            f.seek(1024 + 2 * 100)
            f.write(np.uint16(300).tobytes())
        path = self.shard_copy("vocab.bin", mutate)
        self.fails(tiny_train_args(self.data, data=path), path, "300", "vocabulary")

    def test_heads_not_dividing_channels(self):
        self.fails(tiny_train_args(self.data, heads=3, channels=32),
                   "the 3 attention heads do not divide the width 32 (flags: --heads, --channels)")

    def test_zero_and_negative_batch(self):
        self.fails(tiny_train_args(self.data, **{"micro-batch": 0}), "--micro-batch")
        self.fails(tiny_train_args(self.data, **{"micro-batch": -4}), "--micro-batch")
        self.fails(tiny_train_args(self.data, **{"global-batch": -8}), "--global-batch")
        self.fails(tiny_train_args(self.data, **{"global-batch": 6}), "the global batch 6 is not a multiple of the micro-batch 4",
                   "(flags: --global-batch, --micro-batch, --dp)")

    def test_bad_numbers(self):
        self.fails(tiny_train_args(self.data, lr="fast"), "--lr", "fast")
        self.fails(tiny_train_args(self.data, steps=0), "--steps")
        self.fails(["train", "--no-such-flag"], "--no-such-flag")

    def test_out_of_range_and_unknown_values(self):
        """Each flag's bad value is named in the one line (a sweep over the option kinds: numbers, ranges, names,
        layouts, schedules, codecs, paths)."""
        cases = [("lr", "nan"), ("lr", "-1"), ("steps", "10x"), ("zero", "4"), ("pp-schedule", "foo"),
                 ("comm-algo", "foo"), ("optimizer", "foo"), ("bucket-mb", "0"), ("data-order", "random"),
                 ("lr-scaling", "cube"), ("grad-compression", "topk:0"), ("noise-ema", "2"), ("threads", "-1"),
                 ("keep-last", "-1"), ("tokenizer", "/nonexistent"), ("warmup", "-5"), ("grad-clip", "-1"),
                 ("tp", "3"), ("dp", "2"), ("batch-schedule", "ramp:0:2:100"), ("comm-timeout", "0"),
                 ("precision", "fp16"), ("bf16-matmul", "amx")]
        for flag, value in cases:
            with self.subTest(flag=flag, value=value):
                self.fails(tiny_train_args(self.data, **{flag: value}), "--" + flag)
        self.fails(tiny_train_args(self.data, metrics="/nonexistent/dir/m.jsonl"), "/nonexistent/dir/m.jsonl")

    def test_unknown_command(self):
        self.fails(["nosuchcommand"], "nosuchcommand")

    def test_sequence_longer_than_model(self):
        model = os.path.join(self.dir, "short.bin")
        run(tiny_train_args(self.data, steps=1, **{"save-model": model}))
        self.fails(tiny_train_args(self.data, **{"init-from": model, "seq-len": 64}),
                   "the sequence length 64 is longer than the model's maximum sequence length 32", "(flags: --seq-len, --init-from)")

    def test_checkpoint_of_another_shape(self):
        ck = os.path.join(self.dir, "ck")
        run(tiny_train_args(self.data, steps=2, **{"ckpt-dir": ck}))
        self.fails(tiny_train_args(self.data, channels=64, resume=os.path.join(ck, "step_00000002")),
                   "step_00000002", "shape")

    def test_corrupt_checkpoint(self):
        ck = os.path.join(self.dir, "ck_corrupt")
        run(tiny_train_args(self.data, steps=2, **{"ckpt-dir": ck}))
        f = os.path.join(ck, "step_00000002", "rank_00000.bin")
        with open(f, "r+b") as fh:
            fh.seek(200)
            b = fh.read(1)
            fh.seek(200)
            fh.write(bytes([b[0] ^ 0xFF]))
        self.fails(tiny_train_args(self.data, resume=os.path.join(ck, "step_00000002")), "rank_00000.bin", "checksum")

    def test_missing_checkpoint(self):
        self.fails(tiny_train_args(self.data, resume=os.path.join(self.dir, "nope")), "nope")

    def test_prepare_missing_input(self):
        self.fails(["prepare", "--in", "/no/such.txt", "--out", os.path.join(self.dir, "x")], "/no/such.txt")

    def test_init_from_garbage(self):
        path = os.path.join(self.dir, "garbage.bin")
        with open(path, "wb") as f:
            f.write(b"\x00" * 2000)
        self.fails(tiny_train_args(self.data, **{"init-from": path}), path, "magic")

    # ---- load guard (issue 48) ----

    def model(self, name):
        """A 2-layer, 2-head, 32-wide model trained one step, saved as NAME (.bin: llm.c, .safetensors)."""
        path = os.path.join(self.dir, name)
        if not os.path.exists(path):
            run(tiny_train_args(self.data, steps=1, **{"save-model": path}))
        return path

    def test_load_shape_from_weights_and_config(self):
        """Item 1: a Hugging Face directory without config.json (and no n_head beside the weights), a config.json
        whose sizes disagree with the weights, and shape flags that contradict --init-from are refused; flags that
        agree are accepted."""
        hf = os.path.join(self.dir, "hf_noconfig")
        os.makedirs(hf, exist_ok=True)
        st = os.path.join(hf, "model.safetensors")
        rewrite_safetensors(self.model("m.safetensors"), st, lambda h: h.update(__metadata__={"format": "pt"}))
        self.fails(tiny_train_args(self.data, steps=1, heads=False, **{"init-from": hf}), st, "n_head")
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump({"n_head": 2, "n_layer": 2, "n_embd": 64, "n_positions": 32, "vocab_size": 257}, f)
        self.fails(tiny_train_args(self.data, steps=1, **{"init-from": hf}), "config.json", "n_embd 64", "32")
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump({"n_head": 2, "n_layer": 2, "n_embd": 32, "n_positions": 32, "vocab_size": 257}, f)
        run(tiny_train_args(self.data, steps=1, **{"init-from": hf}))  # the flags agree with the file
        for flag, value in (("layers", 3), ("heads", 4), ("channels", 64), ("vocab-size", 300)):
            with self.subTest(flag=flag):
                self.fails(tiny_train_args(self.data, steps=1, **{"init-from": hf, flag: value}),
                           f"--{flag} {value}", hf)
        self.fails(["train", "--init-from", self.model("m.bin"), "--layers", "4", "--data", self.shard],
                   "--layers 4", "m.bin")

    def test_load_nonfinite_weights(self):
        """Item 2: one NaN weight in a safetensors file, an llm.c file or a checkpoint is refused at load, the line
        naming the file and the tensor (sample used to print NUL bytes and exit 0; train to skip every step)."""
        bad_st = os.path.join(self.dir, "nan.safetensors")

        def poison(header, data):
            begin = header["transformer.h.1.mlp.c_fc.weight"]["data_offsets"][0]
            data[begin + 4 * 7:begin + 4 * 8] = struct.pack("<f", float("nan"))
        rewrite_safetensors(self.model("m.safetensors"), bad_st, edit_data=poison)
        with self.subTest("sample, safetensors"):
            self.fails(["sample", "--model", bad_st, "--tokens", "4"], bad_st, "h.1.mlp.c_fc.weight", "NaN")
        with self.subTest("train, safetensors"):
            self.fails(tiny_train_args(self.data, steps=3, **{"init-from": bad_st}), bad_st, "h.1.mlp.c_fc.weight")
        lora = {"init-from": self.model("m.bin"), "lora-rank": 2}
        adapters, bad_adapters = os.path.join(self.dir, "adapters"), os.path.join(self.dir, "nan_adapters")
        run(tiny_train_args(self.data, steps=1, **lora, **{"save-adapters": adapters}))
        shutil.copytree(adapters, bad_adapters, dirs_exist_ok=True)
        bad_file = os.path.join(bad_adapters, "adapter_model.safetensors")

        def poison_adapter(header, data):
            begin = header["base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"]["data_offsets"][0]
            data[begin:begin + 4] = struct.pack("<f", float("nan"))
        rewrite_safetensors(os.path.join(adapters, "adapter_model.safetensors"), bad_file, edit_data=poison_adapter)
        with self.subTest("adapters"):
            self.fails(tiny_train_args(self.data, steps=1, **lora, **{"lora-init": bad_adapters}), bad_file,
                       "h.0.attn.c_attn.lora_A.weight", "NaN")
        bad_bin = os.path.join(self.dir, "inf.bin")
        shutil.copy(self.model("m.bin"), bad_bin)
        with open(bad_bin, "r+b") as f:  # the last float: lnfb
            f.seek(-4, os.SEEK_END)
            f.write(struct.pack("<f", float("inf")))
        with self.subTest("sample, llm.c"):
            self.fails(["sample", "--model", bad_bin, "--tokens", "4"], bad_bin, "lnfb", "infinity")
        ck = os.path.join(self.dir, "ck_nan")
        run(tiny_train_args(self.data, steps=2, **{"ckpt-dir": ck}))
        step = os.path.join(ck, "step_00000002")
        rank_file, manifest = os.path.join(step, "rank_00000.bin"), os.path.join(step, "manifest.json")
        with open(manifest) as f:
            m = json.load(f)
        entry = next(e for e in m["files"] if e["name"] == "rank_00000.bin")
        with open(rank_file, "rb") as f:
            body = bytearray(f.read())
        self.assertEqual(f"{xxh64(bytes(body)):016x}", entry["xxh64"], "the transcribed XXH64 matches the engine's")
        body[64 + 4 * 100:64 + 4 * 101] = struct.pack("<f", float("nan"))  # parameter 100, after the 64-byte header
        with open(rank_file, "wb") as f:
            f.write(body)
        entry["xxh64"] = f"{xxh64(bytes(body)):016x}"
        with open(manifest, "w") as f:
            json.dump(m, f)
        with self.subTest("resume, checkpoint"):
            self.fails(tiny_train_args(self.data, steps=3, resume=step), rank_file, "parameter 100", "NaN")
        with self.subTest("sample, checkpoint"):
            self.fails(["sample", "--ckpt", step, "--tokens", "4"], rank_file, "parameter 100")

    def test_outputs_checked_before_training(self):
        """Item 3: every output path is checked before the first step: one line naming the flag, and no step is
        taken (the metrics file, which opens after the check, is never written)."""
        not_dir = os.path.join(self.dir, "plain_file")
        open(not_dir, "w").close()
        cases = [("save-model", os.path.join(self.dir, "nodir", "model.safetensors")),
                 ("save-model", os.path.join(not_dir, "model.bin")),
                 ("trace", os.path.join(self.dir, "nodir", "trace.json")),
                 ("tensorboard", os.path.join(not_dir, "tb")), ("ckpt-dir", os.path.join(not_dir, "ck")),
                 ("metrics", os.path.join(self.dir, "nodir", "m.jsonl"))]
        for flag, path in cases:
            with self.subTest(flag=flag, path=path):
                metrics = os.path.join(self.dir, "outputs.jsonl")
                args = {flag: path} if flag == "metrics" else {flag: path, "metrics": metrics}
                if os.path.exists(metrics):
                    os.remove(metrics)
                run(tiny_train_args(self.data, steps=20, **args), check=False)
                self.assertFalse(os.path.exists(metrics) and os.path.getsize(metrics) > 0,
                                 f"--{flag}: steps were taken before the check")
                self.fails(tiny_train_args(self.data, steps=20, **args), "--" + flag, path)
        adapters = os.path.join(not_dir, "adapters")
        self.fails(tiny_train_args(self.data, steps=20, **{"init-from": self.model("m.bin"), "lora-rank": 2,
                                                           "save-adapters": adapters}), "--save-adapters", adapters)
        ck = os.path.join(self.dir, "ck_export")
        run(tiny_train_args(self.data, steps=1, **{"ckpt-dir": ck}))
        out = os.path.join(self.dir, "nodir", "export.bin")
        self.fails(["ckpt", "export", "--out", out, ck], "--out", out, "does not exist")

    def test_empty_and_degenerate_inputs(self):
        """Item 6: no documents, no supervised tokens, nothing to train, a LoRA rank above the width, a fault on a
        rank that does not exist and a sequence that cannot fit are each refused in one line naming the flag or
        file, before any work."""
        empty = os.path.join(self.dir, "empty.txt")
        open(empty, "w").close()
        chat = os.path.join(self.dir, "no_assistant.jsonl")
        with open(chat, "w") as f:
            for q in ("hello", "how are you"):
                f.write(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": q}]}) + "\n")
        ck = os.path.join(self.dir, "ck_past")
        run(tiny_train_args(self.data, steps=4, **{"ckpt-dir": ck}))
        cases = {
            "no documents": (["prepare", "--in", empty, "--out", os.path.join(self.dir, "prep_empty")], empty, "empty"),
            "no supervised tokens": (["prepare", "--format", "chat-jsonl", "--in", chat, "--out",
                                      os.path.join(self.dir, "prep_chat")], "--in", "assistant"),
            "nothing to train": (tiny_train_args(self.data, steps=2, resume=os.path.join(ck, "step_00000004")),
                                 "the checkpoint", "is at step 4, past the 2 step(s) of this run",
                                 "(flags: --resume, --steps)"),
            "rank above the width": (tiny_train_args(self.data, steps=1, channels=64, **{"lora-rank": 1000}),
                                     "the LoRA rank 1000 is larger than the model's width 64",
                                     "(flags: --lora-rank, --channels)"),
            "no such rank": (tiny_train_args(self.data, steps=1, **{"debug-inject-fault": "exit:5:1"}), "--debug-inject-fault",
                             "rank 5"),
        }
        unmasked = os.path.join(self.dir, "masked_none")  # SFT shards prepared elsewhere: every mask byte 0
        os.makedirs(unmasked, exist_ok=True)
        shard = os.path.join(unmasked, "train_000000.bin")
        shutil.copy(self.shard, shard)
        with open(os.path.join(unmasked, "train_000000.mask"), "wb") as f:
            f.write(bytes((os.path.getsize(shard) - 1024) // 2))
        cases["no supervised tokens in the shards"] = (tiny_train_args(self.data, steps=1, data=shard,
                                                                       **{"doc-mask": "off"}), shard, "loss masks")
        long_corpus = os.path.join(self.dir, "long")  # enough tokens for one sequence: the memory is what fails
        os.makedirs(long_corpus, exist_ok=True)
        cases["sequence cannot fit"] = (tiny_train_args(make_corpus(long_corpus, nbytes=1_100_000), steps=1,
                                                        **{"seq-len": 1000000}),
                                    "a sequence length of 1000000 with micro-batches of 4 needs at least", "GB",
                                    "(flags: --seq-len, --micro-batch)")
        for label, (args, *needles) in cases.items():
            with self.subTest(label):
                self.fails(args, *needles)

if __name__ == "__main__":
    unittest.main(verbosity=2)
