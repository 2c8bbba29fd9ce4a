#!/usr/bin/python3
"""test_bf16_train.py: training with --precision bf16.

usage: test_bf16_train.py [layouts | onednn | convergence]   (default: layouts)

layouts (CTest bf16_train, and again under the AVX2 kernels, bf16_train_isa_avx2):
- Parallel layouts in bf16 (DP 2 with ZeRO 1 and 3, TP 2, PP 2) against one process, in two parts.
  (a) One forward/backward at identical parameters: step 1's loss, and its gradient, read off one SGD step at
      learning rate 1 (no momentum, decay or clipping: gradient = initial parameters - parameters after the step,
      exact to fp32 rounding of the parameters, 2^-24 of them). Bound, per gradient tensor (max over its
      elements) and for the loss:  |layout - one process| <= 2 E + F.
      Derivation: a bf16 pass differs from the fp32 pass at the same parameters only by rounding each matmul
      operand to bf16 (each moves by at most u = 2^-8 of itself, unit roundoff), accumulated through the network:
      E = |one process bf16 - one process fp32|, measured here, is u times the accumulated magnitudes of this
      pass. The layout's bf16 pass rounds the same values, which agree with the one process's to fp32 summation
      order, F = |layout fp32 - one process fp32| (measured here; the fp32 layout tests hold it under 1e-5); so
      |layout bf16 - one process bf16| <= |layout bf16 - layout fp32| + F + |one process fp32 - bf16|, where the
      first term is E's size (the same values round alike, but for the few within F of a bf16 rounding boundary):
      <= 2E + F. E and F are taken per gradient tensor (its largest element difference).
      A wrongly wired layout (a missing reduction, a micro-batch counted twice, a stale shard) moves the gradient
      by a part of itself, far beyond 2E (E is about 2.5e-3 of the gradient's largest element).
  (b) Ten steps of AdamW, every layout's largest relative loss gap and largest parameter difference <= K x a
      noise floor measured beside them: the one process against itself with its sums reordered (micro-batches of
      4, 2 and 1 sequences instead of 8, each batch's pairs of sequences in three other orders, and, where oneDNN
      runs, the other matmul path, which reorders every product, alone and with each of those); K = 4.
      tests/layout_floor.py says why these reorderings and why K; measured worst layout / floor: 0.24 (AMX,
      oneDNN), 1.34 (OpenBLAS Haswell kernels), about 2.2 on an AMD EPYC against a single-split floor (issue 14),
      1.68 (TP 2) on an AMD EPYC family 26 (Zen 5), where the other path alone gave 8.5.
  The fp32 layout tests (test_model_parallel.py, test_dp.py) stay the correctness check at 1e-5.
- --bf16-matmul onednn where oneDNN has no bf16 matmul (ONEDNN_MAX_CPU_ISA=AVX2 makes this CPU such a CPU, as an
  AVX2-only AMD EPYC is): one line naming the flag and the ISA, non-zero exit, before any training work; and auto
  picks the widen path there.
- Training in bf16 gives the same bits at 1, 2 and 3 threads (3 steps: losses and parameters).
- A bf16 run resumes bit for bit in bf16, and its checkpoint (fp32 masters) resumes in fp32.
onednn (bf16_train_onednn; skipped, with the reason, where oneDNN has no bf16 matmul):
- --bf16-matmul onednn against widen: the same bf16 operands, only the fp32 summation order differs: one pass at
  identical parameters against 2E (F = 0: both paths' fp32 passes are the same run), and the two runs are not the
  same bits (the onednn path ran).
convergence (bf16_train_convergence):
- 300 steps on the shipped corpus (the King James Bible, byte-level): the final validation loss is within 1% of
  the fp32 run's.
"""
import os
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_probe import onednn_or_skip  # noqa: E402
from bstest import BATCHSCALE, CorpusTest, concurrently, kjv_corpus, run  # noqa: E402
from harness.bf16_reference import BF16, convergence_run, shared_prefix  # noqa: E402
from layout_floor import DRIVER, LAYOUTS, check_layouts, train  # noqa: E402
from torch_gpt import TENSORS  # noqa: E402

FLOOR_MICRO = (4, 2, 1)  # the one-process run's accumulation splits of the global batch of 8
# one SGD step at learning rate 1 that only subtracts the gradient
ONE_STEP = ["--steps", "1", "--optimizer", "sgd", "--momentum", "0", "--weight-decay", "0", "--grad-clip", "0",
            "--warmup", "0"]


def split_tensors(header, flat):
    """The model file's parameters by tensor name (per-layer tensors of all layers together), float64."""
    cfg = dict(maxT=int(header[2]), V=int(header[7]), L=int(header[4]), C=int(header[6]))  # V: the padded rows too
    out, at = {}, 0
    for name, per_layer, shape in TENSORS:
        n = int(np.prod(shape(cfg))) * (cfg["L"] if per_layer else 1)
        out[name] = flat[at:at + n].astype(np.float64)
        at += n
    assert at == flat.size, "model file size does not match its header"
    return out


