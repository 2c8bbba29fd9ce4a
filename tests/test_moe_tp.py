#!/usr/bin/python3
"""test_moe_tp.py: MoE models under tensor and context parallelism, alone and with expert parallelism.

Under --tp every rank of a tensor-parallel group routes the same tokens and holds a slice of each expert's hidden
units (fc rows, fcproj columns; the router and the fcproj bias whole, the bias added by tp rank 0), so the layer's
output is summed over the group like the dense MLP's. Under --cp each rank routes its part of every sequence and
the balance statistics are summed over the dp x cp ranks.

1. Layouts against 1 process at the same global batch over 10 steps: tp 2, tp 2 x ep 2 (4 ranks), tp 2 x ep 4
   (8 ranks), cp 2 and cp 2 x ep 2 (4 ranks). Losses and aux losses within 1e-5 (relative), every step's loads and dropped shares
   equal, final weights within 1e-5 (max |a-b| / max |b|) and the balancing bias equal. The tensor-parallel
   layouts run dropless and under a capacity factor that drops, with AdamW; context parallelism dropless only (a
   sequence's capacity decision would span its cp ranks: refused), under SGD (why: beside LAYOUTS). A checkpoint of any layout is read here by resuming it on
   1 process with nothing left to train (the resumed run writes the state it read).
2. Reshard: tp 2 x ep 2 at step 3 -> 1 process -> tp 2 x ep 2 again trains on to the uninterrupted run's losses
   and weights bit for bit.
3. Bad input, one line each: --tp not dividing --moe-ffn, --cp with --capacity-factor.
usage: test_moe_tp.py   (BATCHSCALE in the environment)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.moe_runs as tm  # noqa: E402  (train, read_ckpt, check, rel)

COMMON = ["--global-batch", "4", "--lr", "3e-3", "--warmup", "2", "--moe-z-loss", "1e-3",
          "--moe-bias-update", "1e-3"]
MODES = [("dropless", ["--dropless"]), ("capacity", ["--capacity-factor", "1.0"])]
# The runs' settings, shared with their 1-process oracle. Context parallelism needs 64-token chunks (2 cp ranks x 2
# zigzag halves: 256 tokens) and is compared under SGD: AdamW divides by sqrt(v) + eps, so an expert weight whose
# gradient is ~1e-9 (a hidden unit GELU rarely opens) moves by lr times a ratio of two rounding-sized numbers, and
# the attention's different summation order under cp shows there: 8.7e-6 for cp 2 x dp 2 without EP, 1.0e-5 with
# (one fc weight of one expert; losses within 4e-9). Under SGD the same runs agree to 3e-7.
SHORT = ["--seq-len", "32"]
LONG_SGD = ["--seq-len", "256", "--optimizer", "sgd", "--lr", "0.3"]
# (name, ranks, flags, modes, setting): micro-batch x data-parallel replicas = the global batch 4 in one micro-step.
LAYOUTS = [("tp2", 2, ["--tp", "2", "--micro-batch", "4"], ("dropless", "capacity"), SHORT),
           ("tp2_ep2", 4, ["--tp", "2", "--ep", "2", "--micro-batch", "2"], ("dropless", "capacity"), SHORT),
           ("tp2_ep4", 8, ["--tp", "2", "--ep", "4", "--micro-batch", "1"], ("capacity",), SHORT),
           ("cp2", 2, ["--cp", "2", "--micro-batch", "4"], ("dropless",), LONG_SGD),
           ("cp2_ep2", 4, ["--cp", "2", "--ep", "2", "--micro-batch", "2"], ("dropless",), LONG_SGD)]


def weights(tmp, name, data, flags, ckpt_dir, step):
    """The logical weights and bias of a checkpoint of any layout: resumed on 1 process, nothing left to train."""
    _, d = tm.train(tmp, name, data, flags + ["--steps", str(step), "--micro-batch", "4",
                                              "--resume", os.path.join(ckpt_dir, f"step_{step:08d}")])
    return tm.read_ckpt(d, step)


# Under AdamW the final weights carry the summation-order floor the cp comment above describes, whose size depends on
# how this CPU's BLAS orders its sums (an AMD EPYC family 26 read tp 2 x ep 2 at 1.1e-5 where an Intel Xeon read
# less). So beside each AdamW reference the same run on 2 data-parallel ranks (no TP, no EP: only the order of the
# gradient sum changes) measures that floor in this run, and the weights' bound is the larger of TOL and
# tm.FLOOR_K x it (why 4: harness/moe_runs.py). The losses, the loads and the dropped shares stay at TOL and exact.


def layouts(tmp, data):
    for mode, mode_flags in MODES:
        refs, floors = {}, {}
        for name, ranks, extra, modes, setting in LAYOUTS:
            if mode not in modes:
                continue
            flags = mode_flags + setting
            key = " ".join(setting)
            if key not in refs:
                refs[key] = tm.train(tmp, f"ref_{mode}_{len(refs)}", data, COMMON + flags + ["--steps", "10",
                                                                                            "--micro-batch", "4"])
                dropped = max(max(r["moe_dropped"]) for r in refs[key][0])
                tm.check((dropped > 0) == (mode == "capacity"),
                         f"{mode}, {key}: largest dropped share of a step {dropped:.3f}")
                if setting is SHORT:  # AdamW
                    _, floor_dir = tm.train(tmp, f"dp2_{mode}_{len(refs)}", data, COMMON + flags +
                                            ["--steps", "10", "--micro-batch", "2"], ranks=2)
                    floors[key] = tm.rel(tm.read_ckpt(floor_dir, 10)[0], tm.read_ckpt(refs[key][1], 10)[0])
            ref, ref_dir = refs[key]
            ref_w, ref_b = tm.read_ckpt(ref_dir, 10)
            rows, d = tm.train(tmp, f"{name}_{mode}", data, COMMON + flags + ["--steps", "10"] + extra, ranks=ranks)
            w, b = weights(tmp, f"{name}_{mode}_read", data, COMMON + flags, d, 10)
            floor = floors.get(key)
            tm.against_oracle(f"{mode}, {name}", rows, ref, (w, b), (ref_w, ref_b),
                              note="" if floor is None else f"; dp 2 without TP or EP {floor:.1e}",
                              weight_tol=tm.TOL if floor is None else max(tm.TOL, tm.FLOOR_K * floor))


def reshard(tmp, data):
    """tp 2 x ep 2 -> 1 process at step 3 -> tp 2 x ep 2 to step 6, bitwise against the uninterrupted run."""
    flags = COMMON + ["--capacity-factor", "1.25", "--seq-len", "32"]
    layout = ["--tp", "2", "--ep", "2", "--micro-batch", "2"]
    whole, d = tm.train(tmp, "rs_whole", data, flags + layout + ["--steps", "6", "--ckpt-every", "3",
                                                                 "--keep-last", "0"], ranks=4)
    _, d_one = tm.train(tmp, "rs_one", data, flags + ["--steps", "3", "--micro-batch", "4",
                                                      "--resume", os.path.join(d, "step_00000003")])
    back, d_back = tm.train(tmp, "rs_back", data, flags + layout + ["--steps", "6", "--resume",
                                                                    os.path.join(d_one, "step_00000003")], ranks=4)
    w6, b6 = weights(tmp, "rs_whole_read", data, flags, d, 6)
    w6b, b6b = weights(tmp, "rs_back_read", data, flags, d_back, 6)
    same_loss = [r["loss"] for r in whole[3:]] == [r["loss"] for r in back[-3:]]
    tm.check(np.array_equal(w6, w6b) and np.array_equal(b6, b6b) and same_loss and np.abs(b6).max() > 0,
             "tp 2 x ep 2 -> 1 process -> tp 2 x ep 2 at step 3 trains on to the uninterrupted run bit for bit")


def bad_input(tmp, data):
    cases = [(["--seq-len", "32", "--tp", "2", "--moe-ffn", "33"], "the tensor-parallel degree 2 does not divide the experts' "
                                                                   "33 hidden units (tensor parallelism splits each expert's "
                                                                   "hidden units) (flags: --tp, --moe-ffn)"),
             (["--seq-len", "256", "--cp", "2", "--capacity-factor", "1.0"], "does not work with context parallelism and a "
                                                                             "capacity factor")]
    tm.refusals(tmp, data, [(extra, 1, text) for extra, text in cases], base=["--steps", "1"])


def main():
    tm.run_on_corpus(bad_input, layouts, reshard)


if __name__ == "__main__":
    main()
