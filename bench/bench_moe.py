#!/usr/bin/env python3
"""bench_moe.py: Mixture of Experts on 2 processes (issue 17). Byte-level KJV,
L=4 H=4 C=256 T=128, micro-batch 8 on each of 2 ranks (global batch 16
sequences, 2,048 tokens a step), AdamW lr 1e-3 cosine to 1e-4, 1 thread per
rank, BS_BENCH_STEPS steps (default 400) per run, in one run:

    dense          the dense GPT (MLP hidden 4C), data parallel over 2 ranks
    moe ep1 x dp2  8 experts, top-2, each expert's hidden 2C (so the active
                   MLP of a token is 2 x 2C = 4C wide: the dense model's
                   FLOPs per token), dropless, aux loss 1e-2, data parallel
    moe ep2        the same model and batch, the 8 experts 4 per rank (--ep 2)
    moe 1 process  the same model and batch on one process, one micro-batch
                   of 16 (1 thread: an OpenMP pair on a loaded 2-core
                   machine stalled at 10-30 s a step), ORACLE_STEPS =
                   min(steps, 100) steps: the invariant's oracle, for the
                   loss gaps only

1. MoE against dense at equal tokens: parameters total and active (counted
   from the layout, checked against the count batchscale prints), tokens/s,
   the final validation loss (32 batches), and the MoE run's expert load
   (max/mean per layer) and dropped share at the end.
2. EP 2 against EP 1 x DP 2: tokens/s, the all-to-all bytes rank 0 sends per
   step and the time it is blocked on them (exposed), the gradient
   all-reduce's bytes and exposed time, and each layout's loss gap to the
   one-process oracle (the invariant: equal up to summation order). Top-k
   routing is discontinuous: once rounding flips a near-tie between two
   experts, the runs route a token differently and their losses part
   further than rounding. So per layout: the first step whose expert loads
   (max/mean per layer) differ from the oracle's, the largest loss gap
   before it (summation order, and the step of the first flip where that
   did not move a layer's max/mean: the JSON holds every step's losses to
   tell them apart) and the gap at the oracle's last step; EP 1 x DP 2 against
   the oracle (its reordering is the gradient all-reduce's) is the floor
   beside EP 2's. At the end: EP 2 against EP 1 x DP 2, training and
   validation loss (the same validation batches on 2 ranks).
3. The planner's reality check, as bench_cp's: `batchscale bench
   --calibrate` measured in the same run, then `batchscale plan --calibrate`
   predicts each row's step, its exposed EP communication and its all-to-all
   volume; predicted / measured is printed, nothing fails. MoE rows at ep 2
   are predicted at --moe-imbalance 1 (balanced) and at the run's measured
   max/mean expert load (an upper bound of the busiest rank's share: a rank
   holds 4 experts).

Tokens/s and step times are the median step of SPEED_ROUNDS interleaved
rounds of SPEED_STEPS steps per row (the first step of each dropped), so a
shared machine's load hits the rows alike; the long runs give the losses,
loads and all-to-all figures (medians over their steps after the first).
usage: bench_moe.py BATCHSCALE OUT_JSON"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402
from bench_cp import MPIRUN, ENV, calibrate  # noqa: E402  (the same launch and calibration)
from bench_fp8 import corpus  # noqa: E402

STEPS = int(os.environ.get("BS_BENCH_STEPS", 400))
SPEED_ROUNDS, SPEED_STEPS = 2, min(STEPS, 20)
RANKS = 2
L, H, C, T, V = 4, 4, 256, 128, 257  # V: the byte tokenizer's 256 bytes + end of text
MICRO = 8
E, K, EXPERT_FFN = 8, 2, 2 * C
SHAPE = ["--layers", str(L), "--heads", str(H), "--channels", str(C), "--seq-len", str(T)]
OPTIM = ["--micro-batch", str(MICRO), "--global-batch", str(MICRO * RANKS), "--lr", "1e-3", "--min-lr", "1e-4",
         "--warmup", "20"]
MOE = ["--experts", str(E), "--moe-top-k", str(K), "--moe-ffn", str(EXPERT_FFN), "--dropless"]
ROWS = {"dense": [], "moe ep1 x dp2": MOE, "moe ep2": MOE + ["--ep", "2"]}
ORACLE = "moe 1 process"
ORACLE_STEPS = min(STEPS, 100)


def run(bs, data, d, name, extra, steps, eval_every, ranks=RANKS):
    """One training run on `ranks` processes of 1 thread (1 process: the global batch in one micro-batch); (its
    metrics rows, its stdout)."""
    metrics = os.path.join(d, name.replace(" ", "_") + ".jsonl")
    cmd = [bs, "train", "--data", data + "/train_000000.bin", "--val-data", data + "/val_000000.bin", "--steps",
           str(steps), "--eval-every", str(eval_every), "--val-batches", "32", "--sample-tokens", "0", "--metrics",
           metrics] + SHAPE + OPTIM + extra
    cmd += ["--threads", "1"] + ([] if ranks > 1 else ["--micro-batch", str(MICRO * RANKS)])
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        raise SystemExit(f"bench_moe: {name} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return [json.loads(line) for line in open(metrics)], p.stdout


def parameters(moe):
    """(total, active) parameters of the model from its layout (the vocabulary's padding rows not counted, as
    batchscale's own count does not): embeddings, per layer 2 LayerNorms, attention, the router (E x C, no bias)
    and E experts of 2 F C + F + C, or the dense MLP of 2 x 4C x C + 4C + C."""
    embed = V * C + T * C + 2 * C
    attention = 2 * 2 * C + 3 * C * C + 3 * C + C * C + C
    if not moe:
        mlp = 2 * 4 * C * C + 4 * C + C
        return embed + L * (attention + mlp), embed + L * (attention + mlp)
    expert = 2 * EXPERT_FFN * C + EXPERT_FFN + C
    return embed + L * (attention + E * C + E * expert), embed + L * (attention + E * C + K * expert)


def check_count(name, total, stdout):
    """batchscale prints the model's parameters in millions to 3 digits: the layout count must round to it."""
    m = re.search(r"([0-9.]+)M parameters", stdout)
    if not m or abs(total / 1e6 - float(m.group(1))) > 0.006:
        raise SystemExit(f"bench_moe: {name}: counted {total:,} parameters, batchscale printed "
                         f"{m.group(0) if m else 'no count'}")


def median(rows, key):
    return statistics.median(r.get(key, 0.0) for r in rows)


def summarize(rows, stdout, moe):
    """The long run's figures: losses, loads at the end, all-to-all and all-reduce medians."""
    timed, last = rows[1:], rows[-1]
    total, active = parameters(moe)
    out = dict(params_total=total, params_active=active, steps=len(rows), tokens=last["tokens"],
               val_curve=[(r["tokens"], r["val_loss"]) for r in rows if r.get("val_loss") is not None],
               val_loss=last.get("val_loss"), loss=[r["loss"] for r in rows],
               run_tokens_per_s=median(timed, "tokens_per_s"),
               a2a_bytes=median(timed, "moe_a2a_bytes"), a2a_exposed_ms=median(timed, "moe_a2a_exposed_ms"),
               comm_bytes=median(timed, "comm_bytes"), comm_exposed_ms=median(timed, "comm_exposed_ms"))
    if moe:
        loads = last["moe_load_max_mean"]
        out.update(load_max_mean=loads, dropped=last["moe_dropped"], aux_loss=last["moe_aux_loss"],
                   loads=[r["moe_load_max_mean"] for r in rows],
                   load_median_mean=statistics.median(sum(r["moe_load_max_mean"]) / L for r in timed))
    return out


def speeds(bs, data, d):
    """Median tokens/s and ms per step of each row: SPEED_ROUNDS rounds of SPEED_STEPS steps, interleaved."""
    steps = {name: [] for name in ROWS}
    for _ in range(SPEED_ROUNDS):
        for name, extra in ROWS.items():
            steps[name] += run(bs, data, d, "speed", extra + ["--quiet"], SPEED_STEPS, 0)[0][1:]
    return {name: dict(tokens_per_s=median(s, "tokens_per_s"), ms=median(s, "ms")) for name, s in steps.items()}


def predict(bs, cal, moe, ep, imbalance):
    """The planner's step, exposed EP time (ms) and all-to-all bytes per step sent by one rank."""
    cmd = [bs, "plan", "--calibrate", cal, "--layers", str(L), "--hidden", str(C), "--heads", str(H), "--vocab",
           str(V), "--seq-len", str(T), "--gpus", str(RANKS), "--gpus-per-node", str(RANKS), "--tp", "1", "--pp", "1",
           "--dp", str(RANKS), "--zero", "0", "--micro-batch", str(MICRO), "--global-batch", str(MICRO * RANKS),
           "--jitter", "0", "--json"]
    if moe:
        cmd += ["--experts", str(E), "--top-k", str(K), "--ffn", str(EXPERT_FFN), "--ep", str(ep),
                "--moe-imbalance", f"{imbalance:.4f}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr or p.stdout).strip())
    step = json.loads(p.stdout)["plan"]["step_time"]
    # docs/PLANNER.md, EP: 4 all-to-alls per MoE layer (dispatch and combine, forward and backward) of
    # e T top-k h bytes x the imbalance, (ep - 1) / ep of which leave the rank
    a2a = 4 * L * 4.0 * MICRO * T * K * C * imbalance * (ep - 1) / ep if moe else 0.0
    return dict(step_ms=step["step"] * 1e3, ep_ms=step.get("ep_comm", 0.0) * 1e3, a2a_bytes=a2a,
                imbalance=imbalance)


def print_quality(res):
    dense, moe = res["dense"], res["moe ep1 x dp2"]
    print(f"\nMoE ({E} experts, top-{K}, expert hidden {EXPERT_FFN}) vs dense (MLP hidden {4 * C}) at equal tokens "
          f"({dense['tokens']:,}), 2 ranks data parallel")
    print(f"{'row':<15} {'params total':>12} {'active':>10} {'tokens/s':>9} {'vs dense':>8} {'val loss':>9} "
          f"{'vs dense':>9}")
    for name in ROWS:
        r = res[name]
        print(f"{name:<15} {r['params_total']:>12,} {r['params_active']:>10,} {r['tokens_per_s']:>9.0f} "
              f"{r['tokens_per_s'] / dense['tokens_per_s']:>8.2f} {r['val_loss']:>9.4f} "
              f"{r['val_loss'] - dense['val_loss']:>+9.4f}")
    print(f"moe ep1 x dp2 at the end: expert load max/mean per layer "
          f"{', '.join(f'{x:.2f}' for x in moe['load_max_mean'])} (median over steps of the layers' mean "
          f"{moe['load_median_mean']:.2f}); dropped {max(moe['dropped']):.3f} (dropless); aux loss "
          f"{moe['aux_loss']:.4f}")


def print_ep(res):
    a, b = res["moe ep2"], res["moe ep1 x dp2"]
    print("\nEP 2 vs EP 1 x DP 2, the same model and global batch (rank 0's figures per step, medians)")
    print(f"{'row':<15} {'tokens/s':>9} {'ms':>7} {'a2a MB':>7} {'a2a exposed ms':>14} {'allreduce MB':>12} "
          f"{'exposed ms':>10}")
    for name in ("moe ep1 x dp2", "moe ep2"):
        r = res[name]
        print(f"{name:<15} {r['tokens_per_s']:>9.0f} {r['ms']:>7.1f} {r['a2a_bytes'] / 1e6:>7.2f} "
              f"{r['a2a_exposed_ms']:>14.2f} {r['comm_bytes'] / 1e6:>12.2f} {r['comm_exposed_ms']:>10.2f}")
    final = abs(a["loss"][-1] / b["loss"][-1] - 1)
    res["ep_gap"] = dict(final=final, val=abs(a["val_loss"] / b["val_loss"] - 1))
    print(f"ep2 / ep1 x dp2: tokens/s {a['tokens_per_s'] / b['tokens_per_s']:.2f}; at step {len(a['loss'])} the "
          f"training loss {final:.1e} apart (relative), the validation loss {res['ep_gap']['val']:.1e}")
    print(f"\nagainst one process (the oracle: the same batch in one micro-batch), relative training-loss gaps over "
          f"{ORACLE_STEPS} steps")
    print(f"{'row':<15} {'loads first differ':>18} {'gap before':>10} {f'gap at step {ORACLE_STEPS}':>16}")
    for name in ("moe ep1 x dp2", "moe ep2"):
        g = res[name]["oracle_gap"] = oracle_gap(res[name], res[ORACLE])
        step = f"step {g['first_routing_difference']}" if g["first_routing_difference"] else "never"
        print(f"{name:<15} {step:>18} {g['before']:>10.1e} {g['last']:>16.1e}")


def oracle_gap(r, oracle):
    """The training-loss gaps of a layout to the oracle over the oracle's steps: before the first step whose
    expert loads differ (summation order only), at the oracle's last step, and that first step (1-based; None:
    never). Validation losses are not compared: one process draws other validation batches than 2 ranks do."""
    pairs = list(zip(r["loads"], oracle["loads"]))
    differ = [i for i, (x, y) in enumerate(pairs) if x != y]
    first = differ[0] if differ else len(pairs)
    gaps = [abs(x / y - 1) for x, y in zip(r["loss"], oracle["loss"])]
    return dict(first_routing_difference=first + 1 if differ else None, before=max(gaps[:first], default=0.0),
                last=gaps[-1])


def print_reality(res):
    print("\nplanner reality check (plan --calibrate of this machine, measured in this run):")
    print(f"{'row':<15} {'imbalance':>9} {'measured ms':>11} {'predicted':>9} {'ratio':>6} {'EP exposed ms':>13} "
          f"{'predicted':>9} {'a2a MB':>7} {'predicted':>9}")
    for name in ROWS:
        r = res[name]
        for p in r["predicted"]:
            if "error" in p:
                print(f"{name:<15} the planner cannot plan it: {p['error']}")
                continue
            p["ratio"] = p["step_ms"] / r["ms"]
            print(f"{name:<15} {p['imbalance']:>9.2f} {r['ms']:>11.1f} {p['step_ms']:>9.1f} {p['ratio']:>6.2f} "
                  f"{r['a2a_exposed_ms']:>13.2f} {p['ep_ms']:>9.2f} {r['a2a_bytes'] / 1e6:>7.2f} "
                  f"{p['a2a_bytes'] / 1e6:>9.2f}")


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    if STEPS < 2:
        raise SystemExit(f"bench_moe: BS_BENCH_STEPS={STEPS}: at least 2 (the first step is a warm-up)")
    machine = kernel_report.machine(bs)
    print(kernel_report.summary(machine))
    print(f"model L={L} H={H} C={C} T={T} V={V}, micro-batch {MICRO} x {RANKS} ranks, {STEPS} steps, 1 thread per "
          "rank")
    res = {}
    with tempfile.TemporaryDirectory() as d:
        kjv = corpus(bs, d)
        for name, extra in ROWS.items():
            rows, stdout = run(bs, kjv, d, name, extra, STEPS, max(1, STEPS // 4))
            res[name] = summarize(rows, stdout, name != "dense")
            check_count(name, res[name]["params_total"], stdout)
        rows, stdout = run(bs, kjv, d, ORACLE, MOE, ORACLE_STEPS, 0, ranks=1)
        res[ORACLE] = summarize(rows, stdout, True)
        for name, speed in speeds(bs, kjv, d).items():
            res[name].update(speed)
        cal = calibrate(bs, d)
        for name, r in ((n, res[n]) for n in ROWS):
            ep = 2 if name == "moe ep2" else 1
            imbalances = [1.0] + ([r["load_median_mean"]] if ep > 1 else [])
            r["predicted"] = [predict(bs, cal, name != "dense", ep, f) for f in imbalances]
    print_quality(res)
    print_ep(res)
    print_reality(res)
    config = dict(layers=L, heads=H, channels=C, seq_len=T, vocab=V, micro_batch=MICRO, ranks=RANKS, steps=STEPS,
                  experts=E, top_k=K, expert_ffn=EXPERT_FFN, dense_ffn=4 * C, optim=OPTIM, rows=ROWS,
                  speed_rounds=SPEED_ROUNDS, speed_steps=SPEED_STEPS, mpirun=MPIRUN)
    with open(out_json, "w") as f:
        json.dump(dict(config=config, results=res, machine=machine), f, indent=1)


if __name__ == "__main__":
    main()