class OnePass:
    """Step 1's loss and gradient (by tensor) of one layout, from one SGD step at learning rate 1."""

    def __init__(self, test, initial, name, precision, ranks=1, micro=8, extra=()):
        m, p, header = train(test.data, test.path(f"pass-{name}-{precision}"), ranks, micro=micro, steps=1,
                             extra=list(extra) + ONE_STEP + ["--lr", "1", "--min-lr", "1", "--precision", precision])
        self.loss = m[0]["loss"]
        after = split_tensors(header, p)
        self.grad = {k: initial[k] - after[k] for k in initial}


def initial_parameters(test):
    """The seed's initial parameters: a step at learning rate 0 leaves them as they are."""
    _, p, header = train(test.data, test.path("initial"), steps=1, extra=ONE_STEP + ["--lr", "0", "--min-lr", "0"])
    return split_tensors(header, p)


def check_one_pass(test, label, ref16, ref32, got16, got32):
    """Asserts got16 within 2E + F of ref16, for the loss and every gradient tensor (see the docstring), and prints
    the worst gap / bound."""
    pairs = [("loss", got16.loss, ref16.loss, ref32.loss, got32.loss)]
    pairs += [("gradient " + k, got16.grad[k], ref16.grad[k], ref32.grad[k], got32.grad[k]) for k in ref16.grad]
    worst = (0.0, "")
    for name, g16, r16, r32, g32 in pairs:
        E, F, gap = (float(np.max(np.abs(a - b))) for a, b in ((r16, r32), (g32, r32), (g16, r16)))
        test.assertLessEqual(gap, 2 * E + F, f"{label}: step-1 {name} gap {gap:.3g} > 2E + F = {2 * E + F:.3g} "
                             f"(E {E:.3g}, F {F:.3g})")
        worst = max(worst, (gap / (2 * E + F) if gap else 0.0, name))
    print(f"  {label}: step-1 loss gap {abs(got16.loss - ref16.loss):.2e} (2E + F = "
          f"{2 * abs(ref16.loss - ref32.loss) + abs(got32.loss - ref32.loss):.2e}); worst gap / bound "
          f"{worst[0]:.4f} ({worst[1]})", flush=True)


class Bf16LayoutTest(CorpusTest):
    CORPUS_BYTES = 400_000

    def test_one_pass_at_identical_parameters(self):
        initial = initial_parameters(self)
        ref = {prec: OnePass(self, initial, "one", prec) for prec in ("bf16", "fp32")}
        fp32_scale = max(np.max(np.abs(g)) for g in ref["fp32"].grad.values())
        print(f"one process: step-1 loss bf16 {ref['bf16'].loss:.7f} fp32 {ref['fp32'].loss:.7f}", flush=True)
        for name, extra in LAYOUTS.items():
            got = {prec: OnePass(self, initial, name, prec, ranks=2, micro=2, extra=extra) for prec in ("bf16", "fp32")}
            for tensor, g in got["fp32"].grad.items():  # F must be fp32 order only, or the bound would mean nothing
                f = np.max(np.abs(g - ref["fp32"].grad[tensor]))
                self.assertLess(f, 1e-5 * fp32_scale, f"{name} fp32 gradient {tensor} differs by {f:.3g}")
            check_one_pass(self, name, ref["bf16"], ref["fp32"], got["bf16"], got["fp32"])

    def test_ten_steps_within_the_noise_floor(self):
        check_layouts(self, "bf16", ["--precision", "bf16"], FLOOR_MICRO)

    def test_same_bits_at_1_2_and_3_threads(self):
        """On the path auto picks (oneDNN's blocks on AMX here, OpenBLAS's in the AVX2 pass); threads need no cores.
        One layer of the engine benchmark's width and rows (2048 x 384 -> 1152 products), where oneDNN's own
        threading changed dinp and dweight between 1 and 2 threads before the products were cut into blocks."""
        engine = ["--precision", "bf16", "--layers", "1", "--heads", "6", "--channels", "384", "--seq-len", "256"]
        runs = [train(self.data, self.path(f"threads{t}"), steps=3, extra=engine + ["--threads", str(t)])
                for t in (1, 2, 3)]
        for t, (m, p, _) in zip((2, 3), runs[1:]):
            self.assertEqual([x["loss"] for x in m], [x["loss"] for x in runs[0][0]], f"losses at 1 and {t} threads")
            self.assertTrue(np.array_equal(p, runs[0][1]), f"parameters differ at 1 and {t} threads")

    def test_onednn_where_it_cannot_run(self):
        """As on an AVX2-only CPU: oneDNN capped at AVX2 has no bf16 matmul."""
        avx2 = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
        metrics = self.path("unavailable.jsonl")
        args = ["train", "--data", os.path.join(self.data, "train_000000.bin"), "--precision", "bf16", "--steps", "2",
                "--layers", "1", "--channels", "32", "--heads", "2", "--seq-len", "32", "--sample-tokens", "0",
                "--eval-every", "0", "--metrics", metrics]
        p = run(args + ["--bf16-matmul", "onednn"], check=False, env=avx2)
        self.assertNotEqual(p.returncode, 0)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("--bf16-matmul onednn", lines[0])
        self.assertIn("avx2", lines[0])  # oneDNN's name for the ISA it found
        self.assertFalse(os.path.exists(metrics), "training started before the flag was refused")
        p = run(args + ["--bf16-matmul", "auto"], env=avx2)
        self.assertIn("bf16 matmuls on widen-fp32", p.stdout)

    def test_resume_bf16_and_in_fp32(self):
        ck = self.path("ck16")
        full, p_full, _ = train(self.data, self.path("r_full"), steps=10,
                                extra=["--precision", "bf16", "--ckpt-dir", ck, "--ckpt-every", "5", "--keep-last", "0"])
        at5 = os.path.join(ck, "step_00000005")
        res, p_res, _ = train(self.data, self.path("r_res"), steps=10,
                              extra=["--precision", "bf16", "--resume", at5, "--ckpt-dir", self.path("ck16b")])
        self.assertEqual([m["loss"] for m in res], [m["loss"] for m in full[5:]])
        self.assertTrue(np.array_equal(p_res, p_full))
        r32, _, _ = train(self.data, self.path("r_32"), steps=10,
                          extra=["--resume", at5, "--ckpt-dir", self.path("ck32")])
        for a, b in zip(r32, full[5:]):
            self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 0.01)

    def test_bad_precision(self):
        for flag, value in (("--precision", "fp4"), ("--bf16-matmul", "amx")):
            p = run(["train", "--data", os.path.join(self.data, "train_000000.bin"), flag, value], check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1)
            self.assertIn(flag, p.stderr)


