#!/usr/bin/python3
"""test_opt_batch.py: batch-size schedules, rounding to whole accumulation
steps, learning-rate scaling and the --optimizer / --lr-scaling names,
through tests/opt_driver (src/optim/batch_schedule, lr_scaling, optimizer).

Expected batches come from the formulas written here, not from the C code:
Megatron-LM's ramp-up as its RampupBatchsizeNumMicroBatchesCalculator
computes it (samples = tokens / seq_len, floating-point division) and as
exact fractions, piecewise-constant stages, doubling, and Llama 3's recipe.
Every bad schedule string gets one line naming --batch-schedule.
"""
import math
import subprocess
import sys
import unittest
from fractions import Fraction

DRIVER = sys.argv[1] if len(sys.argv) > 1 else "build/tests/opt_driver"


def drive(*args, check=True):
    p = subprocess.run([DRIVER] + [str(a) for a in args], capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"opt_driver {args} failed: {p.stderr}")
    return p


def batches(schedule, final, budget, tokens):
    out = drive("batch", schedule, final, budget, *tokens).stdout.split()
    return [int(b) for b in out]


def megatron_rampup(start, increment, ramp_samples, final, consumed_samples):
    """Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator.update(), transcribed."""
    diff = final - start
    assert diff % increment == 0
    per_increment = ramp_samples / (diff // increment)
    if consumed_samples > ramp_samples:
        return final
    return start + int(consumed_samples / per_increment) * increment


def exact_rampup(start, increment, ramp_tokens, final, tokens):
    if tokens > ramp_tokens:
        return final
    per_increment = Fraction(ramp_tokens, (final - start) // increment)
    return start + math.floor(Fraction(tokens) / per_increment) * increment


class ScheduleTest(unittest.TestCase):
    def test_constant(self):
        self.assertEqual(batches("constant", 48, 0, [0, 1, 10**12]), [48, 48, 48])

    def test_ramp_matches_megatron(self):
        # --rampup-batch-size 32 32 RAMP with --global-batch 512 and seq_len 128:
        # 15 increments over 3M tokens (23437.5 samples, a fractional sample count).
        seq_len, start, inc, final, ramp_tokens = 128, 32, 32, 512, 3_000_000
        points = [0, 1, 199_936, 200_064, 1_500_032, 2_999_936, 3_000_064, 10**10]
        points += [k * 4096 * seq_len // 8 for k in range(0, 200)]
        got = batches(f"ramp:{start}:{inc}:3M", final, 0, points)
        for tokens, b in zip(points, got):
            want = exact_rampup(start, inc, ramp_tokens, final, tokens)
            self.assertEqual(b, want, f"tokens {tokens}")
            if tokens % seq_len == 0:
                self.assertEqual(b, megatron_rampup(start, inc, ramp_tokens / seq_len, final, tokens // seq_len),
                                 f"Megatron at tokens {tokens}")
        self.assertEqual(len(set(got)), 16, "the ramp must pass through every increment")

    def test_ramp_exact_at_increment_boundaries(self):
        # 3 increments over 3000 tokens: the batch grows exactly at 1000 and 2000 tokens.
        got = batches("ramp:4:4:3K", 16, 0, [999, 1000, 1999, 2000, 2999, 3000, 3001])
        self.assertEqual(got, [4, 8, 8, 12, 12, 16, 16])

    def test_ramp_divisibility_error(self):
        p = drive("batch", "ramp:32:32:1M", 250, 0, 0, check=False)
        self.assert_one_line_error(p, "the ramp batch schedule", "not a multiple of INCREMENT 32", "Megatron",
                                   "(flags: --batch-schedule, --global-batch)")

    def test_step(self):
        for text in ('step:0:32 1M:64 2.5M:128', 'step:0:32,1M:64,2.5M:128', 'step:"0:32 1M:64 2.5M:128"',
                     'step:0:32  1000K:64 0.0025G:128'):
            got = batches(text, 128, 0, [0, 999_999, 1_000_000, 2_499_999, 2_500_000, 10**13])
            self.assertEqual(got, [32, 32, 64, 64, 128, 128], text)

    def test_step_megatron_units(self):
        # Megatron's "0:768 250B:1536 500B:3072" (B = billions).
        got = batches("step:0:768 250B:1536 500B:3072", 3072, 0, [249_999_999_999, 250 * 10**9, 5 * 10**11])
        self.assertEqual(got, [768, 1536, 3072])

    def test_exp(self):
        # 16, doubled every 1M tokens, capped at the final batch 100.
        got = batches("exp:16:1M", 100, 0, [0, 999_999, 1_000_000, 2_000_000, 2_999_999, 3_000_000, 10**12])
        self.assertEqual(got, [16, 16, 32, 64, 64, 100, 100])

    def test_llama3(self):
        # Given thresholds: G/4, G/2 from 252M, G from 2.87T.
        pts = [0, 251_999_999, 252_000_000, 2_869_999_999_999, 2_870_000_000_000]
        self.assertEqual(batches("llama3:252M:2.87T", 1024, 0, pts), [256, 256, 512, 512, 1024])
        # Without thresholds: Llama 3's fractions of the budget; at its own 15.6T budget they are 252M and 2.87T.
        self.assertEqual(batches("llama3", 1024, 15_600_000_000_000, pts), [256, 256, 512, 512, 1024])
        budget = 10**9
        t1 = budget * 252_000_000 // 15_600_000_000_000
        t2 = budget * 2_870_000_000_000 // 15_600_000_000_000
        got = batches("llama3", 64, budget, [t1 - 1, t1, t2 - 1, t2])
        self.assertEqual(got, [16, 32, 32, 64])
        # A budget so small the first threshold would be 0 tokens: each stage still lasts a step.
        self.assertEqual(batches("llama3", 64, 1000, [0, 1, 182, 183]), [16, 32, 32, 64])

    def assert_one_line_error(self, p, *needles):
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("batchscale: error: "), lines[0])
        for n in needles:
            self.assertIn(n, lines[0])

    def test_bad_strings(self):
        cases = [
            ("step:0:32 1M:64 1M:128", "thresholds must increase"),
            ("step:0:32 2M:64 1M:128", "thresholds must increase"),
            ("step:0:0", "at least 1 sequence"),
            ("ramp:0:8:1M", "at least 1 sequence"),
            ("exp:16:0", "must be positive"),
            ("step:0:32 1X:64", "unknown unit 'X' in '1X'"),
            ("exp:16:1Q", "unknown unit 'Q'"),
            ("step:0:32 1MB:64", "unknown unit 'MB'"),
            ("ramp:8:8", "expected ramp:START:INCREMENT:TOKENS"),
            ("ramp:8:8:1M:5", "expected ramp:START:INCREMENT:TOKENS"),
            ("ramp:8::1M", "expected ramp:START:INCREMENT:TOKENS"),
            ("exp:16", "expected exp:START:TOKENS"),
            ("steps:0:32", "unknown schedule 'steps'"),
            ("", "unknown schedule"),
            ("step:1M:32", "first stage must start at 0"),
            ("step:0:32 1.5:64", "not a whole number"),
            ("step:0:32.5", "not a whole number"),
            ("step:0:32 1M", "not TOKENS:BATCH"),
            ("step:", "at least one stage"),
            ("step:0:x", "not a number"),
            ("constant:4", "takes no arguments"),
            ("llama3:2M:1M", "thresholds must increase"),
            ("llama3:2M", "expected llama3 or llama3:T1:T2"),
        ]
        for text, needle in cases:
            with self.subTest(text=text):
                p = drive("batch", text, 128, 10**9, 0, check=False)
                self.assert_one_line_error(p, "--batch-schedule", needle)
                if text:
                    self.assertIn(f"'{text}'", p.stderr)

    def test_schedule_against_global_batch(self):
        cases = [
            ("ramp:128:8:1M", 128, "START 128 must be below the global batch 128 (flags: --batch-schedule, --global-batch)"),
            ("step:0:32 1M:64", 128, "ends at 64 sequences but the global batch is 128; make them equal (flags: "
                                     "--batch-schedule, --global-batch)"),
            ("exp:256:1M", 128, "START 256 is above the global batch 128 (flags: --batch-schedule, --global-batch)"),
            ("llama3:1M:2M", 3, "at least 4"),
        ]
        for text, final, needle in cases:
            with self.subTest(text=text):
                self.assert_one_line_error(drive("batch", text, final, 10**9, 0, check=False), "--batch-schedule",
                                           needle)
        self.assert_one_line_error(drive("batch", "llama3", 64, 0, 0, check=False), "needs the run's token budget")


def run_loop(schedule, final, seq_len, granule, strict, start_tokens, steps, check=True):
    p = drive("run", schedule, final, 0, seq_len, granule, 1 if strict else 0, start_tokens, steps, check=check)
    rows = [tuple(int(v) for v in line.split()) for line in p.stdout.splitlines()]
    return rows, p


class RoundingAndResumeTest(unittest.TestCase):
    def test_rounding_warns_once(self):
        # ramp 6, 12, 18, 24, 30 over 100 sequences of 10 tokens; granule 4 (micro 2 x dp 2).
        rows, p = run_loop("ramp:6:6:1K", 30, 10, 4, False, 0, 12)
        want = []
        tokens = 0
        for _ in range(12):
            b = exact_rampup(6, 6, 1000, 30, tokens)
            r = max(4, b // 4 * 4)
            want.append((tokens, r))
            tokens += r * 10
        self.assertEqual(rows, want)
        self.assertIn(12, [b for _, b in rows])
        self.assertIn(4, [b for _, b in rows])  # 6 rounds down to 4
        warnings = [ln for ln in p.stderr.splitlines() if ln]
        self.assertEqual(len(warnings), 1, p.stderr)
        self.assertIn("warning", warnings[0])
        self.assertIn("not a multiple of the micro-batch x data-parallel ranks = 4", warnings[0])
        self.assertIn("(flags: --micro-batch, --strict-batch)", warnings[0])

    def test_no_warning_when_multiples(self):
        rows, p = run_loop("ramp:8:8:1K", 32, 10, 4, True, 0, 10)
        self.assertEqual(p.stderr, "")
        self.assertEqual({b for _, b in rows}, {8, 16, 24, 32})

    def test_at_least_one_granule(self):
        rows, _ = run_loop("exp:2:1K", 64, 10, 8, False, 0, 3)
        self.assertEqual([b for _, b in rows], [8, 8, 8])

    def test_strict(self):
        _, p = run_loop("ramp:6:6:1K", 30, 10, 4, True, 0, 12, check=False)
        self.assertEqual(p.returncode, 1)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("--strict-batch", lines[0])
        self.assertIn("asks for 6 sequences", lines[0])

    def test_resume_mid_ramp(self):
        for schedule, final in (("ramp:8:8:10K", 64), ("exp:4:512", 64), ("step:0:4 1K:12 5K:64", 64),
                                ("llama3:1K:9K", 64)):
            full, _ = run_loop(schedule, final, 16, 4, False, 0, 40)
            sizes = {b for _, b in full}
            self.assertGreater(len(sizes), 2, f"{schedule}: the run must cross batch changes")
            for k in (1, 7, 13, 22):
                resumed, _ = run_loop(schedule, final, 16, 4, False, full[k][0], 40 - k)
                self.assertEqual(resumed, full[k:], f"{schedule} resumed at step {k}")


class LrScalingTest(unittest.TestCase):
    def factor(self, rule, batch, base):
        return float(drive("lr-scale", rule, batch, base).stdout)

    def test_rules(self):
        for batch in (32, 48, 64, 256, 1000):
            k = batch / 32
            self.assertEqual(self.factor("none", batch, 32), 1.0)
            self.assertAlmostEqual(self.factor("linear", batch, 32), k, places=14)
            self.assertAlmostEqual(self.factor("sqrt", batch, 32), math.sqrt(k), places=14)

    def test_along_a_ramp(self):
        # At each batch change of ramp:32:32:3M the multiplier follows the batch.
        rows, _ = run_loop("ramp:32:32:3M", 256, 128, 32, True, 0, 400)
        changes = [b for i, (_, b) in enumerate(rows) if i == 0 or rows[i - 1][1] != b]
        self.assertEqual(changes, [32, 64, 96, 128, 160, 192, 224, 256])
        for b in changes:
            self.assertAlmostEqual(self.factor("linear", b, 32), b / 32, places=14)
            self.assertAlmostEqual(self.factor("sqrt", b, 32), math.sqrt(b / 32), places=14)

    def test_bad_rule(self):
        p = drive("lr-scale", "cubic", 64, 32, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("the learning-rate scaling rule must be none, linear or sqrt (got 'cubic') (flags: --lr-scaling)",
                      p.stderr)


class OptimizerNameTest(unittest.TestCase):
    def test_names(self):
        for name, arrays in (("adamw", 2), ("sgd", 1), ("lamb", 2), ("lars", 1)):
            self.assertEqual(drive("optimizer", name).stdout.split(), [name, str(arrays)])
        p = drive("optimizer", "adam", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("the optimizer must be adamw, sgd, lamb, lars or onebit-adam (got 'adam') (flags: --optimizer)",
                      p.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
