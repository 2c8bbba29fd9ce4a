#!/usr/bin/python3
"""test_batch_scaling.py: batch-size scaling through `batchscale train`.

- SGD (Nesterov), LAMB and LARS under ZeRO 1, 2 and 3 on 2 and 4 ranks give
  the single-process run (losses 1e-5 relative over 10 steps, parameters
  max |a-b| / max |b| <= 1e-5); the per-tensor norms of LAMB and LARS are
  summed across shards.
- A ramp schedule realises Megatron's batch arithmetic step by step; a run
  resumed mid-ramp continues the same batches and losses bit for bit.
- --lr-scaling linear/sqrt multiply the rate by k or sqrt(k) at every batch
  change; warm-up measured in tokens is unaffected by the changing batch.
- The gradient noise scale is the same from 1 rank x accumulation 4 and from
  4 ranks x accumulation 1; the adaptive schedule follows it step by step.
- B_simple and the preconditioned B_simple are the same from 1 x 4, 2 x 2
  and 4 x 1 within 1e-6; the curvature B_noise, whose central differences
  amplify float rounding by 1 / CURVATURE_STEP, within 2^-24 / 1e-3 = 6e-5
  (the floor from reordering the reduction alone is printed beside), and
  the preconditioned B_noise(P) likewise; B_noise(P) is logged from the
  first curvature step with v_hat over 5 updates, and never without AdamW.
- --batch-schedule goodput with a planted step-time model, following
  B_noise(P), picks the batch the formula says at every decision and resumes
  mid-run bit for bit (batch, loss, lr, every estimator's value and the pass
  count, the parameters) from a checkpoint that holds every estimator's EMA.
- The noise probe (--noise-probe-every) gives the same values within 1e-6
  from 2 ranks x K 1, ZeRO 0 and 1, as from 1 rank x K 2 (the same
  micro-batches), only at probe steps; turning it on leaves the losses and
  parameters bit for bit; a checkpoint from before the probe resumes with the
  probe afresh; goodput following it resumes mid-run bit for bit. The probe
  of Adam's preconditioned gradients (noise_scale_probe_precond) appears
  once the preconditioner exists (optimizer step 5), agrees between the
  layouts within 1e-6, is not the raw one, is absent under ZeRO 1, and its
  EMA resumes from a checkpoint bit for bit; goodput following it
  (--goodput-estimator probe-precond) uses its last value in the efficiency
  and resumes bit for bit, and is refused without the probe or with SGD.
- --goodput-temperature: the followed noise scale times the lr schedule's
  factor: each step's efficiency and decision are the formula's at bn x
  lr / --lr through a warm-up, and the batch grows with the lr.
- --goodput-noise-curve: each step's efficiency is the formula's at the
  curve's noise scale for that step's training loss, each decision the
  formula's argmax there, both of the curve's stretches are used, and a
  resume mid-run continues bit for bit.
- Bad schedule, optimizer, scaling, estimator, probe and curve flags get one
  line naming the flag.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import BATCHSCALE, MPIRUN, CorpusTest, read_metrics, read_model, run  # noqa: E402

T = 32


def train(data, prefix, ranks=1, extra=(), steps=10, micro=2):
    metrics, model = prefix + ".jsonl", prefix + ".bin"
    args = [BATCHSCALE, "train", "--data", os.path.join(data, "train_000000.bin"), "--layers", "2", "--heads", "2",
            "--channels", "32", "--seq-len", str(T), "--micro-batch", str(micro), "--steps", str(steps),
            "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--quiet",
            "--metrics", metrics, "--save-model", model] + list(extra)
    cmd = MPIRUN + ["-np", str(ranks)] + args if ranks > 1 else args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    return read_metrics(metrics), read_model(model)[1]


def megatron_batch(consumed_samples, start, inc, ramp_samples, final):
    """Megatron-LM's RampupBatchsizeNumMicroBatches arithmetic (REFERENCES.md)."""
    if consumed_samples > ramp_samples:
        return final
    increments = (final - start) // inc
    per_increment = ramp_samples / increments
    return start + int(consumed_samples / per_increment) * inc


