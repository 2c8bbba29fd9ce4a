"""moe_runs.py: what the MoE tests share: train a small MoE GPT through `batchscale train`, read its
checkpoints (one shard or expert-parallel shards) as the logical flat parameters, the tensor layout of an MoE
model, a run against its one-process oracle, refusals in one line, and the checks' one counter (check)."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bstest  # noqa: E402
import torch_gpt  # noqa: E402
from bstest import Checks, launch, rel  # noqa: E402,F401  (rel: the tests' tm.rel)


TOL = 1e-5
# Under AdamW the final weights carry a summation-order floor: AdamW divides by sqrt(v) + eps, so an expert weight
# whose gradient is rounding-sized (a hidden unit GELU rarely opens) moves by lr x a ratio of two rounding-sized
# numbers, and its size depends on how this CPU's BLAS orders its sums (2 ranks against 1 process dropless: 7.4e-6
# on one AMD EPYC family 25, 1.2e-5 on another machine of the CI). So each layout test measures that floor beside
# its reference and bounds the weights by the larger of TOL and FLOOR_K x it: here the 1 process with each batch's
# sequences in another order (REORDERINGS; the objective is the same, the sums' order is not); in the EP and TP
# tests plain data parallelism, itself held to this floor here. FLOOR_K = 4 as the bf16 and FP8 layout tests' K
# (one sample of a spread, over a multi-step run). The losses, the loads and the dropped shares stay at TOL and
# exact.
FLOOR_K = 4
check = Checks()


def layout(cfg):
    """(name, per-layer, shape) of the flat buffer in order: an MoE model's."""
    C, E, Fh, T = cfg["C"], cfg["E"], cfg["F"], cfg["maxT"]
    per_layer = [("ln1w", (C,)), ("ln1b", (C,)), ("qkvw", (3 * C, C)), ("qkvb", (3 * C,)), ("attprojw", (C, C)),
                 ("attprojb", (C,)), ("ln2w", (C,)), ("ln2b", (C,)), ("router", (E, C)),
                 ("experts", (E, 2 * Fh * C + Fh + C))]
    return [("wte", (torch_gpt.padded_vocab(cfg["V"]), C)), ("wpe", (T, C))], per_layer, [("lnfw", (C,)),
                                                                                          ("lnfb", (C,))]


def layer_layout(cfg, l):
    """Layer l's (name, shape) in order: the MoE MLP when (l + 1) % every == 0 (--moe-every, cfg "every", default
    1), else the dense MLP (fcw fcb fcprojw fcprojb) in the router's and experts' place."""
    per_layer = layout(cfg)[1]
    if (l + 1) % cfg.get("every", 1) == 0:
        return per_layer
    C = cfg["C"]
    return per_layer[:8] + [("fcw", (4 * C, C)), ("fcb", (4 * C,)), ("fcprojw", (C, 4 * C)), ("fcprojb", (C,))]


def unflatten(cfg, flat):
    """name -> array; per-layer tensors stacked over the L layers, zero in the layers that lack them."""
    head, _, tail = layout(cfg)
    out, at = {}, 0
    for name, shape in head:
        n = int(np.prod(shape))
        out[name], at = flat[at:at + n].reshape(shape), at + n
    shapes = {name: shape for l in range(cfg["L"]) for name, shape in layer_layout(cfg, l)}
    layers = {name: [np.zeros(shape, flat.dtype) for _ in range(cfg["L"])] for name, shape in shapes.items()}
    for l in range(cfg["L"]):
        for name, shape in layer_layout(cfg, l):
            n = int(np.prod(shape))
            layers[name][l] = flat[at:at + n].reshape(shape)
            at += n
    for name in layers:
        out[name] = np.stack(layers[name])
    for name, shape in tail:
        n = int(np.prod(shape))
        out[name], at = flat[at:at + n].reshape(shape), at + n
    assert at == flat.size, (at, flat.size)
    return out


BATCHSCALE = os.environ.get("BATCHSCALE", "build/batchscale")
MODEL = ["--layers", "2", "--heads", "4", "--channels", "32", "--experts", "4", "--moe-top-k", "2"]


def train(tmp, name, data, extra, ranks=1, check_rc=True):
    """A run into tmp/name (metrics, checkpoints); returns (metrics rows, ckpt dir) or the process."""
    out = os.path.join(tmp, name)
    args = ["train", "--data", data, "--eval-every", "0", "--sample-tokens", "0", "--threads", "1",
            "--comm-timeout", "60", "--quiet", "--metrics", out + ".jsonl", "--ckpt-dir", out + "_ckpt"] + MODEL + extra
    p = launch(args, ranks, check=check_rc)
    if not check_rc:
        return p
    rows = [json.loads(line) for line in open(out + ".jsonl")]
    return rows, out + "_ckpt"


def read_ckpt(ckpt_dir, step):
    """The flat parameters (every rank file's range) and the MoE bias of a checkpoint."""
    d = os.path.join(ckpt_dir, f"step_{step:08d}")
    pieces = []
    for name in sorted(os.listdir(d)):
        if name.startswith("rank_"):
            raw = open(os.path.join(d, name), "rb").read()
            offset, count = np.frombuffer(raw[8:24], np.uint64)
            pieces.append((int(offset), np.frombuffer(raw[64:64 + 4 * int(count)], np.float32)))
    flat = np.zeros(max(o + len(v) for o, v in pieces), np.float32)
    for o, v in pieces:
        flat[o:o + len(v)] = v
    raw = open(os.path.join(d, "moe_bias.bin"), "rb").read()
    assert raw[:8] == b"BSMOEB01"
    layers, experts = np.frombuffer(raw[8:16], np.uint32)
    return flat, np.frombuffer(raw[16:], np.float32).reshape(int(layers), int(experts))


