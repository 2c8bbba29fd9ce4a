"""test_batch_sweep.py: `batchscale batch-sweep` end to end (issue 21, part 1).

A tiny model (L=2 C=32 T=32) on a word-salad corpus, constant learning rate,
global batches 2, 8 and 16 x seeds 1 and 2, to validation loss 2.6:

- the sweep: exit 0, sweep.json with the 6 runs; each run's metrics show the
  batch and seed it was given (the batch in every line, different seeds
  giving different losses); each run's steps to the target equal the linear
  interpolation, computed here from its metrics, between the evaluation
  before the target and the first at or below it, and its tokens are steps x
  batch x T; the fit equals an independent one (numpy, Gauss-Newton on the
  same least-squares problem, started from a coarse grid) to 1e-6 relative,
  B_crit = E_min / S_min, the interval holds the estimate; pareto.png is a
  valid 760x360 PNG (signature, every chunk's CRC, the image data inflates to
  height x (1 + 3 x width) bytes for RGB).
- a cap that batch 2 cannot make (the evaluation before its first at the
  target): its runs are "not reached", named in the table, and left out of
  the fit; the other runs take the same steps as before (the runs are
  deterministic and the cap does not change a constant-lr schedule); the fit
  equals numpy's over those 4 runs.
- --along 2.8,3.0: each loss fitted from the same runs' crossings of it
  equals numpy's fit of the steps and tokens recomputed from their metrics;
  the last point is the target's fit; each local critical batch is the
  stretch's dE_min / dS_min (the first from the start) and the printed
  --goodput-noise-curve carries them; --along refusals (a loss not above the
  target, repeated, malformed, empty) come before any run.
- --step-time 0.2:0.01 with --along: the schedule bound in sweep.json equals
  one recomputed here from the along points (stretches dS_min with their
  local critical batch; best constant sqrt(a Bbar / b) and its time, each
  stretch at its own sqrt(a B_i / b)), and is printed; without --along it is
  the target's fit alone (gain 0); malformed values are refused before any
  run.
- refusals, one line each naming the flag, exit non-zero: no --batches, an
  empty, malformed, single or repeated batch list, a batch that is not a
  whole number of micro-batches, no --target-loss, no command after --, a
  command that is not batchscale train, no --val-data, and a target no run
  reaches within --max-steps (sweep.json still records the runs).
- --lrs 3e-3,1e-3 (given descending; 1e-3 takes about 2.5x the steps, so
  the choice is not a coin flip): the grid is recorded ascending; every
  (batch, lr, seed) ran, its metrics named batchB_lrX_seedK.jsonl, every
  step after warm-up at the run's lr (the metrics' recorded lr: --min-lr
  equal to --lr stays equal), the 3e-3 runs repeating the single-lr sweep's
  steps exactly; each run's steps recomputed from its metrics; per batch the
  chosen lr (sweep.json, the runs' chosen_lr flags, the table's * and the
  per-batch line) is the argmin of the geometric-mean steps computed here;
  the fit equals numpy's on exactly the chosen runs; the interval holds the
  estimate; the warning that the best lr may lie outside --lrs.
- --min-lr scaled with the lr: --lr 3e-3 --min-lr 1.5e-3 --lrs 6e-3 under
  a cap of 8 steps: the metrics' lr is 6e-3 at the end of warm-up and 3e-3
  at the cap (where the cosine reaches --min-lr).
- --lrs refusals, one line naming --lrs: empty, an empty entry, a trailing
  comma, a word, zero, negative, inf, nan, a value given twice (1e-3 and
  0.001), more than 16, and a command without --lr (saying to add it).
"""
import json
import math
import os
import struct
import sys
import unittest
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
from bstest import BATCHSCALE  # noqa: E402

T = 32
TARGET = 2.6
BATCHES = [2, 8, 16]
SEEDS = 2
LRS = [1e-3, 3e-3]
ALONG = [3.0, 2.8]  # --along: losses every run crosses after its first evaluation, on the way to TARGET
STEP_TIME = (0.2, 0.01)  # --step-time A:B: seconds per step = A + B x batch in sequences


