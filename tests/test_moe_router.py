#!/usr/bin/python3
"""test_moe_router.py: the router's gates in the trainer (--moe-gates, --moe-routed-scale; issue 42).

1. A top-1 router learns: --moe-top-k 1 with no aux or z loss and no weight decay (so only the language-model
   loss moves the router), the router weights at the step-5 checkpoint differ from step 1's by more than 1e-4
   (the default gates for top-1 are unnormalized). Before --moe-gates every top-1 gate was renormalised to 1 and
   these weights stayed equal bit for bit; --moe-gates normalized still does that, and is asserted to.
2. The gates in the checkpoint: the manifest records gates and routed_scale; a checkpoint resumes with its own
   and is refused, in one line naming the flags, with other gates or another scale; a manifest without them
   (written before --moe-gates) holds normalized gates at scale 1. --moe-routed-scale reaches the layer (the
   first step's loss differs at scale 2).
3. Bad input, one line each: pre-softmax with the sigmoid router, a scale out of range, the flags without
   --experts.
usage: test_moe_router.py   (BATCHSCALE in the environment)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.moe_runs as tm  # noqa: E402  (train, read_ckpt, layout, unflatten, refusals, run_on_corpus)

SEQ = 32
ONLY_LM = ["--seq-len", str(SEQ), "--micro-batch", "4", "--moe-aux-loss", "0", "--moe-z-loss", "0",
           "--weight-decay", "0"]


def routers(flat):
    """The router weights (L, E, C) of the test model (tm.MODEL) in a flat parameter buffer."""
    cfg = dict(C=32, E=4, F=128, L=2, maxT=SEQ, V=128)
    _, per_layer, _ = tm.layout(cfg)
    others = SEQ * cfg["C"] + cfg["L"] * sum(int(np.prod(s)) for _, s in per_layer) + 2 * cfg["C"]
    cfg["V"] = (flat.size - others) // cfg["C"]  # the padded vocabulary: what is left is wte
    return tm.unflatten(cfg, flat)["router"]


def router_moves(tmp, data, name, extra):
    """The largest change of any router weight between the step-1 and step-5 checkpoints of a 5-step run."""
    _, d = tm.train(tmp, name, data, ONLY_LM + ["--steps", "5", "--ckpt-every", "1", "--keep-last", "0"] + extra)
    return float(np.max(np.abs(routers(tm.read_ckpt(d, 5)[0]) - routers(tm.read_ckpt(d, 1)[0])))), d


def top1_learns(tmp, data):
    moved, _ = router_moves(tmp, data, "top1", ["--moe-top-k", "1"])
    tm.check(moved > 1e-4, f"top-1, default gates: the router moves {moved:.2e} from step 1 to 5 (> 1e-4) on the "
                           "language-model loss alone")
    frozen, _ = router_moves(tmp, data, "top1_norm", ["--moe-top-k", "1", "--moe-gates", "normalized"])
    tm.check(frozen == 0, f"top-1, --moe-gates normalized: one renormalised gate is 1, the router stays put "
                          f"({frozen:.2e})")
    top2, _ = router_moves(tmp, data, "top2", ["--moe-top-k", "2"])
    tm.check(top2 > 1e-4, f"top-2, default gates: the router moves {top2:.2e}")


def one_line_refusal(p, text, what):
    lines = p.stderr.strip().splitlines()
    tm.check(p.returncode != 0 and len(lines) == 1 and text in lines[0],
             f"{what} refused in one line: {lines[-1] if lines else '(nothing)'}")


def gates_in_checkpoints(tmp, data):
    common = ONLY_LM + ["--moe-top-k", "1", "--steps", "2", "--ckpt-every", "1", "--keep-last", "0"]
    _, d = tm.train(tmp, "ck", data, common)
    step1 = os.path.join(d, "step_00000001")
    with open(os.path.join(step1, "manifest.json")) as f:
        manifest = json.load(f)
    moe = manifest["model"]["moe"]
    tm.check(moe.get("gates") == "unnormalized" and moe.get("routed_scale") == 1,
             f"the manifest records the gates and the scale: {moe}")
    rows, _ = tm.train(tmp, "ck_same", data, common + ["--resume", step1])
    tm.check(rows[-1]["step"] == 2, "a checkpoint resumes with its own gates")
    flags = "; resume with the same (flags: --moe-gates, --moe-routed-scale)"
    for extra, text in [(["--moe-gates", "normalized"], "with unnormalized gates and a routed scale of 1, not "
                                                       "normalized gates and 1" + flags),
                        (["--moe-routed-scale", "2"], "a routed scale of 1, not unnormalized gates and 2" + flags)]:
        p = tm.train(tmp, "ck_other", data, common + extra + ["--resume", step1], check_rc=False)
        one_line_refusal(p, text, f"resuming with {' '.join(extra)}")
    del moe["gates"], moe["routed_scale"]  # a manifest written before --moe-gates: every gate renormalised
    with open(os.path.join(step1, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    p = tm.train(tmp, "ck_old", data, common + ["--resume", step1], check_rc=False)
    one_line_refusal(p, "with normalized gates and a routed scale of 1, not unnormalized gates and 1" + flags,
                     "an older top-1 checkpoint resumed with the new default")
    rows, _ = tm.train(tmp, "ck_old_norm", data, common + ["--moe-gates", "normalized", "--resume", step1])
    tm.check(rows[-1]["step"] == 2, "an older checkpoint resumes with --moe-gates normalized")
    one, _ = tm.train(tmp, "scale1", data, ONLY_LM + ["--steps", "1"])
    two, _ = tm.train(tmp, "scale2", data, ONLY_LM + ["--steps", "1", "--moe-routed-scale", "2"])
    tm.check(one[0]["loss"] != two[0]["loss"], f"--moe-routed-scale 2 changes the first loss ({one[0]['loss']:.6f} "
                                               f"against {two[0]['loss']:.6f})")


def bad_input(tmp, data):
    cases = [(["--moe-gates", "pre-softmax", "--router", "sigmoid"],
              "the sigmoid router takes unnormalized gates (flags: --moe-gates, --router)"),
             (["--moe-routed-scale", "0"], "--moe-routed-scale"),
             (["--moe-gates", "renormalized"], "--moe-gates"),
             (["--experts", "0", "--moe-gates", "normalized"], "a dense model (at most 1 expert) cannot use MoE gates other "
                                                               "than the default: it needs a Mixture-of-Experts model "
                                                               "(flags: --moe-gates, --experts)"),
             (["--experts", "0", "--moe-routed-scale", "2"], "a dense model (at most 1 expert) cannot use a routed scale: it "
                                                             "needs a Mixture-of-Experts model (flags: --moe-routed-scale, "
                                                             "--experts)")]
    tm.refusals(tmp, data, [(extra, 1, text) for extra, text in cases])


if __name__ == "__main__":
    tm.run_on_corpus(top1_learns, gates_in_checkpoints, bad_input)
    print("ok")
