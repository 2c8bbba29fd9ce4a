#!/usr/bin/python3
"""test_ft_ckpt.py: what a checkpoint survives, and its tools.

- A kill (SIGKILL, BATCHSCALE_CKPT_FAULT) at each stage of a checkpoint
  write leaves the previous checkpoint loadable and verified by `ckpt
  inspect`; `--resume latest` continues from it (from the new one once it
  was renamed into place) and ends bitwise equal to an uninterrupted run.
- One rank of a 2-rank job killed while checkpoint 6 is written
  (BATCHSCALE_CKPT_FAULT=STAGE:RANK): rank 1 or rank 0 (the committing rank)
  with its file half written, rank 1 with its file complete, and rank 1's
  background writer of --async-ckpt half-way through. No step_6 appears, the killed
  rank's file in the temporary directory is exactly half written, `ckpt
  inspect` verifies checkpoint 4 (checksums) and names the interrupted write,
  and `--resume latest` continues from 4 to end bitwise equal to an
  uninterrupted run.
- A flipped byte or a cut rank file, and a cut manifest, are found: `ckpt
  inspect` exits 1 with a line naming the file, and `--resume latest` falls
  back to the previous complete checkpoint with a warning naming what it
  skipped, again ending bitwise equal to the uninterrupted run.
- Resharding dp4 ZeRO-3 -> dp2 ZeRO-1 -> one process: parameters and
  optimizer state arrive bitwise. Seen through a "null step" (lr 0, beta1 =
  beta2 = 0.5, gradients clipped to exactly 0): it leaves every parameter
  as it is and halves both Adam moments exactly (a power of two), so the
  checkpoint it writes in the new layout must hold the loaded parameters and
  half the loaded moments, bit for bit. Compared through `ckpt export` and
  by reading the rank files with numpy. Training continued in each layout
  gives the losses of the never-resharded run within 1e-5.
- Resharding the model split, against an uninterrupted run: run A trains 10
  steps straight on layout X (checkpointing at step 5 on the way), run B
  resumes A's step-5 checkpoint on layout Y and trains to 10; for tp2 -> pp2,
  pp2 -> dp2 and tp2 x pp2 -> one process, B's final parameters equal A's
  bitwise where a run on Y equals A bitwise (the layouts' arithmetic is the
  same), else lie within the summation-order floor measured in the same
  test: the distance from A of run C, 10 steps straight on Y (see the test).
- llm.c round trip: export -> import -> export is byte-exact; the export
  equals the trainer's own --save-model and, tensor by tensor, the rank
  files rearranged into llm.c's order here; `train --resume` of an imported
  checkpoint equals `train --init-from` of the file, bitwise. A tensor-
  parallel checkpoint inspects (per-shard files) and exports as the
  trainer's own --save-model.
"""
import os
import shutil
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import read_model  # noqa: E402
from harness.ft_jobs import (BATCHSCALE, RANK_HEADER_BYTES, CorpusTest, file_bytes, job,  # noqa: E402
                             losses_by_step, read_checkpoint, run, step_dir, train_args)

STAGES = ["rank-file-half", "rank-file-done", "manifest-half", "before-rename", "after-rename"]


def bits(a):
    return a.view(np.uint32)


def llmc_order(params, C, L, T, Vp):
    """The flat layout ([wte, wpe] [layer 0] ... [lnf], a layer's twelve tensors
    together) rearranged into llm.c's file order (each tensor for all layers)."""
    layer_shapes = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    layer = sum(layer_shapes)
    emb = Vp * C + T * C
    parts = [params[:Vp * C], params[Vp * C:emb]]
    for k, n in enumerate(layer_shapes):
        start = sum(layer_shapes[:k])
        parts += [params[emb + l * layer + start:emb + l * layer + start + n] for l in range(L)]
    parts.append(params[emb + L * layer:])
    return np.concatenate(parts)


