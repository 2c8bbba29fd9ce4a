#!/usr/bin/python3
"""test_moe.py: the MoE layer (src/model/moe.h) against a PyTorch reference
written here from the formulas, in float64 with autograd (Debian's torch).

usage: test_moe.py TEST_MOE_LAYER

For each case the driver (tests/test_moe_layer.c) runs one forward and
backward in float32 on random inputs and writes inputs and results. The
reference recomputes, from the inputs only: logits x Wr^T; softmax or sigmoid
scores; the top-k of score + selection bias; combine weights (gates) by
--moe-gates, each transcribed from the reference that defines it (gates()),
times the routed scale; capacity ceil(N K / E x factor), dropping the lowest
scores first, ties to the later row (the driver's last quarter of rows repeat
its first, so ties occur); GELU(tanh) experts; L_aux = c E sum f_i P_i with f
before dropping; L_z = c_z mean(logsumexp^2); then the gradient of
sum(out * dout) + L_aux + L_z. Asserted, each as max |a - b| / max |b|:
output, dx, drouter, dexperts within 1e-5 (float32 against float64; the
rounding of a few hundred float32 operations is about 1e-6), the gradients
added to the driver's starting values (backward accumulates), aux and z
within 1e-5, per-expert routed and kept counts exactly; and per case that
what it is for happens: rows dropped under a capacity factor (none
dropless), and the selection bias changing the choice of some row. Top-1
without the aux and z losses: normalized gates leave the router's gradient
exactly zero (one renormalised gate is constant), unnormalized and
pre-softmax give it one (issue 42). And the same bits at 1 and 3 threads
(6000 rows: several matmul row blocks per expert).
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import Checks  # noqa: E402

TOL = 1e-5
expect = Checks(print_ok=False)  # FAIL lines only

# router, gates, routed scale, capacity factor, N, C, F, E, K, aux, z, bias scale, seed
CASES = [
    ("softmax", "normalized", 1.0, 0.0, 64, 16, 24, 8, 2, 0.5, 0.1, 0.3, 1),
    ("sigmoid", "normalized", 1.0, 0.0, 64, 16, 24, 8, 2, 0.5, 0.1, 0.3, 2),
    ("softmax", "normalized", 1.0, 1.0, 64, 16, 24, 8, 2, 0.5, 0.1, 0.3, 3),
    ("sigmoid", "normalized", 1.0, 0.75, 64, 16, 24, 8, 2, 0.5, 0.1, 0.3, 4),
    ("softmax", "normalized", 1.0, 1.25, 48, 12, 20, 4, 1, 0.3, 0.05, 0.2, 5),
    ("sigmoid", "normalized", 1.0, 1.0, 40, 8, 16, 6, 3, 0.3, 0.05, 0.2, 6),
]
# each --moe-gates choice at top-1 and top-2, with a routed scale, dropless and dropping
for k in (1, 2):
    CASES += [
        ("softmax", "normalized", 2.5, 1.0, 48, 12, 20, 4, k, 0.3, 0.05, 0.2, 10 + k),
        ("softmax", "unnormalized", 2.5, 0.0, 48, 12, 20, 4, k, 0.3, 0.05, 0.2, 12 + k),
        ("softmax", "pre-softmax", 1.0, 1.25, 48, 12, 20, 4, k, 0.3, 0.05, 0.2, 14 + k),
        ("sigmoid", "unnormalized", 2.5, 1.0, 48, 12, 20, 4, k, 0.3, 0.05, 0.2, 16 + k),
        ("sigmoid", "normalized", 1.0, 0.0, 48, 12, 20, 4, k, 0.3, 0.05, 0.2, 18 + k),
    ]
# top-1 with no aux or z loss: the router's gradient comes from the output alone
NO_AUX = [("softmax", gates, 1.0, 0.0, 48, 12, 20, 4, 1, 0.0, 0.0, 0.2, 30)
          for gates in ("normalized", "unnormalized", "pre-softmax")]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def choose(scores, bias, K):
    """Top-k of score + bias per row, ties to the lower expert index, in order of choice."""
    key = (scores + bias).detach().numpy()
    return np.array([sorted(range(key.shape[1]), key=lambda i: (-key[t, i], i))[:K] for t in range(key.shape[0])])


def kept_mask(chosen, scores, E, cap):
    """(N, K) True where the assignment is computed: per expert the `cap` highest scores, ties to the earlier row;
    and how many experts' cuts fell between equal scores."""
    N, K = chosen.shape
    keep, ties = np.ones((N, K), bool), 0
    s = scores.detach().numpy()
    for e in range(E):
        slots = [(t, k) for t in range(N) for k in range(K) if chosen[t, k] == e]
        slots.sort(key=lambda tk: (-s[tk[0], e], tk[0]))
        for t, k in slots[cap:]:
            keep[t, k] = False
        if len(slots) > cap:  # the cut falls between equal scores: decided by position
            ties += s[slots[cap - 1][0], e] == s[slots[cap][0], e]
    return keep, ties


