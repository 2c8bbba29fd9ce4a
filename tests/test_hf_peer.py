#!/usr/bin/python3
"""test_hf_peer.py: safetensors and Hugging Face GPT-2, both ways, and the
format's validation.

Runs under the Hugging Face venv (scripts/hf-venv.sh: transformers 4.36.2 on
Debian's torch); exits 77 (skipped, with the reason) without it.

- Hugging Face -> here: a random GPT-2 built from a local GPT2Config (every
  parameter drawn, biases and LayerNorms too, so nothing is at its default)
  saved with save_pretrained (model.safetensors + config.json); gpt_dump
  loads the directory and its logits, mean loss and every gradient equal
  GPT2LMHeadModel's within 1e-5 (max |a - b| / max(1, max |b|); fp32, only
  the summation order differs).
- Here -> Hugging Face: a checkpoint of a short training run exported with
  `ckpt export --format safetensors` loads with GPT2LMHeadModel.from_pretrained
  and gives the logits gpt_dump gives on the llm.c export of the same
  checkpoint (an independent path) within 1e-5; the same run's
  --save-model x.safetensors holds the same bytes; `train --init-from DIR`
  starts exactly where --init-from the llm.c export does (same first loss).
- bf16 and f16 files are read (the values rounded as torch rounds them).
- Bad files: each violation of the format gives one line naming the file
  and the tensor, a non-zero exit and no crash.
usage: test_hf_peer.py (env BATCHSCALE, GPT_DUMP, BS_HF_PYTHON)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import SKIP, Checks  # noqa: E402

HF_PYTHON = os.environ.get("BS_HF_PYTHON", "")
TOL = 1e-5  # fp32: one process each side, only the summation order differs

# The part that runs inside the venv: writes the model and the references.
PEER = r'''
import json, sys
import numpy as np, torch
from transformers import GPT2Config, GPT2LMHeadModel
mode, directory = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if mode == "save":
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=257, n_positions=64, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight") else 0.0, 0.1)
    dtype = sys.argv[3] if len(sys.argv) > 3 else "float32"
    if dtype != "float32":
        model = model.to(getattr(torch, dtype))
    model.save_pretrained(directory, safe_serialization=True)
    model = model.float()
else:
    model = GPT2LMHeadModel.from_pretrained(directory)
model.eval()
B, T = 2, 32
inputs = torch.randint(0, 257, (B, T), dtype=torch.int32)
targets = torch.randint(0, 257, (B, T), dtype=torch.int32)
logits = model(inputs.long()).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 257), targets.reshape(-1).long())
loss.backward()
inputs.numpy().tofile(directory + "/inputs.bin")
targets.numpy().tofile(directory + "/targets.bin")
logits.detach().numpy().astype(np.float32).tofile(directory + "/logits.bin")
t = model.transformer
def w(m):  # Conv1D (in, out) -> batchscale's (out, in)
    return m.weight.grad.t()
per_layer = [lambda h: h.ln_1.weight.grad, lambda h: h.ln_1.bias.grad, lambda h: w(h.attn.c_attn),
             lambda h: h.attn.c_attn.bias.grad, lambda h: w(h.attn.c_proj), lambda h: h.attn.c_proj.bias.grad,
             lambda h: h.ln_2.weight.grad, lambda h: h.ln_2.bias.grad, lambda h: w(h.mlp.c_fc),
             lambda h: h.mlp.c_fc.bias.grad, lambda h: w(h.mlp.c_proj), lambda h: h.mlp.c_proj.bias.grad]
grads = [t.wte.weight.grad, t.wpe.weight.grad] + [f(h) for f in per_layer for h in t.h] + [t.ln_f.weight.grad, t.ln_f.bias.grad]
np.concatenate([g.detach().reshape(-1).numpy() for g in grads]).astype(np.float32).tofile(directory + "/grads.bin")
json.dump({"loss": float(loss)}, open(directory + "/ref.json", "w"))
'''


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def floats(path):
    data = open(path, "rb").read()
    return struct.unpack(f"<{len(data) // 4}f", data)


def rel(a, b):
    worst = max(abs(x - y) for x, y in zip(a, b))
    return worst / max(1.0, max(abs(y) for y in b))


def dump(model_path, d):
    """gpt_dump's logits, loss and gradients on the peer's batch."""
    out = os.path.join(d, "ours.bin")
    run([os.environ["GPT_DUMP"], model_path, d + "/inputs.bin", d + "/targets.bin", "2", "32", out])
    values = floats(out)
    n_logits = 2 * 32 * 257
    return values[:n_logits], values[n_logits], values[n_logits + 1:]


def hf_to_here(t, d, dtype="float32"):
    run([HF_PYTHON, "-c", PEER, "save", d, dtype])
    logits, loss, grads = dump(d, d)
    ref = json.load(open(d + "/ref.json"))["loss"]
    label = f"Hugging Face -> batchscale ({dtype} file)"
    e_logits, e_grads = rel(logits, floats(d + "/logits.bin")), rel(grads, floats(d + "/grads.bin"))
    t(len(grads) == len(floats(d + "/grads.bin")), f"{label}: gradient count {len(grads)}")
    t(e_logits <= TOL, f"{label}: logits {e_logits:.2e}")
    t(abs(loss - ref) / ref <= TOL, f"{label}: loss {loss:.6f} vs {ref:.6f}")
    t(e_grads <= TOL, f"{label}: every gradient {e_grads:.2e}")


def here_to_hf(t, d):
    bs = os.environ["BATCHSCALE"]
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("in the beginning was the word and the word was with the model. " * 400)
    run([bs, "prepare", "--in", corpus, "--out", d + "/data"])
    ck, saved = d + "/ck", d + "/saved.safetensors"
    run([bs, "train", "--data", d + "/data/train_000000.bin", "--layers", "2", "--heads", "4", "--channels", "32",
         "--seq-len", "64", "--micro-batch", "2", "--global-batch", "4", "--steps", "3", "--eval-every", "0",
         "--sample-tokens", "0", "--threads", "1", "--quiet", "--ckpt-dir", ck, "--save-model", saved])
    hf_dir, llmc = d + "/exported", d + "/exported.bin"
    run([bs, "ckpt", "export", "--format", "safetensors", "--out", hf_dir, ck])
    run([bs, "ckpt", "export", "--llmc", llmc, ck])
    t(os.path.exists(hf_dir + "/config.json"), "export writes config.json beside model.safetensors")
    run([HF_PYTHON, "-c", PEER, "load", hf_dir])  # from_pretrained, then the references on a fresh batch
    logits, loss, _ = dump(llmc, hf_dir)
    e = rel(logits, floats(hf_dir + "/logits.bin"))
    t(e <= TOL, f"batchscale -> Hugging Face: from_pretrained's logits vs the llm.c export's {e:.2e}")
    t(open(saved, "rb").read()[8:] == open(hf_dir + "/model.safetensors", "rb").read()[8:],
      "--save-model x.safetensors writes the bytes ckpt export writes")
    return hf_dir


def init_from(t, d, hf_dir):
    """train --init-from a Hugging Face directory starts where --init-from the llm.c export of the same weights does."""
    bs = os.environ["BATCHSCALE"]
    metrics = d + "/init.jsonl"
    run([bs, "train", "--data", d + "/data/train_000000.bin", "--init-from", hf_dir, "--seq-len", "64",
         "--micro-batch", "2", "--global-batch", "2", "--steps", "1", "--eval-every", "0", "--sample-tokens", "0",
         "--threads", "1", "--quiet", "--metrics", metrics])
    first = json.loads(open(metrics).readline())["loss"]
    again = d + "/again.jsonl"
    run([bs, "train", "--data", d + "/data/train_000000.bin", "--init-from", d + "/exported.bin", "--seq-len", "64",
         "--micro-batch", "2", "--global-batch", "2", "--steps", "1", "--eval-every", "0", "--sample-tokens", "0",
         "--threads", "1", "--quiet", "--metrics", again])
    same = json.loads(open(again).readline())["loss"]
    t(first == same, f"--init-from the Hugging Face directory: first loss {first:.6f} = the llm.c file's")


def write_st(path, header, data):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def bad_files(t, d):
    """Each violation one line naming the file and the tensor; non-zero exit, no crash."""
    bs = os.environ["BATCHSCALE"]
    good = d + "/exported/model.safetensors"
    raw = open(good, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    name = "transformer.h.0.ln_1.weight"

    def edit(fn):
        h = json.loads(json.dumps(header))
        fn(h)
        return h
    cases = {
        "truncated": (None, raw[:5], "shorter than its header length"),
        "header_too_long": (None, struct.pack("<Q", 200 << 20) + raw[8:], "more than the format's 100 MB"),
        "not_json": (None, struct.pack("<Q", 4) + b"{{{{" + data, "the header is not a JSON object"),
        "bad_dtype": (edit(lambda h: h[name].update(dtype="F12")), data, f"tensor {name} has an unknown dtype"),
        "hole": (edit(lambda h: h[name].update(data_offsets=[h[name]["data_offsets"][0] + 4,
                                                             h[name]["data_offsets"][1] + 4])), data + b"\0" * 4,
                 "tensors must tile it"),
        "wrong_size": (edit(lambda h: h[name].update(shape=[33])), data, f"tensor {name}: data_offsets"),
        "missing": (edit(lambda h: h.pop("transformer.ln_f.bias")), data[:-32 * 4], "tensor ln_f.bias is missing"),
        "unexpected": (edit(lambda h: h.update({"transformer.h.0.extra": {"dtype": "F32", "shape": [0],
                                                                           "data_offsets": [0, 0]}})), data,
                       "unexpected tensor transformer.h.0.extra"),
        "metadata": (edit(lambda h: h["__metadata__"].update(n_head=4)), data, "__metadata__ value n_head is not a string"),
        "shape": (edit(lambda h: h["transformer.wpe.weight"].update(shape=[32, 64])), data,
                  "n_positions 64 disagrees with the weights' 32 (wpe.weight's rows)"),  # the metadata's sizes
    }
    for label, (h, blob, needle) in cases.items():
        path = f"{d}/bad_{label}.safetensors"
        if h is None:
            open(path, "wb").write(blob)
        else:
            write_st(path, h, blob)
        p = run([bs, "ckpt", "import", "--from", path, "--out", d + "/bad_ck", "--global-batch", "2"], check=False)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        ok = p.returncode not in (0, -11, 139) and len(lines) == 1 and path in lines[0] and needle in lines[0]
        t(ok, f"bad file ({label}): {lines[0] if lines else '(nothing)'}")


def main():
    if not HF_PYTHON or subprocess.run([HF_PYTHON, "-c", "import transformers, torch"],
                                       capture_output=True).returncode != 0:
        print(f"SKIP: no Hugging Face venv at {HF_PYTHON or '(unset)'} (scripts/hf-venv.sh makes it from PyPI; "
              "offline it cannot)")
        return SKIP
    t = Checks()
    with tempfile.TemporaryDirectory() as d:
        for dtype in ("float32", "bfloat16", "float16"):  # bf16/f16 files: references on torch's rounded values
            os.makedirs(f"{d}/{dtype}")
            hf_to_here(t, f"{d}/{dtype}", dtype)
        hf_dir = here_to_hf(t, d)
        init_from(t, d, hf_dir)
        bad_files(t, d)
    print(f"{'FAILED' if t.failed else 'ok'}: {len(t.failed)} failure(s)")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
