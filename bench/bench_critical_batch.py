#!/usr/bin/env python3
"""bench_critical_batch.py: which noise-scale estimator predicts the critical
batch, and does a goodput-driven batch beat fixed schedules (issue 21).

Per setting (a model, a corpus, a target validation loss; the demo model and
a half-width one on byte-level KJV, the demo model on Vim's user manual from
Debian's vim-runtime):
1. the fitted critical batch: `batchscale batch-sweep` at batches 4-64 x
   SEEDS seeds to the target (1 process), each batch at its own best of the
   constant learning rates LRS (`--lrs`, McCandlish et al.'s definition;
   runs x the number of lrs): B_crit with its bootstrap interval and the
   lr chosen per batch; with LRS empty, one constant lr 2e-3 for every
   batch (the fixed-lr B_crit);
2. the estimators at the target: a run at batch 16 with --noise-scale
   --noise-scale-every 10 until the target, at each EMA horizon of HORIZONS;
   each estimator's last value (B_simple, B_simple of the Adam-preconditioned
   gradient, the curvature B_noise, the curvature B_noise of Adam's
   preconditioned update direction, and the noise probe at the step's weights,
   PROBE) and its ratio to B_crit (goal: one within 2x on every setting); the
   extra gradient passes the curvature estimate cost, the probe's extra
   micro-batches and its value at the probe before;
   the probes at the target over seeds (BS_BENCH_PROBE_SEEDS, default 1337,1,2,3,4:
   runs at batch 16 with the probe every 5 steps, raw and preconditioned; the
   last value before the target, the seeds' mean ratio to B_crit);
   and the same at the weights a run at each batch of BS_BENCH_FROZEN_BATCHES
   (default 16) reached at the target, measured there at lr 0 (no EMA lag);
   and the trade-off past the warm-up: `batch-sweep --from` a batch-16
   checkpoint at the warm-up's end (every batch from the same weights and
   Adam state), with raw B_simple at the checkpoint's and the target's
   weights and the probes of a batch-16 continuation;
3. schedules to the target on 2 processes, in one run: constant 8, 16, 32,
   two ramps 8 -> 32 (over 64K and 256K tokens), adaptive:8:64 and
   goodput:8:64 (following the preconditioned EMA, and following the noise
   probe), and goodput:8:64 given the fitted B_crit (--goodput-noise-scale:
   the policy without an estimator's error) and given the sweep's local
   critical batches along the loss (`batch-sweep --along`, 0.5 and 0.2 above
   the target, fed as --goodput-noise-curve: a noise scale that grows as the
   loss falls, measured, scaled by the lr schedule's factor with
   --goodput-temperature), evaluated every 2 steps: training seconds (the steps' own,
   evaluations excluded), tokens and steps to the target, interpolated
   between the evaluations around it; goodput's PASS when its seconds are
   below the best constant's and the best ramp's;
4. the same schedules with the 2 ranks on two test hosts (network
   namespaces, tests/hosts/) joined by a link shaped to LINK (default 100
   Mb/s, env BS_BENCH_LINK; `none` skips it), for the settings of
   BS_BENCH_LINK_SETTINGS (default kjv-demo): there the gradient all-reduce
   is a fixed cost per step, so throughput grows with the batch as on a
   cluster, which on 2 cores' shared memory it hardly does. Skipped, with
   the reason, where namespaces cannot be made (not root).
Timings are this machine's at the moment of the run: compare within a run.
usage: bench_critical_batch.py BATCHSCALE OUT_JSON   (env BS_BENCH_SETTINGS=kjv-demo,... to choose the
settings, BS_BENCH_LRS=1e-3,2e-3,4e-3 the lr grid, BS_BENCH_LRS= for the single-lr sweep)"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "hosts"))
import testhosts  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
LINK = os.environ.get("BS_BENCH_LINK", "100mbit")
LINK_SETTINGS = os.environ.get("BS_BENCH_LINK_SETTINGS", "kjv-demo").split(",")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
SEEDS = int(os.environ.get("BS_BENCH_SEEDS", 2))
BATCHES = "4,8,16,32,64"
LRS = os.environ.get("BS_BENCH_LRS", "1e-3,2e-3,4e-3")  # empty: every batch at COMMON's --lr
DEMO = ["--layers", "4", "--heads", "4", "--channels", "192"]
HALF = ["--layers", "4", "--heads", "4", "--channels", "96"]
COMMON = ["--seq-len", "128", "--micro-batch", "4", "--lr", "2e-3", "--min-lr", "2e-3", "--warmup-tokens", "65536",
          "--val-batches", "8", "--threads", "1", "--sample-tokens", "0", "--quiet"]
SCHEDULES = {"constant 8": (8, "constant"), "constant 16": (16, "constant"), "constant 32": (32, "constant"),
             "ramp 8->32 over 64K": (32, "ramp:8:8:65536"), "ramp 8->32 over 256K": (32, "ramp:8:8:262144"),
             "adaptive:8:64": (64, "adaptive:8:64"), "goodput:8:64": (64, "goodput:8:64"),
             "goodput:8:64 probe": (64, "goodput:8:64"), "goodput:8:64 probe-precond": (64, "goodput:8:64")}
# Schedules' own flags: goodput following the noise probe (B_simple at each decision step's weights, M = 8
# micro-batches over the 2 ranks, on goodput's default decision steps) instead of the lagging EMA.
SCHEDULE_FLAGS = {"goodput:8:64 probe": ["--goodput-estimator", "probe", "--noise-probe-every", "10",
                                         "--noise-probe-batches", "4"],
                  "goodput:8:64 probe-precond": ["--goodput-estimator", "probe-precond", "--noise-probe-every", "10",
                                                 "--noise-probe-batches", "4"]}


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def corpus(bs, tmp, name):
    """The setting's prepared byte-level shards."""
    if name == "kjv":
        data = os.path.join(ROOT, "data", "kjv")
        if not os.path.exists(os.path.join(data, "train_000000.bin")):
            run([os.path.join(ROOT, "scripts", "demo-data.sh"), bs])
        return data
    doc = "/usr/share/vim/vim90/doc"
    text = os.path.join(tmp, "vim_usr.txt")
    with open(text, "w") as out:
        for f in sorted(x for x in os.listdir(doc) if x.startswith("usr_") and x.endswith(".txt")):
            out.write(open(os.path.join(doc, f), errors="replace").read())
    run([bs, "prepare", "--in", text, "--out", os.path.join(tmp, "vim")])
    return os.path.join(tmp, "vim")


