#!/usr/bin/python3
"""test_opt_ref.py: the optimizers of src/optim against implementations
nobody here wrote, and the sharded path against the unsharded one.

1. AdamW and SGD (plain, momentum, dampening, Nesterov; coupled weight decay)
   over 10 steps equal torch.optim.AdamW / torch.optim.SGD (float32, Debian's
   python3-torch) on random tensors of several shapes, with per-step lr and
   gradient scale (clipping) and tensors that decay and that do not.
2. LAMB and LARS equal a float64 numpy transcription of the published update
   rules (You et al. 2020, Algorithm 2; You et al. 2017, Algorithm 1 with
   REFERENCES.md's eps and the usual zero-norm guard), written from the papers.
   The tensors include a zero one (the guard), an all-zero gradient on step 1,
   and very small and very large weights (so LAMB's optional clamp acts).
3. Sharding: the same update as 2, 3, 4 and 5 simulated ranks, each holding
   only its own range (cut inside tensors, one range inside the gap between
   tensors, one empty), with the per-tensor sums added across ranks through
   the sum_across_ranks callback: AdamW and SGD bitwise equal to one range;
   LAMB and LARS within 1e-6 (their norms are summed in another order).
Elements in the gap between tensors (like wte's padded rows) never change,
and 1 and 3 OpenMP threads give bitwise the same result as the default.

Tolerance: max |c - t| / max |t| per tensor <= 1e-6, for the weights and
every state array.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

torch.set_num_threads(1)
DRIVER = sys.argv[1] if len(sys.argv) > 1 else "build/tests/opt_driver"
STEPS = 10
TOL = 1e-6
failures = []

# (shape, decays, initial scale); a gap of GAP floats follows the first tensor.
TENSORS = [((7, 13), True, 0.5), ((13,), False, 0.0), ((5, 4, 3), True, 1.0), ((1,), False, 2.0),
           ((33, 8), True, 1e-4), ((9, 6), True, 100.0), ((64,), False, 1.0)]
GAP = 11
ZERO_GRAD_FIRST_STEP = 3  # tensor index whose gradient is 0 on step 1


def check(label, err, tol):
    ok = err <= tol
    print(f"  {'ok  ' if ok else 'FAIL'} {label}: {err:.2e} (tol {tol:.0e})")
    if not ok:
        failures.append(label)


def rel_err(c, t):
    c = np.asarray(c, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    return float(np.max(np.abs(c - t)) / max(np.max(np.abs(t)), 1e-30))


def f32(x):
    return float(np.float32(x))


def make_problem(seed):
    rng = np.random.default_rng(seed)
    layout, offset = [], 0
    for i, (shape, decays, scale) in enumerate(TENSORS):
        count = int(np.prod(shape))
        layout.append((offset, count, decays, shape))
        offset += count + (GAP if i == 0 else 0)
    n = offset
    params = rng.standard_normal(n).astype(np.float32)
    for (off, count, _, _), (_, _, scale) in zip(layout, TENSORS):
        params[off:off + count] *= np.float32(scale)
    gap = slice(layout[0][0] + layout[0][1], layout[1][0])
    params[gap] = 7.0  # must survive untouched
    grads = rng.standard_normal((STEPS, n)).astype(np.float32)
    off, count = layout[ZERO_GRAD_FIRST_STEP][:2]
    grads[0, off:off + count] = 0
    lrs = [f32(1e-2 * (0.5 + 0.1 * s)) for s in range(STEPS)]
    scales = [f32(1.0 if s % 3 else 0.6) for s in range(STEPS)]
    return layout, n, params, grads, lrs, scales, gap


def run_driver(tmp, cfg, problem, cuts, threads=None):
    layout, n, params, grads, lrs, scales, _ = problem
    params.tofile(os.path.join(tmp, "p.bin"))
    grads.tofile(os.path.join(tmp, "g.bin"))
    spec = dict(cfg, n=n, tensors=[[o, c, d] for o, c, d, _ in layout], cuts=list(cuts),
                steps=[[lr, s] for lr, s in zip(lrs, scales)], params=os.path.join(tmp, "p.bin"),
                grads=os.path.join(tmp, "g.bin"), out=os.path.join(tmp, "out.bin"))
    with open(os.path.join(tmp, "spec.json"), "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if threads else None
    subprocess.run([DRIVER, "step", os.path.join(tmp, "spec.json")], check=True, timeout=120, env=env)
    out = np.fromfile(os.path.join(tmp, "out.bin"), dtype=np.float32)
    arrays = out.size // n
    return [out[k * n:(k + 1) * n] for k in range(arrays)]


def torch_reference(kind, cfg, problem):
    layout, n, params, grads, lrs, scales, _ = problem
    ps = [torch.tensor(params[o:o + c].reshape(shape)) for o, c, _, shape in layout]
    for p in ps:
        p.requires_grad_(True)
    groups = [{"params": [p], "weight_decay": cfg["weight_decay"] if d else 0.0} for p, (_, _, d, _) in zip(ps, layout)]
    if kind == "adamw":
        opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    else:
        opt = torch.optim.SGD(groups, lr=lrs[0], momentum=cfg["momentum"], dampening=cfg["dampening"],
                              nesterov=cfg["nesterov"])
    for s in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lrs[s]
        for p, (o, c, _, shape) in zip(ps, layout):
            p.grad = torch.tensor(grads[s, o:o + c].reshape(shape)) * scales[s]
        opt.step()
    out = [p.detach().numpy().ravel() for p in ps]
    if kind == "adamw":
        state = [[opt.state[p][key].numpy().ravel() for p in ps] for key in ("exp_avg", "exp_avg_sq")]
    elif cfg["momentum"] != 0:
        state = [[opt.state[p]["momentum_buffer"].numpy().ravel() for p in ps]]
    else:
        state = [[np.zeros(c, np.float32) for _, c, _, _ in layout]]
    return [out] + state


def norm(x):
    return float(np.sqrt(np.sum(np.square(x))))


def lamb_reference(cfg, problem):
    """You et al. 2020, Algorithm 2 (LAMB), per layer, in float64."""
    layout, _, params, grads, lrs, scales, _ = problem
    b1, b2, eps, lam = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"]
    result = [[], [], []]
    for o, c, decays, _ in layout:
        x = params[o:o + c].astype(np.float64)
        m = np.zeros(c)
        v = np.zeros(c)
        wd = lam if decays else 0.0
        for t in range(1, STEPS + 1):
            g = grads[t - 1, o:o + c].astype(np.float64) * scales[t - 1]
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            m_hat = m / (1 - b1 ** t)
            v_hat = v / (1 - b2 ** t)
            r = m_hat / (np.sqrt(v_hat) + eps)
            update = r + wd * x
            w_norm, u_norm = norm(x), norm(update)
            ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            if cfg["lamb_clamp"]:
                ratio = min(max(ratio, 0.01), 10.0)
            x = x - lrs[t - 1] * ratio * update
        for k, a in enumerate((x, m, v)):
            result[k].append(a)
    return result


def lars_reference(cfg, problem):
    """You et al. 2017, Algorithm 1 (LARS), per layer, in float64."""
    layout, _, params, grads, lrs, scales, _ = problem
    mom, beta, eta, eps = cfg["momentum"], cfg["weight_decay"], cfg["lars_eta"], cfg["eps"]
    result = [[], []]
    for o, c, decays, _ in layout:
        w = params[o:o + c].astype(np.float64)
        vel = np.zeros(c)
        wd = beta if decays else 0.0
        for t in range(STEPS):
            g = grads[t, o:o + c].astype(np.float64) * scales[t]
            w_norm, g_norm = norm(w), norm(g)
            local_lr = eta * w_norm / (g_norm + wd * w_norm + eps) if w_norm > 0 and g_norm > 0 else 1.0
            vel = mom * vel + lrs[t] * local_lr * (g + wd * w)
            w = w - vel
        result[0].append(w)
        result[1].append(vel)
    return result


BASE = dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, momentum=0.0, dampening=0.0, nesterov=False,
            lars_eta=1e-3, lamb_clamp=False)
CONFIGS = [
    ("adamw", dict(BASE, kind="adamw")),
    ("sgd", dict(BASE, kind="sgd")),
    ("sgd momentum", dict(BASE, kind="sgd", momentum=0.9)),
    ("sgd momentum dampening", dict(BASE, kind="sgd", momentum=0.9, dampening=0.3)),
    ("sgd nesterov", dict(BASE, kind="sgd", momentum=0.9, nesterov=True)),
    ("lamb", dict(BASE, kind="lamb", weight_decay=0.01)),
    ("lamb clamped", dict(BASE, kind="lamb", weight_decay=0.01, lamb_clamp=True)),
    ("lars", dict(BASE, kind="lars", momentum=0.9, weight_decay=5e-4, lars_eta=0.02)),
]
STATE_NAMES = {"adamw": ["m", "v"], "sgd": ["momentum buffer"], "lamb": ["m", "v"], "lars": ["velocity"]}


def shard_cuts(layout, n, rng):
    """Cut points for 2, 3 and 4 ranks: inside tensors at random places; the
    4-rank layout also has one rank inside the gap and one empty rank."""
    def inside(t):
        o, c = layout[t][:2]
        return int(rng.integers(o + 1, o + c)) if c > 1 else o
    gap_start = layout[0][0] + layout[0][1]
    return [
        [inside(2)],
        sorted([inside(0), inside(5)]),
        [gap_start + 2, gap_start + 5, gap_start + 5],  # rank 1 holds only padding, rank 2 nothing
        sorted({inside(0), inside(2), inside(4), inside(6)}),
    ]


def main():
    problem = make_problem(1234)
    layout, n, params, grads, lrs, scales, gap = problem
    rng = np.random.default_rng(99)
    cut_sets = shard_cuts(layout, n, rng)
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, cfg in CONFIGS:
            kind = cfg["kind"]
            print(f"{label}: {STEPS} steps, {len(layout)} tensors")
            got = run_driver(tmp, cfg, problem, [])
            outputs[label] = got
            if kind in ("adamw", "sgd"):
                ref = torch_reference(kind, cfg, problem)
                who = "torch"
            else:
                ref = lamb_reference(cfg, problem) if kind == "lamb" else lars_reference(cfg, problem)
                who = "numpy"
            names = ["weights"] + STATE_NAMES[kind]
            for k, name in enumerate(names):
                worst = max(rel_err(got[k][o:o + c], ref[k][t]) for t, (o, c, _, _) in enumerate(layout))
                check(f"{name} vs {who} (worst tensor)", worst, TOL)
            for threads in (1, 3):
                same = all(np.array_equal(a, b) for a, b in zip(run_driver(tmp, cfg, problem, [], threads), got))
                check(f"{threads} thread(s) bitwise equal to the default (0 = yes)", 0.0 if same else 1.0, 0.0)
            untouched = np.array_equal(got[0][gap], params[gap]) and all(np.all(a[gap] == 0) for a in got[1:])
            check("gap between tensors untouched (0 = yes)", 0.0 if untouched else 1.0, 0.0)
            for cuts in cut_sets:
                sharded = run_driver(tmp, cfg, problem, cuts)
                err = max(rel_err(sharded[k], got[k]) if k == 0 else
                          max(rel_err(sharded[k][o:o + c], got[k][o:o + c]) for o, c, _, _ in layout)
                          for k in range(len(got)))
                bitwise = all(np.array_equal(a, b) for a, b in zip(sharded, got))
                ranks = len(cuts) + 1
                if kind in ("adamw", "sgd"):
                    check(f"{ranks} ranks cut at {cuts}: bitwise equal to one range (0 = yes)", 0.0 if bitwise else 1.0,
                          0.0)
                else:
                    check(f"{ranks} ranks cut at {cuts} vs one range", err, TOL)
    # The checks above must be able to fail: the clamp and the guards acted.
    if np.array_equal(outputs["lamb"][0], outputs["lamb clamped"][0]):
        failures.append("LAMB's clamp changed nothing; the check would not cover it")
    for label in ("sgd momentum", "sgd nesterov", "sgd momentum dampening"):
        if np.array_equal(outputs[label][0], outputs["sgd"][0]):
            failures.append(f"{label} equals plain SGD; the check would not cover it")
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print("all optimizer checks passed")


if __name__ == "__main__":
    main()
