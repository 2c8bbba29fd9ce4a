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
   resuming it without --lora-rank is refused in one line.
7. --base-weights bf16 and int8 (the frozen linear weights kept in 2 or 1
   bytes, int8 with a per-row scale; wte in bf16) give bit for bit the run of an fp32 base
   over a file rounded the same way in NumPy; their state bytes and final
   loss against the fp32 base are printed.
6. DiLoCo (--local-steps 4) over LoRA synchronises only the adapters: the
   bytes sent are the adapters' pseudo-gradient every 4th step, nothing
   between, and the base stays frozen.
5. Bad input, one line each: --lora-targets with an unknown layer, LoRA flags
   without --lora-rank, --zero 3, --precision bf16, int8 base weights with
   --tp, --lora-init of a file holding other tensors.
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import Checks, launch, make_corpus, read_metrics, read_model, rel  # noqa: E402

TOL = 1e-5
check = Checks()


def train(d, name, extra, ranks=1, check_rc=True):
    metrics, model = os.path.join(d, name + ".jsonl"), os.path.join(d, name + ".bin")
    args = ["train", "--data", os.path.join(d, "data", "train_000000.bin"), "--seq-len", "32",
            "--micro-batch", "2", "--global-batch", "8", "--lr", "3e-3", "--warmup", "2", "--eval-every", "0",
            "--sample-tokens", "0", "--threads", "1", "--comm-timeout", "60", "--quiet", "--metrics", metrics,
            "--save-model", model] + extra
    p = launch(args, ranks, check=check_rc)
    if not check_rc:
        return p
    return read_metrics(metrics), read_model(model)[1]


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
        ref_loss = [x["loss"] for x in ref_m]
        changed = rel(ref_w, base_w)
        check(changed > 1e-4, f"the merged model moved from the base ({changed:.2e}): the adapters trained")
        for name, extra, ranks in [("dp2 zero0", ["--zero", "0"], 2), ("dp2 zero1", ["--zero", "1"], 2),
                                   ("dp2 zero2", ["--zero", "2"], 2), ("tp2", ["--tp", "2"], 2),
                                   ("tp2 dp2 zero1", ["--tp", "2", "--zero", "1"], 4)]:
            m, w = train(d, name.replace(" ", "_"), lora + extra, ranks)
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
        check(p.returncode != 0 and "--lora-rank 4" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              f"resuming a LoRA checkpoint without --lora-rank: one line ({p.stderr.strip()[:100]})")

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
        bad = [(["--lora-rank", "4", "--lora-targets", "qkv,mlp"], "--lora-targets"),
               (["--lora-merge"], "--lora-rank"),
               (["--lora-rank", "4", "--zero", "3"], "--zero 3"),
               (["--lora-rank", "4", "--precision", "bf16"], "--precision bf16"),
               (["--lora-rank", "4", "--base-weights", "int8", "--tp", "2"], "--base-weights int8"),
               (["--base-weights", "bf16"], "--base-weights"),
               (["--lora-rank", "4", "--lora-init", base], base)]
        for extra, named in bad:
            ranks = 2 if "--zero" in extra or "--tp" in extra else 1
            p = train(d, "bad", ["--init-from", base, "--steps", "1"] + extra, ranks, check_rc=False)
            lines = [x for x in p.stderr.strip().splitlines() if "batchscale" in x or "error" in x]
            check(p.returncode != 0 and named in p.stderr and len(lines) >= 1,
                  f"{' '.join(extra)}: refused naming {named} ({p.stderr.strip().splitlines()[-1][:110] if p.stderr.strip() else 'no message'})")
    print(f"{len(check.failed)} failure(s)")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
