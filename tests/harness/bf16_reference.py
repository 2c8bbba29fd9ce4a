"""bf16_reference.py: the 300-step bf16 run on the shipped corpus that two convergence tests compare with:
bf16_train_convergence (bf16 against fp32) runs it once per ctest run, into the directory of the CTest fixture
bf16_300 ($BS_BF16_300), and fp8_train_convergence (the FP8 recipes against bf16) reads it there; run by hand
without the fixture, fp8_train_convergence runs it itself. The same bits either way: the run has its own process
and one thread, and its arguments are the same."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bstest import read_metrics  # noqa: E402
from layout_floor import train  # noqa: E402

STEPS = 300
SMALL = ["--layers", "2", "--channels", "64"]  # layout_floor's model with 2 layers
BF16 = ["--precision", "bf16"]


def convergence_run(data, prefix, extra=()):
    """One of the convergence tests' runs: (metrics, parameters, model header)."""
    return train(data, prefix, steps=STEPS, val=True, extra=SMALL + list(extra))


def shared_prefix():
    """Where the fixture's bf16 run writes its files (None outside the fixture)."""
    directory = os.environ.get("BS_BF16_300")
    return os.path.join(directory, "bf16") if directory else None


def bf16_metrics(data, scratch):
    """The bf16 run's metrics: the fixture's, or run here into `scratch` when there is none."""
    prefix = shared_prefix()
    if prefix and os.path.isfile(prefix + ".jsonl"):
        print(f"  bf16: the run of the fixture bf16_300 ({prefix}.jsonl)", flush=True)
        return read_metrics(prefix + ".jsonl")
    return convergence_run(data, os.path.join(scratch, "bf16"), BF16)[0]
