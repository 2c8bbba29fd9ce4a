#!/usr/bin/python3
"""test_bench_schedule_race.py: the arithmetic bench/bench_schedule_race.py decides with, on hand-made metrics and
hand-made rows (the bench itself trains for an hour): each step priced by the line A + B x its batch and
interpolated to the target between the evaluations around it as the measured seconds are; the paired difference by
seed and its standard error against a hand computation; PASS only when goodput's mean is below both the best
constant's and the best ramp's; a seed that missed the target is a MISS, never a win."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import bench_critical_batch as bcb  # noqa: E402
import bench_schedule_race as race  # noqa: E402


def step(n, batch, ms, val=None):
    x = dict(step=n, batch=batch, ms=ms, tokens=n * batch * 128)
    if val is not None:
        x["val_loss"] = val
    return x


class RaceArithmeticTest(unittest.TestCase):
    def test_priced_seconds_interpolate_like_measured_ones(self):
        # Batches 8, 8, 16, 16; evaluations after steps 2 (loss 3.0) and 4 (2.0); target 2.5 lies halfway.
        m = [step(1, 8, 999), step(2, 8, 999, 3.0), step(3, 16, 999), step(4, 16, 999, 2.0)]
        line = (0.5, 0.01)
        seconds, tokens, steps = bcb.to_target(m, 2.5, lambda x: line[0] + line[1] * x["batch"])
        at2, at4 = 2 * (0.5 + 0.08), 2 * (0.5 + 0.08) + 2 * (0.5 + 0.16)
        self.assertAlmostEqual(seconds, (at2 + at4) / 2)
        self.assertAlmostEqual(steps, 3.0)
        self.assertAlmostEqual(tokens, (2 * 8 * 128 + 4 * 16 * 128) / 2)
        # The measured clock (the default) reads the ms instead: the same interpolation.
        self.assertAlmostEqual(bcb.to_target(m, 2.5)[0], (2 * 0.999 + 4 * 0.999) / 2)
        self.assertIsNone(bcb.to_target(m, 1.0))

    def test_paired_difference_and_verdict(self):
        rows = {"constant 32": {"a": (50.0, 0, 50), "b": (54.0, 0, 54), "c": (52.0, 0, 52)},
                "constant 16": {"a": (60.0, 0, 60), "b": (61.0, 0, 61), "c": (59.0, 0, 59)},
                "ramp 8->32 over 64K": {"a": (55.0, 0, 55), "b": (53.0, 0, 53), "c": (57.0, 0, 57)},
                "goodput:8:64": {"a": (49.0, 0, 49), "b": (52.0, 0, 52), "c": (51.0, 0, 51)}}
        diffs = [-1.0, -2.0, -1.0]
        mean = sum(diffs) / 3
        se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)
        got = race.verdict(rows)["goodput:8:64"]
        self.assertEqual(got["best_constant"], "constant 32")
        self.assertEqual(got["best_ramp"], "ramp 8->32 over 64K")
        self.assertAlmostEqual(got["minus_constant"][0], mean)
        self.assertAlmostEqual(got["minus_constant"][1], se)
        self.assertEqual(got["word"], "PASS")
        # Slower than the ramp on the mean by a little: MISS.
        rows["ramp 8->32 over 64K"] = {"a": (50.0, 0, 50), "b": (50.0, 0, 50), "c": (51.0, 0, 51)}
        self.assertEqual(race.verdict(rows)["goodput:8:64"]["word"], "MISS")
        # A seed that never reached the target cannot win, however fast the others.
        rows["ramp 8->32 over 64K"] = {"a": (60.0, 0, 60), "b": (60.0, 0, 60), "c": (60.0, 0, 60)}
        rows["goodput:8:64"]["c"] = None
        self.assertTrue(race.verdict(rows)["goodput:8:64"]["word"].startswith("MISS"))


if __name__ == "__main__":
    unittest.main()
