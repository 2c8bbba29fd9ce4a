#!/usr/bin/env python3
"""bench_schedule_race.py: batch schedules raced to a target loss without the
timing noise (issue 21's goal: goodput ahead of the best constant batch and the
best ramp).

On 2 cores the scatter of measured step times between repetitions (2-7%) and
of one seed's trajectory (5-15% in steps) is as large as the gaps between
schedules, so one timed run per schedule decides nothing. Here each schedule
is run to the target on 2 local processes once per seed (the runs are
deterministic), and each step is priced by the setting's step-time line
t = A + B x batch, fitted to that model's runs with the 2 ranks on two test
hosts over the 100 Mb/s link (docs/BATCH_SCALING.md): the trajectories are
real, the clock is the link's. Goodput follows the setting's local critical
batches along the loss (`batch-sweep --along`) at the lr schedule's
temperature and is given the same line (`--goodput-time-model`), so its
choices are those a perfectly measured line gives.

Per setting it prints each schedule's modelled seconds, tokens and steps to
the target per seed, the mean and standard deviation over the seeds, goodput's
paired difference (by seed) from the best constant and from the best ramp with
its standard error, and PASS when goodput's mean is below both.

usage: bench_schedule_race.py BATCHSCALE OUT_JSON   (env BS_RACE_SETTINGS=kjv-half,kjv-demo,vim-demo
       to choose settings, BS_RACE_SEEDS=1337,1,2,3 the seeds, BS_RACE_ONLY="constant 32|goodput:8:32" some
       schedules only)"""
import json
import math
import os
import sys
import tempfile

import bench_critical_batch as bcb

# Schedules: name -> (--global-batch, --batch-schedule, extra flags); goodput's flags are the setting's.
CONSTANTS = lambda *bs: {f"constant {b}": (b, "constant", []) for b in bs}
RAMPS = {"ramp 8->32 over 64K": (32, "ramp:8:8:65536", []), "ramp 8->64 over 64K": (64, "ramp:8:8:65536", [])}


def goodput_flags(curve, line):
    return ["--goodput-noise-curve", curve, "--goodput-temperature", "--goodput-time-model", f"{line[0]}:{line[1]}"]


# Settings: corpus, model, target validation loss, the step-time line (A s, B s per sequence) on the 100 Mb/s link,
# the local critical batches along the loss (`batch-sweep --along`, docs/BATCH_SCALING.md: "Along the loss"), the
# constant batches raced and goodput's MAX values (on the demo model also 32: where its steps stop falling). The half width's line is fitted to its link runs, the demo model's to the Zen 5 link
# runs of constant 16 and 32 (it reproduces them and the ramp within 2%); Vim's manual uses the demo model's line
# (the same model: a step's time does not depend on the text), and its curve is `bench_critical_batch.py`'s sweep
# (lr 2e-3 for every batch, BS_BENCH_LRS=) along 3.0 and 2.7 (its middle stretch's 142 lies past the batches measured).
RACES = {
    "kjv-half": ("kjv", bcb.HALF, 2.3, (0.21, 0.003), "2.8:9.23,2.5:15.1,2.3:18.9", (24, 32, 40, 48), (64,)),
    "kjv-demo": ("kjv", bcb.DEMO, 2.45, (0.78, 0.007), "2.95:8.81,2.65:5.31,2.45:38.1", (16, 24, 32, 40, 48), (64, 32)),
    "vim-demo": ("vim", bcb.DEMO, 2.5, (0.78, 0.007), "3:11.3,2.7:142,2.5:23.6", (24, 32, 48, 64), (64,)),
}


def race(bs, data, model, target, line, curve, constants, maxima, seeds, tmp):
    """{schedule: {seed: (seconds, tokens, steps) or None}} with each step priced A + B x its batch."""
    table = dict(CONSTANTS(*constants), **RAMPS)
    for top in maxima:
        table[f"goodput:8:{top}"] = (top, f"goodput:8:{top}", goodput_flags(curve, line))
    only = [k for k in os.environ.get("BS_RACE_ONLY", "").split("|") if k]
    table = {k: v for k, v in table.items() if not only or k in only}
    priced = lambda x: line[0] + line[1] * x["batch"]
    rows = {}
    for name, (final, schedule, flags) in table.items():
        rows[name] = {}
        for seed in seeds:
            path = os.path.join(tmp, f"{name.replace(' ', '_').replace(':', '_').replace('>', '')}_{seed}.jsonl")
            m, _ = bcb.train(bs, data, model, target, ["--global-batch", str(final), "--batch-schedule", schedule,
                                                       "--eval-every", "2", "--seed", seed] + flags, 2, path)
            rows[name][seed] = bcb.to_target(m, target, priced)
        print("    " + f"{name:22s} " + " ".join(f"{h[0]:6.1f}" if h else "  miss" for h in rows[name].values()) +
              "  " + summary(rows[name].values()), flush=True)
    return rows


def mean_sd(xs):
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return mean, sd


def summary(hits):
    hits = list(hits)
    if any(h is None for h in hits):
        return "(target missed by some seed)"
    (s, sd), (steps, _) = mean_sd([h[0] for h in hits]), mean_sd([h[2] for h in hits])
    return f"mean {s:.1f} s (sd {sd:.1f}), {steps:.1f} steps"


def paired(a, b):
    """Mean and standard error of a's seconds minus b's, seed by seed."""
    d = [a[k][0] - b[k][0] for k in a]
    mean, sd = mean_sd(d)
    return mean, sd / math.sqrt(len(d))


def verdict(rows):
    """Each goodput schedule's paired differences from the best constant and the best ramp (by mean seconds),
    and PASS when its mean is below both."""
    means = {k: mean_sd([h[0] for h in v.values()])[0] for k, v in rows.items() if all(h for h in v.values())}
    best = lambda prefix: min((k for k in means if k.startswith(prefix)), key=means.get, default=None)
    const, ramp = best("constant"), best("ramp")
    out = {}
    for name in (k for k in rows if k.startswith("goodput")):
        if name not in means or const is None or ramp is None:
            out[name] = dict(word="MISS (a seed did not reach the target)")
            continue
        dc, dr = paired(rows[name], rows[const]), paired(rows[name], rows[ramp])
        word = "PASS" if means[name] < min(means[const], means[ramp]) else "MISS"
        out[name] = dict(word=word, best_constant=const, best_ramp=ramp, minus_constant=dc, minus_ramp=dr)
        print(f"  {name}: {means[name]:.1f} s; minus {const} {dc[0]:+.1f} s (se {dc[1]:.1f}), minus {ramp} "
              f"{dr[0]:+.1f} s (se {dr[1]:.1f}): {word}", flush=True)
    return out


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    settings = os.environ.get("BS_RACE_SETTINGS", ",".join(RACES)).split(",")
    seeds = os.environ.get("BS_RACE_SEEDS", "1337,1,2,3").split(",")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in settings:
            corpus_name, model, target, line, curve, constants, maxima = RACES[name]
            data = bcb.corpus(bs, tmp, corpus_name)
            print(f"{name}: {' '.join(model)} to validation loss {target}, step {line[0]} + {line[1]} x batch s, "
                  f"goodput's curve {curve}; seconds per seed {','.join(seeds)}:", flush=True)
            rows = race(bs, data, model, target, line, curve, constants, maxima, seeds, tmp)
            results[name] = dict(line=line, curve=curve, seeds=seeds, runs=rows, goodput=verdict(rows))
    json.dump(results, open(out_json, "w"), indent=1)


if __name__ == "__main__":
    main()
