#!/usr/bin/python3
"""test_tok_gpt2.py: our GPT-2 BPE (and BPE applied from a trained file) against
encoders nobody here wrote, tiktoken and Hugging Face tokenizers, all built from
the same local vocabulary files (tests/data/gpt2; no download at run time).

- the known vectors of tests/data/gpt2/README.md;
- 12,000 lines of varied text (words, contractions, numbers in several scripts,
  punctuation, letters of many scripts, combining marks, emoji sequences, every
  kind of Unicode whitespace, pieces hundreds of symbols long): ours equals both
  peers token for token, on 1 and 2 threads, and decodes back to the same bytes;
- `prepare` with GPT-2 writes shards whose tokens, read back through the
  training loader, are end-of-text + tiktoken's encoding of each document;
- a tokenizer trained here, exported as encoder.json + vocab.bpe and loaded by
  Hugging Face, encodes text exactly as we do.

Runs under the bench virtual environment (scripts/install-test-peers.sh
installs the peers there; this script re-runs itself with that python).
"""
import os
import random
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.tok_peers as peers  # noqa: E402

try:
    import numpy as np
    import tiktoken  # noqa: F401
    import tokenizers  # noqa: F401
except ImportError:
    python = peers.peer_python()
    if os.path.realpath(python) == os.path.realpath(sys.executable) and os.environ.get("BS_TOK_REEXEC"):
        raise
    os.environ["BS_TOK_REEXEC"] = "1"
    os.execv(python, [python] + sys.argv)

from bstest import TempDir, run  # noqa: E402

GPT2 = ["--tokenizer", "gpt2", "--vocab-dir", peers.GPT2_DIR]
LOADER = os.environ.get("TOK_LOADER", "build/tests/test_tok_loader")
EOT = 50256


def ids_of(text):
    return [int(x) for x in text.split()]


def shard_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        body = np.frombuffer(f.read(), dtype=np.uint16)
    assert header[0] == 20240520 and header[1] == 1 and header[2] == len(body), path
    return body.astype(np.int64).tolist()


def shards(directory, prefix):
    names = sorted(n for n in os.listdir(directory) if n.startswith(prefix + "_") and n.endswith(".bin"))
    return [os.path.join(directory, n) for n in names]