def gates(router, mode, logits, scores, idx):
    """The combine weights of the chosen experts idx (N, K) as each reference writes them (before the scale):
    normalized softmax: Megatron-Core's default (moe_router_pre_softmax False), a softmax over the chosen logits;
    normalized sigmoid: DeepSeek-V3's norm_topk_prob, the chosen scores over their sum; unnormalized: Qwen2-MoE /
    DeepSeek-V2's norm_topk_prob False, the chosen scores as they are; pre-softmax: Megatron-Core's
    moe_router_pre_softmax, the softmax over all E logits, then the chosen ones."""
    if mode == "normalized" and router == "softmax":
        return torch.softmax(logits.gather(1, idx), -1)
    if mode == "normalized":
        chosen = scores.gather(1, idx)
        return chosen / chosen.sum(1, keepdim=True)
    if mode == "pre-softmax":
        return torch.softmax(logits, -1).gather(1, idx)
    return scores.gather(1, idx)


def reference(p, router, mode, scale, cap_factor, N, C, F, E, K, aux_c, z_c):
    x, wr, bias, dout = p["x"], p["wr"], p["bias"], p["dout"]
    ex = p["experts"].view(E, -1)
    fc, fcb = ex[:, :F * C].reshape(E, F, C), ex[:, F * C:F * C + F]
    proj, projb = ex[:, F * C + F:2 * F * C + F].reshape(E, C, F), ex[:, 2 * F * C + F:]
    logits = x @ wr.T
    scores = torch.softmax(logits, -1) if router == "softmax" else torch.sigmoid(logits)
    chosen = choose(scores, bias, K)
    idx = torch.tensor(chosen)
    weights = scale * gates(router, mode, logits, scores, idx)
    cap = math.ceil(N * K / E * cap_factor) if cap_factor > 0 else N * K
    keep, ties = kept_mask(chosen, scores, E, cap)
    out = torch.zeros(N, C, dtype=torch.float64)
    for t in range(N):
        for k in range(K):
            if keep[t, k]:
                e = chosen[t, k]
                y = gelu(x[t] @ fc[e].T + fcb[e]) @ proj[e].T + projb[e]
                out[t] = out[t] + weights[t, k] * y
    routed = np.bincount(chosen.ravel(), minlength=E).astype(np.float64)
    kept = np.bincount(chosen[keep], minlength=E).astype(np.float64)
    prob = scores if router == "softmax" else scores / scores.sum(1, keepdim=True)
    aux = aux_c * E * (torch.tensor(routed / (N * K)) * prob.mean(0)).sum()
    z = z_c * (torch.logsumexp(logits, -1) ** 2).mean()
    ((out * dout).sum() + aux + z).backward()
    no_bias = choose(scores, torch.zeros(E, dtype=torch.float64), K)
    biased = int(np.sum(np.sort(no_bias, 1) != np.sort(chosen, 1)))
    return out, aux, z, routed, kept, biased, ties


