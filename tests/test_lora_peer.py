#!/usr/bin/python3
"""test_lora_peer.py: LoRA training against Hugging Face peft.

Runs under the Hugging Face venv (scripts/hf-venv.sh: transformers 4.36.2 and
peft 0.7.1 on Debian's torch); exits 77 (skipped, with the reason) without it.

A random GPT-2 (every parameter drawn, as in test_hf_peer.py) is saved with
save_pretrained; peft wraps it with rank-4 adapters on two of the four linear
layers, named as peft users do (target_modules ["c_attn", "mlp.c_proj"];
alpha 12, the default of neither side; the run's dropout) whose A and B are
both drawn (peft starts B at zero, which would leave A's first gradients zero
and hide a wrong dA), and saves them. `batchscale train --init-from DIR
--lora-init ADAPTERS` with no other LoRA flag (r, alpha, dropout and targets
come from peft's adapter_config.json) then runs 6 AdamW steps (weight decay 0.1 on the
adapters as torch.optim.AdamW applies it to its group, constant lr, no
clipping) on the same sequences as a torch.optim.AdamW loop over peft's
trainable parameters. Checked within 1e-5 (fp32 on both sides; only the
summation order differs, and 6 Adam steps do not amplify it past 1e-6 here):
  - every step's loss;
  - the trained adapters (--save-adapters, read back with safetensors), and
    peft loads that directory (PeftModel.from_pretrained) to the same logits,
    with the same r, alpha, dropout and target modules, and the base's path;
  - --lora-merge --save-model: the merged weights equal merge_and_unload()'s;
  - the base weights in the merged file outside the adapted layers are the
    file's own (frozen: LayerNorms, embeddings untouched by training);
  - with --lora-dropout 0.1 against peft whose nn.Dropout modules are
    replaced by a transcription of batchscale's keyed mask (lora.h: a hash of
    the tokens, the step, the layer, the target and the column): the same
    losses and adapters (the gradient goes through the same mask).
usage: test_lora_peer.py (env BATCHSCALE, BS_HF_PYTHON)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import SKIP  # noqa: E402

HF_PYTHON = os.environ.get("BS_HF_PYTHON", "")
TOL = 1e-5
STEPS, B, T, V, RANK, ALPHA, LR, WD = 6, 2, 32, 257, 4, 12.0, 2e-3, 0.1
DROPOUT, SEED = 0.1, 5

PEER = r'''
import json, sys
import numpy as np, torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel
from peft import LoraConfig, PeftModel, get_peft_model
d, steps, B, T, V, rank, alpha, lr, wd = sys.argv[1], *map(int, sys.argv[2:7]), *map(float, sys.argv[7:10])
dropout, seed = float(sys.argv[10]), int(sys.argv[11])
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5)
base = GPT2LMHeadModel(cfg)
with torch.no_grad():
    for name, p in base.named_parameters():
        p.normal_(1.0 if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.0, 0.1)
base.save_pretrained(d + "/base", safe_serialization=True)
targets = ["c_attn", "mlp.c_proj"]  # peft's suffix match: attn.c_attn and mlp.c_proj, not attn.c_proj
model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=dropout,
                                        fan_in_fan_out=True, bias="none"))
with torch.no_grad():
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.normal_(0.0, 0.2)
model.save_pretrained(d + "/init_adapters")

# batchscale's dropout mask (src/model/lora.h), transcribed: a function of the tokens, the step, the layer, the
# target and the column; peft's nn.Dropout modules are replaced by it so both sides drop the same elements
def mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))
class Keys:
    rows = None
def row_keys(tokens, step):
    Bn, Tn = tokens.shape
    h = np.full(Bn, mix(mix(np.array([seed], np.uint64)) + np.uint64(step))[0], np.uint64)
    for i in range(Tn):
        h = mix(h + tokens[:, i].astype(np.uint64))
    return mix(h[:, None] + np.arange(Tn, dtype=np.uint64)[None, :])
class KeyedDropout(torch.nn.Module):
    def __init__(self, layer, target):
        super().__init__()
        self.salt = mix(np.array([(4 * layer + target + 1) * 0x9E3779B97F4A7C15 % 2**64], np.uint64))[0]
        self.threshold = np.uint64(int(float(np.float32(dropout)) * 16777216.0 + 0.5))
    def forward(self, x):
        if not self.training:
            return x
        row = mix(Keys.rows ^ self.salt)[..., None]
        cols = np.arange(x.shape[-1], dtype=np.uint64)
        keep = (mix(row + cols) >> np.uint64(40)) >= self.threshold
        scale = np.float32(1) / (np.float32(1) - np.float32(dropout))
        return x * torch.from_numpy(keep.astype(np.float32) * scale)
if dropout > 0:
    names = {"attn.c_attn": 0, "attn.c_proj": 1, "mlp.c_fc": 2, "mlp.c_proj": 3}
    for name, module in model.named_modules():
        if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
            layer = int(name.split(".h.")[1].split(".")[0])
            target = names[name.split(".h.%d." % layer)[1]]
            module.lora_dropout["default"] = KeyedDropout(layer, target)
    model.train()
stream = torch.randint(0, V, (steps * B * T + 1,), generator=torch.Generator().manual_seed(3))
stream.to(torch.int32).numpy().tofile(d + "/stream.bin")
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
losses = []
for s in range(steps):
    first = s * B
    idx = torch.stack([stream[(first + b) * T:(first + b) * T + T] for b in range(B)]).long()
    tgt = torch.stack([stream[(first + b) * T + 1:(first + b) * T + T + 1] for b in range(B)]).long()
    opt.zero_grad()
    Keys.rows = row_keys(idx.numpy(), s)
    logits = model(input_ids=idx).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
probe = stream[:T].long().unsqueeze(0)
with torch.no_grad():
    ref_logits = model(input_ids=probe).logits
state = {k: v for k, v in model.state_dict().items() if "lora_" in k}
# our exported adapters, loaded by peft onto the same base
ours = PeftModel.from_pretrained(GPT2LMHeadModel.from_pretrained(d + "/base"), d + "/ours")
ours.eval()
loaded = ours.peft_config["default"]
ours_config = {"r": loaded.r, "lora_alpha": loaded.lora_alpha, "lora_dropout": loaded.lora_dropout,
               "target_modules": sorted(loaded.target_modules), "base": loaded.base_model_name_or_path}
with torch.no_grad():
    our_logits = ours(input_ids=probe).logits
saved = load_file(d + "/ours/adapter_model.safetensors")
def rel(a, b):
    return float((a.double() - b.double()).abs().max() / max(1.0, float(b.double().abs().max())))
adapter_err = max(rel(saved[k.replace(".default", "")], v) for k, v in state.items())
missing = sorted(set(k.replace(".default", "") for k in state) ^ set(saved))
merged = model.merge_and_unload().state_dict()
mine = load_file(d + "/merged.safetensors")
merge_err = max(rel(mine[k], merged[k]) for k in mine)  # both Conv1D (in, out)
base_file = load_file(d + "/base/model.safetensors")
frozen_same = all(torch.equal(mine[k], base_file[k]) for k in mine if "ln_" in k or "wte" in k or "wpe" in k)
json.dump({"losses": losses, "adapter_err": adapter_err, "missing": missing, "logits_err": rel(our_logits, ref_logits),
           "merge_err": merge_err, "frozen_same": frozen_same, "ours_config": ours_config,
           "adapted": sorted(set(k.split(".h.0.")[1].rsplit(".lora_", 1)[0] for k in saved if ".h.0." in k))},
          open(d + "/peer.json", "w"))
'''

# the base, adapters and stream are written by the first half of PEER; split it at the training loop's output
SETUP = PEER[:PEER.index("trainable = ")]


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def write_shard(path, stream_path):
    """A token shard (llm.c format: 256 int32 header, magic 20240520, version 1, count; uint16 tokens)."""
    import array
    tokens = array.array("i")
    with open(stream_path, "rb") as f:
        tokens.frombytes(f.read())
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        header.tofile(f)
        array.array("H", tokens).tofile(f)


def run_pair(bs, d, dropout):
    """The peer script and batchscale on the same model, adapters and tokens; returns (peer, our losses)."""
    args = [d, str(STEPS), str(B), str(T), str(V), str(RANK), str(ALPHA), str(LR), str(WD), str(dropout), str(SEED)]
    run([HF_PYTHON, "-c", SETUP] + args)
    write_shard(d + "/train.bin", d + "/stream.bin")
    metrics = d + "/m.jsonl"
    run([bs, "train", "--init-from", d + "/base", "--data", d + "/train.bin", "--data-order", "sequential",
         "--seq-len", str(T), "--micro-batch", str(B), "--global-batch", str(B), "--steps", str(STEPS),
         "--lr", str(LR), "--min-lr", str(LR), "--warmup", "0", "--weight-decay", str(WD), "--grad-clip", "0",
         "--beta2", "0.95", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1", "--quiet",
         "--lora-init", d + "/init_adapters", "--seed", str(SEED),
         "--save-adapters", d + "/ours", "--lora-merge", "--save-model", d + "/merged.safetensors",
         "--metrics", metrics])
    run([HF_PYTHON, "-c", PEER] + args)
    return json.load(open(d + "/peer.json")), [json.loads(line)["loss"] for line in open(metrics)]


def main():
    if not HF_PYTHON or not os.path.exists(HF_PYTHON) or run([HF_PYTHON, "-c", "import peft"], check=False).returncode:
        print("SKIP: no Hugging Face venv with peft (scripts/hf-venv.sh makes it; PyPI needed once)")
        return SKIP
    bs = os.environ["BATCHSCALE"]
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        peer, ours = run_pair(bs, d, 0.0)
        os.makedirs(d + "/dropout")
        dpeer, dours = run_pair(bs, d + "/dropout", DROPOUT)
        drop_err = max(abs(a - b) / b for a, b in zip(dours, dpeer["losses"]))
        checks = [
            (len(ours) == STEPS and max(abs(a - b) / b for a, b in zip(ours, peer["losses"])) <= TOL,
             f"loss at each of {STEPS} AdamW steps vs peft: "
             f"{max(abs(a - b) / b for a, b in zip(ours, peer['losses'])):.2e} ({ours[0]:.5f} .. {ours[-1]:.5f})"),
            (not peer["missing"], f"the exported adapter names are peft's (differences: {peer['missing'][:4]})"),
            (peer["adapter_err"] <= TOL, f"trained adapters vs peft's: {peer['adapter_err']:.2e}"),
            (peer["logits_err"] <= TOL, f"peft loads --save-adapters: logits {peer['logits_err']:.2e}"),
            (peer["adapted"] == ["attn.c_attn", "mlp.c_proj"] and peer["ours_config"] == {
                "r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0, "target_modules": ["attn.c_attn", "mlp.c_proj"],
                "base": os.path.realpath(d + "/base")} and dpeer["ours_config"]["lora_dropout"] == DROPOUT,
             f"--lora-init took r, alpha, dropout and targets from peft's file, and peft reads them back from "
             f"--save-adapters: {peer['ours_config']}, adapted {peer['adapted']}"),
            (peer["merge_err"] <= TOL, f"--lora-merge weights vs merge_and_unload(): {peer['merge_err']:.2e}"),
            (peer["frozen_same"], "the frozen base (embeddings, LayerNorms) leaves training bit for bit"),
            (len(dours) == STEPS and drop_err <= TOL and dpeer["adapter_err"] <= TOL,
             f"--lora-dropout {DROPOUT} with peft's dropout given the same keyed mask: losses {drop_err:.2e}, "
             f"adapters {dpeer['adapter_err']:.2e} (and they differ from no dropout: "
             f"{max(abs(a - b) for a, b in zip(dours, ours)):.1e})"),
        ]
        print("losses, batchscale:", ["%.6f" % x for x in ours], "\nlosses, peft:      ", ["%.6f" % x for x in peer["losses"]])
        for ok, what in checks:
            print(("ok   " if ok else "FAIL ") + what, flush=True)
            failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
