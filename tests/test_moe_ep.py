#!/usr/bin/python3
"""test_moe_ep.py: expert parallelism in the trainer (`batchscale train --ep N`).

1. Layouts: ep 2 (2 ranks; also with 2 micro-steps per step, dropless), ep 2 x dp 2
   and ep 4 (4 ranks) equal 1 process
   at the same global batch over 10 steps: losses and aux losses within 1e-5
   (relative), every step's loads and dropped shares equal, final weights
   within the larger of 1e-5 and FLOOR_K x the summation-order floor beside
   each oracle (max |a-b| / max |b|; the floor: plain data parallelism at the
   oracle's micro-steps, 4 ranks or 2, held to the 1 process's own floor in
   test_moe_model.py) and the bias equal; dropless and under
   a capacity factor that drops (each sequence its own capacity group on
   every layout). The EP checkpoint is read here from its shard files (the
   experts of ep rank e are logical experts e E/ep ..), not by batchscale.
2. Checkpoints (`ckpt inspect` verifies an EP one): ep 2 -> ep 1 (2 ranks) -> 1 process bitwise (each resumed
   with nothing left to train writes the state it read), and an ep 2 run
   resumed at step 3 ends bitwise where the uninterrupted one does.
3. Metrics: moe_a2a_bytes and moe_a2a_exposed_ms per step under EP only;
   validation through the EP layers equals plain data parallelism's.
4. Bad input, one line each: --ep not dividing --experts or the
   data-parallel size, --ep with --zero 3 (ZeRO 1 and 2: test_moe_ep_zero.py).
usage: test_moe_ep.py   (BATCHSCALE in the environment)
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.moe_runs as tm  # noqa: E402  (train, read_ckpt, read_ep_ckpt, check, rel)
from harness.moe_runs import read_ep_ckpt  # noqa: E402

TOL = 1e-5
E = 4
COMMON = tm.EP_COMMON
MODES = [("dropless", ["--dropless"]), ("capacity", ["--capacity-factor", "1.0"])]
# (name, ranks, flags, the one-process oracle's micro-batch): the aux and z losses are over each micro-step's
# data-parallel batch, so 2 micro-steps per step compare with 1 process at 2 micro-steps of 2 sequences.
# Accumulation runs dropless only: under --capacity-factor 1.0 plain data parallelism (2 ranks at micro-batch 1,
# no EP) has left this oracle at step 6 (steps 1-5 within 1e-8, then 1e-5: a near-tied top-k choice decided the
# other way by the dense gemms' row count, not by the rule: test_moe_accum.py), so a capacity run with
# accumulation would test rounding, not EP.
LAYOUTS = [("ep2", 2, ["--micro-batch", "2", "--ep", "2"], 4), ("ep2_dp2", 4, ["--micro-batch", "1", "--ep", "2"], 4),
           ("ep4", 4, ["--micro-batch", "1", "--ep", "4"], 4), ("ep2_accum2", 2, ["--micro-batch", "1", "--ep", "2"], 2)]


def layouts(tmp, data):
    for mode, flags in MODES:
        refs = {m: tm.train(tmp, f"ref{m}_{mode}", data, COMMON + flags + ["--steps", "10", "--micro-batch", str(m)])
                for m in ((4, 2) if mode == "dropless" else (4,))}
        ref, ref_dir = refs[4]
        ref_w = tm.read_ckpt(ref_dir, 10)[0]
        dropped = max(max(r["moe_dropped"]) for r in ref)
        tm.check((dropped > 0) == (mode == "capacity"), f"{mode}: largest dropped share of a step {dropped:.3f}")
        tm.check("moe_a2a_bytes" not in ref[-1], f"{mode}: 1 process reports no all-to-all traffic")
        # the summation-order floor beside each oracle: plain data parallelism at its micro-steps' batches
        floors = {}
        for m, (_, m_dir) in refs.items():
            _, floor_dir = tm.train(tmp, f"dp{m}_{mode}", data, COMMON + flags + ["--steps", "10",
                                                                                "--micro-batch", "1"], ranks=m)
            floors[m] = tm.rel(tm.read_ckpt(floor_dir, 10)[0], tm.read_ckpt(m_dir, 10)[0])
        for name, ranks, extra, oracle in LAYOUTS:
            if oracle != 4 and mode == "capacity":
                continue
            ref, ref_dir = refs[oracle]
            ref_w, ref_b = tm.read_ckpt(ref_dir, 10)
            rows, d = tm.train(tmp, f"{name}_{mode}", data, COMMON + flags + ["--steps", "10"] + extra, ranks=ranks)
            tm.against_oracle(f"{mode}, {name}", rows, ref, read_ep_ckpt(d, 10), (ref_w, ref_b),
                              note=f"; dp {oracle} without EP {floors[oracle]:.1e}",
                              weight_tol=max(TOL, tm.FLOOR_K * floors[oracle]))
            a2a = [r.get("moe_a2a_bytes", 0) for r in rows]
            tm.check(min(a2a) > 0 and all(r["moe_a2a_exposed_ms"] >= 0 for r in rows),
                     f"{mode}, {name}: every step reports its all-to-all bytes (rank 0: {min(a2a)}-{max(a2a)}) "
                     f"and exposed time")


def reshard(tmp, data):
    """ep 2 -> ep 1 (2 ranks) -> 1 process bitwise; ep 2 resumed at step 3 of 6 bitwise."""
    common = COMMON + ["--capacity-factor", "1.25"]
    whole, d = tm.train(tmp, "rs_ep2", data, common + ["--steps", "6", "--micro-batch", "2", "--ep", "2",
                                                       "--ckpt-every", "3", "--keep-last", "0"], ranks=2)
    _, d_ep1 = tm.train(tmp, "rs_dp2", data, common + ["--steps", "3", "--micro-batch", "2",
                                                       "--resume", os.path.join(d, "step_00000003")], ranks=2)
    _, d_one = tm.train(tmp, "rs_one", data, common + ["--steps", "3", "--micro-batch", "4",
                                                       "--resume", os.path.join(d_ep1, "step_00000003")])
    p = subprocess.run([tm.BATCHSCALE, "ckpt", "inspect", os.path.join(d, "step_00000003")], capture_output=True,
                       text=True, timeout=60)
    tm.check(p.returncode == 0 and "ep 2 inside dp" in p.stdout and "each model shard's files tile" in p.stdout,
             f"ckpt inspect verifies the ep 2 checkpoint: {p.stdout.strip().splitlines()[-1] if p.stdout else p.stderr}")
    w_ep2, b_ep2 = read_ep_ckpt(d, 3)
    w_one, b_one = tm.read_ckpt(d_one, 3)
    tm.check(np.array_equal(w_ep2, w_one) and np.array_equal(b_ep2, b_one) and np.abs(b_ep2).max() > 0,
             "checkpoint ep 2 -> ep 1 (2 ranks) -> 1 process: the weights and the bias bit for bit")
    back, d_back = tm.train(tmp, "rs_back", data, common + ["--steps", "6", "--micro-batch", "2", "--ep", "2",
                                                            "--resume", os.path.join(d_one, "step_00000003")],
                            ranks=2)
    w6, b6 = read_ep_ckpt(d, 6)
    w6b, b6b = read_ep_ckpt(d_back, 6)
    same_loss = [r["loss"] for r in whole[3:]] == [r["loss"] for r in back[-3:]]
    tm.check(np.array_equal(w6, w6b) and np.array_equal(b6, b6b) and same_loss,
             "1 process -> ep 2 at step 3 trains on to the uninterrupted ep 2 run's losses and weights bit for bit")


def evaluation(tmp, data):
    """Validation forwards go through the EP layers too: ep 2 equals 2 data-parallel ranks without EP (the same
    validation sequences per rank), and sampling after training runs on the gathered model."""
    val = os.path.join(os.path.dirname(data), "val_000000.bin")
    flags = COMMON + ["--dropless", "--steps", "4", "--micro-batch", "2", "--val-data", val, "--eval-every", "2",
                      "--val-batches", "2"]
    dp, _ = tm.train(tmp, "val_dp2", data, flags, ranks=2)
    ep, _ = tm.train(tmp, "val_ep2", data, flags + ["--ep", "2", "--sample-tokens", "8"], ranks=2)
    a = [r["val_loss"] for r in ep if "val_loss" in r]
    b = [r["val_loss"] for r in dp if "val_loss" in r]
    err = max(abs(x - y) / y for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
    tm.check(len(a) == 2 and err < TOL, f"validation: ep 2 within {TOL} of dp 2 without EP ({err:.1e}), then a sample")


def bad_input(tmp, data):
    cases = [(["--ep", "3"], 1, "the expert-parallel degree 3 must divide the 4 experts (each EP rank holds experts / ep "
                                "of them) (flags: --ep, --experts)"),
             (["--ep", "2"], 1, "the expert-parallel degree 2 does not divide the data-parallel size 1 (expert parallelism folds "
                               "over data-parallel ranks) (flags: --ep, --dp)"),
             (["--ep", "2", "--zero", "3"], 1, "does not work with ZeRO stage 3 (use ZeRO stage 0, 1 or 2) (flags: "
                                              "--experts, --zero)")]
    tm.refusals(tmp, data, cases)


def main():
    tm.run_on_corpus(bad_input, layouts, evaluation, reshard)


if __name__ == "__main__":
    main()