def numpy_fit(steps, tokens):
    """S_min, E_min of log S = log S_min + log(1 + B_crit / B), B = E / S: Gauss-Newton from a grid."""
    steps, tokens = np.asarray(steps, float), np.asarray(tokens, float)
    y, batch = np.log(steps), tokens / steps

    def residual(theta):
        return y - theta[0] - np.log1p(np.exp(theta[1]) / batch)

    grid = np.linspace(np.log(batch.min()) - 7, np.log(batch.max()) + 7, 2001)
    best = min(grid, key=lambda b: np.var(y - np.log1p(np.exp(b) / batch)))
    theta = np.array([np.mean(y - np.log1p(np.exp(best) / batch)), best])
    for _ in range(100):
        r = np.exp(theta[1]) / batch
        jac = np.stack([np.ones_like(y), r / (1 + r)], axis=1)
        delta = np.linalg.lstsq(jac, residual(theta), rcond=None)[0]
        theta = theta + delta
        if np.max(np.abs(delta)) < 1e-13:
            break
    return np.exp(theta[0]), np.exp(theta[0] + theta[1])


def check_png(test, path):
    with open(path, "rb") as f:
        data = f.read()
    test.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
    at, idat, chunks = 8, b"", []
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        test.assertEqual(crc, zlib.crc32(kind + body), f"{path}: bad CRC in chunk {kind}")
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        if kind == b"IDAT":
            idat += body
        at += 12 + length
    test.assertEqual((chunks[0], chunks[-1]), (b"IHDR", b"IEND"))
    test.assertEqual((width, height, depth), (760, 360, 8))
    test.assertIn(colour, (2, 6))  # cairo writes RGB when every pixel is opaque, else RGBA
    test.assertEqual(len(zlib.decompress(idat)), height * (1 + (3 if colour == 2 else 4) * width))


def steps_from_metrics(lines, target=TARGET):
    """Steps to the target: linear in the validation loss between the evaluation before it and the first at or
    below."""
    evals = [(line["step"], line["val_loss"]) for line in lines if "val_loss" in line]
    k = next(i for i, e in enumerate(evals) if e[1] <= target)
    assert k > 0, "the loss at the first evaluation: the test's eval interval is too coarse"
    (s0, l0), (s1, l1) = evals[k - 1], evals[k]
    return s0 + (l0 - target) / (l0 - l1) * (s1 - s0)


