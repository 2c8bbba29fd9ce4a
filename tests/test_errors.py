#!/usr/bin/python3
"""test_errors.py: bad input gets one clear line naming the file or flag and a
non-zero exit; never a crash, a hang, or silent wrong output."""
import os
import shutil
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import TempDir, make_corpus, run, tiny_train_args  # noqa: E402


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
        self.fails(tiny_train_args(self.data, heads=3, channels=32), "--heads 3", "--channels 32")

    def test_zero_and_negative_batch(self):
        self.fails(tiny_train_args(self.data, **{"micro-batch": 0}), "--micro-batch")
        self.fails(tiny_train_args(self.data, **{"micro-batch": -4}), "--micro-batch")
        self.fails(tiny_train_args(self.data, **{"global-batch": -8}), "--global-batch")
        self.fails(tiny_train_args(self.data, **{"global-batch": 6}), "--global-batch 6", "--micro-batch 4")

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
        self.fails(tiny_train_args(self.data, **{"init-from": model, "seq-len": 64}), "--seq-len 64", "32")

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
