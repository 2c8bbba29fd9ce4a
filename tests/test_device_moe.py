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
2. Bad input, one line each: what the device does not run yet with --experts: --capacity-factor, --ep.
3. `test_device_moe.py sim ranks` (the layouts tier: mpirun): 2 data-parallel ranks on the device (each
   micro-step's statistics all-reduced over them) at ZeRO 0 and 2 against the CPU's 2 ranks, as 1 with case
   (a)'s flags.
usage: test_device_moe.py sim|cuda [ranks]   (BATCHSCALE in the environment)
"""
import os
import sys

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
                            (dev + ["--ep", "2"], 1, "not with --ep")])


def data_parallel(tmp, data):
    name, flags = CASES[0]
    for zero in ("0", "2"):
        dp2 = COMMON + flags + ["--micro-batch", "1", "--zero", zero]
        ref, ref_dir = tm.train(tmp, f"cpu_dp2_zero{zero}", data, dp2, ranks=2)
        rows, d = tm.train(tmp, f"dev_dp2_zero{zero}", data, dp2 + ["--device", DEVICE], ranks=2)
        tm.against_oracle(f"--device {DEVICE} on 2 data-parallel ranks at ZeRO {zero}, {name}", rows, ref,
                          tm.read_ckpt(d, 10), tm.read_ckpt(ref_dir, 10), keys=("loss", "moe_aux_loss", "moe_z_loss"))


if __name__ == "__main__":
    why = device_answers(DEVICE)
    if why:
        required = os.environ.get("BS_REQUIRE_GPU") == "1"
        print(("FAIL (BS_REQUIRE_GPU=1): " if required else "skipped: ") + why)
        sys.exit(1 if required else 77)
    if sys.argv[1:] == ["ranks"]:
        tm.run_on_corpus(data_parallel)
    else:
        tm.run_on_corpus(equal_to_cpu, refusals)