class BatchSweep(bstest.CorpusTest):
    @classmethod
    def train_command(cls):
        return [BATCHSCALE, "train", "--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", str(T),
                "--micro-batch", "2", "--lr", "3e-3", "--min-lr", "3e-3", "--warmup", "2", "--val-batches", "4",
                "--threads", "1", "--data", os.path.join(cls.data, "train_000000.bin"),
                "--val-data", os.path.join(cls.data, "val_000000.bin")]

    @classmethod
    def sweep(cls, out, *options, batches=BATCHES, seeds=SEEDS, check=True, train=None):
        args = ["batch-sweep", "--batches", ",".join(map(str, batches)), "--seeds", str(seeds), "--target-loss",
                str(TARGET), "--eval-tokens", "256", "--out", os.path.join(cls.dir, out)] + list(options) + ["--"]
        return bstest.run(args + (train or cls.train_command()), check=check)

    @classmethod
    def load(cls, out):
        with open(os.path.join(cls.dir, out, "sweep.json")) as f:
            return json.load(f)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.first = cls.sweep("full", "--max-steps", "300", "--along", ",".join(map(str, ALONG[::-1])),
                              "--step-time", "%g:%g" % STEP_TIME)
        cls.full = cls.load("full")
        cls.lr_run = cls.sweep("lrs", "--max-steps", "300", "--lrs", "3e-3,1e-3", "--step-time", "%g:%g" % STEP_TIME)
        cls.lrs = cls.load("lrs")

    def test_runs_and_interpolation(self):
        runs = self.full["runs"]
        self.assertEqual([(r["batch"], r["seed"]) for r in runs],
                         [(b, s) for b in BATCHES for s in range(1, SEEDS + 1)])
        losses = {}
        for r in runs:
            self.assertEqual(r["outcome"], "reached", r)
            lines = bstest.read_metrics(r["metrics"])
            self.assertTrue(all(line["batch"] == r["batch"] for line in lines))
            evals = [(line["step"], line["tokens"], line["val_loss"]) for line in lines if "val_loss" in line]
            k = next(i for i, e in enumerate(evals) if e[2] <= TARGET)
            self.assertGreater(k, 0, "the target at the first evaluation: the test's eval interval is too coarse")
            (s0, t0, l0), (s1, t1, l1) = evals[k - 1], evals[k]
            self.assertEqual(r["eval_step"], s1)
            self.assertEqual(lines[-1]["step"], s1, "the run did not stop at the target")
            share = (l0 - TARGET) / (l0 - l1)
            self.assertAlmostEqual(r["steps"], s0 + share * (s1 - s0), places=9)
            self.assertAlmostEqual(r["tokens"], r["steps"] * r["batch"] * T, places=5)
            losses.setdefault(r["batch"], []).append(lines[0]["loss"])
        for batch, first_losses in losses.items():
            self.assertNotEqual(first_losses[0], first_losses[1], f"batch {batch}: the seeds gave the same run")

    def test_fit_and_chart(self):
        fit, runs = self.full["fit"], self.full["runs"]
        s_min, e_min = numpy_fit([r["steps"] for r in runs], [r["tokens"] for r in runs])
        self.assertLess(abs(fit["s_min"] / s_min - 1), 1e-6, (fit, s_min))
        self.assertLess(abs(fit["e_min_tokens"] / e_min - 1), 1e-6, (fit, e_min))
        self.assertAlmostEqual(fit["b_crit_sequences"], fit["e_min_tokens"] / fit["s_min"] / T, places=9)
        self.assertEqual(fit["runs_used"], 6)
        ci = fit["interval"]
        self.assertEqual((ci["level"], ci["resamples"]), (0.95, 1000))
        for key in ("s_min", "e_min_tokens", "b_crit_sequences"):
            self.assertLessEqual(ci[key][0], fit[key])
            self.assertLessEqual(fit[key], ci[key][1])
        self.assertIn("B_crit = %.2f sequences" % fit["b_crit_sequences"], self.first.stdout)
        check_png(self, self.path("full/pareto.png"))

    def test_along_the_loss(self):
        # --along (given increasing, fitted decreasing): every loss's fit is numpy's over the runs' own crossings
        # of it, read from their metrics; the last point is the target's fit; each local critical batch is the
        # stretch's dE_min / dS_min (the first from the start), and the printed curve gives them to train.
        along = self.full["along"]["points"]
        self.assertEqual([p["val_loss"] for p in along], ALONG + [TARGET])
        fit = self.full["fit"]
        self.assertEqual((along[-1]["s_min"], along[-1]["e_min_tokens"]), (fit["s_min"], fit["e_min_tokens"]))
        before, curve = (0.0, 0.0), []
        for point in along:
            steps = [steps_from_metrics(bstest.read_metrics(r["metrics"]), point["val_loss"])
                     for r in self.full["runs"]]
            tokens = [s * r["batch"] * T for s, r in zip(steps, self.full["runs"])]
            s_min, e_min = numpy_fit(steps, tokens)
            self.assertTrue(point["fitted"])
            self.assertEqual(point["runs_used"], 6)
            self.assertLess(abs(point["s_min"] / s_min - 1), 1e-6, (point, s_min))
            self.assertLess(abs(point["e_min_tokens"] / e_min - 1), 1e-6, (point, e_min))
            lo, hi = point["b_crit_sequences_interval"]
            self.assertLessEqual(lo, point["b_crit_sequences"])
            self.assertLessEqual(point["b_crit_sequences"], hi)
            ds, de = point["s_min"] - before[0], point["e_min_tokens"] - before[1]
            if ds > 0 and de > 0:
                self.assertAlmostEqual(point["local_b_sequences"], de / ds / T, places=9)
                curve.append("%.4g:%.3g" % (point["val_loss"], de / ds / T))
            else:
                self.assertIsNone(point["local_b_sequences"])
            before = (point["s_min"], point["e_min_tokens"])
        self.assertAlmostEqual(along[0]["local_b_sequences"], along[0]["b_crit_sequences"], places=9)
        self.assertIn("--goodput-noise-curve " + ",".join(curve), self.first.stdout)
        self.assertGreater(steps_from_metrics(bstest.read_metrics(self.full["runs"][0]["metrics"]), ALONG[0]), 0)

    def test_schedule_bound(self):
        # --step-time: the stretches as --along cuts them, the bound recomputed here from the along points
        a, b = STEP_TIME
        bound, stretches, before = self.full["schedule_bound"], [], 0.0
        for point in self.full["along"]["points"]:
            ds, before = point["s_min"] - before, point["s_min"]
            if point["local_b_sequences"] is not None and ds > 0:
                stretches.append((ds, point["local_b_sequences"]))
        self.assertEqual((bound["stretches"], bound["left_out"]), (len(stretches), 3 - len(stretches)))
        steps = sum(s for s, _ in stretches)
        bbar = sum(s * loc for s, loc in stretches) / steps
        best = math.sqrt(a * bbar / b)
        constant = sum(s * (1 + loc / best) * (a + b * best) for s, loc in stretches)
        grid = np.exp(np.arange(math.log(1e-3), math.log(1e6), 1e-4))  # batches, 1e-4 apart in log
        seconds = lambda s, loc: s * (1 + loc / grid) * (a + b * grid)  # noqa: E731
        self.assertLessEqual(constant, np.min(sum(seconds(s, loc) for s, loc in stretches)) * (1 + 1e-12))
        oracle = sum(np.min(seconds(s, loc)) for s, loc in stretches)  # each stretch at its own best batch
        for key, want in (("mean_local_sequences", bbar), ("best_constant_sequences", best),
                          ("constant_seconds", constant)):
            self.assertAlmostEqual(bound[key] / want, 1, places=9, msg=key)
        self.assertAlmostEqual(bound["oracle_seconds"] / oracle, 1, places=7)  # a minimum is flat: grid^2 / 8
        self.assertAlmostEqual(bound["gain"], 1 - bound["oracle_seconds"] / constant, places=12)
        single = self.lrs["schedule_bound"]  # no --along: the target's fit alone, nothing to adapt to
        self.assertEqual((single["stretches"], single["left_out"]), (1, 0))
        self.assertAlmostEqual(single["mean_local_sequences"], self.lrs["fit"]["b_crit_sequences"], places=9)
        self.assertAlmostEqual(single["gain"], 0, places=12)
        self.assertIn("best constant batch %.2f sequences" % best, self.first.stdout)
        self.assertIn("each stretch at its own best batch: %.1f s" % oracle, self.first.stdout)

    def test_run_left_out(self):
        full = {(r["batch"], r["seed"]): r for r in self.full["runs"]}
        small = [r for r in self.full["runs"] if r["batch"] == BATCHES[0]]
        every = 256 // (BATCHES[0] * T)
        cap = min(r["eval_step"] for r in small) - every  # an evaluation both small runs made above the target
        for r in small:
            at_cap = [x["val_loss"] for x in bstest.read_metrics(r["metrics"]) if x["step"] == cap]
            self.assertGreater(at_cap[0], TARGET)
        others = [r for r in self.full["runs"] if r["batch"] != BATCHES[0]]
        self.assertLessEqual(max(r["eval_step"] for r in others), cap, "the larger batches need the cap too")
        p = self.sweep("capped", "--max-steps", str(cap))
        capped = self.load("capped")
        for r in capped["runs"]:
            if r["batch"] == BATCHES[0]:
                self.assertEqual((r["outcome"], r["steps"], r["eval_step"]), ("not reached", None, cap))
                self.assertRegex(p.stdout, r"\n\s+%d\s+%d\s+-\s+-\s+not reached within --max-steps %d \(best "
                                 r"validation loss [0-9.]+\): left out of the fit" % (r["batch"], r["seed"], cap))
            else:
                self.assertEqual(r["steps"], full[(r["batch"], r["seed"])]["steps"])
        s_min, e_min = numpy_fit([r["steps"] for r in others], [r["tokens"] for r in others])
        self.assertEqual(capped["fit"]["runs_used"], 4)
        self.assertLess(abs(capped["fit"]["s_min"] / s_min - 1), 1e-6)
        self.assertLess(abs(capped["fit"]["e_min_tokens"] / e_min - 1), 1e-6)

    def refused(self, args, words):
        p = bstest.run(args, check=False)
        errors = p.stderr.strip().splitlines()
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertEqual(len(errors), 1, p.stderr)
        for w in words:
            self.assertIn(w, errors[0])

    def test_refusals(self):
        train = ["--"] + self.train_command()
        base = ["batch-sweep", "--target-loss", "2", "--out", self.path("bad")]
        self.refused(["batch-sweep", "--target-loss", "2"] + train, ["--batches is required"])
        for batches, why in (("", "--batches is required"), ("8,x", "whole number"), ("8", "at least two"),
                             ("8,8", "given twice"), ("8,", "comma"), ("0,8", "whole number"),
                             ("3,8", "3 is not a multiple of --micro-batch 2")):
            self.refused(base + ["--batches", batches] + train, ["--batches", why])
        self.refused(["batch-sweep", "--batches", "2,8"] + train, ["--target-loss"])
        self.refused(base + ["--batches", "2,8", "--seeds", "0"] + train, ["--seeds"])
        self.refused(base + ["--batches", "2,8"], ["after --"])
        self.refused(base + ["--batches", "2,8", "--", "echo", "train"], ["batchscale train"])
        self.refused(base + ["--batches", "2,8", "--"] + self.train_command()[:-2], ["--val-data"])
        for along, why in (("1.5", "not above --target-loss 2"), ("3,3", "given twice"), ("3,", "comma"),
                           ("3,x", "validation loss"), ("", "give one or more")):
            self.refused(base + ["--batches", "2,8", "--along", along] + train, ["--along", why])
        for step_time in ("0.2", "0.2:", ":0.01", "0:0.01", "0.2:-1", "x:y", "0.2:0.01:3"):
            self.refused(base + ["--batches", "2,8", "--step-time", step_time] + train, ["--step-time", "A:B"])

    def test_target_never_reached(self):
        p = self.sweep("never", "--max-steps", "3", batches=[2, 8], seeds=1, check=False)
        errors = [line for line in p.stderr.splitlines() if "error" in line]
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertIn("no run reached --target-loss 2.6 within --max-steps 3", errors[0])
        summary = self.load("never")
        self.assertEqual([r["outcome"] for r in summary["runs"]], ["not reached"] * 2)
        self.assertIsNone(summary["fit"])

    def test_runs_at_their_lr(self):
        runs = self.lrs["runs"]
        self.assertEqual(self.lrs["lrs"], LRS)
        self.assertEqual([(r["batch"], r["lr"], r["seed"]) for r in runs],
                         [(b, lr, s) for b in BATCHES for lr in LRS for s in range(1, SEEDS + 1)])
        single = {(r["batch"], r["seed"]): r for r in self.full["runs"]}
        for r in runs:
            self.assertEqual(r["outcome"], "reached", r)
            self.assertEqual(os.path.basename(r["metrics"]), "batch%d_lr%s_seed%d.jsonl"
                             % (r["batch"], "0.001" if r["lr"] == 1e-3 else "0.003", r["seed"]))
            lines = bstest.read_metrics(r["metrics"])
            after_warmup = [line["lr"] for line in lines if line["step"] >= 2]
            self.assertTrue(all(abs(lr / r["lr"] - 1) < 1e-6 for lr in after_warmup), (r, after_warmup[:5]))
            self.assertAlmostEqual(r["steps"], steps_from_metrics(lines), places=9)
            if r["lr"] == 3e-3:  # the single-lr sweep's --lr: the same run exactly
                self.assertEqual(r["steps"], single[(r["batch"], r["seed"])]["steps"])

    def test_choice_and_fit(self):
        runs, choice = self.lrs["runs"], self.lrs["lr_choice"]["batches"]
        chosen_runs = []
        for b, entry in zip(BATCHES, choice):
            steps = {lr: [steps_from_metrics(bstest.read_metrics(r["metrics"])) for r in runs
                          if r["batch"] == b and r["lr"] == lr] for lr in LRS}
            geomean = {lr: float(np.exp(np.mean(np.log(v)))) for lr, v in steps.items()}
            best = min(LRS, key=lambda lr: geomean[lr])
            other = [lr for lr in LRS if lr != best][0]
            self.assertGreater(geomean[other] / geomean[best], 1.5, f"batch {b}: the choice is a coin flip {geomean}")
            self.assertEqual((entry["batch"], entry["lr"]), (b, best))
            for r in runs:
                if r["batch"] == b:
                    self.assertEqual(r["chosen_lr"], r["lr"] == best, r)
            chosen_runs += [r for r in runs if r["batch"] == b and r["lr"] == best]
            spell = lambda lr: "%g" % lr
            self.assertRegex(self.lr_run.stdout, r"\n\s+%d\s+%s\*\s+1\s" % (b, spell(best)))
            self.assertIn("batch %d: lr %s (geometric-mean steps %.1f over %d runs; other lrs: %s %.1f)"
                          % (b, spell(best), geomean[best], SEEDS, spell(other), geomean[other]), self.lr_run.stdout)
            edge = "smallest" if best == LRS[0] else "largest"
            self.assertRegex(self.lr_run.stderr, r"warning: batch-sweep: at batch(es)? [0-9, ]*\b%d\b[0-9, ]* the chosen "
                             r"lr is the %s of --lrs \(%s\): the best lr may lie outside --lrs" % (b, edge, spell(best)))
        fit = self.lrs["fit"]
        s_min, e_min = numpy_fit([r["steps"] for r in chosen_runs], [r["tokens"] for r in chosen_runs])
        self.assertEqual(fit["runs_used"], len(chosen_runs))
        self.assertLess(abs(fit["s_min"] / s_min - 1), 1e-6, (fit, s_min))
        self.assertLess(abs(fit["e_min_tokens"] / e_min - 1), 1e-6, (fit, e_min))
        ci = fit["interval"]
        self.assertIn("the lr chosen per batch from the resampled runs", ci["method"])
        for key in ("s_min", "e_min_tokens", "b_crit_sequences"):
            self.assertLessEqual(ci[key][0], fit[key])
            self.assertLessEqual(fit[key], ci[key][1])
        check_png(self, self.path("lrs/pareto.png"))

    def test_min_lr_scaled(self):
        train = self.train_command()
        train[train.index("--min-lr") + 1] = "1.5e-3"
        self.sweep("minlr", "--max-steps", "8", "--lrs", "6e-3", batches=[8, 16], seeds=1, check=False, train=train)
        runs = self.load("minlr")["runs"]
        self.assertEqual([(r["batch"], r["lr"], r["outcome"]) for r in runs],
                         [(8, 6e-3, "not reached"), (16, 6e-3, "not reached")])
        for r in runs:
            lines = {line["step"]: line["lr"] for line in bstest.read_metrics(r["metrics"])}
            self.assertLess(abs(lines[2] / 6e-3 - 1), 1e-6, lines)  # the end of warm-up: the peak, the run's lr
            self.assertLess(abs(lines[8] / 3e-3 - 1), 1e-6, lines)  # the cap: --min-lr x 6e-3 / 3e-3

    def test_lr_refusals(self):
        base = ["batch-sweep", "--batches", "2,8", "--target-loss", "2", "--out", self.path("bad")]
        train = ["--"] + self.train_command()
        many = ",".join("%de-4" % k for k in range(1, 18))
        for lrs, why in (("", "empty"), ("1e-3,,2e-3", "must be a number"), ("1e-3,", "comma"),
                         ("x", "must be a number"), ("0,1e-3", "0 is not a positive finite"),
                         ("-1e-3", "-1e-3 is not a positive finite"), ("inf", "inf is not a positive finite"),
                         ("nan", "nan is not a positive finite"), ("1e-3,0.001", "0.001 is given twice"),
                         (many, "at most 16")):
            self.refused(base + ["--lrs", lrs] + train, ["--lrs", why])
        no_lr = self.train_command()
        del no_lr[no_lr.index("--lr"):no_lr.index("--lr") + 2]
        self.refused(base + ["--lrs", "1e-3"] + ["--"] + no_lr, ["--lrs", "add --lr to the train command"])

    def test_from_checkpoint(self):
        base_steps, base_batch, warmup = 6, 4, ["--warmup-tokens", str(2 * 4 * T)]  # warm-up the same in every run
        train = self.train_command() + warmup
        del train[train.index("--warmup"):train.index("--warmup") + 2]
        bstest.run(train[1:] + ["--global-batch", str(base_batch), "--steps", str(base_steps), "--seed", "1",
                                "--quiet", "--out", self.path("base")])
        ckpt = self.path("base/ckpt/step_%08d" % base_steps)
        p = self.sweep("from", "--max-steps", "300", "--from", ckpt, batches=[2, 8], seeds=1, train=train)
        self.assertIn("counted from checkpoint %s (step %d, %d tokens)" % (ckpt, base_steps, base_steps * 4 * T),
                      p.stdout)
        summary = self.load("from")
        self.assertEqual(summary["from"], {"checkpoint": ckpt, "step": base_steps, "tokens": base_steps * 4 * T})
        for r in summary["runs"]:
            self.assertEqual(r["outcome"], "reached", r)
            lines = bstest.read_metrics(r["metrics"])
            self.assertEqual(lines[0]["step"], base_steps + 1)  # continued, not restarted
            self.assertEqual(lines[0]["tokens"], (base_steps * base_batch + r["batch"]) * T)
            self.assertAlmostEqual(r["steps"], steps_from_metrics(lines) - base_steps, places=9)
            self.assertAlmostEqual(r["tokens"], r["steps"] * r["batch"] * T, places=5)
            self.assertEqual(r["eval_step"], lines[-1]["step"])
            # the same run as one that switches its batch at the checkpoint's tokens (step schedule), bit for bit:
            # the optimizer state, the step and the data position carried over
            switch = self.path("switch_%d.jsonl" % r["batch"])
            bstest.run(train[1:] + ["--global-batch", str(r["batch"]), "--seed", "1", "--quiet", "--batch-schedule",
                                    "step:0:%d %d:%d" % (base_batch, base_steps * base_batch * T, r["batch"]),
                                    "--train-tokens", str(lines[-1]["tokens"]), "--metrics", switch, "--sample-tokens", "0",
                                    "--eval-every", "0"])
            switched = {x["step"]: x["loss"] for x in bstest.read_metrics(switch)}
            self.assertEqual([x["loss"] for x in lines], [switched[x["step"]] for x in lines])
        fit = summary["fit"]
        s_min, e_min = numpy_fit([r["steps"] for r in summary["runs"]], [r["tokens"] for r in summary["runs"]])
        self.assertLess(abs(fit["s_min"] / s_min - 1), 1e-6, (fit, s_min))

    def test_resume_new_batch_refusals(self):
        train = self.train_command()[1:] + ["--quiet"]
        bstest.run(train + ["--global-batch", "4", "--steps", "2", "--out", self.path("nb")])
        ckpt = self.path("nb/ckpt/step_00000002")
        self.refused(train + ["--global-batch", "8", "--resume", ckpt],
                     ["at a global batch of 4", "or continue the constant batch at the new one",
                      "(flags: --batch-schedule, --global-batch, --resume-new-batch)"])
        self.refused(train + ["--global-batch", "8", "--resume-new-batch"], ["--resume-new-batch needs --resume"])
        self.refused(train + ["--global-batch", "8", "--resume", ckpt, "--resume-new-batch", "--batch-schedule",
                              "ramp:4:4:512"], ["--resume-new-batch", "constant", "ramp:4:4:512"])
        bstest.run(train + ["--global-batch", "8", "--steps", "2", "--batch-schedule", "ramp:4:4:512", "--out",
                            self.path("nbramp")])
        self.refused(train + ["--global-batch", "8", "--resume", self.path("nbramp/ckpt/step_00000002"),
                              "--resume-new-batch"], ["continuing at a new batch", "ramp:4:4:512", "only a constant",
                                                      "(flags: --resume-new-batch, --batch-schedule)"])
        self.refused(["batch-sweep", "--batches", "2,8", "--target-loss", "2", "--out", self.path("bad"), "--from",
                      self.path("nowhere"), "--"] + self.train_command(), ["--from", "nowhere", "no such checkpoint"])


if __name__ == "__main__":
    unittest.main()
