#!/usr/bin/python3
"""test_cc_train.py: compressed communication in training.

Convergence (argv "convergence N"): on the shipped corpus (the King James
Bible from Debian's bible-kjv, byte-level), tiny model (L=2 C=64 T=64),
N ranks, 300 steps, global batch 16, ZeRO 0:
- fp16, bf16 and int8 gradients: final validation loss within 2% of the
  uncompressed AdamW run;
- 1-bit Adam (full precision for 60 steps, then 1-bit momentum with worker
  and server error feedback): within 5%;
- top-k 1% with error feedback: within 5% of uncompressed SGD, and without
  error feedback measurably worse (at least 5% above uncompressed). Top-k
  runs with plain SGD, the setting where error feedback is proven to work
  (Stich et al. 2018, "Sparsified SGD with memory"): with Adam the residual
  arrives in bursts that the per-element variance normalises away, which is
  exactly the nonlinearity 1-bit Adam was invented to get around (Tang et al.
  2021). Measured here with AdamW, 2 ranks: top-k 1% with feedback 3.11,
  without 2.78, uncompressed 2.38 (docs/PERFORMANCE.md).
- bytes on the wire per step (metrics: comm_bytes against comm_bytes_fp32,
  what the fp32 ring would send): int8 at most 27%, fp16 and bf16 50%,
  1-bit at most 4% (steps after the freeze), top-k 1% at most 3%.

Mechanics (argv "mechanics", small corpus, 2 or 4 ranks, 10 steps):
- error-feedback residuals are saved in checkpoints: resuming continues bit
  for bit (int8 at ZeRO 0, top-k at ZeRO 2, 1-bit Adam at ZeRO 1 across its
  freeze step), and a checkpoint without them resumes with a warning and
  another result (so the bit-exact resume is not an accident);
- 1-bit Adam under ZeRO-1 gives ZeRO-0's result;
- ZeRO++: hpZ gives ZeRO-3's result bit for bit with fewer bytes over the
  data-parallel group; qwZ gathers in int8 (bytes) and stays within 1% of
  ZeRO-3's losses; qgZ (the hierarchical int8 all-to-all reduce-scatter) at
  ZeRO 1, 2 and 3 on 2 ranks (one node) and 4 (2 emulated nodes x 2): every
  step's loss within 1% of the fp32 run's, the parameters not identical to
  it (something was quantized), the fp32 accounting equal to the fp32 run's
  bytes, and the bytes saved those of a reduce-scatter cut from fp32 to
  int8 with a scale per block: the run has one reduce-scatter of the P
  parameters a step (accumulation 1), (N-1)/N 4P bytes in fp32, of which
  qgZ sends (1 + 4/B)/4;
- bad values get one line naming the flag and a non-zero exit.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import CorpusTest, kjv_corpus, launch, read_metrics, read_model, run  # noqa: E402


def train(data, prefix, ranks, extra=(), steps=10, micro=4, batch=8, model=("2", "4", "64", "32"), val=0):
    metrics, out = prefix + ".jsonl", prefix + ".bin"
    L, H, C, T = model
    args = ["train", "--data", os.path.join(data, "train_000000.bin"), "--layers", L, "--heads", H,
            "--channels", C, "--seq-len", T, "--micro-batch", str(micro), "--global-batch", str(batch), "--steps",
            str(steps), "--lr", "3e-3", "--warmup", "2", "--sample-tokens", "0", "--threads", "1", "--metrics",
            metrics, "--save-model", out] + list(extra)
    if val:
        args += ["--val-data", os.path.join(data, "val_000000.bin"), "--eval-every", str(steps), "--val-batches",
                 str(val)]
    else:
        args += ["--eval-every", "0"]
    p = launch(args, ranks)
    return read_metrics(metrics), read_model(out)[1], p.stderr


def byte_share(step):
    return step["comm_bytes"] / step["comm_bytes_fp32"]


class Convergence(CorpusTest):
    ranks = 2
    runs = {}

    @classmethod
    def make_data(cls, directory):
        return kjv_corpus(directory)

    def result(self, name, extra):
        if name not in self.runs:
            n = self.ranks
            self.runs[name] = train(self.data, os.path.join(self.dir, f"{name}_{n}"), n, extra, steps=300,
                                    micro=16 // n, batch=16, model=("2", "4", "64", "64"), val=16)[0]
        return self.runs[name]

    def val(self, name, extra):
        return self.result(name, extra)[-1]["val_loss"]

    def test_elementwise_codecs_within_2_percent(self):
        base = self.val("adamw", [])
        self.assertLess(base, self.result("adamw", [])[0]["loss"] * 0.6, "the uncompressed run did not learn")
        self.assertEqual(byte_share(self.result("adamw", [])[-1]), 1.0)
        for codec, share in (("fp16", 0.5), ("bf16", 0.5), ("int8", 0.27)):
            v = self.val(codec, ["--grad-compression", codec])
            self.assertLess(abs(v - base) / base, 0.02, f"{codec}: {v:.4f} vs uncompressed {base:.4f}")
            measured = byte_share(self.result(codec, [])[-1])
            self.assertLessEqual(measured, share + 1e-9, f"{codec} sends {measured:.2%} of fp32")
            if share == 0.5:
                self.assertGreater(measured, 0.499, codec)

    def test_onebit_adam_within_5_percent(self):
        base = self.val("adamw", [])
        run = self.result("onebit", ["--optimizer", "onebit-adam", "--freeze-step", "60"])
        v = run[-1]["val_loss"]
        self.assertLess(abs(v - base) / base, 0.05, f"1-bit Adam {v:.4f} vs Adam {base:.4f}")
        self.assertEqual(byte_share(run[59]), 1.0, "warm-up steps are full precision")
        self.assertLessEqual(max(byte_share(s) for s in run[60:]), 0.04)

    def test_topk_needs_error_feedback(self):
        sgd = ["--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", "--lr", "0.5"]
        base = self.val("sgd", sgd)
        self.assertLess(base, self.result("sgd", sgd)[0]["loss"] * 0.6, "uncompressed SGD did not learn")
        ef = self.val("topk", sgd + ["--grad-compression", "topk:0.01"])
        no_ef = self.val("topk_no_ef", sgd + ["--grad-compression", "topk:0.01", "--no-error-feedback"])
        self.assertLess(abs(ef - base) / base, 0.05, f"top-k 1% with feedback {ef:.4f} vs {base:.4f}")
        self.assertGreater(no_ef, base * 1.05, f"top-k 1% without feedback {no_ef:.4f} vs {base:.4f}")
        self.assertGreater(no_ef, ef, "error feedback did not help")
        self.assertLessEqual(byte_share(self.result("topk", [])[-1]), 0.03)


class Mechanics(CorpusTest):

    def resume_case(self, name, extra, ranks=2):
        ck = self.path("ck_" + name)
        full, p_full, _ = train(self.data, self.path(name + "_full"), ranks, extra + [
            "--ckpt-dir", ck, "--ckpt-every", "5", "--keep-last", "0"])
        at5 = os.path.join(ck, "step_00000005")
        self.assertTrue(os.path.exists(os.path.join(at5, "extra_00001.bin")), "no residuals in the checkpoint")
        res, p_res, _ = train(self.data, self.path(name + "_res"), ranks, extra + [
            "--resume", at5, "--ckpt-dir", self.path("ck2_" + name)])
        self.assertEqual([m["loss"] for m in res], [m["loss"] for m in full[5:]], name)
        self.assertTrue(np.array_equal(p_res, p_full), name)
        return at5, p_full

    def test_resume_keeps_residuals(self):
        at5, p_full = self.resume_case("int8", ["--grad-compression", "int8"])
        os.remove(os.path.join(at5, "extra_00001.bin"))
        _, p_lost, err = train(self.data, self.path("int8_lost"), 2, ["--grad-compression", "int8", "--resume", at5,
                                                                      "--ckpt-dir", self.path("ck3")])
        self.assertIn("error-feedback residuals start from zero", err)
        self.assertFalse(np.array_equal(p_lost, p_full), "residuals made no difference")
        self.resume_case("topk_zero2", ["--grad-compression", "topk:0.05", "--zero", "2"])
        self.resume_case("onebit_zero1", ["--optimizer", "onebit-adam", "--freeze-step", "3", "--zero", "1"])

    def test_onebit_zero1_equals_zero0(self):
        ob = ["--optimizer", "onebit-adam", "--freeze-step", "4"]
        m0, p0, _ = train(self.data, self.path("ob0"), 2, ob)
        m1, p1, _ = train(self.data, self.path("ob1"), 2, ob + ["--zero", "1"])
        for a, b in zip(m0, m1):
            self.assertLess(abs(a["loss"] - b["loss"]), 1e-6 * b["loss"], f"step {a['step']}")
        self.assertLess(float(np.max(np.abs(p0 - p1))), 1e-6)
        # the compression stage moved the parameters: 1-bit Adam is not plain Adam there
        _, pa, _ = train(self.data, self.path("adam"), 2, [])
        self.assertGreater(float(np.max(np.abs(pa - p0))), 1e-4)

    def test_zero_plus_plus(self):
        z3 = ["--zero", "3", "--ranks-per-node", "2"]
        m3, p3, _ = train(self.data, self.path("z3"), 4, z3, micro=2)
        mh, ph, _ = train(self.data, self.path("hpz"), 4, z3 + ["--zero-hpz"], micro=2)
        self.assertEqual([m["loss"] for m in mh], [m["loss"] for m in m3])
        self.assertTrue(np.array_equal(ph, p3), "hpZ changed the result")
        mq, _, _ = train(self.data, self.path("qwz"), 4, z3 + ["--zero-quant-weights"], micro=2)
        for a, b in zip(mq, m3):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 0.01, f"qwZ step {a['step']}")
        # bytes: ZeRO-3 gathers every block's parameters twice a micro-step (forward and backward) and
        # reduce-scatters the gradients; hpZ's backward gathers cross only the node (2 ranks: each sends 1/2
        # of a block instead of 3/4), qwZ's gathers are int8 (about a quarter)
        self.assertLess(mh[-1]["comm_bytes"], m3[-1]["comm_bytes"])
        self.assertLess(mq[-1]["comm_bytes"], 0.6 * m3[-1]["comm_bytes"])
        self.assertGreater(mq[-1]["compression_ratio"], 1.5)

    def test_qgz(self):
        block = 256  # --compression-block's default
        int8_share = (1 + 4 / block) / 4  # one byte per element and a 4-byte scale per block, against 4 bytes
        for ranks, layout in ((2, []), (4, ["--ranks-per-node", "2"])):
            for zero in (1, 2, 3):
                name, base = f"zero{zero}_np{ranks}", ["--zero", str(zero)] + layout
                mf, pf, _ = train(self.data, self.path(name), ranks, base, micro=8 // ranks)
                mq, pq, _ = train(self.data, self.path("qgz_" + name), ranks, base + ["--zero-quant-grads"],
                                  micro=8 // ranks)
                gaps = [abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(mq, mf)]
                print(f"qgZ {name}: largest loss gap {max(gaps):.2e}")
                self.assertEqual(len(gaps), 10, name)
                self.assertLess(max(gaps), 0.01, name)
                self.assertFalse(np.array_equal(pq, pf), f"{name}: qgZ quantized nothing")
                fp32, sent = mf[-1]["comm_bytes"], mq[-1]["comm_bytes"]
                self.assertEqual(mq[-1]["comm_bytes_fp32"], fp32, name)
                reduce_scatter = (ranks - 1) / ranks * 4 * pf.size
                share = 1 - (fp32 - sent) / reduce_scatter
                print(f"qgZ {name}: bytes {sent} of fp32's {fp32}; reduce-scatter at {share:.4f} of fp32 "
                      f"({int8_share:.4f} expected)")
                self.assertLess(abs(share - int8_share), 0.001, name)

    def test_bad_flags(self):
        data = os.path.join(self.data, "train_000000.bin")
        cases = [
            (["--grad-compression", "topk:0"], "--grad-compression"),
            (["--grad-compression", "topk:1.5"], "--grad-compression"),
            (["--grad-compression", "zstd"], "--grad-compression"),
            (["--compression-block", "0"], "--compression-block"),
            (["--grad-compression", "onebit", "--compression-scheme", "ring"],
             ("the ring compression scheme cannot carry onebit encodings", "(flags: --compression-scheme, --grad-compression)")),
            (["--compression-scheme", "tree"],
             ("the compression scheme must be ring or exchange (got 'tree')", "(flags: --compression-scheme)")),
            (["--zero-quant-weights"], ("they need ZeRO stage 3 (got stage 0)", "(flags: --zero-quant-weights, --zero-hpz, --zero)")),
            (["--zero-hpz", "--zero", "2"], ("they need ZeRO stage 3 (got stage 2)", "--zero-hpz, --zero)")),
            (["--zero-quant-grads"], ("ZeRO's quantized gradients quantize the gradient reduce-scatter: they need ZeRO stage 1",
                                      "(flags: --zero-quant-grads, --zero)")),
            (["--zero-quant-grads", "--zero", "2", "--compression-scheme", "exchange"],
             ("a compression scheme does not apply to ZeRO's quantized gradients", "(flags: --compression-scheme, --zero-quant-grads)")),
            (["--zero-quant-grads", "--zero", "2", "--grad-compression", "fp16"],
             ("cannot be combined with the fp16 gradient compression", "(flags: --zero-quant-grads, --grad-compression)")),
            (["--optimizer", "onebit-adam"], ("the onebit-adam optimizer needs a freeze step S >= 1", "(flags: --optimizer, --freeze-step)")),
            (["--optimizer", "onebit-adam", "--freeze-step", "2", "--zero", "2"],
             ("the onebit-adam optimizer needs ZeRO stage 0 or 1", "(flags: --optimizer, --zero)")),
            (["--freeze-step", "3"], ("a freeze step is 1-bit Adam's: it needs the onebit-adam optimizer",
                                      "(flags: --freeze-step, --optimizer)")),
            (["--optimizer", "onebit-adam", "--freeze-step", "2", "--noise-scale"],
             ("cannot be combined with the gradient noise scale estimate", "(flags: --optimizer, --noise-scale, --batch-schedule)")),
            (["--optimizer", "onebit-adam", "--freeze-step", "2", "--balance"],
             ("cannot be combined with the balanced micro-batch order", "(flags: --optimizer, --balance)")),
            (["--optimizer", "onebit-adam", "--freeze-step", "2", "--grad-compression", "fp16"],
             ("compresses the momentum itself: leave the gradients uncompressed", "(flags: --optimizer, --grad-compression")),
            (["--virtual-stages", "2", "--grad-compression", "fp16"],
             ("virtual pipeline stages with compressed gradients", "(flags: --virtual-stages, --grad-compression")),
        ]
        # compression.c's refusals: their words (the quantities) and the flags that set them
        for extra, needles in cases:
            p = run(["train", "--data", data, "--layers", "1", "--channels", "32", "--heads", "2", "--seq-len", "16",
                     "--steps", "1", "--quiet"] + extra, check=False)
            self.assertNotEqual(p.returncode, 0, str(extra))
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, f"{extra}: {p.stderr}")
            for needle in (needles,) if isinstance(needles, str) else needles:
                self.assertIn(needle, p.stderr, str(extra))


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "mechanics"
    if which == "convergence":
        Convergence.ranks = int(sys.argv[2])
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Convergence)
    else:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Mechanics)
    sys.exit(0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1)
