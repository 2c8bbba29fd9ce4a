#!/usr/bin/python3
"""test_lora.py: LoRA fine-tuning under every layout it composes with, its
memory, its checkpoints and its bad input (numerics against peft are
tests/test_lora_peer.py).

A base model (2 layers, C 32) is trained briefly without LoRA; rank-4
adapters on all four linear layers then train over it for 8 steps, global
batch 8, and the adapted model is exported merged (--lora-merge: W + s B A).
1. Layouts: 1 process with accumulation 4 is the reference; 2 processes at
   ZeRO 0, 1 and 2 (accumulation 2), TP 2, and TP 2 x DP 2 (4 processes)
   give the same losses (relative 1e-5) and merged weights (max |a-b| /
   max |b| within 1e-5; fp32, only summation order differs); with
   --lora-dropout 0.2 too (DP 2 and TP 2: the masks are keyed by the data).
2. The base stays frozen: every tensor of the merged file outside the four
   adapted weight matrices equals the base file's bit for bit, and so do the
   adapted ones of a run whose adapters stayed zero (--lr 0).
3. Memory: the run's parameter + gradient + optimizer bytes (state_bytes)
   are the frozen base plus 4 floats per adapter element (its value,
   gradient and two Adam moments), far below full fine-tuning's 4 per model
   element; measured against a full fine-tuning run of the same model.
4. A checkpoint at step 4 resumes to the same final weights bit for bit, and
   resuming it without --lora-rank is refused in one line. Its manifest
   records the frozen base's hash (XXH64 of the base in the logical layout),
   the same from TP 2 and TP 2 x DP 2 runs; resuming over a base file with
   one weight changed is refused in one line.
8. Adapters round-trip: --save-adapters at alpha 8, dropout 0.1, targets
   qkv,fc writes them in adapter_config.json with the base's path and hash
   (peft's "revision"); --lora-init of that directory with no LoRA flag
   gives bit for bit the run with all four flags set to the saved values;
   editing lora_alpha in the file changes the loss (the file is read);
   loading them over another base warns in one line (they load, as peft
   would load them), over their own base says nothing; a
   flag set to another value is refused in one line naming the flag and the
   file, as are configs batchscale cannot apply as peft would (use_rslora, a
   target outside the four layers) and --lora-init without a config or
   --lora-rank.
7. --base-weights bf16 and int8 (the frozen linear weights kept in 2 or 1
   bytes, int8 with a per-row scale; wte in bf16) give bit for bit the run of an fp32 base
   over a file rounded the same way in NumPy; their state bytes and final
   loss against the fp32 base are printed.
6. DiLoCo (--local-steps 4) over LoRA synchronises only the adapters: the
   bytes sent are the adapters' pseudo-gradient every 4th step, nothing
   between, and the base stays frozen.
5. Bad input, exactly one line of stderr each (under mpirun, exactly one
   from each rank; the launcher's own lines aside): --lora-targets with an
   unknown layer, LoRA flags without --lora-rank, --zero 3, --precision bf16,
   int8 base weights with --tp, --lora-init of a file holding other tensors.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import Checks, make_corpus, one_line_error, read_model, rel  # noqa: E402
from harness.lora_runs import train  # noqa: E402

TOL = 1e-5
check = Checks()


def refused(p, named, ranks=1):
    """A refusal: a non-zero exit and exactly one line of stderr naming `named` (bstest.one_line_error)."""
    line = one_line_error(p, ranks)
    return p.returncode != 0 and line is not None and named in line


def base_hash(step_dir):
    """The frozen base's hash a LoRA checkpoint's manifest records."""
    with open(os.path.join(step_dir, "manifest.json")) as f:
        return json.load(f)["model"]["lora"].get("base_xxh64", "(none)")


def round_trip(d, base, other, ck_hash):
    """8. --save-adapters writes what the run used; --lora-init takes it back, flags left out."""
    saved = os.path.join(d, "saved")
    train(d, "save", ["--init-from", base, "--steps", "4", "--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout",
                      "0.1", "--lora-targets", "qkv,fc", "--save-adapters", saved])
    with open(os.path.join(saved, "adapter_config.json")) as f:
        cfg = json.load(f)
    check(cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["lora_dropout"] == 0.1 and
          cfg["target_modules"] == ["attn.c_attn", "mlp.c_fc"] and
          cfg["base_model_name_or_path"] == os.path.realpath(base) and cfg["revision"] == "batchscale-xxh64:" + ck_hash,
          f"adapter_config.json holds the run's r, alpha, dropout, targets, base path and base hash: "
          f"{ {k: cfg.get(k) for k in ('r', 'lora_alpha', 'lora_dropout', 'target_modules', 'revision')} }")
    load = ["--init-from", base, "--steps", "1", "--lora-init", saved]
    unset, _ = train(d, "load_unset", load)
    given, _ = train(d, "load_set", load + ["--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout", "0.1",
                                            "--lora-targets", "qkv,fc"])
    check(unset[0]["loss"] == given[0]["loss"],
          f"--lora-init with the LoRA flags left out runs as with the saved values given ({unset[0]['loss']:.6f} "
          f"vs {given[0]['loss']:.6f})")
    same, moved = (train(d, "load_base", ["--init-from", b, "--steps", "1", "--lora-init", saved, "--lora-merge"],
                         check_rc=False) for b in (base, other))
    check(same.returncode == 0 and same.stderr == "" and moved.returncode == 0 and
          f"trained over a base of hash {ck_hash}" in (one_line_error(moved) or ""),
          f"--lora-init over another base than the adapters' warns in one line, over theirs says nothing "
          f"({moved.stderr.strip()[:140]})")
    edited = os.path.join(d, "edited")
    shutil.copytree(saved, edited)
    with open(os.path.join(edited, "adapter_config.json"), "w") as f:
        json.dump(dict(cfg, lora_alpha=16), f)
    alpha16, _ = train(d, "load_edit", ["--init-from", base, "--steps", "1", "--lora-init", edited])
    check(alpha16[0]["loss"] != unset[0]["loss"],
          f"lora_alpha 16 in the file changes the loss ({alpha16[0]['loss']:.6f} vs {unset[0]['loss']:.6f})")
    bad_configs = {"rslora": dict(cfg, use_rslora=True), "head": dict(cfg, target_modules=["c_attn", "lm_head"])}
    for name, bad_cfg in bad_configs.items():
        os.makedirs(os.path.join(d, name))
        with open(os.path.join(d, name, "adapter_config.json"), "w") as f:
            json.dump(bad_cfg, f)
    take = "leave it out to take it (flags: "
    cases = [(["--lora-init", saved, "--lora-alpha", "16"], ("the LoRA alpha 16 differs from lora_alpha 8",
                                                          take + "--lora-alpha)")),
             (["--lora-init", saved, "--lora-rank", "8"], ("the LoRA rank 8 differs from r 4", take + "--lora-rank)")),
             (["--lora-init", saved, "--lora-dropout", "0"], ("the adapter dropout 0 differs from lora_dropout 0.1",
                                                            take + "--lora-dropout)")),
             (["--lora-init", saved, "--lora-targets", "all"], ("the adapted layers all differ from target_modules",
                                                              "(flags: --lora-targets)")),
             (["--lora-init", os.path.join(d, "rslora")], ("use_rslora",)),
             (["--lora-init", os.path.join(d, "head")], ("'lm_head'",)),
             (["--lora-init", os.path.join(d, "data")], ("give the LoRA rank (flags: --lora-init, --lora-rank)",))]
    for extra, named in cases:
        p = train(d, "bad", ["--init-from", base, "--steps", "1"] + extra, check_rc=False)
        check(all(refused(p, n) for n in named), f"{' '.join(extra[2:]) or extra[1]}: refused in one line naming "
                                                 f"{named!r} ({p.stderr.strip()[:150]})")


def bf16_bits(w):
    """w rounded to bf16 by round-to-nearest-even of the bits, kept in float32."""
    u = w.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)


def round_linear(body, header, kind):
    """The llm.c file's values as a reduced --base-weights stores them: wte in bf16, each layer's four linear
    weights (out, in) in bf16, or int8 by absmax per output row (scale = max|w| / 127, q = rint(w / scale),
    w = q x scale), all in float32."""
    T, V, L, C, Vp = (int(header[i]) for i in (2, 3, 4, 6, 7))
    sizes = [("wte", Vp * C), ("wpe", T * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
             ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
             ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C)]
    shapes = {"qkvw": (3 * C, C), "attprojw": (C, C), "fcw": (4 * C, C), "fcprojw": (C, 4 * C)}
    out, at = body.copy(), 0
    for name, n in sizes:
        if name in shapes:
            w = out[at:at + n].reshape(L, *shapes[name])
            if kind == "bf16":
                w[...] = bf16_bits(w)
            else:
                scale = np.abs(w).max(axis=2, keepdims=True) / np.float32(127)
                scale[scale == 0] = 1
                w[...] = np.rint(w / scale).astype(np.float32) * scale
        elif name == "wte":
            out[at:at + n] = bf16_bits(out[at:at + n])
        at += n
    return out


def main():
    with tempfile.TemporaryDirectory() as d:
        make_corpus(d)
        base = os.path.join(d, "base.bin")
        _, base_w = train(d, "base", ["--layers", "2", "--heads", "4", "--channels", "32", "--steps", "6"])
        lora = ["--init-from", base, "--steps", "8", "--lora-rank", "4", "--lora-alpha", "8", "--lora-merge"]

        ref_m, ref_w = train(d, "ref", lora)
        layout_hashes = {}
        ref_loss = [x["loss"] for x in ref_m]
        changed = rel(ref_w, base_w)
        check(changed > 1e-4, f"the merged model moved from the base ({changed:.2e}): the adapters trained")
        for name, extra, ranks in [("dp2 zero0", ["--zero", "0"], 2), ("dp2 zero1", ["--zero", "1"], 2),
                                   ("dp2 zero2", ["--zero", "2"], 2), ("tp2", ["--tp", "2"], 2),
                                   ("tp2 dp2 zero1", ["--tp", "2", "--zero", "1"], 4)]:
            ck_dir = os.path.join(d, "ck_" + name.replace(" ", "_"))  # the base's hash in the manifest, per layout
            m, w = train(d, name.replace(" ", "_"), lora + extra + ["--ckpt-every", "8", "--ckpt-dir", ck_dir], ranks)
            layout_hashes[name] = base_hash(os.path.join(ck_dir, "step_00000008"))
            loss_err = max(abs(a - b) / b for a, b in zip([x["loss"] for x in m], ref_loss))
            check(len(m) == len(ref_m) and loss_err <= TOL, f"{name}: losses vs 1 process {loss_err:.2e}")
            w_err = rel(w, ref_w)
            check(w_err <= TOL, f"{name}: merged weights vs 1 process {w_err:.2e}")

        # dropout's masks are keyed by the data, so layouts drop the same elements
        drop = lora + ["--lora-dropout", "0.2"]
        d_m, d_w = train(d, "drop_ref", drop)
        check(rel(d_w, ref_w) > 1e-4, f"--lora-dropout 0.2 changes training ({rel(d_w, ref_w):.2e} from none)")
        for name, extra, ranks in [("dp2 zero1 dropout", ["--zero", "1"], 2), ("tp2 dropout", ["--tp", "2"], 2)]:
            m, w = train(d, name.replace(" ", "_"), drop + extra, ranks)
            loss_err = max(abs(a - b) / b for a, b in zip([x["loss"] for x in m], [x["loss"] for x in d_m]))
            check(loss_err <= TOL and rel(w, d_w) <= TOL,
                  f"{name}: losses {loss_err:.2e}, merged weights {rel(w, d_w):.2e} vs 1 process")

        # 2. frozen: outside the adapted matrices the merged file is the base's, bit for bit
        _, zero_w = train(d, "zero_lr", lora[:-1] + ["--lr", "0", "--min-lr", "0"])
        check(np.array_equal(zero_w, base_w), "with --lr 0 the merged model is the base bit for bit")
        same = np.count_nonzero(ref_w == base_w) / ref_w.size
        C, L = 32, 2
        adapted = L * (3 * C * C + C * C + 4 * C * C + 4 * C * C)
        check(np.count_nonzero(ref_w != base_w) <= adapted,
              f"only the 4 adapted matrices per layer changed ({ref_w.size - np.count_nonzero(ref_w == base_w)} "
              f"elements of at most {adapted}; {same:.1%} of the model untouched)")

        # 3. memory: LoRA's state bytes against full fine-tuning of the same model
        full_m, _ = train(d, "full", ["--init-from", base, "--steps", "2"])
        lora_bytes, full_bytes = ref_m[-1]["state_bytes"], full_m[-1]["state_bytes"]
        n_model = base_w.size
        n_adapters = L * 4 * (C + 3 * C + C + C + C + 4 * C + 4 * C + C)  # r x (in + out) per target, r = 4
        check(full_bytes == 4 * 4 * n_model, f"full fine-tuning keeps 4 floats per parameter ({full_bytes} bytes)")
        check(lora_bytes == 4 * (n_model + 4 * n_adapters),
              f"LoRA keeps the frozen base + 4 floats per adapter element: {lora_bytes} bytes, "
              f"{lora_bytes / full_bytes:.1%} of full fine-tuning's {full_bytes}")

        # 4. resume bitwise, and refused without --lora-rank
        ck, at4 = os.path.join(d, "ck"), os.path.join(d, "ck", "step_00000004")
        _, whole_w = train(d, "whole", lora + ["--ckpt-every", "4", "--ckpt-dir", ck, "--keep-last", "0"])
        _, resumed = train(d, "resumed", lora + ["--resume", at4, "--ckpt-dir", os.path.join(d, "ck2")])
        check(np.array_equal(whole_w, ref_w) and np.array_equal(resumed, ref_w),
              "a checkpoint at step 4 of 8 resumes to the same weights bit for bit")
        p = train(d, "noresume", ["--init-from", base, "--steps", "8", "--resume", at4, "--ckpt-dir", ck],
                  check_rc=False)
        check(p.returncode != 0 and "written with LoRA rank 4" in p.stderr and "(flags: --lora-rank, --lora-targets)"
              in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              f"resuming a LoRA checkpoint without --lora-rank: one line ({p.stderr.strip()[:100]})")
        ck_hash = base_hash(at4)
        check(len(ck_hash) == 16 and all(h == ck_hash for h in layout_hashes.values()),
              f"the manifest records the frozen base's hash {ck_hash}, the same from {sorted(layout_hashes)}")
        header, body = read_model(base)
        other = os.path.join(d, "base_other.bin")
        with open(other, "wb") as f:  # the base with one weight changed
            f.write(header.tobytes())
            f.write(np.concatenate([body[:-1], body[-1:] + np.float32(1e-3)]).tobytes())
        p = train(d, "otherbase", ["--init-from", other] + lora[2:] + ["--resume", at4, "--ckpt-dir", ck],
                  check_rc=False)
        check(refused(p, "the initial model " + other) and refused(p, "resume over the same base (flags: --init-from)"),
              f"resuming a LoRA checkpoint over another base is refused in one line ({p.stderr.strip()[:150]})")

        round_trip(d, base, other, ck_hash)

        # 6. DiLoCo over LoRA: only the adapters' pseudo-gradient crosses the link, every H steps
        m, w = train(d, "diloco", lora + ["--local-steps", "4", "--outer-optimizer", "avg"], 2)
        sent = [x["comm_bytes"] for x in m]
        check(sent == [0, 0, 0, 4 * n_adapters] * 2,
              f"DiLoCo H=4 with LoRA sends the adapters only ({4 * n_adapters} bytes at steps 4 and 8, not the "
              f"model's {4 * n_model}): {sent}")
        check(np.count_nonzero(w != base_w) <= adapted, "DiLoCo with LoRA leaves the base frozen")

        # 7. a low-precision frozen base (--base-weights): the same run as fp32 LoRA over a file whose linear
        # weights were rounded the same way here (bf16 round-to-nearest-even; int8 absmax per output row), bit
        # for bit; its memory and its loss gap to the fp32 base
        header = read_model(base)[0]
        for kind in ("bf16", "int8"):
            rounded = os.path.join(d, f"base_{kind}.bin")
            with open(rounded, "wb") as f:
                f.write(header.tobytes())
                f.write(round_linear(base_w, header, kind).tobytes())
            q_m, q_w = train(d, f"q_{kind}", lora + ["--base-weights", kind])
            o_m, o_w = train(d, f"o_{kind}", ["--init-from", rounded] + lora[2:])
            same = [x["loss"] for x in q_m] == [x["loss"] for x in o_m] and np.array_equal(q_w, o_w)
            gap = q_m[-1]["loss"] / ref_m[-1]["loss"] - 1
            check(same, f"--base-weights {kind} equals fp32 LoRA over the {kind}-rounded file bit for bit "
                        f"(state bytes {q_m[-1]['state_bytes']} vs {lora_bytes} with an fp32 base; final loss "
                        f"{gap:+.2e} relative to the fp32 base)")

        # 5. bad input
        bad = [(["--lora-rank", "4", "--lora-targets", "qkv,mlp"],
                "unknown adapted layer 'mlp' (qkv, attproj, fc, fcproj or all) (flags: --lora-targets)"),
               (["--lora-merge"], "the merging of the adapters needs a LoRA rank (adapters to train) (flags: "
                "--lora-merge, --lora-rank)"),
               (["--lora-rank", "4", "--zero", "3"], "LoRA of rank 4 does not work with ZeRO stage 3 (the frozen base is "
                "kept whole on every rank; use stage 1 or 2) (flags: --lora-rank, --zero)"),
               (["--lora-rank", "4", "--precision", "bf16"], "does not work with bf16 precision (adapters train in fp32 "
                "over an fp32 base) (flags: --lora-rank, --precision)"),
               (["--lora-rank", "4", "--base-weights", "int8", "--tp", "2"], "an int8 base under tensor parallelism (a "
                "row-parallel shard would scale its part of each row alone) (flags: --lora-rank, --base-weights, --tp)"),
               (["--base-weights", "bf16"], "--base-weights"),
               (["--lora-rank", "4", "--lora-init", base], base)]
        for extra, named in bad:
            ranks = 2 if "--tp" in extra else 1  # the layout checks need the processes the layout names
            p = train(d, "bad", ["--init-from", base, "--steps", "1"] + extra, ranks, check_rc=False)
            check(refused(p, named, ranks),
                  f"{' '.join(extra)}: refused in one line naming {named} ({p.stderr.strip()[:150] or 'no message'})")
        # the base saved without the trained adapters is said, once; with --lora-merge nothing is said
        for extra, warned in ((["--lora-rank", "4"], True), (["--lora-rank", "4", "--lora-merge"], False)):
            p = train(d, "saved_base", ["--init-from", base, "--steps", "1"] + extra, check_rc=False)
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 0 and (lines == [] if not warned else
                                         len(lines) == 1 and "gets the frozen base without the trained adapters" in lines[0]
                                         and "(flags: --save-model, --lora-merge, --save-adapters)" in lines[0]),
                  f"--save-model with {' '.join(extra)}: {'one warning line' if warned else 'no warning'} "
                  f"({p.stderr.strip()[:150] or 'no message'})")
    print(f"{len(check.failed)} failure(s)")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