def run_case(driver, case, tmp):
    router, mode, scale, cap, N, C, F, E, K, aux_c, z_c, bias_scale, seed = case
    path = os.path.join(tmp, "moe.bin")
    args = [router, mode, scale, cap, N, C, F, E, K, aux_c, z_c, bias_scale, seed]
    log = subprocess.run([driver, path] + [str(a) for a in args],
                         check=True, capture_output=True, text=True).stdout.strip()
    raw = np.fromfile(path, np.float64)
    ne = E * (2 * F * C + F + C)
    names = [("x", N * C), ("wr", E * C), ("experts", ne), ("bias", E), ("dout", N * C), ("dx0", N * C),
             ("dwr0", E * C), ("dexperts0", ne), ("out", N * C), ("dx", N * C), ("dwr", E * C), ("dexperts", ne),
             ("losses", 2), ("routed", E), ("kept", E)]
    got, at = {}, 0
    for name, n in names:
        got[name], at = raw[at:at + n], at + n
    expect(at == raw.size, f"driver wrote {raw.size} values, expected {at}")
    shapes = {"x": (N, C), "wr": (E, C), "dout": (N, C)}
    p = {k: torch.tensor(got[k].reshape(shapes.get(k, (-1,))), requires_grad=k in ("x", "wr", "experts"))
         for k in ("x", "wr", "experts", "bias", "dout")}
    out, aux, z, routed, kept, biased, ties = reference(p, router, mode, scale, cap, N, C, F, E, K, aux_c, z_c)
    label = f"{router} {mode} x{scale} cap {cap} N{N} E{E} K{K}"
    errs = {
        "out": rel(got["out"], out.detach().numpy().ravel()),
        "dx": rel(got["dx"] - got["dx0"], p["x"].grad.numpy().ravel()),
        "drouter": rel(got["dwr"] - got["dwr0"], p["wr"].grad.numpy().ravel()),
        "dexperts": rel(got["dexperts"] - got["dexperts0"], p["experts"].grad.numpy().ravel()),
        "aux": abs(got["losses"][0] - aux.item()) / max(abs(aux.item()), 1e-30),
        "z": abs(got["losses"][1] - z.item()) / max(abs(z.item()), 1e-30),
    }
    dropped = int(routed.sum() - kept.sum())
    print(f"{label}: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) +
          f"; dropped {dropped}/{int(routed.sum())}, cuts between equal scores {ties}, bias moved {biased} choices | {log}")
    for k, v in errs.items():
        expect(v <= TOL, f"{label}: {k} differs by {v:.3e}")
    expect(np.array_equal(got["routed"], routed), f"{label}: routed {got['routed']} != {routed}")
    expect(np.array_equal(got["kept"], kept), f"{label}: kept {got['kept']} != {kept}")
    expect((dropped > 0) == (cap > 0), f"{label}: {dropped} dropped")
    expect(biased > 0, f"{label}: the selection bias changed no choice")
    router_grad = float(np.max(np.abs(got["dwr"] - got["dwr0"])))
    return ties, router_grad, float(p["wr"].grad.abs().max())


def check_top1_router_learns(driver, tmp):
    """Top-1, no aux or z loss: the router's gradient is the output's alone. Normalized gates: exactly zero here
    and in PyTorch (softmax over one logit); unnormalized and pre-softmax: nonzero (and equal to PyTorch's,
    run_case)."""
    for case in NO_AUX:
        _, grad, ref = run_case(driver, case, tmp)
        if case[1] == "normalized":
            expect(grad == 0 and ref == 0, f"top-1 normalized: router gradient {grad:.3e} (PyTorch {ref:.3e}), want 0")
        else:
            expect(grad > 1e-3 and ref > 1e-3, f"top-1 {case[1]}: router gradient {grad:.3e} (PyTorch {ref:.3e})")
        print(f"top-1 {case[1]}, no aux or z loss: largest router gradient {grad:.3e} (PyTorch {ref:.3e})")


def check_threads(driver, tmp):
    """The same bits at 1 and 3 threads, on rows enough for several matmul row blocks per expert."""
    outs = []
    for threads in (1, 3):
        path = os.path.join(tmp, f"threads{threads}.bin")
        subprocess.run([driver, path, "sigmoid", "unnormalized", "2.5", "1.5", "6000", "16", "24", "4", "2", "0.5", "0.1", "0.05", "7"],
                       check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        outs.append(open(path, "rb").read())
    same = outs[0] == outs[1]
    print(f"6000 rows, 4 experts: 1 and 3 threads {'bitwise equal' if same else 'DIFFER'}")
    expect(same, "results differ between 1 and 3 threads")


def main():
    torch.set_default_dtype(torch.float64)
    with tempfile.TemporaryDirectory() as tmp:
        ties = sum(run_case(sys.argv[1], case, tmp)[0] for case in CASES)
        check_top1_router_learns(sys.argv[1], tmp)
        check_threads(sys.argv[1], tmp)
    expect(ties > 0, "no capacity cut fell between equal scores: the tie rule was not exercised")
    print("FAILED" if expect.failed else "ok", f"({len(expect.failed)} failure(s), {len(CASES)} cases)")
    return 1 if expect.failed else 0


if __name__ == "__main__":
    sys.exit(main())
