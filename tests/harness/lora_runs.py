"""lora_runs.py: the LoRA tests' training run on a small corpus (test_lora.py, test_nf4.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bstest import launch, read_metrics, read_model  # noqa: E402


def train(d, name, extra, ranks=1, check_rc=True, global_batch=8, threads=1):
    """The LoRA tests' run on the corpus in d (test_lora.py's and test_nf4.py's): (metrics, final model), or with check_rc=False
    the CompletedProcess."""
    metrics, model = os.path.join(d, name + ".jsonl"), os.path.join(d, name + ".bin")
    args = ["train", "--data", os.path.join(d, "data", "train_000000.bin"), "--seq-len", "32",
            "--micro-batch", "2", "--global-batch", str(global_batch), "--lr", "3e-3", "--warmup", "2",
            "--eval-every", "0", "--sample-tokens", "0", "--threads", str(threads), "--comm-timeout", "60", "--quiet",
            "--metrics", metrics, "--save-model", model] + extra
    p = launch(args, ranks, check=check_rc)
    if not check_rc:
        return p
    return read_metrics(metrics), read_model(model)[1]