def metrics(path):
    return [json.loads(line) for line in open(path)]


def run_sweep(bs, data, model, target, out, options):
    """`batch-sweep` of BATCHES x SEEDS to the target with the sweep's own options; its sweep.json."""
    run([bs, "batch-sweep", "--batches", BATCHES, "--seeds", str(SEEDS), "--target-loss", str(target), "--max-steps",
         "1500", "--out", out] + options + ["--", bs, "train", "--data", os.path.join(data, "train_000000.bin"),
                                            "--val-data", os.path.join(data, "val_000000.bin")] + model +
        [x for x in COMMON if x != "--quiet"])
    return json.load(open(os.path.join(out, "sweep.json")))


ALONG = (0.5, 0.2)  # --along: the losses this far above the target, so the curve has three stretches


def sweep(bs, data, model, target, out):
    """B_crit in sequences, its interval, {batch: the lr chosen} (empty without LRS), and the local critical batches
    along the loss as a --goodput-noise-curve (None if no stretch was located)."""
    along = ",".join(f"{target + d:.4g}" for d in ALONG)
    summary = run_sweep(bs, data, model, target, out, ["--eval-tokens", "8192", "--along", along] +
                        (["--lrs", LRS] if LRS else []))
    fit = summary["fit"]
    chosen = {b["batch"]: b["lr"] for b in summary.get("lr_choice", {}).get("batches", [])}
    curve = ",".join(f"{p['val_loss']:.4g}:{p['local_b_sequences']:.3g}" for p in summary["along"]["points"]
                     if p.get("local_b_sequences") is not None)
    return fit["b_crit_sequences"], fit.get("interval", {}).get("b_crit_sequences"), chosen, curve or None