class Gpt2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.dir = cls.tmp.__enter__()
        cls.text = peers.varied_text()
        cls.bytes = cls.text.encode("utf-8")
        cls.path = os.path.join(cls.dir, "varied.txt")
        with open(cls.path, "wb") as f:
            f.write(cls.bytes)
        cls.tk = peers.tiktoken_gpt2()
        cls.hf = peers.hf_bpe()
        cls.expected = cls.tk.encode_ordinary(cls.text)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def encode(self, path, tokenizer=GPT2, threads=1):
        p = run(["tokenizer", "encode", *tokenizer, "--in", path, "--threads", str(threads), "--quiet"])
        return ids_of(p.stdout)

    def assertSameTokens(self, ours, theirs, what):
        if ours == theirs:
            return
        i = next((k for k in range(min(len(ours), len(theirs))) if ours[k] != theirs[k]), min(len(ours), len(theirs)))
        context = self.tk.decode(theirs[max(0, i - 8):i + 8]) if theirs and max(theirs) < EOT else ""
        self.fail(f"{what}: first difference at token {i} of {len(theirs)} (ours {ours[i:i + 6]}, "
                  f"theirs {theirs[i:i + 6]}) near {context!r}")

    def test_known_vectors(self):
        # From tests/data/gpt2/README.md.
        known = {"hello world": [31373, 995],
                 "In the beginning God created the heaven and the earth.":
                     [818, 262, 3726, 1793, 2727, 262, 9538, 290, 262, 4534, 13]}
        for text, ids in known.items():
            path = os.path.join(self.dir, "known.txt")
            with open(path, "w") as f:
                f.write(text)
            self.assertEqual(self.encode(path), ids, text)
            self.assertEqual(self.tk.encode_ordinary(text), ids, "tiktoken disagrees with the README")
            self.assertEqual(self.hf.encode(text).ids, ids, "Hugging Face disagrees with the README")
        self.assertEqual(self.tk.eot_token, EOT)

    def test_varied_text_is_varied(self):
        self.assertGreaterEqual(self.text.count("\n") + 1, 10000)
        for needle in ["'s", "😀", "\u3000", "\u0301", "١" if "١" in self.text else "٣", "  ", "\t", "\r\n"]:
            self.assertIn(needle, self.text)
        self.assertGreater(len(self.expected), 500_000)

    def test_equals_tiktoken(self):
        self.assertSameTokens(self.encode(self.path), self.expected, "ours vs tiktoken")

    def test_equals_hugging_face(self):
        self.assertSameTokens(self.encode(self.path), self.hf.encode(self.text).ids, "ours vs Hugging Face")

    def test_two_threads(self):
        self.assertSameTokens(self.encode(self.path, threads=2), self.expected, "ours on 2 threads vs tiktoken")

    def test_decode(self):
        ids_path = os.path.join(self.dir, "ids.txt")
        with open(ids_path, "w") as f:
            f.write(" ".join(map(str, self.expected + [EOT])))
        out = os.path.join(self.dir, "decoded.bin")
        run(["tokenizer", "decode", *GPT2, "--in", ids_path, "--out", out])
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.bytes + b"<|endoftext|>")

    def test_prepare_shards_load_in_loader(self):
        out = os.path.join(self.dir, "prep")
        run(["prepare", "--in", self.path, "--out", out, *GPT2, "--val-fraction", "0.1", "--shard-tokens", "100000",
             "--threads", "2"])
        train, val = shards(out, "train"), shards(out, "val")
        self.assertGreater(len(train), 5)
        got_train = sum((shard_tokens(p) for p in train), [])
        got_val = sum((shard_tokens(p) for p in val), [])
        self.assertSameTokens(got_train + got_val, [EOT] + self.expected, "prepare vs end-of-text + tiktoken")
        share = len(got_val) / (len(got_train) + len(got_val))
        self.assertTrue(0.07 < share < 0.13, f"validation share {share:.3f} for --val-fraction 0.1")
        # The same shards, byte for byte, on one thread.
        one = os.path.join(self.dir, "prep1")
        run(["prepare", "--in", self.path, "--out", one, *GPT2, "--val-fraction", "0.1", "--shard-tokens", "100000",
             "--threads", "1"])
        for a, b in zip(train + val, shards(one, "train") + shards(one, "val")):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                self.assertEqual(fa.read(), fb.read(), f"{a} differs on 1 thread")
        # What the training loader reads: windows of T+1 tokens at stride T within each shard.
        T = 64
        p = subprocess.run([LOADER, os.path.join(out, "train_*.bin"), str(T), "50257"], capture_output=True, text=True,
                           check=True)
        windows = [ids_of(line) for line in p.stdout.splitlines()]
        expected = []
        for path in train:
            toks = shard_tokens(path)
            expected += [toks[k * T:k * T + T + 1] for k in range((len(toks) - 1) // T)]
        self.assertEqual(len(windows), len(expected))
        self.assertEqual(windows, expected)
        self.assertEqual(windows[0][:4], ([EOT] + self.expected)[:4])

    def test_prepare_directory_documents(self):
        docs = os.path.join(self.dir, "docs")
        os.makedirs(docs)
        lines = self.text.split("\n")
        parts = ["\n".join(lines[:100]), "\n".join(lines[100:3000]), "\n".join(lines[3000:3200])]
        for i, part in enumerate(parts):  # written in reverse name order: files are taken sorted by name
            with open(os.path.join(docs, f"doc{2 - i}.txt"), "w", encoding="utf-8", newline="") as f:
                f.write(part)
        out = os.path.join(self.dir, "prepdocs")
        p = run(["prepare", "--in", docs, "--out", out, *GPT2, "--val-fraction", "0"])
        self.assertIn("prepared 3 document(s)", p.stdout)
        got = sum((shard_tokens(s) for s in shards(out, "train")), [])
        want = sum(([EOT] + self.tk.encode_ordinary(part) for part in reversed(parts)), [])
        self.assertSameTokens(got, want, "three documents")
        self.assertEqual(shards(out, "val"), [])

    def test_reordered_merges_equal_hugging_face(self):
        # Merges moved ahead of the merges that make their parts: a merge can then make a pair of
        # lower rank than its own, which no trained vocabulary does. Hugging Face still merges the
        # lowest rank first; so must we (tiktoken cannot load such files).
        d = os.path.join(self.dir, "reordered")
        os.makedirs(d)
        shutil.copy(os.path.join(peers.GPT2_DIR, "encoder.json"), d)
        with open(os.path.join(peers.GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().rstrip("\n").split("\n")
        header, merges = lines[0], lines[1:]
        rng = random.Random(5)
        moved = sorted(rng.sample(range(1000, len(merges)), 3000))
        early = [merges[i] for i in moved]
        rest = [m for i, m in enumerate(merges) if i not in set(moved)]
        with open(os.path.join(d, "vocab.bpe"), "w", encoding="utf-8") as f:
            f.write("\n".join([header] + early + rest) + "\n")
        self.assertSameTokens(self.encode(self.path, ["--tokenizer", "gpt2", "--vocab-dir", d]),
                              peers.hf_bpe(d).encode(self.text).ids, "reordered merges vs Hugging Face")

    def test_trained_tokenizer_equals_hugging_face(self):
        corpus = os.path.join(self.dir, "kjv.txt")
        with open(corpus, "wb") as f:
            f.write(subprocess.run(["bible", "-m", "8192", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout)
        model = os.path.join(self.dir, "kjv.bpe")
        run(["tokenizer", "train", "--in", corpus, "--vocab-size", "3000", "--out", model])
        exported = os.path.join(self.dir, "kjv-gpt2-format")
        run(["tokenizer", "export", "--tokenizer", model, "--out", exported])
        hf = peers.hf_bpe(exported)
        with open(corpus, encoding="utf-8") as f:
            kjv = f.read()
        self.assertEqual(hf.get_vocab_size(), 3000)
        for name, path, text in [("KJV", corpus, kjv), ("varied text", self.path, self.text)]:
            self.assertSameTokens(self.encode(path, ["--tokenizer", model]), hf.encode(text).ids,
                                  f"trained tokenizer vs Hugging Face on {name}")


if __name__ == "__main__":
    unittest.main()
