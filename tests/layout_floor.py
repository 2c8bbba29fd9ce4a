"""layout_floor.py: parallel layouts in a low precision (bf16, FP8) against one process over ten steps of AdamW,
within K x a noise floor measured beside them; shared by tests/test_bf16_train.py and tests/test_fp8_train.py.

The floor: the one process against itself with its sums reordered, the largest relative loss gap over the ten
steps and the largest parameter difference over these runs:
- the same global batches split into smaller micro-batches (the precision's `splits`, in sequences, of 8);
- the same batches with their micro-batches in another order (REORDERINGS of the four pairs of sequences of each
  batch). Why: splitting the batch alone keeps most fp32 sums in their order (biases, LayerNorm and embedding
  gradients accumulate micro-batch after micro-batch into one buffer), while DP's reduction (half-batch sums added)
  is a real reordering; on an AMD EPYC family 26 under AddressSanitizer the splits and the matmul path alone read a
  floor 7x smaller than the normal build's, and TP 2 in bf16 then read 4.1x it;
- where oneDNN runs, the other bf16 matmul path: every product's sums in another order, the kind of change TP makes
  (its partial sums added in another order, then rounded to bf16), which the batch orders alone do not contain;
  once alone and once with each of the splits and orders above, so that this kind is sampled as often as the
  batch kind. Why: on the oneDNN path (fixed blocks) the splits and orders keep most products' sums and read
  small, so the one run of the other path was the floor's only sample of TP's kind, and that kind spreads widely.
  Measured on an AMD EPYC family 26 (Zen 5, avx512_bf16, oneDNN's brg:avx512_core_bf16), 16 seeds: at identical
  parameters TP 2 and the other path move the gradients alike (relative L2 1e-4..6e-4 per tensor at the initial
  weights and after 7 and 8 steps, either one the larger, a tenth or less of bf16's own rounding), yet over ten
  steps the other path alone read 4.9e-6..5e-3 (median 5e-5) and TP 2 9e-6..3e-3 (median 9e-5); the batch-only
  members read under 0.65x the other path alone in 12 of the 16. With the other path alone TP 2 read above 4x
  the floor in 3 of the 16 (8.5x at the test's seed, whose other-path run read 4.9e-6, the lowest); with it at
  every reordering, at most 2.1x (1.7x at the test's seed, floor 1.1e-4).
The data: every run reads the batches as shards of two sequences each (random windows of the corpus) in
--data-order sequential, so that a reordering permutes files and nothing else.

Why K = 4: rounding to bf16 or FP8 amplifies any difference, whatever its size, into the same chaotic spread once
Adam has taken a few steps (a step-1 gradient difference of 1e-7 (micro-batch split) and of 7e-5 (TP 2) both end at
1e-5..5e-4 after the corpus's gradient spike at step 6, at the test's seed; over 16 seeds on the AMD EPYC family 26
the floor's members and TP 2 both spread over 5e-6..6e-3), so the layouts' gaps and the floor's are samples of the
same spread; K = 4 covers the measured worst layout / floor with room (docs/PERFORMANCE.md gives the figures per
CPU), and a real error (a different batch, a wrong learning rate, a stale shard) moves the loss by 1e-2 or more.
That margin is thin at the spread's top (one of the 16 seeds read 6e-3 between the one process's own reorderings),
so the test keeps its one seed, whose spread is at the bottom (floor 1.1e-4 in bf16).
"""
import os

import numpy as np

from bf16_probe import probe
from bstest import batch_shards, concurrently, launch, read_metrics, read_model

DRIVER = os.environ.get("BF16_DRIVER", "build/tests/bf16_driver")
LAYOUTS = {"dp2-zero1": ["--dp", "2", "--zero", "1"], "dp2-zero3": ["--dp", "2", "--zero", "3"], "tp2": ["--tp", "2"],
           "pp2": ["--pp", "2"]}
K = 4  # the bound in units of the measured floor: see above
T, STEPS, PAIRS = 64, 10, 4  # train()'s --seq-len and steps; a global batch of 8 = 4 pairs of sequences
REORDERINGS = ((2, 3, 0, 1), (3, 2, 1, 0), (1, 0, 3, 2))  # of each batch's pairs


def train(data, prefix, ranks=1, extra=(), steps=STEPS, micro=8, val=False):
    """The tests' small model (L4 C64, T 64, global batch 8) on the corpus in `data`: (metrics, parameters,
    model header)."""
    metrics, model = prefix + ".jsonl", prefix + ".bin"
    args = ["train", "--data", os.path.join(data, "train_000000.bin"), "--layers", "4", "--heads", "4",
            "--channels", "64", "--seq-len", str(T), "--micro-batch", str(micro), "--global-batch", "8", "--steps",
            str(steps), "--lr", "3e-3", "--warmup", "2", "--sample-tokens", "0", "--threads", "1", "--quiet",
            "--metrics", metrics, "--save-model", model] + list(extra)
    if val:
        args += ["--val-data", os.path.join(data, "val_000000.bin"), "--eval-every", str(steps), "--val-batches", "8"]
    else:
        args += ["--eval-every", "0"]
    launch(args, ranks)
    header, body = read_model(model)
    return read_metrics(metrics), body, header


