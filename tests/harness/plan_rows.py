"""plan_rows.py: the published runs of tests/data/plan_validation.tsv as rows, and the planner's prediction of
each in the quantity its source reports (plan_validation checks them against the validation doc; plan_stacks runs
them with only what a user would type)."""
import csv
import json
import os
import subprocess

BATCHSCALE = os.environ.get("BATCHSCALE", "build/batchscale")
ROWS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "plan_validation.tsv")
HALVES = ("calibration", "held-out", "fresh held-out", "fresh held-out 2")


class Row:
    """One published run of tests/data/plan_validation.tsv: its columns by name, the flags both as the
    command-line tokens given to the planner and as a dict (a flag without a value maps to None)."""

    def __init__(self, fields):
        missing = [k for k in ("id", "half", "source", "metric", "published", "flags") if not fields.get(k)]
        if missing:
            raise AssertionError(f"{ROWS_FILE}: row {fields.get('id')}: no {', '.join(missing)}")
        self.id, self.half, self.source, self.metric = fields["id"], fields["half"], fields["source"], fields["metric"]
        self.published = float(fields["published"])
        self.args = fields["flags"].split()
        self.flags = {}
        for i, token in enumerate(self.args):
            if token.startswith("--"):
                value = self.args[i + 1] if i + 1 < len(self.args) and not self.args[i + 1].startswith("--") else None
                self.flags[token[2:]] = value


def load_rows(path=ROWS_FILE):
    """The rows of the data file, in its order; '#' lines are comments, the first other line is the header."""
    with open(path) as f:
        lines = (line for line in f if not line.startswith("#"))
        rows = [Row(fields) for fields in csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)]
    ids = [row.id for row in rows]
    for row in rows:
        if row.half not in HALVES:
            raise AssertionError(f"{path}: {row.id}: half '{row.half}' is not one of {', '.join(HALVES)}")
        if ids.count(row.id) > 1:
            raise AssertionError(f"{path}: row id {row.id} appears more than once")
    return rows


ALL_ROWS = load_rows()


UNITS = {"megatron_tflops": "TFLOP/s", "megatron_mfu": "MFU", "model_tflops": "TFLOP/s", "step_seconds": "s/step",
         "tokens_per_gpu": "tokens/s/GPU"}


def plan_args(row):
    return ["plan", "--search", "--top", "1", "--json"] + row.args


def run_plan(row):
    """The planner's JSON for a row. A layout its memory model rejects (the search finds no layout that fits)
    is planned once more as given, without --search, which reports the plan and then exits non-zero saying it
    does not fit: the row is still predicted, and marked (fits false) as the memory model's miss."""
    rid = row.id
    args = plan_args(row)
    p = subprocess.run([BATCHSCALE] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0 and "does not fit" in p.stderr:
        args = [a for a in args if a != "--search"]
        p = subprocess.run([BATCHSCALE] + args, capture_output=True, text=True, timeout=300)
        if "this layout does not fit" in p.stderr and p.stdout.strip():
            return json.loads(p.stdout)
    if p.returncode != 0:
        raise AssertionError(f"{rid}: batchscale failed:\n{p.stderr}")
    return json.loads(p.stdout)


def predict(row):
    metric = row.metric
    j = run_plan(row)
    plan = j["plan"]
    step, gpus = plan["step_time"]["step"], plan["gpus"]
    m = j["model"]
    B, s, l, h, V = plan["batch_tokens"] / m["seq_len"], m["seq_len"], m["layers"], m["hidden"], m["vocab"]
    if metric == "megatron_tflops":
        value = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / step / gpus / 1e12
    elif metric == "megatron_mfu":
        value = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) / step / gpus / j["fleet"][0]["peak_flops"]
    elif metric == "model_tflops":
        value = m["flops_per_token"] * plan["batch_tokens"] / step / gpus / 1e12
    elif metric == "tokens_per_gpu":
        value = plan["batch_tokens"] / step / gpus
    else:
        value = step
    layout = plan["layout"]["text"]
    if not plan["fits"]:
        mem = plan["memory"]
        layout += (f" (does not fit: {(mem['total'] - mem['reserve']) / 2 ** 30:.1f} of "
                   f"{(mem['capacity'] - mem['reserve']) / 2 ** 30:.1f} GiB)")
    return value, layout, plan["fits"]


def error(metric, predicted, published):
    """Predicted throughput over published throughput, minus one."""
    if metric == "step_seconds":
        return published / predicted - 1
    return predicted / published - 1