class Bf16OnednnTest(CorpusTest):
    CORPUS_BYTES = 400_000

    def test_onednn_path_equals_widen(self):
        initial = initial_parameters(self)
        widen = OnePass(self, initial, "widen", "bf16", extra=["--bf16-matmul", "widen"])
        fp32 = OnePass(self, initial, "one", "fp32")
        onednn = OnePass(self, initial, "onednn", "bf16", extra=["--bf16-matmul", "onednn"])
        check_one_pass(self, "onednn vs widen", widen, fp32, onednn, fp32)
        self.assertFalse(all(np.array_equal(onednn.grad[k], widen.grad[k]) for k in widen.grad),
                         "the onednn path did not run: the same bits as widen")


class Bf16ConvergenceTest(unittest.TestCase):
    def test_300_steps_match_fp32(self):
        # fp32 and bf16 side by side, one thread each (they ran on 2 threads one after another: the same bits, as the
        # engine cuts its sums into fixed blocks); the bf16 run into the fixture bf16_300's directory, where
        # fp8_train_convergence reads it (harness/bf16_reference.py)
        with tempfile.TemporaryDirectory() as d:
            data = kjv_corpus(d)
            bf16_prefix = shared_prefix() or os.path.join(d, "t16")
            for stale in (bf16_prefix + ".jsonl", bf16_prefix + ".bin"):
                if os.path.exists(stale):
                    os.remove(stale)
            os.makedirs(os.path.dirname(bf16_prefix), exist_ok=True)
            (m32, _, _), (m16, _, _) = concurrently([lambda: convergence_run(data, os.path.join(d, "t32")),
                                                     lambda: convergence_run(data, bf16_prefix, BF16)])
        v32, v16 = m32[-1]["val_loss"], m16[-1]["val_loss"]
        self.assertLess(v32, m32[0]["loss"] * 0.6, "fp32 did not learn")
        self.assertLess(abs(v16 - v32) / v32, 0.01, f"bf16 {v16:.4f} vs fp32 {v32:.4f}")


def main():
    part = sys.argv[1] if len(sys.argv) > 1 else "layouts"
    cases = {"layouts": Bf16LayoutTest, "onednn": Bf16OnednnTest, "convergence": Bf16ConvergenceTest}
    if part not in cases or len(sys.argv) > 2:
        sys.exit("usage: test_bf16_train.py [layouts | onednn | convergence]")
    if not os.path.exists(BATCHSCALE):
        sys.exit(f"BATCHSCALE={BATCHSCALE}: no such program (run through ctest)")
    if part == "onednn":
        onednn_or_skip(DRIVER, "bf16_train_onednn")
    suite = unittest.TestLoader().loadTestsFromTestCase(cases[part])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