def loss_gap(run_metrics, reference):
    """The largest relative loss gap over the steps."""
    return max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(run_metrics, reference))


def param_gap(p, reference):
    return float(np.max(np.abs(p.astype(np.float64) - reference)) / np.max(np.abs(reference)))


def pair_shards(data, out, order=tuple(range(PAIRS)), seq_len=T):
    """The first STEPS global batches as shards of two sequences each (bstest.batch_shards: random windows of the
    corpus, so a sequence's last target is its pair's first token, the same in every run), each batch's pairs in
    `order`; seq_len: the runs' --seq-len (their flags give it where it is not T)."""
    return batch_shards(data, out, order, seq_len, STEPS, per_shard=2)


def floor_runs(test, tag, pairs, splits, seq_len=T, other_path=True):
    """The one process's reorderings: label -> train() keywords (without the precision's flags); other_path False:
    without the other bf16 matmul path (a precision with no bf16 product, where it changes nothing)."""
    batches = {f"micro {m}": dict(micro=m, extra=pairs) for m in splits}
    for order in REORDERINGS:
        label = "pairs " + "".join(map(str, order))
        batches[label] = dict(extra=pair_shards(test.data, test.path(f"{tag}-data{label[6:]}"), order, seq_len))
    runs = dict(batches)
    here = probe(DRIVER)
    if here["available"] and other_path:  # the other matmul path alone and with every batch reordering (see above)
        other = ["--bf16-matmul", "widen" if here["auto"] == "onednn-bf16" else "onednn"]
        runs[" ".join(other)] = dict(extra=pairs + other)
        for label, kw in batches.items():
            runs[f"{label} {' '.join(other)}"] = dict(kw, extra=kw["extra"] + other)
    return runs


class Floor:
    """The one process in the precision `flags` (one: its metrics, one_p: its parameters) on the pair shards
    (pairs: the flags that read them) and the floor of its reorderings (floor_runs), measured here."""

    def __init__(self, test, tag, flags, splits, ran=lambda metrics: None, run_flags=lambda prefix: [], seq_len=T,
                 other_path=True):
        """run_flags(prefix): more flags for the run whose files start with prefix (e.g. a checkpoint directory
        of its own); self.one_prefix and self.prefixes (label -> prefix) name them. seq_len: where flags set
        another --seq-len than T (flags also override train()'s model: the last of a repeated flag wins);
        other_path: as floor_runs'."""
        self.test, self.tag = test, tag
        self.pairs = pair_shards(test.data, test.path(f"{tag}-pairs"), seq_len=seq_len)
        runs = floor_runs(test, tag, self.pairs, splits, seq_len, other_path)
        self.one_prefix = test.path(f"{tag}-one")
        self.prefixes = {label: test.path(f"{tag}-{label.replace(' ', '')}") for label in runs}
        # the one process and its reorderings: independent one-process runs, side by side on the test's cores
        jobs = [lambda: train(test.data, self.one_prefix, extra=self.pairs + flags + run_flags(self.one_prefix))]
        jobs += [lambda label=label, kw=kw: train(test.data, self.prefixes[label], micro=kw.get("micro", 8),
                                                  extra=kw["extra"] + flags + run_flags(self.prefixes[label]))
                 for label, kw in runs.items()]
        (self.one, self.one_p, _), *reordered = concurrently(jobs)
        ran(self.one)
        self.loss = self.param = 0.0
        for label, (m, p, _) in zip(runs, reordered):
            self.loss, self.param = max(self.loss, loss_gap(m, self.one)), max(self.param, param_gap(p, self.one_p))
            print(f"  {tag} floor {label}: loss gap {loss_gap(m, self.one):.2e}, parameters "
                  f"{param_gap(p, self.one_p):.2e}", flush=True)
        test.assertGreater(self.loss, 0, "no reordering of the one-process run changed it: the floor measured nothing")

    def check(self, name, m, p):
        """Another run's metrics m and parameters p within K x the floor of the one process's."""
        self.test.assertEqual(len(m), len(self.one))
        lg, pg = loss_gap(m, self.one), param_gap(p, self.one_p)
        print(f"  {self.tag} {name}: loss gap {lg:.2e} = {lg / self.loss:.2f} x floor, parameters {pg:.2e} = "
              f"{pg / self.param:.2f} x floor", flush=True)
        self.test.assertLessEqual(lg, K * self.loss, f"{self.tag} {name}: loss gap {lg:.3g} > {K} x floor {self.loss:.3g}")
        self.test.assertLessEqual(pg, K * self.param,
                                  f"{self.tag} {name}: parameters {pg:.3g} > {K} x floor {self.param:.3g}")


def check_layouts(test, tag, flags, splits, ran=lambda metrics: None):
    """Every layout of LAYOUTS in the precision `flags` within K x the floor (loss gap and parameters); `ran` checks
    a run's metrics showed the precision at work."""
    floor = Floor(test, tag, flags, splits, ran)
    for name, extra in LAYOUTS.items():
        m, p, _ = train(test.data, test.path(f"{tag}-{name}"), ranks=2, micro=2, extra=extra + floor.pairs + flags)
        ran(m)
        floor.check(name, m, p)