SHORT_NAMES = {"loss": "lm", "moe_aux_loss": "aux", "moe_z_loss": "z"}


def against_oracle(label, rows, ref, weights, ref_weights, keys=("loss", "moe_aux_loss"), note="", steps=10,
                   weight_tol=TOL):
    """A layout's run against its 1-process oracle: each metric of keys within TOL (relative) at every step, every
    step's loads and dropped shares equal, the final weights within weight_tol (max |a-b| / max |b|; note: what is
    printed beside the figure) and the balancing bias equal."""
    (w, b), (ref_w, ref_b) = weights, ref_weights
    errs = [max(abs(a[k] - r[k]) / r[k] for a, r in zip(rows, ref)) for k in keys]
    check(len(rows) == steps and max(errs) < TOL, f"{label}: losses within {TOL} of 1 process ("
          + ", ".join(f"{SHORT_NAMES.get(k, k)} {e:.1e}" for k, e in zip(keys, errs)) + ")")
    check(all(a["moe_load_max_mean"] == r["moe_load_max_mean"] and a["moe_dropped"] == r["moe_dropped"]
              for a, r in zip(rows, ref)), f"{label}: every step's loads and dropped shares equal 1 process's")
    check(w.shape == ref_w.shape and rel(w, ref_w) < weight_tol and np.array_equal(b, ref_b),
          f"{label}: final weights within {weight_tol:.1e} ({rel(w, ref_w):.1e}{note}), bias equal")


# The flags the expert-parallel tests share.
EP_COMMON = ["--seq-len", "32", "--global-batch", "4", "--lr", "3e-3", "--warmup", "2", "--moe-z-loss", "1e-3",
             "--moe-bias-update", "1e-3"]


def manifest(ckpt_dir, step):
    d = os.path.join(ckpt_dir, f"step_{step:08d}")
    return d, json.load(open(os.path.join(d, "manifest.json")))


def read_ep_ckpt(ckpt_dir, step, array=0):
    """The logical flat parameters (array 0; 1 and 2: Adam's m and v) and the bias of a checkpoint of any ep: shard
    e's layout holds E/ep experts per layer (its local expert j is logical expert e E/ep + j); the dense tensors are
    taken from shard 0."""
    d, m = manifest(ckpt_dir, step)
    ep = m["layout"].get("ep", 1)
    moe = m["model"]["moe"]
    cfg = {"C": m["model"]["channels"], "E": moe["experts"], "F": moe["ffn"], "maxT": m["model"]["seq_len"],
           "V": m["model"]["vocab"]}
    pieces = {e: [] for e in range(ep)}  # shard e: (offset, values) of its files
    for f in m["files"]:
        raw = open(os.path.join(d, f["name"]), "rb").read()
        at = 64 + 4 * f["count"] * array  # the header, then params, m and v of the file's range
        pieces[f["shard"]].append((f["offset"], np.frombuffer(raw[at:at + 4 * f["count"]], np.float32)))
    local = [np.concatenate([v for _, v in sorted(pieces[e], key=lambda p: p[0])]) for e in range(ep)]
    raw = open(os.path.join(d, "moe_bias.bin"), "rb").read()
    layers, experts = np.frombuffer(raw[8:16], np.uint32)
    bias = np.frombuffer(raw[16:], np.float32).reshape(int(layers), int(experts))
    if m["layout"]["tp"] == m["layout"]["pp"] == ep == 1:  # one shard: the logical layout (whatever its layers hold)
        return local[0], bias
    at = [0] * ep
    out = []
    head, per_layer, tail = layout(cfg)
    for name, shape in head + per_layer * m["model"]["layers"] + tail:
        n = int(np.prod(shape)) // (ep if name == "experts" else 1)  # per shard
        taken = [local[e][at[e]:at[e] + n] for e in range(ep)]
        out += taken if name == "experts" else taken[:1]
        at = [a + n for a in at]
    check(all(a == len(v) for a, v in zip(at, local)), f"{d}: every shard's files hold its layout exactly")
    return np.concatenate(out), bias


def refusals(tmp, data, cases, base=("--seq-len", "32", "--steps", "1")):
    """Each case (extra flags, ranks, text) is refused: a non-zero exit and one line on stderr holding text."""
    for extra, ranks, text in cases:
        p = train(tmp, "bad", data, list(base) + extra, ranks=ranks, check_rc=False)
        lines = p.stderr.strip().splitlines()
        check(p.returncode != 0 and len(lines) == 1 and text in lines[0],
              f"{' '.join(extra)} refused in one line: {lines[-1] if lines else '(nothing)'}")


def run_on_corpus(*parts):
    """Each part(tmp, data) in turn on one small byte corpus in a temporary directory; exit 1 if a check failed."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(bstest.make_corpus(tmp), "train_000000.bin")
        for part in parts:
            part(tmp, data)
    if check.failed:
        print(f"{len(check.failed)} check(s) failed")
        sys.exit(1)