def train(bs, data, model, target, extra, ranks, path, hosts=None):
    """A run to the target (at most 4M tokens, the length the adaptive schedules plan with; the learning rate is
    constant after warm-up, so the length shapes nothing else), on the test hosts (one rank each) when given;
    returns (metrics, wall seconds)."""
    cmd = [bs, "train", "--data", os.path.join(data, "train_000000.bin"), "--val-data",
           os.path.join(data, "val_000000.bin"), "--target-val-loss", str(target), "--train-tokens", "4M",
           "--metrics", path] + model + COMMON + extra
    if hosts is not None:
        cmd = hosts.mpirun_args(ranks, cmd, slots=1)
    elif ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    t0 = time.monotonic()
    run(cmd)
    return metrics(path), time.monotonic() - t0


ESTIMATOR_KEYS = ("noise_scale", "noise_scale_precond", "noise_scale_curvature", "noise_scale_curvature_precond",
                  "noise_scale_probe")
PROBE = ["--noise-probe-every", "10", "--noise-probe-batches", "8"]  # the probe: 8 extra micro-batches every 10 steps


def estimators(bs, data, model, target, tmp, ema, batch=16):
    m, _ = train(bs, data, model, target, ["--global-batch", str(batch), "--eval-every", "4", "--noise-scale",
                                           "--noise-scale-every", "10", "--noise-ema", str(ema)] + PROBE, 1,
                 os.path.join(tmp, f"est_{ema}_{batch}.jsonl"))
    last = {}
    for x in m:
        for k in ESTIMATOR_KEYS:
            if x.get(k) is not None and x[k] == x[k]:
                last[k] = x[k]
    last["noise_extra_passes"] = max((x.get("noise_extra_passes", 0) for x in m), default=0)
    last["noise_probe_micro_batches"] = max((x.get("noise_probe_micro_batches", 0) for x in m), default=0)
    probes = [x["noise_scale_probe"] for x in m if x.get("noise_scale_probe") is not None]
    last["noise_scale_probe_previous"] = probes[-2] if len(probes) > 1 else None  # its step-to-step spread
    last["steps"] = len(m)
    return last


PROBE_SEEDS = [s for s in os.environ.get("BS_BENCH_PROBE_SEEDS", "1337,1,2,3,4").split(",") if s]
PROBE_KEYS = ("noise_scale_probe", "noise_scale_probe_precond")


def probe_runs(bs, data, model, target, tmp, b_crit):
    """The probes at the target: per seed of PROBE_SEEDS a run at batch 16 to the target with the probe (K = 8
    micro-batches every 5 steps; raw and through Adam's preconditioner), the last value of each before the
    target and its ratio to B_crit; and the seeds' mean ratio."""
    rows = {}
    for seed in PROBE_SEEDS:
        m, _ = train(bs, data, model, target, ["--global-batch", "16", "--seed", seed, "--eval-every", "4",
                                               "--noise-scale", "--noise-probe-every", "5", "--noise-probe-batches",
                                               "8"], 1, os.path.join(tmp, f"probe_{seed}.jsonl"))
        rows[seed] = {k: [x[k] for x in m if x.get(k) is not None][-1] for k in PROBE_KEYS}
        rows[seed]["steps"] = len(m)
    mean_ratio = {k: sum(r[k] for r in rows.values()) / len(rows) / b_crit for k in PROBE_KEYS}
    return dict(runs=rows, mean_ratio=mean_ratio,
                within_2x={k: sum(0.5 <= r[k] / b_crit <= 2 for r in rows.values()) for k in PROBE_KEYS})


FROZEN_BATCHES = [b for b in os.environ.get("BS_BENCH_FROZEN_BATCHES", "16").split(",") if b]
FROZEN_KEYS = ("noise_scale", "noise_scale_curvature")  # P is rebuilt by the measuring steps: not the run's


def frozen_estimators(bs, data, model, target, tmp, batch):
    """The estimators at the weights a run at `batch` reached at the target, without the EMAs' lag: the run's
    final model loaded and trained at lr 0 for 30 steps at batch 64 (the weights stay; every step measures the
    same point, on other data: --seed 7), near-uniform averages (--noise-ema 0.999)."""
    out = os.path.join(tmp, f"frozen_run_{batch}")
    m, _ = train(bs, data, model, target, ["--global-batch", str(batch), "--eval-every", "4", "--out", out], 1,
                 os.path.join(tmp, f"frozen_run_{batch}.jsonl"))
    return dict(frozen_at(bs, data, os.path.join(out, "model.bin"), tmp, str(batch)), val_loss=m[-1].get("val_loss"))


