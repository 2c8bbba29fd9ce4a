"""model_parallel_runs.py: the model-parallel tests' model (L layers, H heads, C channels, T positions, V
tokens, VP padded) and its training run (test_model_parallel.py, test_pipeline_schedules.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bstest import layout_run  # noqa: E402

L, H, C, T, V = 4, 4, 32, 32, 257
VP = 384


def train(data, prefix, ranks=1, extra=(), steps=10, micro=2, check=True):
    shape = ["--layers", str(L), "--heads", str(H), "--channels", str(C), "--seq-len", str(T)]
    return layout_run(data, prefix, shape, ranks, extra, steps, micro, check)