class BatchScalingTest(CorpusTest):
    def test_optimizers_under_zero_equal_one_process(self):
        G = 8
        for opt in (["--optimizer", "sgd", "--nesterov", "--lr", "0.05"], ["--optimizer", "lamb"],
                    ["--optimizer", "lars", "--lr", "0.5"]):
            name = opt[1]
            o_m, o_p = train(self.data, self.path(f"{name}_oracle"), micro=G, extra=opt + ["--global-batch", str(G)])
            self.assertLess(o_m[-1]["loss"], o_m[0]["loss"], f"{name} learns")
            for ranks, zero in ((2, 1), (2, 3), (4, 2), (4, 1)):
                m, p = train(self.data, self.path(f"{name}_{ranks}_{zero}"), ranks=ranks,
                             extra=opt + ["--global-batch", str(G), "--zero", str(zero)])
                for a, b in zip(m, o_m):
                    self.assertLess(abs(a["loss"] - b["loss"]) / b["loss"], 1e-5, f"{name} N={ranks} zero={zero}")
                err = np.max(np.abs(p.astype(np.float64) - o_p)) / np.max(np.abs(o_p))
                self.assertLess(err, 1e-5, f"{name} N={ranks} zero={zero}")

    def test_ramp_follows_megatron_and_resumes_mid_ramp(self):
        # ramp from 4 to 16 sequences in steps of 4 over 40 sequences (1280 tokens), micro 2 x 2 ranks
        sched = ["--batch-schedule", f"ramp:4:4:{40 * T}", "--global-batch", "16"]
        ck = self.path("ramp_ck")
        full, p_full = train(self.data, self.path("ramp_full"), ranks=2, steps=12,
                             extra=sched + ["--ckpt-dir", ck, "--ckpt-every", "3", "--keep-last", "0"])
        consumed = 0
        for m in full:
            self.assertEqual(m["batch"], megatron_batch(consumed, 4, 4, 40, 16), f"at {consumed} sequences")
            consumed += m["batch"]
        self.assertEqual([m["batch"] for m in full[:5]], [4, 4, 4, 4, 8])  # 40/3 sequences per increment
        self.assertEqual(full[-1]["batch"], 16)
        resumed, p_res = train(self.data, self.path("ramp_res"), ranks=2, steps=12,
                               extra=sched + ["--resume", os.path.join(ck, "step_00000003"),
                                              "--ckpt-dir", self.path("ramp_ck2")])
        self.assertEqual([(m["batch"], m["loss"]) for m in resumed], [(m["batch"], m["loss"]) for m in full[3:]])
        self.assertTrue(np.array_equal(p_full, p_res))

    def test_lr_scaling_at_batch_changes(self):
        for rule, f in (("linear", lambda k: k), ("sqrt", math.sqrt)):
            m, _ = train(self.data, self.path(f"scale_{rule}"), steps=8,
                         extra=["--batch-schedule", f"ramp:2:2:{12 * T}", "--global-batch", "8", "--lr-scaling", rule,
                                "--base-batch", "8", "--warmup", "0", "--min-lr", "3e-3"])
            batches = {x["batch"] for x in m}
            self.assertGreater(len(batches), 2)
            for x in m:
                self.assertAlmostEqual(x["lr"], 3e-3 * f(x["batch"] / 8), delta=1e-12, msg=rule)

    def test_token_warmup_unaffected_by_batch_changes(self):
        warm = 20 * T
        m, _ = train(self.data, self.path("warm"), steps=8,
                     extra=["--batch-schedule", f"ramp:2:2:{12 * T}", "--global-batch", "8",
                            "--warmup-tokens", str(warm), "--min-lr", "3e-3"])
        for x in m:
            tokens = x["tokens"]
            want = 3e-3 * tokens / warm if tokens <= warm else 3e-3
            self.assertAlmostEqual(x["lr"], want, delta=1e-12)

    def test_noise_scale_same_for_accumulation_and_ranks(self):
        a, _ = train(self.data, self.path("ns1"), steps=12, extra=["--global-batch", "8", "--noise-scale"])
        b, _ = train(self.data, self.path("ns4"), ranks=4, steps=12, extra=["--global-batch", "8", "--noise-scale"])
        va, vb = a[-1].get("noise_scale"), b[-1].get("noise_scale")
        self.assertIsNotNone(va, "noise scale not resolved after 12 steps")
        self.assertLess(abs(va - vb) / abs(va), 1e-4)  # float summation order only
        self.assertAlmostEqual(a[-1]["noise_scale_tokens"], va * T, delta=1e-6 * abs(va) * T)

    def test_adaptive_batch_follows_noise_scale(self):
        m, _ = train(self.data, self.path("adaptive"), steps=1,
                     extra=["--batch-schedule", "adaptive:4:12", "--train-tokens", str(300 * 4 * T)])
        batch = 4
        for prev, cur in zip(m, m[1:]):
            ns = prev.get("noise_scale")
            if ns is not None:
                batch = min(12, max(batch, int(ns // 2) * 2))
            self.assertEqual(cur["batch"], batch, f"step {cur['step']}")
        self.assertGreater(m[-1]["batch"], 4, "the batch never grew")
        self.assertGreaterEqual(m[-1]["tokens"], 300 * 4 * T)

    def test_estimators_same_for_accumulation_and_ranks(self):
        est = ["--global-batch", "8", "--noise-scale", "--noise-scale-every", "3"]
        runs = {(r, algo): train(self.data, self.path(f"est_{r}_{algo}"), ranks=r, steps=12,
                                 extra=est + ["--comm-algo", algo])[0]
                for r, algo in ((1, "ring"), (2, "ring"), (4, "ring"), (4, "mpi"))}
        one = runs[(1, "ring")][-1]
        self.assertEqual(one["noise_extra_passes"], 4 * 4 + 4 * 3,
                         "4 passes at each of steps 3, 6, 9, 12; 4 more for B_noise(P) at 6, 9, 12 (v_hat over 5)")
        precond_curv = "noise_scale_curvature_precond"
        self.assertEqual([m["step"] for m in runs[(1, "ring")] if precond_curv in m], list(range(6, 13)))

        def rel(a, b, key):
            return abs(a[key] - b[key]) / abs(b[key])
        # B_simple and the preconditioned B_simple (measured once v_hat averages 5 updates): within 1e-6.
        # The curvature B_noise divides gradient differences by 2h, with the weights moved by CURVATURE_STEP = 1e-3 of
        # their norm (src/optim/curvature.h): float rounding of the gradients (2^-24 relative) is amplified up to
        # 1 / 1e-3 times, so its bound is 2^-24 / 1e-3 = 6e-5. The same layout with the reduction reordered (ring
        # against MPI's collectives, 4 ranks) shows what summation order alone does; printed beside.
        curvature_bound = 2.0 ** -24 / 1e-3
        for key in ("noise_scale_curvature", precond_curv):
            floor = rel(runs[(4, "mpi")][-1], runs[(4, "ring")][-1], key)
            print(f"{key}: summation-order floor {floor:.2e} (bound {curvature_bound:.2e})")
            self.assertLess(floor, curvature_bound)
        for r in (2, 4):
            last = runs[(r, "ring")][-1]
            for key in ("noise_scale", "noise_scale_precond"):
                self.assertLess(rel(last, one, key), 1e-6, f"{key} {r} ranks")
            for key in ("noise_scale_curvature", precond_curv):
                self.assertLess(rel(last, one, key), curvature_bound, f"{key} {r} ranks")
            self.assertEqual(last["noise_extra_passes"], one["noise_extra_passes"])
        for key in ("noise_scale", "noise_scale_precond", "noise_scale_curvature", precond_curv):
            self.assertGreater(one[key], 0, key)
        self.assertNotEqual(one[precond_curv], one["noise_scale_curvature"])
        sgd, _ = train(self.data, self.path("est_sgd"), steps=6,
                       extra=est + ["--optimizer", "sgd", "--lr", "0.05"])
        self.assertIn("noise_scale_curvature", sgd[-1])
        self.assertFalse(any(precond_curv in m for m in sgd), "no Adam preconditioner under SGD")
        self.assertEqual(sgd[-1]["noise_extra_passes"], 4 * 2)

    def test_goodput_picks_formula_and_resumes(self):
        a, b, lo, hi = 1.0, 0.002, 4, 32
        gp = ["--batch-schedule", f"goodput:{lo}:{hi}", "--train-tokens", str(60 * 8 * T), "--goodput-every", "3",
              "--goodput-time-model", f"{a}:{b}", "--lr-scaling", "sqrt", "--base-batch", "4",
              "--noise-scale-every", "4", "--goodput-estimator", "curvature-precond"]
        ck = self.path("gp_ck")
        full, p_full = train(self.data, self.path("gp_full"), ranks=2, steps=1,
                             extra=gp + ["--ckpt-dir", ck, "--ckpt-every", "7", "--keep-last", "0"])

        def goodput(batch, bn):
            return batch / (a + b * batch) * (bn + lo) / (bn + batch)
        batch, decisions = lo, 0
        for prev, cur in zip(full, full[1:]):
            self.assertEqual(prev["batch"], batch, f"step {prev['step']}")
            bn = prev.get("noise_scale_curvature_precond")  # the estimator goodput follows
            if bn is not None:
                self.assertAlmostEqual(prev["efficiency"], (bn + lo) / (bn + batch), delta=1e-12)
                self.assertAlmostEqual(prev["goodput"], goodput(batch, bn), delta=1e-9)
            if (prev["step"] % 3 == 0 or prev["step"] == 1) and bn is not None:
                decisions += 1  # the line is given: no size is explored, every decision is the formula's
                batch = max(range(lo, hi + 1, 2 * 2), key=lambda B: goodput(B, bn))
                self.assertEqual(prev["goodput_batch"], batch, f"decision at step {prev['step']}")
        self.assertEqual(full[-1]["batch"], batch)
        self.assertGreater(decisions, 3)
        self.assertNotIn(batch, (lo, 2 * lo), "the formula's batch is interior on this curve")
        resumed, p_res = train(self.data, self.path("gp_res"), ranks=2, steps=1,
                               extra=gp + ["--resume", os.path.join(ck, "step_00000014"),
                                           "--ckpt-dir", self.path("gp_ck2")])
        keys = ("batch", "loss", "lr", "noise_scale", "noise_scale_precond", "noise_scale_curvature",
                "noise_scale_curvature_precond", "noise_extra_passes", "goodput", "efficiency")
        self.assertIn("noise_scale_curvature_precond", full[13], "the checkpoint at step 14 holds B_noise(P)'s EMA")
        self.assertEqual([[m.get(k) for k in keys] for m in resumed], [[m.get(k) for k in keys] for m in full[14:]])
        self.assertTrue(np.array_equal(p_full, p_res))

    def test_noise_probe_layouts_and_trajectory(self):
        # M = 2 micro-batches of 2 per probe: 2 ranks x K 1 (accumulation 1) and 1 rank x K 2 (accumulation 2) draw
        # the same sequences; so does ZeRO 1 on 2 ranks. Probes at steps 2, 4 and 6, at weights that differ between
        # the layouts by summation order only.
        probe = ["--global-batch", "4", "--noise-probe-every", "2", "--noise-probe-batches"]
        keys = ("noise_scale_probe", "noise_probe_grad_sq", "noise_probe_trace")
        one, _ = train(self.data, self.path("probe_1"), steps=6, extra=probe + ["2"])
        runs = {"2 ranks": train(self.data, self.path("probe_2"), ranks=2, steps=6, extra=probe + ["1"])[0],
                "2 ranks, ZeRO 1": train(self.data, self.path("probe_2z"), ranks=2, steps=6,
                                          extra=probe + ["1", "--zero", "1"])[0]}
        probed = [m for m in one if "noise_probe_trace" in m]
        self.assertEqual([m["step"] for m in probed], [2, 4, 6])
        self.assertFalse(any("noise_probe_trace" in m for m in one if m["step"] % 2), "only at probe steps")
        self.assertEqual([m["noise_probe_micro_batches"] for m in one], [0, 2, 2, 4, 4, 6])
        for m in probed:
            self.assertGreater(m["noise_probe_trace"], 0)
        for name, other in runs.items():
            for a, b in zip(one, other):
                for k in keys:
                    if k in a:
                        rel = abs(a[k] - b[k]) / abs(a[k])
                        print(f"probe {name} step {a['step']} {k}: {a[k]:.9g} vs {b[k]:.9g}, relative {rel:.1e}")
                        self.assertLess(rel, 1e-6, f"{name} step {a['step']} {k}")
            self.assertEqual(other[-1]["noise_probe_micro_batches"], 3, "K = 1 per rank at each of 3 probes")
        # the probe leaves the training trajectory bit for bit (the plain run does not even measure micro norms)
        plain, p_plain = train(self.data, self.path("probe_off"), steps=6, extra=["--global-batch", "4"])
        ema = probe + ["2", "--noise-probe-ema", "0.5"]
        on, p_on = train(self.data, self.path("probe_on"), steps=6,
                         extra=ema + ["--ckpt-dir", self.path("probe_ck"), "--ckpt-every", "3", "--keep-last", "0"])
        self.assertEqual([m["loss"] for m in on], [m["loss"] for m in plain])
        self.assertTrue(np.array_equal(p_on, p_plain))
        # EMA 0.5: the second probe's |G|^2 is the bias-corrected average of the two probes' own
        g1, g2 = probed[0]["noise_probe_grad_sq"], probed[1]["noise_probe_grad_sq"]
        self.assertAlmostEqual([m for m in on if m["step"] == 4][0]["noise_probe_grad_sq"],
                               (0.5 * 0.5 * g1 + 0.5 * g2) / 0.75, delta=1e-9 * abs(g2))
        # a checkpoint written before the probe (its 9 words, the probe's 5 and the preconditioned probe's 4, cut
        # from schedule.estimators) still resumes: the trajectory goes on, and the probe starts afresh, so its first value is that probe's own (EMA 0's)
        old = self.path("probe_old_ck")
        shutil.copytree(os.path.join(self.path("probe_ck"), "step_00000003"), old)
        manifest = os.path.join(old, "manifest.json")
        with open(manifest) as f:
            j = json.load(f)
        j["schedule"]["estimators"] = j["schedule"]["estimators"][:-9]
        with open(manifest, "w") as f:
            json.dump(j, f)
        resumed, _ = train(self.data, self.path("probe_old"), steps=6,
                           extra=ema + ["--resume", old, "--ckpt-dir", self.path("probe_old_ck2")])
        self.assertEqual([m["loss"] for m in resumed], [m["loss"] for m in on[3:]])
        self.assertEqual(resumed[0]["noise_probe_grad_sq"], probed[1]["noise_probe_grad_sq"])
        self.assertNotEqual(resumed[0]["noise_probe_grad_sq"], on[3]["noise_probe_grad_sq"])

    def test_noise_probe_preconditioned(self):
        # Adam's preconditioner exists from optimizer step 5 (PRECOND_FROM_STEP): probes before the updates of steps
        # 6, 8 and 10 carry the preconditioned values, those at 2 and 4 not; the same in both layouts (ZeRO 0); an
        # EMA 0.5 of them resumes from a checkpoint at step 7 to the bit.
        probe = ["--global-batch", "4", "--noise-probe-every", "2", "--noise-probe-ema", "0.5", "--noise-probe-batches"]
        keys = ("noise_scale_probe_precond", "noise_probe_precond_grad_sq", "noise_probe_precond_trace")
        ck = self.path("pp_ck")
        one, _ = train(self.data, self.path("pp_1"), steps=10,
                       extra=probe + ["2", "--ckpt-dir", ck, "--ckpt-every", "7", "--keep-last", "0"])
        two, _ = train(self.data, self.path("pp_2"), ranks=2, steps=10, extra=probe + ["1"])
        self.assertEqual([m["step"] for m in one if keys[0] in m], [6, 8, 10])
        self.assertEqual([m["step"] for m in one if "noise_scale_probe" in m], [2, 4, 6, 8, 10])
        for a, b in zip(one, two):
            for k in keys:
                self.assertEqual(k in a, k in b, f"step {a['step']} {k}")
                if k in a:
                    self.assertGreater(a[k], 0)
                    self.assertLess(abs(a[k] - b[k]) / abs(a[k]), 1e-6, f"step {a['step']} {k}: {a[k]} vs {b[k]}")
        # P changes what is measured: the preconditioned |G|^2 is not the raw one
        self.assertNotAlmostEqual(one[5]["noise_probe_precond_grad_sq"] / one[5]["noise_probe_grad_sq"], 1.0, places=2)
        zero1, _ = train(self.data, self.path("pp_z1"), ranks=2, steps=6, extra=probe + ["1", "--zero", "1"])
        self.assertFalse(any(keys[0] in m for m in zero1), "ZeRO 1 keeps no whole preconditioner: raw probe only")
        resumed, _ = train(self.data, self.path("pp_res"), steps=10,
                           extra=probe + ["2", "--resume", os.path.join(ck, "step_00000007"),
                                          "--ckpt-dir", self.path("pp_ck2")])
        self.assertEqual([[m.get(k) for k in keys] for m in resumed], [[m.get(k) for k in keys] for m in one[7:]])

    def goodput_follows(self, estimator, key):
        a, b, lo, hi = 1.0, 0.002, 4, 32
        gp = ["--batch-schedule", f"goodput:{lo}:{hi}", "--train-tokens", str(40 * 8 * T), "--goodput-every", "3",
              "--goodput-time-model", f"{a}:{b}", "--noise-probe-every", "2", "--noise-probe-batches", "2",
              "--noise-probe-ema", "0.5", "--goodput-estimator", estimator]
        ck = self.path(f"gpp_ck_{estimator}")
        full, p_full = train(self.data, self.path(f"gpp_full_{estimator}"), ranks=2, steps=1,
                             extra=gp + ["--ckpt-dir", ck, "--ckpt-every", "7", "--keep-last", "0"])
        bn, followed = None, 0
        for x in full:  # goodput follows the last probe's value between probes
            bn = x.get(key, bn)
            if bn is not None and x.get("efficiency") is not None:
                self.assertAlmostEqual(x["efficiency"], (bn + lo) / (bn + x["batch"]), delta=1e-12, msg=x["step"])
                followed += 1
        self.assertGreater(followed, 10)
        self.assertGreater(len({x["batch"] for x in full}), 1, "goodput moved the batch")
        resumed, p_res = train(self.data, self.path(f"gpp_res_{estimator}"), ranks=2, steps=1,
                               extra=gp + ["--resume", os.path.join(ck, "step_00000007"),
                                           "--ckpt-dir", self.path(f"gpp_ck2_{estimator}")])
        keys = ("batch", "loss", "lr", "noise_scale_probe", "noise_probe_grad_sq", "noise_probe_trace",
                "noise_scale_probe_precond", "noise_probe_precond_grad_sq", "noise_probe_precond_trace",
                "noise_probe_micro_batches", "goodput", "efficiency", "goodput_batch")
        self.assertEqual([[m.get(k) for k in keys] for m in resumed], [[m.get(k) for k in keys] for m in full[7:]])
        self.assertTrue(np.array_equal(p_full, p_res))

    def test_goodput_follows_probe_and_resumes(self):
        self.goodput_follows("probe", "noise_scale_probe")

    def test_goodput_follows_preconditioned_probe_and_resumes(self):
        self.goodput_follows("probe-precond", "noise_scale_probe_precond")

    def test_goodput_given_noise_scale(self):
        # --goodput-noise-scale: the policy alone, fed a noise scale from outside (batch-sweep's B_crit, say), so a
        # run separates the policy's choices from any estimator's. Every step's efficiency is the formula's at the
        # given value, and each decision (after the first step, then every 3) is the formula's argmax: with the line
        # and the noise scale given, nothing is explored.
        # With --goodput-time-fit the same: the line through the planted times is the planted line.
        for fit in ([], ["--goodput-time-fit"]):
            with self.subTest(fit=fit):
                self.check_goodput_given_noise_scale(fit)

    def check_goodput_given_noise_scale(self, fit):
        a, b, lo, hi, bn = 1.0, 0.002, 4, 32, 0.5  # best over continuous B: sqrt(a bn / b) = 15.8
        gp = ["--batch-schedule", f"goodput:{lo}:{hi}", "--train-tokens", str(30 * 8 * T), "--goodput-every", "3",
              "--goodput-time-model", f"{a}:{b}", "--goodput-noise-scale", str(bn)] + fit
        full, _ = train(self.data, self.path("gp_given" + "_fit" * len(fit)), ranks=2, steps=1, extra=gp)

        def goodput(batch):
            return batch / (a + b * batch) * (bn + lo) / (bn + batch)
        best = max(range(lo, hi + 1, 2 * 2), key=goodput)
        self.assertNotIn(best, (lo, 2 * lo, hi), "the formula's batch is interior on this curve")
        batch = lo
        for prev in full[:-1]:
            self.assertEqual(prev["batch"], batch, f"step {prev['step']}")
            self.assertAlmostEqual(prev["efficiency"], (bn + lo) / (bn + batch), delta=1e-12, msg=prev["step"])
            if prev["step"] % 3 == 0 or prev["step"] == 1:
                batch = best
                self.assertEqual(prev["goodput_batch"], batch, f"decision at step {prev['step']}")
        self.assertEqual(full[1]["batch"], best, "the second step runs the formula's batch")
        self.assertEqual(full[-1]["batch"], best)

    def replay_goodput(self, metrics, a, b, lo, hi, noise_of):
        """Checks a planted-time goodput run (2 ranks x micro-batch 2, a decision every 3 steps) against the formula
        at noise_of(step's metrics): every step's batch and efficiency, every decision (after the first step, then
        every 3; the line is given, so none explores); returns the decisions' batches."""
        def goodput(batch, noise):
            return batch / (a + b * batch) * (noise + lo) / (noise + batch)
        batch, chosen = lo, []
        for x in metrics[:-1]:
            noise = noise_of(x)
            self.assertEqual(x["batch"], batch, f"step {x['step']}")
            self.assertAlmostEqual(x["efficiency"], (noise + lo) / (noise + batch), delta=1e-12, msg=x["step"])
            if x["step"] % 3 == 0 or x["step"] == 1:
                batch = max(range(lo, hi + 1, 2 * 2), key=lambda B: goodput(B, noise))
                self.assertEqual(x["goodput_batch"], batch, f"decision at step {x['step']}")
                chosen.append(batch)
        return chosen

    def test_goodput_temperature(self):
        # --goodput-temperature: the followed noise scale times the lr schedule's factor (the step's lr over --lr;
        # --lr-scaling none here), so during a long warm-up the policy sees little noise and keeps small batches,
        # then grows them as the lr rises (and lowers them as the cosine decays it). Each step's efficiency and
        # each decision are the formula's at bn x lr / 3e-3.
        a, b, lo, hi, bn, lr = 1.0, 0.05, 4, 32, 60.0, 3e-3  # at the peak lr sqrt(a bn / b) = 35: batch 32
        gp = ["--batch-schedule", f"goodput:{lo}:{hi}", "--train-tokens", str(60 * 8 * T), "--goodput-every", "3",
              "--goodput-time-model", f"{a}:{b}", "--goodput-noise-scale", str(bn), "--goodput-temperature",
              "--warmup-tokens", str(40 * 8 * T)]
        full, _ = train(self.data, self.path("gp_temp"), ranks=2, steps=1, extra=gp)
        chosen = self.replay_goodput(full, a, b, lo, hi, lambda x: bn * x["lr"] / lr)
        self.assertLess(full[5]["lr"], 0.5 * lr, "the run decides inside the warm-up")
        top = chosen.index(max(chosen))
        self.assertLess(chosen[0], chosen[top], f"the batch grows with the lr: {chosen}")
        self.assertEqual(chosen[:top + 1], sorted(chosen[:top + 1]), f"and only grows while it rises: {chosen}")
        self.assertLess(chosen[-1], chosen[top], f"the cosine decay lowers it again: {chosen}")

    def test_goodput_given_noise_curve(self):
        # --goodput-noise-curve TO:B,...: a noise scale that changes with the training loss (batch-sweep --along's
        # local critical batches): each step's efficiency is the formula's at the curve's value for that step's
        # loss, each decision (after the first step, then every 3) is the formula's argmax there, both stretches of
        # the curve are used, and a resume from a checkpoint mid-run continues bit for bit.
        a, b, lo, hi = 1.0, 0.002, 4, 32
        probe, _ = train(self.data, self.path("gpc_probe"), ranks=2, steps=12)  # where this model's loss goes
        middle = round(probe[6]["loss"], 3)
        curve = [(middle, 0.5), (0.01, 60.0)]  # 0.5 sequences until the loss falls to `middle`, then 60
        gp = ["--batch-schedule", f"goodput:{lo}:{hi}", "--train-tokens", str(30 * 8 * T), "--goodput-every", "3",
              "--goodput-time-model", f"{a}:{b}", "--goodput-noise-curve", ",".join(f"{l}:{s}" for l, s in curve)]
        ck = self.path("gpc_ck")
        full, p_full = train(self.data, self.path("gpc_full"), ranks=2, steps=1,
                             extra=gp + ["--ckpt-dir", ck, "--ckpt-every", "7", "--keep-last", "0"])

        def at(x):  # the curve's noise scale: the first stretch whose end the step's loss is still above
            return next((s for l, s in curve if l < x["loss"]), curve[-1][1])
        self.replay_goodput(full, a, b, lo, hi, at)
        used = {at(x) for x in full[:-1]}
        self.assertEqual(used, {0.5, 60.0}, "the run crossed the curve's first loss")
        self.assertGreater(len({x["batch"] for x in full[3:]}), 1, "the batch followed the curve")
        resumed, p_res = train(self.data, self.path("gpc_res"), ranks=2, steps=1,
                               extra=gp + ["--resume", os.path.join(ck, "step_00000007"),
                                           "--ckpt-dir", self.path("gpc_ck2")])
        keys = ("batch", "loss", "lr", "goodput", "efficiency", "goodput_batch")
        self.assertEqual([[m.get(k) for k in keys] for m in resumed], [[m.get(k) for k in keys] for m in full[7:]])
        self.assertTrue(np.array_equal(p_full, p_res))

    def test_bad_flags(self):
        for flag, value in (("--batch-schedule", "ramp:4:3:100"), ("--batch-schedule", "step:\"0:8 0:16\""),
                            ("--batch-schedule", "exp:0:100"), ("--batch-schedule", "step:\"0:4 10Q:8\""),
                            ("--optimizer", "adagrad"), ("--lr-scaling", "cubic")):
            p = run(["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", "2", "--heads", "2",
                     "--channels", "32", "--seq-len", "32", "--micro-batch", "2", "--global-batch", "8", "--steps",
                     "2", "--quiet", flag, value], check=False)
            self.assertNotEqual(p.returncode, 0, f"{flag} {value}")
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(flag, lines[0])
        # each refusal: its words (the estimators' reasons name the quantity) and the flags that set it
        g = ["--batch-schedule", "goodput:4:16", "--train-tokens", "1000"]
        for needles, args in (
                (("the curvature noise scale needs ZeRO stage 0", "(flags: --noise-scale-every, --zero, --tp"),
                 ["--noise-scale-every", "2", "--zero", "1"]),
                (("goodput's precond noise scale needs the adamw optimizer", "(flags: --goodput-estimator, --optimizer"),
                 g + ["--optimizer", "sgd"]),
                (("goodput's curvature estimator needs the curvature noise scale",
                  "(flags: --goodput-estimator, --noise-scale-every)"), g + ["--goodput-estimator", "curvature"]),
                (("goodput's probe-precond estimator needs the noise probe", "(flags: --goodput-estimator, "
                  "--noise-probe-every, --optimizer"), g + ["--goodput-estimator", "probe-precond"]),
                (("goodput's probe-precond estimator needs", "(flags: --goodput-estimator"),
                 g + ["--goodput-estimator", "probe-precond", "--noise-probe-every", "2", "--optimizer", "sgd"]),
                (("goodput's curvature-precond estimator needs", "(flags: --goodput-estimator, --noise-scale-every, "
                  "--optimizer)"), g + ["--goodput-estimator", "curvature-precond", "--optimizer", "sgd",
                                        "--noise-scale-every", "2"]),
                (("goodput's time model needs A:B", "(flags: --goodput-time-model)"),
                 g + ["--goodput-time-model", "1:-2"]),
                (("--batch-schedule",), ["--batch-schedule", "goodput:8:4", "--train-tokens", "1000"]),
                (("a given goodput noise scale needs the goodput:MIN:MAX batch schedule",
                  "(flags: --goodput-noise-scale, --batch-schedule)"), ["--goodput-noise-scale", "12"]),
                (("--goodput-noise-scale",), g + ["--goodput-noise-scale", "-1"]),
                (("goodput's noise curve needs the goodput:MIN:MAX batch schedule",
                  "(flags: --goodput-noise-curve, --batch-schedule, --goodput-noise-scale)"),
                 ["--goodput-noise-curve", "2.8:9"]),
                (("goodput's temperature needs the goodput:MIN:MAX batch schedule",
                  "(flags: --goodput-temperature, --batch-schedule)"), ["--goodput-temperature"]),
                (("goodput's noise curve: '2.6:9,2.8:12': the losses must decrease", "(flags: --goodput-noise-curve)"),
                 g + ["--goodput-noise-curve", "2.6:9,2.8:12"]),
                (("and no given noise scale (got the batch schedule goodput:4:16 and a noise scale)",
                  "(flags: --goodput-noise-curve"), g + ["--goodput-noise-curve", "2.8:9", "--goodput-noise-scale", "3"]),
                (("--noise-probe-every",), ["--noise-probe-every", "-1"]),
                (("--noise-probe-every",), ["--noise-probe-every", "2", "--zero", "2"]),
                (("--noise-probe-batches",), ["--noise-probe-every", "2", "--noise-probe-batches", "0"]),
                (("--noise-probe-batches",), ["--noise-probe-every", "2", "--noise-probe-batches", "1"]),
                (("goodput's probe estimator needs the noise probe every N steps",
                  "(flags: --goodput-estimator, --noise-probe-every)"), g + ["--goodput-estimator", "probe"])):
            p = run(["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", "2", "--heads", "2",
                     "--channels", "32", "--seq-len", "32", "--micro-batch", "2", "--global-batch", "8", "--steps",
                     "2", "--quiet"] + args, check=False)
            self.assertNotEqual(p.returncode, 0, " ".join(args))
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            for needle in needles:
                self.assertIn(needle, lines[0])
        p = run(["train", "--data", os.path.join(self.data, "train_000000.bin"), "--layers", "2", "--heads", "2",
                 "--channels", "32", "--seq-len", "32", "--micro-batch", "4", "--global-batch", "8", "--steps", "2",
                 "--quiet", "--batch-schedule", "ramp:6:2:1000", "--strict-batch"], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--strict-batch", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