class CheckpointTest(CorpusTest):
    CORPUS_BYTES = 60_000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ref = {}

    def reference(self, ranks, steps, zero=0):
        """An uninterrupted run's final checkpoint (manifest, params, state) and losses."""
        key = (ranks, steps, zero)
        if key not in self.ref:
            name = f"ref_{ranks}_{steps}_{zero}"
            run(job(ranks, train_args(self.data, self.path(name), steps,
                                      extra=["--zero", str(zero), "--quiet", "--metrics", self.path(name + ".jsonl")])))
            self.ref[key] = (read_checkpoint(step_dir(self.path(name), steps)),
                             losses_by_step(self.path(name + ".jsonl")))
        return self.ref[key]

    def assert_same_as_reference(self, ckpt, ranks, steps, label):
        (_, ref_params, ref_state), _ = self.reference(ranks, steps)
        _, params, state = read_checkpoint(step_dir(ckpt, steps))
        self.assertTrue(np.array_equal(bits(params), bits(ref_params)), f"{label}: parameters")
        self.assertTrue(np.array_equal(bits(state), bits(ref_state)), f"{label}: optimizer state")

    def run_until(self, ranks, ckpt, steps, stop, extra=()):
        """Runs the job planned for `steps` steps and kills it at the start of step
        stop + 1 (the schedule must be the full run's for bitwise results)."""
        p = run(job(ranks, train_args(self.data, ckpt, steps, extra=["--quiet", "--debug-inject-fault",
                                                                     f"exit:{ranks - 1}:{stop + 1}"] + list(extra))),
                check=False)
        self.assertIn(p.returncode, (-9, 137), p.stderr)

    def inspect(self, directory):
        return run([BATCHSCALE, "ckpt", "inspect", directory], check=False)

    def test_kill_at_each_write_stage(self):
        for stage in STAGES:
            ckpt = self.path("fault_" + stage)
            self.run_until(1, ckpt, 8, 4, extra=["--ckpt-every", "2"])
            resume = ["--ckpt-every", "2", "--resume", "latest", "--quiet"]
            p = run(job(1, train_args(self.data, ckpt, 8, extra=resume)),
                    env={"BATCHSCALE_CKPT_FAULT": stage}, check=False)
            self.assertEqual(p.returncode, -9, f"{stage}: killed by SIGKILL")
            renamed = stage == "after-rename"
            self.assertEqual(os.path.isdir(step_dir(ckpt, 6)), renamed, stage)
            if not renamed:
                self.assertTrue(os.path.isdir(os.path.join(ckpt, ".tmp-step_00000006")), stage)
            p = self.inspect(ckpt)
            self.assertEqual(p.returncode, 0, f"{stage}: {p.stdout}{p.stderr}")
            self.assertIn(f"{step_dir(ckpt, 4)}\n", p.stdout)
            if not renamed:
                self.assertIn(".tmp-step_00000006: an interrupted write, ignored", p.stdout)
            p = run(job(1, train_args(self.data, ckpt, 8, extra=["--resume", "latest"])))
            self.assertIn(f"resumed from {step_dir(ckpt, 6 if renamed else 4)} at step", p.stdout, stage)
            self.assertFalse(os.path.exists(os.path.join(ckpt, ".tmp-step_00000006")), "left-overs removed")
            self.assert_same_as_reference(ckpt, 1, 8, stage)

    def test_one_rank_killed_while_writing(self):
        source = self.path("rankkill_src")
        self.run_until(2, source, 8, 4, extra=["--ckpt-every", "2"])  # checkpoints 2 and 4
        counts = [f["count"] for f in read_checkpoint(step_dir(source, 4))[0]["files"]]
        cases = [("rank-file-half:1", []), ("rank-file-half:0", []), ("rank-file-done:1", []),
                 ("rank-file-half:1", ["--async-ckpt"])]
        for fault, flags in cases:
            label = fault + " " + " ".join(flags)
            ckpt = self.path("rankkill_" + fault.replace(":", "_") + "".join(flags))
            shutil.copytree(source, ckpt)
            p = run(job(2, train_args(self.data, ckpt, 8, extra=["--ckpt-every", "2", "--resume", "latest", "--quiet"]
                                      + flags)), env={"BATCHSCALE_CKPT_FAULT": fault}, check=False)
            self.assertIn(p.returncode, (-9, 137), f"{label}: {p.stderr}")
            self.assertFalse(os.path.exists(step_dir(ckpt, 6)), f"{label}: an incomplete checkpoint is visible")
            tmp = os.path.join(ckpt, ".tmp-step_00000006")
            self.assertFalse(os.path.exists(os.path.join(tmp, "manifest.json")), label)
            stage, rank = fault.split(":")
            size = os.path.getsize(os.path.join(tmp, f"rank_{int(rank):05d}.bin"))
            count = counts[int(rank)]
            full = RANK_HEADER_BYTES + 3 * 4 * count
            self.assertEqual(size, RANK_HEADER_BYTES + count // 2 * 4 if stage == "rank-file-half" else full, label)
            p = self.inspect(ckpt)
            self.assertEqual(p.returncode, 0, f"{label}: {p.stdout}{p.stderr}")
            self.assertIn(".tmp-step_00000006: an interrupted write, ignored", p.stdout, label)
            p = self.inspect(step_dir(ckpt, 4))
            self.assertEqual(p.returncode, 0, label)
            self.assertIn("verified: every checksum matches", p.stdout, label)
            p = run(job(2, train_args(self.data, ckpt, 8, extra=["--ckpt-every", "2", "--resume", "latest"] + flags)))
            self.assertIn(f"resumed from {step_dir(ckpt, 4)} at step 4", p.stdout, label)
            self.assertFalse(os.path.exists(tmp), f"{label}: left-overs removed")
            self.assert_same_as_reference(ckpt, 2, 8, label)

    def test_corruption_is_detected_and_skipped(self):
        source = self.path("corrupt_src")
        self.run_until(2, source, 8, 6, extra=["--ckpt-every", "2"])
        damages = [
            ("flip", lambda d: flip_byte(os.path.join(d, "rank_00001.bin"), 1000), "rank_00001.bin is corrupt"),
            ("cut", lambda d: cut(os.path.join(d, "rank_00000.bin"), 5000), "rank_00000.bin is truncated"),
            ("manifest", lambda d: cut(os.path.join(d, "manifest.json"), 200), "manifest.json is not a readable"),
        ]
        for name, damage, message in damages:
            ckpt = self.path("corrupt_" + name)
            shutil.copytree(source, ckpt)
            damage(step_dir(ckpt, 6))
            p = self.inspect(step_dir(ckpt, 6))
            self.assertEqual(p.returncode, 1, name)
            self.assertIn(message, p.stderr, name)
            self.assertIn(step_dir(ckpt, 6), p.stderr, name)
            p = self.inspect(ckpt)
            self.assertEqual(p.returncode, 1, name)
            self.assertIn("verified: every checksum matches", p.stdout)
            p = run(job(2, train_args(self.data, ckpt, 8, extra=["--resume", "latest"])))
            self.assertIn(f"warning: skipping {step_dir(ckpt, 6)}", p.stderr, name)
            self.assertIn(message, p.stderr, name)
            self.assertIn(f"resumed from {step_dir(ckpt, 4)} at step 4", p.stdout, name)
            self.assert_same_as_reference(ckpt, 2, 8, name)
        # both newer checkpoints damaged: back to the oldest
        ckpt = self.path("corrupt_two")
        shutil.copytree(source, ckpt)
        flip_byte(os.path.join(step_dir(ckpt, 6), "rank_00000.bin"), 70)
        cut(os.path.join(step_dir(ckpt, 4), "rank_00001.bin"), 64)
        p = run(job(2, train_args(self.data, ckpt, 8, extra=["--resume", "latest"])))
        self.assertEqual(p.stderr.count("warning: skipping"), 2, p.stderr)
        self.assertIn(f"resumed from {step_dir(ckpt, 2)} at step 2", p.stdout)
        self.assert_same_as_reference(ckpt, 2, 8, "two damaged")

    def test_reshard_dp4_zero3_to_dp2_zero1_to_one(self):
        steps = 9
        (_, _, _), ref_losses = self.reference(4, steps, zero=3)
        first = self.path("reshard_dp4")
        self.run_until(4, first, steps, 3, extra=["--zero", "3", "--ckpt-every", "3"])
        null = ["--lr", "0", "--min-lr", "0", "--beta1", "0.5", "--beta2", "0.5", "--grad-clip", "1e-300"]
        hops = [(first, 3, 4, 0), (self.path("reshard_dp2"), 4, 2, 1), (self.path("reshard_dp1"), 5, 1, 0)]
        for (src, step, _, _), (dst, _, ranks, zero) in zip(hops, hops[1:]):
            label = f"{src} -> {ranks} ranks ZeRO {zero}"
            run(job(ranks, train_args(self.data, dst, step + 1,
                                      extra=["--zero", str(zero), "--quiet", "--resume", step_dir(src, step)] + null)))
            before, after = step_dir(src, step), step_dir(dst, step + 1)
            m_before, p_before, s_before = read_checkpoint(before)
            m_after, p_after, s_after = read_checkpoint(after)
            self.assertEqual((m_after["layout"]["dp"], m_after["layout"]["zero"]), (ranks, zero))
            self.assertEqual(len(m_after["files"]), ranks)
            self.assertTrue(np.array_equal(bits(p_after), bits(p_before)), label + ": parameters")
            self.assertTrue(np.any(s_before != 0))
            self.assertTrue(np.array_equal(bits(s_after * 2), bits(s_before)), label + ": optimizer state")
            exports = [self.path("reshard_a.bin"), self.path("reshard_b.bin")]
            for d, e in zip((before, after), exports):
                run([BATCHSCALE, "ckpt", "export", "--llmc", e, d])
            self.assertEqual(file_bytes(exports[0]), file_bytes(exports[1]), label + ": export")
        # training continues from the dp4 ZeRO-3 checkpoint on 2 ranks (ZeRO 1), then on one process
        cont2, cont1 = self.path("reshard_cont2"), self.path("reshard_cont1")
        self.run_until(2, cont2, steps, 6, extra=["--zero", "1", "--ckpt-every", "3", "--resume", step_dir(first, 3),
                                                  "--metrics", cont2 + ".jsonl"])
        run(job(1, train_args(self.data, cont1, steps, extra=["--quiet", "--resume", step_dir(cont2, 6),
                                                              "--metrics", cont1 + ".jsonl"])))
        got = {**losses_by_step(cont2 + ".jsonl"), **losses_by_step(cont1 + ".jsonl")}
        self.assertEqual(sorted(got), list(range(4, steps + 1)))
        for step, loss in got.items():
            self.assertLess(abs(loss - ref_losses[step]) / ref_losses[step], 1e-5, f"step {step}")

    def test_reshard_tp_pp_against_uninterrupted_run(self):
        steps, at = 10, 5
        layouts = {"tp2": (2, 2, 1), "pp2": (2, 1, 2), "dp2": (2, 1, 1), "tp2pp2": (4, 2, 2), "one": (1, 1, 1)}

        def straight(name):  # `steps` steps on one layout, a checkpoint at `at` on the way; (ckpt dir, parameters)
            ranks, tp, pp = layouts[name]
            ck, model = self.path("split_" + name), self.path("split_" + name + ".bin")
            if not os.path.exists(model):
                run(job(ranks, train_args(self.data, ck, steps, extra=["--tp", str(tp), "--pp", str(pp), "--quiet",
                                                                       "--ckpt-every", str(at), "--save-model", model])))
            return ck, read_model(model)[1].astype(np.float64)

        def rel(x, y):
            return float(np.max(np.abs(x - y)) / np.max(np.abs(y)))

        for x, y in (("tp2", "pp2"), ("pp2", "dp2"), ("tp2pp2", "one")):
            label = f"{x} -> {y}"
            ck, a = straight(x)
            # The floor: run C trains on Y from the start, so it differs from A by Y's summation order on all 10
            # steps; B shares A's arithmetic for 5 and differs for 5, so it lies at most that far from A.
            # Measured on a Xeon (AVX-512): floors 7.8e-7 to 1.0e-6, B 1.1e-7 on all three; a resume that read
            # Adam's second moment 1% too large gave 1.4e-5 on tp2 -> pp2.
            _, c = straight(y)
            ranks, tp, pp = layouts[y]
            model = self.path(f"split_{x}_to_{y}.bin")
            p = run(job(ranks, train_args(self.data, self.path(f"split_{x}_to_{y}"), steps,
                                          extra=["--tp", str(tp), "--pp", str(pp), "--resume", step_dir(ck, at),
                                                 "--save-model", model])))
            wrote = layouts[x]
            self.assertIn(f"resumed from {step_dir(ck, at)} at step {at} (written by {wrote[0]} ranks: tp {wrote[1]} "
                          f"x cp 1 x pp {wrote[2]} x dp {wrote[0] // (wrote[1] * wrote[2])}", p.stdout, label)
            b = read_model(model)[1].astype(np.float64)
            floor, err = rel(c, a), rel(b, a)
            print(f"  {label}: resumed run vs uninterrupted {err:.2e}, floor (never resharded on {y}) {floor:.2e}")
            if floor == 0:
                self.assertTrue(np.array_equal(b, a), f"{label}: the layouts' arithmetic is the same, yet B != A")
            else:
                self.assertLessEqual(err, floor, label)

    def test_llmc_export_import_round_trip(self):
        ckpt, saved = self.path("llmc_ckpt"), self.path("llmc_saved.bin")
        run(job(2, train_args(self.data, ckpt, 3, extra=["--zero", "2", "--quiet", "--save-model", saved])))
        one, two, back = self.path("llmc_1.bin"), self.path("llmc_2.bin"), self.path("llmc_back")
        run([BATCHSCALE, "ckpt", "export", "--llmc", one, ckpt])  # the directory: its newest checkpoint
        self.assertEqual(file_bytes(one), file_bytes(saved), "export == the trainer's --save-model")
        header, body = read_model(one)
        self.assertEqual(list(header[:8]), [20240326, 3, 32, 257, 2, 2, 32, 384])
        _, params, _ = read_checkpoint(step_dir(ckpt, 3))
        self.assertTrue(np.array_equal(bits(body), bits(llmc_order(params, 32, 2, 32, 384))))
        p = run([BATCHSCALE, "ckpt", "import", "--llmc", one, "--out", back, "--global-batch", "8"])
        self.assertIn(step_dir(back, 0), p.stdout)
        self.assertEqual(self.inspect(back).returncode, 0)
        manifest, imported, state = read_checkpoint(step_dir(back, 0))
        self.assertEqual((manifest["step"], manifest["optimizer"]["name"], manifest["schedule"]["batch"]),
                         (0, "adamw", "constant"))
        self.assertTrue(np.array_equal(bits(imported), bits(params)))
        self.assertFalse(np.any(state))
        run([BATCHSCALE, "ckpt", "export", "--llmc", two, step_dir(back, 0)])
        self.assertEqual(file_bytes(one), file_bytes(two), "export -> import -> export")
        # resuming the imported checkpoint is starting from the file
        a, b = self.path("llmc_resumed.bin"), self.path("llmc_init.bin")
        run(job(1, train_args(self.data, self.path("llmc_r"), 3,
                              extra=["--quiet", "--resume", step_dir(back, 0), "--save-model", a])))
        run(job(1, train_args(self.data, self.path("llmc_i"), 3, extra=["--quiet", "--init-from", one,
                                                                        "--save-model", b])))
        self.assertEqual(file_bytes(a), file_bytes(b))

    def test_tensor_parallel_checkpoint_inspect_and_export(self):
        ckpt, saved, exported = self.path("tp2"), self.path("tp2_saved.bin"), self.path("tp2_export.bin")
        run(job(2, train_args(self.data, ckpt, 1, extra=["--tp", "2", "--quiet", "--save-model", saved])))
        run([BATCHSCALE, "ckpt", "export", "--llmc", exported, ckpt])
        self.assertEqual(file_bytes(exported), file_bytes(saved), "export of a tensor-parallel checkpoint")
        p = self.inspect(ckpt)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("dp 1 x cp 1 x tp 2 x pp 1", p.stdout)
        self.assertIn("rank_00001.bin   shard 1 [0, ", p.stdout)
        self.assertIn("each model shard's files tile its layout", p.stdout)
        cut(os.path.join(step_dir(ckpt, 1), "rank_00001.bin"), 100)
        p = self.inspect(ckpt)
        self.assertEqual(p.returncode, 1)
        self.assertIn("rank_00001.bin is truncated", p.stderr)

    def test_tool_errors_are_one_line(self):
        ckpt = self.path("errors_ckpt")
        run(job(1, train_args(self.data, ckpt, 1, extra=["--quiet"])))
        cases = [
            (["inspect"], "give the checkpoint directory"),
            (["inspect", self.path("nothing")], "does not exist or is not a directory"),
            (["inspect", self.dir + "/data"], "no checkpoint (step_*)"),
            (["export", ckpt], "--out PATH is required"),
            (["export", "--format", "onnx", "--out", self.path("x"), ckpt], "--format must be llmc or safetensors"),
            (["export", "--llmc", self.path("x.bin"), self.path("nothing")], "is neither a checkpoint nor a directory"),
            (["import", "--llmc", self.path("none.bin"), "--out", self.path("o"), "--global-batch", "8"],
             "none.bin"),
            (["import", "--llmc", self.data + "/train_000000.bin", "--out", self.path("o"), "--global-batch", "8"],
             "is not an llm.c model file"),
            (["import", "--llmc", self.path("x.bin"), "--out", self.path("o")], "--global-batch is required"),
            (["frobnicate"], "unknown subcommand 'frobnicate'"),
        ]
        for args, message in cases:
            p = run([BATCHSCALE, "ckpt"] + args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


def flip_byte(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def cut(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


if __name__ == "__main__":
    unittest.main(verbosity=2)
