#!/usr/bin/python3
"""test_moe_pipeline.py: MoE models with --moe-every and pipeline parallelism in the trainer.

Model: L 4, C 32, E 4, K 2, --moe-every 2 (layers 1 and 3 MoE, 0 and 2 dense: layer blocks of two sizes).
1. Layouts against 1 process at the same micro-step batch over 10 steps, dropless and under a capacity
   factor that drops: pp 2 (stage 0 holds layers 0-1, stage 1 layers 2-3), pp 2 with --pp-split 1,3 (a
   stage without MoE layers beside one with both), pp 2 x ep 2 (4 ranks, the EP group inside a stage),
   interleaved virtual stages (dropless), pp 2 with every layer MoE (dropless) and pp 2 x tp 2 (dropping;
   its weights read through a 1-process resume of its checkpoint). Language-model, aux
   and z losses (the last two summed over every stage's layers) within 1e-5 (relative), every step's loads
   and dropped shares equal, final weights within 1e-5 (max |a-b| / max |b|; with EP or TP, which reorder the
   gradient's sums, the larger of 1e-5 and FLOOR_K x plain data parallelism's floor beside it) and the bias
   equal. The pipeline checkpoints are read here from their shard files
   (stage s holds its layers; ep rank e the experts e E/ep ..), not by batchscale.
2. Checkpoints: pp 2 x ep 2 -> 1 process bitwise (resumed with nothing left to train, it writes the state
   it read), the bias included.
3. Metrics: one load entry per MoE layer.
4. Bad input, one line each: --pp-schedule zbh1 with MoE, --moe-every beyond --layers.
usage: test_moe_pipeline.py   (BATCHSCALE in the environment)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.moe_runs as tm  # noqa: E402  (train, read_ckpt, layout, layer_layout, check, rel)

LAYERS, EVERY = 4, 2
MODEL = ["--layers", str(LAYERS), "--moe-every", str(EVERY)]  # after tm.MODEL's --layers 2: the last one counts
COMMON = MODEL + ["--seq-len", "32", "--global-batch", "4", "--lr", "3e-3", "--warmup", "2", "--moe-z-loss", "1e-3",
                  "--moe-bias-update", "1e-3"]
MODES = [("dropless", ["--dropless"]), ("capacity", ["--capacity-factor", "1.0"])]
# (name, ranks, flags, modes): each compares with 1 process at micro-batch 2 (the aux and z losses are over
# each micro-step's data-parallel batch: 2 sequences in every layout here)
LAYOUTS = [("pp2", 2, ["--micro-batch", "2", "--pp", "2"], ("dropless", "capacity")),
           ("pp2_split13", 2, ["--micro-batch", "2", "--pp", "2", "--pp-split", "1,3"], ("dropless", "capacity")),
           ("pp2_ep2", 4, ["--micro-batch", "1", "--pp", "2", "--ep", "2"], ("dropless", "capacity")),
           ("pp2_vs2", 2, ["--micro-batch", "2", "--pp", "2", "--pp-schedule", "interleaved", "--virtual-stages",
                           "2"], ("dropless",)),
           ("pp2_every1", 2, ["--micro-batch", "2", "--pp", "2", "--moe-every", "1"], ("dropless",)),
           ("pp2_tp2", 4, ["--micro-batch", "2", "--pp", "2", "--tp", "2"], ("capacity",))]


def stage_of_layers(split):
    """The model stage of each layer from the manifest's pp_split (layers per stage, virtual stages counted as
    stages in model order)."""
    return [s for s, n in enumerate(int(x) for x in split.split(",")) for _ in range(n)]


def read_pp_ckpt(ckpt_dir, step):
    """The logical flat parameters and the bias of a checkpoint of any pp x ep (tp 1): the manifest's pp counts
    model stages (virtual ones included); shard s + ep_index x stages holds the embeddings (stage 0), its layers and the final LayerNorm (the last stage), each layer's
    experts split over the ep ranks (local expert j of ep rank e is logical expert e E/ep + j), the other
    tensors alike on every ep rank (taken from ep 0's)."""
    d = os.path.join(ckpt_dir, f"step_{step:08d}")
    m = json.load(open(os.path.join(d, "manifest.json")))
    lay = m["layout"]
    stages, ep = lay["pp"], lay.get("ep", 1)
    moe = m["model"]["moe"]
    cfg = {"C": m["model"]["channels"], "E": moe["experts"], "F": moe["ffn"], "maxT": m["model"]["seq_len"],
           "V": m["model"]["vocab"], "L": m["model"]["layers"], "every": moe.get("every", 1)}
    pieces = {}
    for f in m["files"]:
        raw = open(os.path.join(d, f["name"]), "rb").read()
        pieces.setdefault(f["shard"], []).append((f["offset"], np.frombuffer(raw[64:64 + 4 * f["count"]], np.float32)))
    local = {s: np.concatenate([v for _, v in sorted(p, key=lambda x: x[0])]) for s, p in pieces.items()}
    at = {s: 0 for s in local}
    head, _, tail = tm.layout(cfg)
    layer_stage = stage_of_layers(lay["pp_split"])
    tensors = [(0, name, shape) for name, shape in head]
    for l in range(cfg["L"]):
        tensors += [(layer_stage[l], name, shape) for name, shape in tm.layer_layout(cfg, l)]
    tensors += [(stages - 1, name, shape) for name, shape in tail]
    out = []
    for vs, name, shape in tensors:
        n = int(np.prod(shape)) // (ep if name == "experts" else 1)  # per shard
        shards = [vs + e * stages for e in range(ep)]
        taken = [local[s][at[s]:at[s] + n] for s in shards]
        out += taken if name == "experts" else taken[:1]
        for s in shards:
            at[s] += n
    tm.check(all(at[s] == len(v) for s, v in local.items()), f"{d}: every shard's files hold its layout exactly")
    raw = open(os.path.join(d, "moe_bias.bin"), "rb").read()
    layers, experts = np.frombuffer(raw[8:16], np.uint32)
    return np.concatenate(out), np.frombuffer(raw[16:], np.float32).reshape(int(layers), int(experts))


def one_process_state(tmp, data, name, ckpt, flags):
    """A checkpoint resumed on 1 process with nothing left to train: the state it read, in the 1-process layout."""
    _, d_one = tm.train(tmp, name + "_one", data, COMMON + flags + ["--steps", "10", "--micro-batch", "2", "--resume",
                                                                   os.path.join(ckpt, "step_00000010")])
    return tm.read_ckpt(d_one, 10)


def compare(name, mode, rows, ckpt, ref, ref_ckpt, weights, floor=None):
    """Against 1 process; the aux and z losses summed over every stage's layers; the weights within TOL, or with a
    floor (plain data parallelism's) within the larger of TOL and FLOOR_K x it."""
    note = f"; max |bias| {np.abs(weights[1]).max():.4f}" + ("" if floor is None else f"; dp 2 {floor:.1e}")
    tm.against_oracle(f"{mode}, {name}", rows, ref, weights, tm.read_ckpt(ref_ckpt, 10),
                      keys=("loss", "moe_aux_loss", "moe_z_loss"), note=note,
                      weight_tol=tm.TOL if floor is None else max(tm.TOL, tm.FLOOR_K * floor))


def layouts(tmp, data):
    for mode, flags in MODES:
        refs = {}
        for every in ((EVERY, 1) if mode == "dropless" else (EVERY,)):
            refs[every] = tm.train(tmp, f"ref_{mode}_e{every}", data, COMMON + flags + [
                "--steps", "10", "--micro-batch", "2", "--moe-every", str(every)])
        ref, ref_dir = refs[EVERY]
        dropped = max(max(r["moe_dropped"]) for r in ref)
        tm.check((dropped > 0) == (mode == "capacity"), f"{mode}: largest dropped share of a step {dropped:.3f}")
        tm.check(all(len(r["moe_load_max_mean"]) == LAYERS // EVERY for r in ref),
                 f"{mode}: the metrics hold one load entry per MoE layer ({LAYERS // EVERY})")
        # EP and TP reorder the gradient's sums (harness/moe_runs.py's FLOOR_K): their floor is plain data
        # parallelism at the oracle's micro-steps (2 ranks at micro-batch 1)
        _, floor_dir = tm.train(tmp, f"dp2_{mode}", data, COMMON + flags + ["--steps", "10", "--micro-batch", "1"],
                                ranks=2)
        floor = tm.rel(tm.read_ckpt(floor_dir, 10)[0], tm.read_ckpt(ref_dir, 10)[0])
        for name, ranks, extra, modes in LAYOUTS:
            if mode not in modes:
                continue
            every = 1 if "--moe-every" in extra else EVERY
            rows, d = tm.train(tmp, f"{name}_{mode}", data, COMMON + flags + ["--steps", "10"] + extra, ranks=ranks)
            # tensor-parallel shards are read through batchscale's resharding (test_moe_tp checks it), others here
            weights = one_process_state(tmp, data, name, d, flags) if "--tp" in extra else read_pp_ckpt(d, 10)
            compare(name, mode, rows, d, *refs[every], weights,
                    floor=floor if "--ep" in extra or "--tp" in extra else None)
            if name == "pp2_ep2" and mode == "capacity":
                reshard(tmp, data, d, flags)


def reshard(tmp, data, d, flags):
    """The pp 2 x ep 2 checkpoint resumed on 1 process with nothing left to train: the same state bit for bit."""
    w, b = read_pp_ckpt(d, 10)
    w_one, b_one = one_process_state(tmp, data, "rs", d, flags)
    tm.check(np.array_equal(w, w_one) and np.array_equal(b, b_one) and np.abs(b).max() > 0,
             "checkpoint pp 2 x ep 2 -> 1 process: the weights and the bias bit for bit")


def bad_input(tmp, data):
    cases = [(["--pp", "2", "--pp-schedule", "zbh1"], 1, "does not work with the zbh1 pipeline schedule (the split "
                                                         "backward does not train MoE layers) (flags: --experts, --pp-schedule)"),
             (["--moe-every", "5"], 1, "MoE every 5 layers is more than the 4 layers"),
             (["--moe-every", "5"], 1, "(flags: --moe-every, --layers)")]
    tm.refusals(tmp, data, cases, base=MODEL + ["--seq-len", "32", "--steps", "1"])


def main():
    tm.run_on_corpus(bad_input, layouts)


if __name__ == "__main__":
    main()