def frozen_at(bs, data, model_file, tmp, name):
    """FROZEN_KEYS at the weights of model_file: 30 steps at lr 0, batch 64, --seed 7, --noise-ema 0.999."""
    path = os.path.join(tmp, f"frozen_{name}.jsonl")
    run([bs, "train", "--data", os.path.join(data, "train_000000.bin"), "--init-from", model_file, "--seq-len", "128",
         "--micro-batch", "4", "--global-batch", "64", "--lr", "0", "--min-lr", "0", "--steps", "30", "--noise-scale",
         "--noise-scale-every", "3", "--noise-ema", "0.999", "--threads", "1", "--sample-tokens", "0", "--quiet",
         "--eval-every", "0", "--seed", "7", "--metrics", path])
    last = metrics(path)[-1]
    return {k: last[k] for k in FROZEN_KEYS if last.get(k) is not None}


BASE_TOKENS = 65536  # the base run of the shared-checkpoint sweep: batch 16 to the end of COMMON's warm-up


def from_checkpoint(bs, data, model, target, tmp):
    """The trade-off past the warm-up: a base run at batch 16 to BASE_TOKENS (its checkpoint), `batch-sweep --from`
    it (every batch continues the same weights and Adam state, lr 2e-3, S and E counted from the checkpoint);
    the raw B_simple at the checkpoint's weights and at the target's (a batch-16 continuation, seed 1), and that
    continuation's probes (every 4 steps, K = 8; raw and preconditioned): the last and the median of each."""
    base = os.path.join(tmp, "from_base")
    train_data = ["--data", os.path.join(data, "train_000000.bin"), "--val-data", os.path.join(data, "val_000000.bin")]
    run([bs, "train"] + train_data + model + COMMON + ["--global-batch", "16", "--train-tokens", str(BASE_TOKENS),
                                                       "--eval-every", "0", "--out", base])
    ckpt = os.path.join(base, "ckpt", "step_%08d" % (BASE_TOKENS // (16 * 128)))
    fit = run_sweep(bs, data, model, target, os.path.join(tmp, "from_sweep"),
                    ["--eval-tokens", "4096", "--from", ckpt])["fit"]
    cont = os.path.join(tmp, "from_16")
    m, _ = train(bs, data, model, target, ["--global-batch", "16", "--seed", "1", "--resume", ckpt,
                                           "--resume-new-batch", "--eval-every", "2", "--noise-probe-every", "4",
                                           "--noise-probe-batches", "8", "--out", cont], 1, cont + ".jsonl")
    probes = {}
    for k in PROBE_KEYS:
        values = [x[k] for x in m if x.get(k) is not None]
        probes[k] = dict(last=values[-1], median=sorted(values)[len(values) // 2]) if values else None
    return dict(b_crit=fit["b_crit_sequences"], interval=fit.get("interval", {}).get("b_crit_sequences"),
                s_min=fit["s_min"], frozen_start=frozen_at(bs, data, os.path.join(base, "model.bin"), tmp, "start"),
                frozen_target=frozen_at(bs, data, os.path.join(cont, "model.bin"), tmp, "target"), probes=probes)


def to_target(m, target, step_seconds=lambda x: x["ms"] / 1000):
    """Training seconds, tokens and steps to the target, interpolated linearly in the validation loss between
    the evaluation that reached it and the one before (as batch-sweep does), so the evaluation interval does not
    quantise them; seconds are the steps' own (the metrics' ms, or step_seconds of each step's metrics),
    evaluation time excluded. None if not reached."""
    seconds, prev = 0.0, (0, 0.0, 0, None)  # (step, seconds, tokens, val loss) at the previous evaluation
    for x in m:
        seconds += step_seconds(x)
        if "val_loss" not in x:
            continue
        if x["val_loss"] <= target:
            f = 1.0 if prev[3] is None else (prev[3] - target) / (prev[3] - x["val_loss"])
            lerp = lambda a, b: a + f * (b - a)
            return lerp(prev[1], seconds), lerp(prev[2], x["tokens"]), lerp(prev[0], x["step"])
        prev = (x["step"], seconds, x["tokens"], x["val_loss"])
    return None


GIVEN = "goodput:8:64 given B_crit"  # the policy alone: goodput fed the sweep's fitted B_crit (--goodput-noise-scale)
# fed the sweep's local critical batches (--goodput-noise-curve) at the lr schedule's temperature (--goodput-temperature)
GIVEN_CURVE = "goodput:8:64 given the B_crit curve, temperature"


def schedules(bs, data, model, target, tmp, hosts=None, b_crit=None, curve=None):
    rows, table, given = {}, dict(SCHEDULES), {}
    if b_crit is not None:
        table[GIVEN], given[GIVEN] = (64, "goodput:8:64"), ["--goodput-noise-scale", f"{b_crit:.3f}"]
    if curve is not None:
        table[GIVEN_CURVE], given[GIVEN_CURVE] = (64, "goodput:8:64"), ["--goodput-noise-curve", curve, "--goodput-temperature"]
    for name, (final, schedule) in table.items():
        flags = given.get(name, SCHEDULE_FLAGS.get(name, []))
        path = os.path.join(tmp, name.replace(" ", "_").replace(":", "_").replace(">", "") + ".jsonl")
        m, wall = train(bs, data, model, target, ["--global-batch", str(final), "--batch-schedule", schedule,
                                                  "--eval-every", "2", "--noise-ema", str(SCHEDULE_EMA)] + flags, 2, path,
                        hosts)
        hit = to_target(m, target)
        reached = hit is not None
        rows[name] = dict(wall_s=hit[0] if hit else float("inf"), tokens=hit[1] if hit else None,
                          steps=hit[2] if hit else None, run_wall_s=wall, reached=reached,
                          batches=[x["batch"] for x in m if x.get("goodput_batch") is not None])
        if reached:
            print(f"    {name:22s} {hit[0]:7.1f} s {hit[1]:9.0f} tokens {hit[2]:6.1f} steps to the target "
                  f"(run {wall:.0f} s with evaluations)", flush=True)
        else:
            print(f"    {name:22s} NOT reached in 4M tokens", flush=True)
    return rows


def verdict(rows):
    """Each goodput schedule's PASS when it reached the target in less wall time than the best constant and the
    best ramp; {name: word}."""
    best = lambda keys: min((rows[k]["wall_s"] for k in keys if rows[k]["reached"]), default=float("inf"))
    const, ramp = best([k for k in rows if k.startswith("constant")]), best([k for k in rows if k.startswith("ramp")])
    words = {}
    for name in (k for k in rows if k.startswith("goodput")):
        g = rows[name]
        words[name] = "PASS" if g["reached"] and g["wall_s"] < min(const, ramp) else "MISS"
        print(f"  {name} {g['wall_s']:.1f} s vs best constant {const:.1f} s, best ramp {ramp:.1f} s: "
              f"{words[name]} (its batches at its decisions: {g['batches']})", flush=True)
    return words


def linked_schedules(bs, data, model, target, tmp, b_crit=None, curve=None):
    """The schedules with one rank on each of two test hosts whose links are shaped to LINK; None (and the reason
    printed) where test hosts cannot be made."""
    if os.geteuid() != 0:
        print("  schedules over a shaped link: skipped (test hosts need root for network namespaces)", flush=True)
        return None
    print(f"  schedules with the 2 ranks on two hosts over a {LINK} link:", flush=True)
    try:
        with testhosts.TestHosts(2) as hosts:
            for host in (0, 1):
                p = hosts.shape(host, f"rate {LINK}")
                if p.returncode != 0:
                    print(f"  schedules over a shaped link: skipped ({p.stderr.strip()})", flush=True)
                    return None
            return schedules(bs, data, model, target, tmp, hosts, b_crit, curve)
    except AssertionError as e:  # TestHosts: the namespaces could not be made
        print(f"  schedules over a shaped link: skipped ({e})", flush=True)
        return None


# The estimators' EMA horizons: the default 0.99 (about 100 steps: the whole of these runs, so the |G|^2 average
# is dominated by the early, large gradients and every ratio comes out low) and 0.9 (the last ~10 steps: the value
# at the target). The adaptive and goodput schedules read the estimate at the short horizon.
HORIZONS = (0.99, 0.9)
SCHEDULE_EMA = 0.9
SETTINGS = {"kjv-demo": ("kjv", DEMO, 2.45), "kjv-half": ("kjv", HALF, 2.5), "vim-demo": ("vim", DEMO, 2.5)}


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    settings = os.environ.get("BS_BENCH_SETTINGS", ",".join(SETTINGS)).split(",")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in settings:
            corpus_name, model, target = SETTINGS[name]
            data = corpus(bs, tmp, corpus_name)
            print(f"{name}: {corpus_name}, {' '.join(model)}, target validation loss {target}", flush=True)
            b_crit, interval, chosen, curve = sweep(bs, data, model, target, os.path.join(tmp, name + "_sweep"))
            print(f"  fitted B_crit {b_crit:.1f} sequences, 95% interval {interval}; local critical batches along "
                  f"the loss: {curve}", flush=True)
            if chosen:
                print("  lr chosen per batch (of " + LRS + "): " +
                      ", ".join(f"{b}: {lr if lr is not None else 'none reached'}" for b, lr in chosen.items()),
                      flush=True)
            est = {}
            for ema in HORIZONS:
                est[str(ema)] = e = estimators(bs, data, model, target, tmp, ema)
                for k in ESTIMATOR_KEYS:
                    if k in e:
                        print(f"  --noise-ema {ema}: {k:29s} {e[k]:8.2f}  ratio to B_crit {e[k] / b_crit:6.2f}",
                              flush=True)
                print(f"  curvature cost: {e['noise_extra_passes']} extra gradient passes in {e['steps']} steps; the "
                      f"probe's: {e['noise_probe_micro_batches']} extra micro-batches (the probe before its last: "
                      f"{e['noise_scale_probe_previous']})")
            frozen = {}
            for batch in FROZEN_BATCHES:
                frozen[batch] = f = frozen_estimators(bs, data, model, target, tmp, batch)
                for k in FROZEN_KEYS:
                    if k in f:
                        print(f"  at the target's weights (run at batch {batch}): {k:22s} {f[k]:8.2f}  ratio to "
                              f"B_crit {f[k] / b_crit:6.2f}", flush=True)
            probes = probe_runs(bs, data, model, target, tmp, b_crit)
            for k in PROBE_KEYS:
                print(f"  {k} at the target (last probe, seeds {','.join(PROBE_SEEDS)}): " +
                      ", ".join(f"{r[k]:.2f}" for r in probes["runs"].values()) +
                      f"; seeds' mean ratio to B_crit {probes['mean_ratio'][k]:.2f}, within 2x in "
                      f"{probes['within_2x'][k]} of {len(PROBE_SEEDS)}", flush=True)
            shared = from_checkpoint(bs, data, model, target, tmp)
            print(f"  from a shared checkpoint at {BASE_TOKENS} tokens: B_crit {shared['b_crit']:.1f} "
                  f"{shared['interval']} (S_min {shared['s_min']:.1f}); raw B_simple at the checkpoint's weights "
                  f"{shared['frozen_start'].get('noise_scale', float('nan')):.2f}, at the target's "
                  f"{shared['frozen_target'].get('noise_scale', float('nan')):.2f}; probes on the way (last, "
                  f"median): {shared['probes']}", flush=True)
            rows = schedules(bs, data, model, target, tmp, b_crit=b_crit, curve=curve)
            results[name] = dict(b_crit=b_crit, interval=interval, noise_curve=curve, lrs=LRS, chosen_lr=chosen, estimators=est,
                                 frozen_estimators=frozen, probes=probes, from_checkpoint=shared, schedules=rows,
                                 goodput=verdict(rows))
            if LINK != "none" and name in LINK_SETTINGS:
                linked = linked_schedules(bs, data, model, target, tmp, b_crit, curve)
                if linked is not None:
                    results[name].update(link=LINK, linked_schedules=linked, linked_goodput=verdict(linked))
    json.dump(results, open(out_json, "w"), indent=1)


if __name__ == "__main__":
    main()
