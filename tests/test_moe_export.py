#!/usr/bin/python3
"""test_moe_export.py: an MoE model through every converter, nothing dropped (src/model/safetensors_moe.h,
src/model/moe_upcycle.h, src/cli/model_flags.h).

1. Export: an MoE checkpoint (sigmoid router, --moe-every 2: layer 0 dense, layer 1 MoE; a nonzero selection bias
   after 3 steps of --moe-bias-update) through `ckpt export --format safetensors`: the file holds exactly the
   expected tensors (every expert, the gate and its e_score_correction_bias, no dense MLP in the MoE layer), each
   equal bit for bit to the checkpoint's (moe_bias.bin for the bias); config.json states the MoE fields. This file's
   tensors, read here by their Hugging Face names, through tests/torch_gpt.py's MoE GPT in float64 give the engine's
   logits (moe_gpt_dump --logits reading the same directory) within 1e-5 (max |a-b| / max |b|); transformers'
   AutoModelForCausalLM refuses it (with the hf venv: BS_HF_PYTHON); the run's --out directory holds the same
   tensors (model.safetensors: llm.c's model.bin cannot hold them).
2. Back: `ckpt import` and `train --init-from DIR` (lr 0, one step; the MoE flags from the file; also under --pp 2
   and --ep 2) reproduce the checkpoint's parameters and bias bit for bit; `sample` generates the same text from
   the checkpoint and from the directory.
3. Upcycling a dense model (--init-from dense --experts 4): at --upcycle-noise 0 every expert is the dense MLP bit
   for bit, the router is seeded, and the first step's loss equals the dense model's within 1e-6 (the top-k weights
   sum to 1 and every expert computes the same MLP: only the weighted sum's rounding differs, ~1e-8 here), and so
   do the logits of the exported upcycled model and of the dense file (moe_gpt_dump --logits); at 0.01
   each expert's weights move by 0.01 x their tensor's rms (within 10%), the experts differ, the loss moves by more
   than 1e-6, and the same --seed gives the same experts bit for bit, another seed others.
4. What a converter cannot carry is refused in one line: llm.c export of an MoE model, flags that contradict the
   file's MoE shape, safetensors files with a missing, extra or misplaced expert tensor or MoE tensors without
   num_experts, norm_topk_prob false; an older checkpoint that does not record its router exported without
   --router, or --router against the recorded one, or resumed with another --router.
usage: test_moe_export.py MOE_GPT_DUMP   (BATCHSCALE in the environment)
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
import torch_gpt  # noqa: E402
from bstest import Checks, launch, rel  # noqa: E402
from harness.moe_runs import read_ckpt, unflatten  # noqa: E402

check = Checks()
L, H, C, E, K, EVERY = 2, 4, 32, 4, 2, 2
SHAPE = ["--layers", str(L), "--heads", str(H), "--channels", str(C)]
MOE = ["--experts", str(E), "--moe-top-k", str(K), "--moe-every", str(EVERY), "--router", "sigmoid"]
PREFIX = "transformer."
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def train(tmp, name, data, extra, check_rc=True, ranks=1):
    out = os.path.join(tmp, name)
    args = ["train", "--data", data, "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--quiet",
            "--seq-len", "32", "--micro-batch", "4", "--global-batch", "4", "--data-order", "sequential",
            "--metrics", out + ".jsonl", "--ckpt-dir", out + "_ckpt"] + extra
    p = launch(args + (["--comm-timeout", "60"] if ranks > 1 else []), ranks, check=check_rc)
    if not check_rc:
        return p
    return [json.loads(line) for line in open(out + ".jsonl")], out + "_ckpt"


def refused(p, text, what):
    lines = p.stderr.strip().splitlines()
    check(p.returncode != 0 and len(lines) == 1 and text in lines[0],
          f"{what}: refused in one line: {lines[-1] if lines else '(nothing)'}")


def read_st(path):
    """name -> float32 array, and the metadata, of a safetensors file (F32 only)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], np.float32).reshape(e["shape"])
    return out, meta


