#!/usr/bin/python3
"""test_device_moe.py: MoE layers on a device (`train --device sim|cuda --experts`: model/moe_device.h, the
DK_MOE_* kernels of device/moe_math.h) against one CPU process.

`test_device_moe.py sim` (every machine) and `test_device_moe.py cuda` (a GPU; skipped with exit 77 and the reason
where none answers, a failure under BS_REQUIRE_GPU=1):
1. Equal to the CPU over 10 steps of 2 micro-steps, for (a) the softmax router, top 2, normalized gates, the aux
   and z losses and loss-free balancing (--moe-bias-update), and (b) the sigmoid router, top 1, unnormalized gates
   times --moe-routed-scale, --moe-every 2 (a dense layer and an MoE one): losses, aux and z losses within 1e-5
   (relative) at every step, every step's loads and dropped shares equal, the final weights within 1e-5 (max
   |a-b| / max |b|, read from the checkpoints) and the balancing bias equal (harness/moe_runs.against_oracle);
   the validation losses at steps 5 and 10 within 1e-5 (the device routes them with the bias the update moved).
2. Bad input, one line each: what the device does not run yet with --experts: --capacity-factor, --cuda-graphs on.
3. `test_device_moe.py sim ranks` (the layouts tier: mpirun): 2 data-parallel ranks on the device (each
   micro-step's statistics all-reduced over them) at ZeRO 0 and 2 against the CPU's 2 ranks, as 1 with case
   (a)'s flags. Expert parallelism on the device (model/moe_device_exchange.h), dropless at ZeRO 0: ep 2
   (2 ranks, micro-batch 2), ep 2 x dp 2 and ep 4 (4 ranks, micro-batch 1) against 1 CPU process at micro-batch 4
   (one micro-step of the same 4 sequences); at ZeRO 1 (each rank updating its pieces: its part of the dense
   ranges over the data group, of the expert ranges over the expert-data group) ep 2 and ep 2 x dp 2, and ep 2
   at ZeRO 2, the same; and ep 2 at micro-batch 1 (2 micro-steps) against 1 process at
   micro-batch 2, as 1 with case (a)'s flags and --eval-every 5 (the validation
   forwards move rows too): losses within 1e-5, loads equal, final weights (read from the ep shards) within 1e-5,
   bias equal; the validation losses within 1e-5 of the CPU's run at the same layout (each rank validates its
   own sequences, so 1 process's differ); each step's moe_a2a_bytes above 0 and at most the CPU's (the CPU
   also moves each row's score and position). The ep 2 runs' (ZeRO 0 and 1) step 5, resumed by 1 CPU process with
   nothing left to train, is saved again with the same weights and bias bit for bit, and the same layout on the
   device resumed from that copy ends steps 6-10 as the uninterrupted run, bit for bit.
usage: test_device_moe.py sim|cuda [ranks]   (BATCHSCALE in the environment)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.moe_runs as tm  # noqa: E402
from harness.device_runs import device_answers, device_from_argv  # noqa: E402

DEVICE = device_from_argv()
COMMON = ["--seq-len", "32", "--micro-batch", "2", "--global-batch", "4", "--lr", "3e-3", "--warmup", "2",
          "--steps", "10", "--moe-z-loss", "1e-3"]
CASES = [("softmax top-2, bias update", ["--moe-bias-update", "1e-3"]),
         ("sigmoid top-1, moe-every 2", ["--router", "sigmoid", "--moe-top-k", "1", "--moe-gates", "unnormalized",
                                         "--moe-routed-scale", "2.5", "--moe-every", "2"])]


def equal_to_cpu(tmp, data):
    val = ["--eval-every", "5", "--val-data", data.replace("train_", "val_"), "--val-batches", "2"]
    for i, (name, flags) in enumerate(CASES):
        ref, ref_dir = tm.train(tmp, f"cpu{i}", data, COMMON + flags + val)
        rows, d = tm.train(tmp, f"dev{i}", data, COMMON + flags + val + ["--device", DEVICE])
        tm.against_oracle(f"--device {DEVICE}, {name}", rows, ref, tm.read_ckpt(d, 10), tm.read_ckpt(ref_dir, 10),
                          keys=("loss", "moe_aux_loss", "moe_z_loss"))
        got, want = ([r["val_loss"] for r in x if "val_loss" in r] for x in (rows, ref))
        err = max(abs(a - b) / b for a, b in zip(got, want)) if got and len(got) == len(want) else float("inf")
        tm.check(len(got) == 2 and err < tm.TOL, f"--device {DEVICE}, {name}: validation losses within {tm.TOL} "
                 f"({err:.1e})")


def refusals(tmp, data):
    dev = ["--device", DEVICE]
    tm.refusals(tmp, data, [(dev + ["--capacity-factor", "1.25"], 1, "not with --capacity-factor"),
                            (dev + ["--cuda-graphs", "on"], 1, "not with --cuda-graphs on")])


def data_parallel(tmp, data):
    name, flags = CASES[0]
    for zero in ("0", "2"):
        dp2 = COMMON + flags + ["--micro-batch", "1", "--zero", zero]
        ref, ref_dir = tm.train(tmp, f"cpu_dp2_zero{zero}", data, dp2, ranks=2)
        rows, d = tm.train(tmp, f"dev_dp2_zero{zero}", data, dp2 + ["--device", DEVICE], ranks=2)
        tm.against_oracle(f"--device {DEVICE} on 2 data-parallel ranks at ZeRO {zero}, {name}", rows, ref,
                          tm.read_ckpt(d, 10), tm.read_ckpt(ref_dir, 10), keys=("loss", "moe_aux_loss", "moe_z_loss"))


def validation_losses(rows):
    return [r["val_loss"] for r in rows if "val_loss" in r]


def resumed_on_one_cpu_process(tmp, data, label, tag, common, device, rows, d):
    """Step 5 of the device ep run d, resumed by 1 CPU process with nothing left to train, is saved again with the
    same weights and bias; the device layout resumed from that copy trains on to run d's steps 6-10 and step 10 bit
    for bit."""
    _, one = tm.train(tmp, f"cpu_copy_{tag}", data, common + ["--micro-batch", "4", "--steps", "5", "--resume",
                                                           os.path.join(d, "step_00000005")])
    (w, b), (w1, b1) = tm.read_ep_ckpt(d, 5), tm.read_ckpt(one, 5)
    tm.check(np.array_equal(w, w1) and np.array_equal(b, b1) and np.abs(b).max() > 0,
             f"{label}: its step 5 resumed by 1 CPU process saves the same weights and bias bit for bit")
    back, d_back = tm.train(tmp, f"dev_back_{tag}", data, common + device + ["--resume", os.path.join(one, "step_00000005")],
                            ranks=2)
    (w10, b10), (w10b, b10b) = tm.read_ep_ckpt(d, 10), tm.read_ep_ckpt(d_back, 10)
    same = [r["loss"] for r in rows[5:]] == [r["loss"] for r in back[-5:]]
    tm.check(same and np.array_equal(w10, w10b) and np.array_equal(b10, b10b),
             f"{label}: resumed on the device from that copy, steps 6-10 and step 10's weights and bias bit for bit")


# (layout, ranks, flags, the 1-process oracle's micro-batch; ep 4: one expert per rank, so a rank whose expert no
# row chose sends nothing back): the aux and z losses are over each micro-step's
# data-parallel batch, so 2 micro-steps of 2 sequences (ep 2 at micro-batch 1) compare with micro-batch 2.
EP_LAYOUTS = [("ep 2", 2, ["--micro-batch", "2", "--ep", "2"], 4), ("ep 2 x dp 2", 4, ["--micro-batch", "1", "--ep", "2"], 4),
              ("ep 4", 4, ["--micro-batch", "1", "--ep", "4"], 4),
              ("ep 2 at ZeRO 1", 2, ["--micro-batch", "2", "--ep", "2", "--zero", "1"], 4),
              ("ep 2 x dp 2 at ZeRO 1", 4, ["--micro-batch", "1", "--ep", "2", "--zero", "1"], 4),
              ("ep 2 at ZeRO 2", 2, ["--micro-batch", "2", "--ep", "2", "--zero", "2"], 4),
              ("ep 2, 2 micro-steps", 2, ["--micro-batch", "1", "--ep", "2"], 2)]


def expert_parallel(tmp, data):
    name, flags = CASES[0]
    common = COMMON + flags + ["--eval-every", "5", "--val-data", data.replace("train_", "val_"), "--val-batches", "2"]
    oracles = {}
    for micro in (4, 2):
        ref, ref_dir = tm.train(tmp, f"cpu_ep_oracle{micro}", data, common + ["--micro-batch", str(micro)])
        oracles[micro] = ref, tm.read_ckpt(ref_dir, 10)
    for layout, ranks, extra, micro in EP_LAYOUTS:
        label = f"--device {DEVICE} at {layout}, {name}"
        tag = "".join(c for c in layout if c.isalnum())
        device = extra + ["--device", DEVICE]
        rows, d = tm.train(tmp, f"dev_{tag}", data, common + device + ["--ckpt-every", "5", "--keep-last", "0"],
                           ranks=ranks)
        tm.against_oracle(label, rows, oracles[micro][0], tm.read_ep_ckpt(d, 10), oracles[micro][1],
                          keys=("loss", "moe_aux_loss", "moe_z_loss"))
        cpu_rows, _ = tm.train(tmp, f"cpu_{tag}", data, common + extra, ranks=ranks)
        against_cpu_layout(label, layout, rows, cpu_rows)
        if layout in ("ep 2", "ep 2 at ZeRO 1"):
            resumed_on_one_cpu_process(tmp, data, label, tag, common, device, rows, d)


def against_cpu_layout(label, layout, rows, cpu_rows):
    """The validation losses within TOL of the CPU's run at the same layout, and each step's all-to-all bytes above
    0 and at most the CPU's (which also moves each row's metadata)."""
    got, want = validation_losses(rows), validation_losses(cpu_rows)
    err = max(abs(a - b) / b for a, b in zip(got, want)) if got and len(got) == len(want) else float("inf")
    tm.check(len(got) == 2 and err < tm.TOL, f"{label}: validation losses within {tm.TOL} of the CPU's {layout} "
             f"({err:.1e}; each rank validates its own sequences)")
    sent, cpu_sent = ([r.get("moe_a2a_bytes", 0) for r in x] for x in (rows, cpu_rows))
    tm.check(len(sent) == len(cpu_sent) and all(0 < a <= b for a, b in zip(sent, cpu_sent)),
             f"{label}: every step's all-to-all bytes, at most the CPU's (which also moves each row's metadata): "
             f"{min(sent)}-{max(sent)} against {min(cpu_sent)}-{max(cpu_sent)}")


if __name__ == "__main__":
    why = device_answers(DEVICE)
    if why:
        required = os.environ.get("BS_REQUIRE_GPU") == "1"
        print(("FAIL (BS_REQUIRE_GPU=1): " if required else "skipped: ") + why)
        sys.exit(1 if required else 77)
    if sys.argv[1:] == ["ranks"]:
        tm.run_on_corpus(data_parallel, expert_parallel)
    else:
        tm.run_on_corpus(equal_to_cpu, refusals)