def write_st(path, tensors, meta):
    header, at, blobs = {"__metadata__": meta}, 0, []
    for name, t in tensors.items():
        b = np.ascontiguousarray(t, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        at += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def expected_names():
    names = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
    for l in range(L):
        names += [f"h.{l}.{n}" for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias")]
        if (l + 1) % EVERY:
            names += [f"h.{l}.mlp.{n}" for n in ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")]
            continue
        names += [f"h.{l}.mlp.gate.weight", f"h.{l}.mlp.gate.e_score_correction_bias"]
        names += [f"h.{l}.mlp.experts.{e}.{n}" for e in range(E)
                  for n in ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")]
    return sorted(PREFIX + n for n in names)


def to_reference(t, cfg):
    """The file's tensors (Hugging Face names) as tests/torch_gpt.py's parameters, written from the names alone."""
    Lc, F = cfg["n_layer"], cfg["moe_intermediate_size"]
    g = {k[len(PREFIX):]: torch.tensor(v.astype(np.float64)) for k, v in t.items()}
    p = {"wte": g["wte.weight"], "wpe": g["wpe.weight"], "lnfw": g["ln_f.weight"], "lnfb": g["ln_f.bias"]}
    ours = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
            "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight",
            "ln2b": "ln_2.bias", "fcw": "mlp.c_fc.weight", "fcb": "mlp.c_fc.bias", "fcprojw": "mlp.c_proj.weight",
            "fcprojb": "mlp.c_proj.bias"}
    dense_shape = {"fcw": (4 * C, C), "fcb": (4 * C,), "fcprojw": (C, 4 * C), "fcprojb": (C,)}
    for name, hf in ours.items():
        per = []
        for l in range(Lc):
            key = f"h.{l}.{hf}"
            if key not in g:  # the dense MLP of an MoE layer: unused
                per.append(torch.zeros(dense_shape[name], dtype=torch.float64))
                continue
            per.append(g[key].t() if hf in CONV1D else g[key])  # Conv1D (in, out) -> (out, in)
        p[name] = torch.stack(per)
    router, experts, bias = [], [], []
    for l in range(Lc):
        if f"h.{l}.mlp.gate.weight" not in g:
            router.append(torch.zeros(E, C, dtype=torch.float64))
            experts.append(torch.zeros(E, 2 * F * C + F + C, dtype=torch.float64))
            bias.append(torch.zeros(E, dtype=torch.float64))
            continue
        router.append(g[f"h.{l}.mlp.gate.weight"])
        bias.append(g[f"h.{l}.mlp.gate.e_score_correction_bias"])
        x = f"h.{l}.mlp.experts"
        experts.append(torch.stack([torch.cat([g[f"{x}.{e}.c_fc.weight"].t().reshape(-1), g[f"{x}.{e}.c_fc.bias"],
                                               g[f"{x}.{e}.c_proj.weight"].t().reshape(-1),
                                               g[f"{x}.{e}.c_proj.bias"]]) for e in range(E)]))
    p.update(router=torch.stack(router), experts=torch.stack(experts), moe_bias=torch.stack(bias))
    return p


def top_k_margin(p, cfg, moe, idx):
    """The smallest gap, over the batch's rows and MoE layers, between the K-th and (K+1)-th selection key (score +
    bias): the float32 engine and the float64 reference choose alike when it is far above float32 rounding."""
    gaps = []
    orig = torch_gpt.moe_top_k

    def spy(key, k):
        s = np.sort(key.detach().numpy(), axis=1)[:, ::-1]
        gaps.append(float(np.min(s[:, k - 1] - s[:, k])))
        return orig(key, k)
    torch_gpt.moe_top_k = spy
    try:
        logits, _ = torch_gpt.forward(cfg, p, idx, moe=moe)
    finally:
        torch_gpt.moe_top_k = orig
    return logits, min(gaps)


def engine_logits(dump, model_dir, tmp, B, T, seed):
    out = os.path.join(tmp, "logits.bin")
    subprocess.run([dump, "--logits", model_dir, out, str(B), str(T), str(seed)], check=True)
    raw = open(out, "rb").read()
    idx = np.frombuffer(raw[:4 * B * T], np.int32).reshape(B, T)
    return idx, np.frombuffer(raw[4 * B * T:], np.float32).reshape(B, T, -1)


AUTO = """import sys
from transformers import AutoModelForCausalLM
try:
    AutoModelForCausalLM.from_pretrained(sys.argv[1])
except (KeyError, ValueError) as e:
    print("refused:", repr(e))
    sys.exit(0)
print("loaded")
sys.exit(1)
"""


def auto_refuses(out):
    """transformers' Auto classes refuse the directory (main's export loaded as a GPT-2 with random MLPs); skipped,
    saying so, without the hf venv (scripts/hf-venv.sh)."""
    py = os.environ.get("BS_HF_PYTHON", "")
    if not os.path.exists(py):
        print(f"skip transformers' AutoModelForCausalLM check: no {py or 'BS_HF_PYTHON'}")
        return
    p = subprocess.run([py, "-c", AUTO, out], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"transformers' AutoModelForCausalLM refuses the directory rather than load a dense "
                             f"GPT-2: {p.stdout.strip()[:100]}")


def export(tmp, data, dump):
    """1: a trained MoE checkpoint to safetensors, every tensor carried and the logits PyTorch's."""
    run_dir = os.path.join(tmp, "moe_run")
    _, ck = train(tmp, "moe", data, SHAPE + MOE + ["--steps", "3", "--moe-bias-update", "1e-2", "--lr", "3e-3",
                                                   "--out", run_dir])
    flat, bias = read_ckpt(ck, 3)
    check(np.abs(bias).max() > 0, f"the checkpoint's selection bias is nonzero (max {np.abs(bias).max():.3f})")
    out = os.path.join(tmp, "hf_moe")
    launch(["ckpt", "export", "--format", "safetensors", "--out", out, ck], 1)
    t, meta = read_st(os.path.join(out, "model.safetensors"))
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(sorted(t) == expected_names(), f"the file holds exactly the {len(expected_names())} expected tensors "
          f"(every expert, the gate and its bias; no dense MLP in the MoE layer): {len(t)}")
    V = cfg["vocab_size"]
    ref = unflatten(dict(V=V, maxT=32, L=L, C=C, E=E, F=4 * C, every=EVERY), flat)
    same = np.array_equal(t[PREFIX + "wte.weight"], ref["wte"][:V]) and np.array_equal(
        t[PREFIX + "h.1.attn.c_attn.weight"], ref["qkvw"][1].T) and np.array_equal(
        t[PREFIX + "h.0.mlp.c_proj.weight"], ref["fcprojw"][0].T) and np.array_equal(
        t[PREFIX + "h.1.mlp.gate.weight"], ref["router"][1]) and np.array_equal(
        t[PREFIX + "h.1.mlp.gate.e_score_correction_bias"], bias[1])
    F = 4 * C
    for e in range(E):
        blk, x = ref["experts"][1][e], f"{PREFIX}h.1.mlp.experts.{e}."
        same = same and np.array_equal(t[x + "c_fc.weight"], blk[:F * C].reshape(F, C).T) and np.array_equal(
            t[x + "c_fc.bias"], blk[F * C:F * C + F]) and np.array_equal(
            t[x + "c_proj.weight"], blk[F * C + F:2 * F * C + F].reshape(C, F).T) and np.array_equal(
            t[x + "c_proj.bias"], blk[2 * F * C + F:])
    check(same, "embeddings, attention, the dense MLP, the gate, its bias and every expert equal the checkpoint's "
                "bit for bit")
    stated = {k: cfg.get(k) for k in ("model_type", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                      "decoder_sparse_step", "scoring_func", "norm_topk_prob", "capacity_factor")}
    want = dict(model_type="batchscale_gpt2_moe", num_experts=E, num_experts_per_tok=K, moe_intermediate_size=F,
                decoder_sparse_step=EVERY, scoring_func="sigmoid", norm_topk_prob=True, capacity_factor=0.0)
    check(stated == want and meta.get("num_experts") == str(E), f"config.json (and the metadata) state the MoE "
                                                                f"model: {stated}")
    saved = os.path.join(run_dir, "model.safetensors")
    s, _ = read_st(saved) if os.path.exists(saved) else ({}, None)
    check(sorted(s) == sorted(t) and all(np.array_equal(s[k], t[k]) for k in t),
          f"train --out's model.safetensors holds the same {len(s)} tensors, equal bit for bit")
    auto_refuses(out)
    p = to_reference(t, cfg)
    moe = dict(E=E, K=K, F=F, router=cfg["scoring_func"], capacity=cfg["capacity_factor"], aux=0.0, z=0.0,
               every=cfg["decoder_sparse_step"])
    rcfg = dict(C=C, H=cfg["n_head"], L=cfg["n_layer"], V=V)
    for seed in range(1, 20):  # a batch whose top-k choices are not within rounding of a tie (see top_k_margin)
        idx, got = engine_logits(dump, out, tmp, 2, 32, seed)
        want_logits, margin = top_k_margin(p, rcfg, moe, torch.tensor(idx, dtype=torch.long))
        if margin > 1e-4:
            break
    err = rel(got, want_logits.detach().numpy())
    check(margin > 1e-4 and err < 1e-5, f"PyTorch's MoE GPT on the file's tensors gives the engine's logits within "
                                        f"1e-5 ({err:.1e}; smallest top-k margin {margin:.1e})")
    return ck, out, flat, bias


def back(tmp, data, ck_flat, ck_bias, out, ck):
    """2: ckpt import and train --init-from read the directory back bit for bit; sample generates the same text
    from the checkpoint (its bias included) and from the directory."""
    texts = [subprocess.run([bstest.BATCHSCALE, "sample", src, path, "--tokens", "40", "--seed", "3", "--prompt",
                             "the lord"], capture_output=True, check=True).stdout  # bytes: a young model's tokens
             for src, path in (("--ckpt", ck), ("--model", out))]
    check(texts[0] == texts[1] and len(texts[0]) > 40, "sample --ckpt and --model of its export generate the same "
                                                       "text (the checkpoint's selection bias read by both)")
    imp = os.path.join(tmp, "imported")
    launch(["ckpt", "import", "--from", out, "--out", imp, "--global-batch", "4"], 1)
    f, b = read_ckpt(imp, 0)
    check(np.array_equal(f, ck_flat) and np.array_equal(b, ck_bias),
          "ckpt import: the parameters and the selection bias equal the checkpoint's bit for bit")
    _, d = train(tmp, "init_from", data, ["--init-from", out, "--steps", "1", "--lr", "0", "--min-lr", "0"])
    f, b = read_ckpt(d, 1)
    manifest = json.load(open(os.path.join(d, "step_00000001", "manifest.json")))["model"]["moe"]
    check(np.array_equal(f, ck_flat) and np.array_equal(b, ck_bias) and manifest["experts"] == E and
          manifest["every"] == EVERY and manifest["router"] == "sigmoid",
          f"train --init-from DIR (lr 0, one step) keeps them bit for bit, the MoE shape from the file: {manifest}")
    for layout in (["--pp", "2"], ["--ep", "2"]):  # each stage its layers' bias; each ep rank its experts
        _, d = train(tmp, "init_from_" + layout[0][2:], data, ["--init-from", out, "--steps", "1", "--lr", "0",
                                                                "--min-lr", "0", "--micro-batch", "2"] + layout,
                     ranks=2)
        again = os.path.join(tmp, "again_" + layout[0][2:])  # its rank files are shards: read through ckpt export
        launch(["ckpt", "export", "--format", "safetensors", "--out", again, d], 1)
        same = [open(os.path.join(x, "model.safetensors"), "rb").read() for x in (out, again)]
        check(same[0] == same[1], f"train --init-from DIR on 2 ranks with {' '.join(layout)} keeps them bit for bit "
                                  "(its export is the same file)")


def upcycle(tmp, data, dump):
    """3: a dense model upcycled into an MoE one."""
    dense = os.path.join(tmp, "dense.bin")
    launch(["train", "--data", data, "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--quiet",
            "--seq-len", "32", "--micro-batch", "4", "--global-batch", "4", "--steps", "3", "--lr", "3e-3",
            "--save-model", dense] + SHAPE, 1)
    dcfg, dp = torch_gpt.read_model(dense)
    flags = ["--init-from", dense, "--steps", "1", "--lr", "0", "--min-lr", "0"]
    rows, _ = train(tmp, "dense_run", data, flags)
    runs = {}
    for name, extra in [("n0", ["--upcycle-noise", "0"]), ("n1", ["--upcycle-noise", "0.01"]),
                        ("n1b", ["--upcycle-noise", "0.01"]), ("n1s", ["--upcycle-noise", "0.01", "--seed", "7"])]:
        r, d = train(tmp, "up_" + name, data, flags + ["--experts", str(E), "--moe-top-k", str(K), "--router",
                                                        "sigmoid"] + extra)
        f, b = read_ckpt(d, 1)
        runs[name] = (r[0]["loss"], unflatten(dict(V=dcfg["V"], maxT=32, L=L, C=C, E=E, F=4 * C), f), b)
    d_loss = rows[0]["loss"]
    loss0, p0, b0 = runs["n0"]
    F = 4 * C
    dense_mlp = [np.concatenate([dp["fcw"][l].numpy().ravel(), dp["fcb"][l].numpy(), dp["fcprojw"][l].numpy().ravel(),
                                 dp["fcprojb"][l].numpy()]) for l in range(L)]
    copies = all(np.array_equal(p0["experts"][l][e], dense_mlp[l]) for l in range(L) for e in range(E))
    check(copies and np.array_equal(p0["qkvw"], np.stack([x.numpy() for x in dp["qkvw"]])) and
          np.std(p0["router"]) > 0.01 and not b0.any(),
          "noise 0: every expert is the dense MLP bit for bit, attention the dense model's, the router seeded "
          f"(std {np.std(p0['router']):.4f}), the bias 0")
    e0 = abs(loss0 - d_loss) / d_loss
    check(e0 < 1e-6, f"noise 0: the first step's loss {loss0:.7f} equals the dense model's {d_loss:.7f} within 1e-6 "
                     f"({e0:.1e})")
    hf0 = os.path.join(tmp, "hf_up0")
    launch(["ckpt", "export", "--format", "safetensors", "--out", hf0, os.path.join(tmp, "up_n0_ckpt")], 1)
    _, dense_logits = engine_logits(dump, dense, tmp, 2, 32, 5)
    _, up_logits = engine_logits(dump, hf0, tmp, 2, 32, 5)
    el = rel(up_logits, dense_logits)
    check(el < 1e-6, f"noise 0: the exported upcycled model's logits equal the dense model's within 1e-6 ({el:.1e})")
    loss1, p1, _ = runs["n1"]
    moved = [float(np.sqrt(np.mean((p1["experts"][l][e][:F * C] - dense_mlp[l][:F * C]) ** 2)) /
                   np.sqrt(np.mean(dense_mlp[l][:F * C] ** 2))) for l in range(L) for e in range(E)]
    distinct = not np.array_equal(p1["experts"][0][0], p1["experts"][0][1])
    check(all(0.009 < m < 0.011 for m in moved) and distinct,
          f"noise 0.01: each expert's fc weight moved by {min(moved):.4f}-{max(moved):.4f} x its rms, the experts "
          "differ")
    e1 = abs(loss1 - d_loss) / d_loss
    check(e1 > 1e-6, f"noise 0.01: the loss moves by {e1:.1e} (> 1e-6: the bound above can tell)")
    check(np.array_equal(p1["experts"], runs["n1b"][1]["experts"]) and
          not np.array_equal(p1["experts"], runs["n1s"][1]["experts"]),
          "the same --seed gives the same experts bit for bit, another seed other experts")
    return dense


def crafted(tmp, out, name, edit, config_edit=None):
    """A copy of the exported directory with its tensors (and config.json) edited."""
    d = os.path.join(tmp, name)
    shutil.copytree(out, d)
    t, meta = read_st(os.path.join(out, "model.safetensors"))
    meta = {k: v for k, v in meta.items() if config_edit is None or k not in ("num_experts",)}
    edit(t)
    write_st(os.path.join(d, "model.safetensors"), t, meta)
    if config_edit:
        cfg = json.load(open(os.path.join(d, "config.json")))
        config_edit(cfg)
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return d


def unrecorded(tmp, data, ck):
    """The router in the manifest: an older checkpoint's (without it) needs ckpt export --router, a contradicting
    one is refused, and so is resuming with another --router."""
    old = os.path.join(tmp, "old_ckpt")
    shutil.copytree(ck, old)
    path = os.path.join(old, "step_00000003", "manifest.json")
    m = json.load(open(path))
    del m["model"]["moe"]["router"], m["model"]["moe"]["capacity_factor"]
    json.dump(m, open(path, "w"))
    hf = os.path.join(tmp, "old_hf")
    p = launch(["ckpt", "export", "--format", "safetensors", "--out", hf, old], 1, check=False)
    refused(p, "give --router", "ckpt export of a checkpoint whose manifest does not record the router")
    launch(["ckpt", "export", "--format", "safetensors", "--out", hf, "--router", "sigmoid", old], 1)
    cfg = json.load(open(os.path.join(hf, "config.json")))
    check(cfg["scoring_func"] == "sigmoid" and "capacity_factor" not in cfg,
          "with --router sigmoid it exports, stating that router and no capacity factor it does not know")
    p = launch(["ckpt", "export", "--format", "safetensors", "--out", hf, "--router", "softmax", ck], 1, check=False)
    refused(p, "--router softmax contradicts", "ckpt export --router against the recorded one")
    flags = SHAPE + MOE[:-1] + ["softmax", "--resume", os.path.join(ck, "step_00000003"), "--steps", "4"]
    refused(train(tmp, "bad", data, flags, check_rc=False), "the sigmoid router, not softmax; resume with the same "
            "(flags: --router)",
            "resuming a sigmoid-router checkpoint with --router softmax")


def refusals(tmp, data, ck, out, dense):
    """4: one line each."""
    p = launch(["ckpt", "export", "--format", "llmc", "--out", os.path.join(tmp, "x.bin"), ck], 1, check=False)
    refused(p, "--format safetensors", "ckpt export --format llmc of an MoE checkpoint")
    base = ["--steps", "1", "--lr", "0", "--min-lr", "0"]
    for extra, text in [(["--moe-top-k", "1"], "--moe-top-k 1 contradicts"), (["--experts", "8"], "--experts 8"),
                        (["--experts", "1"], "--experts 1"), (["--router", "softmax"], "--router softmax"),
                        (["--moe-every", "1"], "--moe-every 1"), (["--upcycle-noise", "0"], "--upcycle-noise"),
                        (["--moe-gates", "unnormalized"], "--moe-gates unnormalized contradicts"),
                        (["--moe-routed-scale", "2"], "--moe-routed-scale 2 contradicts")]:
        refused(train(tmp, "bad", data, ["--init-from", out] + base + extra, check_rc=False), text,
                f"--init-from an MoE directory with {' '.join(extra)}")
    refused(train(tmp, "bad", data, ["--init-from", dense, "--experts", "4", "--moe-ffn", "64"] + base,
                  check_rc=False), "--moe-ffn 64", "upcycling with --moe-ffn other than 4 C")
    refused(train(tmp, "bad", data, SHAPE + ["--experts", "4", "--save-model", os.path.join(tmp, "m.bin")] + base,
                  check_rc=False), "does not work with saving the model to an llm.c file (it holds a dense GPT-2: give a name "
            "ending in .safetensors) (flags: --experts, --save-model)", "--save-model to an llm.c file of an MoE model")
    unrecorded(tmp, data, ck)
    x = PREFIX + "h.1.mlp."
    cases = [("missing", lambda t: t.pop(x + "experts.3.c_proj.bias"), None, "experts.3.c_proj.bias is missing"),
             ("extra", lambda t: t.update({x + "experts.4.c_fc.bias": t[x + "experts.0.c_fc.bias"]}), None,
              "unexpected tensor " + x + "experts.4.c_fc.bias"),
             ("dense_too", lambda t: t.update({x + "c_fc.bias": t[x + "experts.0.c_fc.bias"]}), None,
              "unexpected tensor " + x + "c_fc.bias"),
             ("no_fields", lambda t: None, lambda c: c.pop("num_experts"), "MoE tensors need num_experts"),
             ("bad_norm", lambda t: None, lambda c: c.update(norm_topk_prob="maybe"), "norm_topk_prob must be true or")]
    for name, edit, config_edit, text in cases:
        d = crafted(tmp, out, "st_" + name, edit, config_edit)
        p = launch(["ckpt", "import", "--from", d, "--out", os.path.join(tmp, "imp_" + name), "--global-batch", "4"],
                   1, check=False)
        refused(p, text, f"ckpt import of a directory with {name.replace('_', ' ')}")
    d = crafted(tmp, out, "st_unnormalized", lambda t: None, lambda c: c.update(norm_topk_prob=False,
                                                                                   routed_scaling_factor=2.5))
    imported = os.path.join(tmp, "imp_unnormalized")
    launch(["ckpt", "import", "--from", d, "--out", imported, "--global-batch", "4"], 1)
    manifests = glob.glob(os.path.join(imported, "step_*", "manifest.json"))
    moe = json.load(open(manifests[0]))["model"]["moe"] if manifests else {}
    check(moe.get("gates") == "unnormalized" and moe.get("routed_scale") == 2.5,
          f"norm_topk_prob false, routed_scaling_factor 2.5 import as --moe-gates unnormalized, scale 2.5: {moe}")


def main():
    dump = sys.argv[1]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(bstest.make_corpus(tmp), "train_000000.bin")
        ck, out, flat, bias = export(tmp, data, dump)
        back(tmp, data, flat, bias, out, ck)
        dense = upcycle(tmp, data, dump)
        refusals(tmp, data, ck, out, dense)
    if check.failed:
        print(f"{len(check.failed)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
