#!/usr/bin/python3
"""test_sft.py: supervised fine-tuning data: `prepare --format chat-jsonl`,
loss masks, packed documents, against PyTorch (Debian's python3-torch).

1. A packed batch (documents starting at end-of-text inside the sequences,
   targets -1 where the loss does not count): gpt_dump with docs:EOT gives
   the logits, the loss (sum over counted tokens / B T, gpt_dump's
   normalisation) and every gradient of an independent PyTorch GPT whose
   attention mask is causal and inside documents and whose positions restart
   at 0 at each document's first token, with ignored targets
   (tests/torch_gpt.py), within 1e-5; the packed rows equal each document
   run alone (1e-5); without the document mask, or with positions 0..T-1,
   the logits differ (both matter); a batch without any separator gives
   bitwise the logits of docs off (pretraining data is unchanged).
2. prepare --format chat-jsonl on two hand-written examples (a prompt/response
   pair and a messages list) writes exactly the expected byte tokens and
   loss-mask bytes: responses and the end-of-text after a response counted,
   prompts, role headers and system text not; both packed in the first
   window of --seq-len, its rest end-of-text padding, then the final target.
   Packing (--seq-len 32, examples of 1 to 60 bytes): every kept example lies
   whole inside one window, in order; those over 31 tokens are dropped and
   counted (prepare.json, and one warning line "N examples dropped: longer
   than --seq-len"); shards cut on window boundaries read the same windows.
3. Training on prepared chat data: the first step's loss is the mean over the
   counted tokens of the global batch, with attention inside documents and
   restarted positions, computed by PyTorch from the same initial model and
   sequences (1e-5); one process, 2 data-parallel ranks and micro-batches of
   1 give the same updates (losses 1e-5 relative, final parameters 1e-5).
4. Bad input: malformed lines (one line naming the file and line), shards
   with and without masks mixed, --doc-mask with --cp, a --seq-len other
   than the data's windows, an unknown --chat-template, --chat-template with
   --format text: one line each; SFT data without its windows' length (an
   earlier prepare) trains with a warning.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt as tg  # noqa: E402
from bstest import BATCHSCALE, MPIRUN, one_line_error, read_metrics, read_model, rel  # noqa: E402

torch.set_num_threads(1)
DUMP = os.environ.get("GPT_DUMP", "build/tests/gpt_dump")
failures = []


def check(label, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {label} {detail}", flush=True)
    if not ok:
        failures.append(label)


def doc_starts(idx, eot):
    """(B,T) the position of the last end-of-text at or before each token (0 before the first)."""
    B, T = idx.shape
    start = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        s = 0
        for i in range(T):
            if idx[b, i] == eot:
                s = i
            start[b, i] = s
    return start


def doc_mask(idx, eot):
    """(B,T,T) True where query i may see key j: j <= i and j at or after the last end-of-text at or before i."""
    start, j = doc_starts(idx, eot), torch.arange(idx.shape[1])
    return (j[None, None, :] <= j[None, :, None]) & (j[None, None, :] >= start[:, :, None])


def doc_positions(idx, eot):
    """(B,T) each token's position counted from the last end-of-text at or before it (0 before the first)."""
    return torch.arange(idx.shape[1])[None, :] - doc_starts(idx, eot)


def masked_loss_sum(logits, targets):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="sum")


def check_packed_batch(tmp):
    print("1. a packed batch against PyTorch (gpt_dump docs:EOT)")
    cfg = dict(L=2, H=2, C=32, V=70, maxT=32)
    B, T, eot = 2, 32, 69
    p = tg.init_params(cfg, 5)
    model = os.path.join(tmp, "packed.bin")
    tg.write_model(model, cfg, p)
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(0, eot, (B, T), generator=g)
    for b, positions in ((0, (0, 10, 21)), (1, (5, 17))):
        idx[b, list(positions)] = eot
    tgt = torch.randint(0, eot, (B, T), generator=g)
    tgt[0, 2:8] = -1  # prompts: not counted
    tgt[1, 0:9] = -1
    outs = dump_runs(tmp, model, idx, tgt, eot)
    params = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    logits, _ = tg.forward(cfg, params, idx.long(), attn_mask=doc_mask(idx, eot), positions=doc_positions(idx, eot))
    loss = masked_loss_sum(logits, tgt.long()) / (B * T)
    loss.backward()
    got, n = outs["docs"], B * T * cfg["V"]
    e = rel(got[:n], logits.detach().numpy().ravel())
    check("logits", e <= 1e-5, f"{e:.2e}")
    check("loss (counted tokens only)", abs(got[n] - loss.item()) / loss.item() <= 1e-5, f"{got[n]:.6f} vs {loss.item():.6f}")
    pos = n + 1
    worst = 0.0
    for name, _, _ in tg.TENSORS:
        grad = params[name].grad.numpy().ravel()
        worst = max(worst, rel(got[pos:pos + grad.size], grad))
        pos += grad.size
    check("every gradient", worst <= 1e-5, f"{worst:.2e}")
    e_plain = rel(outs["plain"][:n], logits.detach().numpy().ravel())
    check("without docs:EOT the logits differ (the mask matters)", e_plain > 1e-3, f"{e_plain:.2e}")
    alone = [tg.forward(cfg, p, idx[b:b + 1, s:e].long())[0][0] for b in range(B) for s, e in documents(idx[b], eot)]
    e_alone = rel(got[:n], torch.cat(alone).detach().numpy().ravel())
    check("packed rows = each document run alone (PyTorch, positions from 0)", e_alone <= 1e-5, f"{e_alone:.2e}")
    unrestarted, _ = tg.forward(cfg, p, idx.long(), attn_mask=doc_mask(idx, eot))
    e_pos = rel(got[:n], unrestarted.detach().numpy().ravel())
    check("with positions 0..T-1 the logits differ (the restart matters)", e_pos > 1e-3, f"{e_pos:.2e}")
    plain_idx = torch.randint(0, eot, (B, T), generator=g)  # pretraining-like: no separator anywhere
    outs = dump_runs(tmp, model, plain_idx, tgt, eot)
    check("no separator in the batch: docs:EOT bitwise equal to docs off", np.array_equal(outs["docs"], outs["plain"]))


def documents(row, eot):
    """(start, end) of each document of a row: a new one at each end-of-text (the first may start without one)."""
    starts = sorted({0} | {i for i, t in enumerate(row.tolist()) if t == eot})
    return list(zip(starts, starts[1:] + [len(row)]))


def dump_runs(tmp, model, idx, tgt, eot):
    """gpt_dump's outputs for the batch with docs:EOT and without."""
    B, T = idx.shape
    idx.numpy().astype(np.int32).tofile(os.path.join(tmp, "in.bin"))
    tgt.numpy().astype(np.int32).tofile(os.path.join(tmp, "tg.bin"))
    outs = {}
    for label, extra in (("docs", [f"docs:{eot}"]), ("plain", [])):
        out = os.path.join(tmp, f"dump_{label}.bin")
        subprocess.run([DUMP, model, os.path.join(tmp, "in.bin"), os.path.join(tmp, "tg.bin"), str(B), str(T), out]
                       + extra, check=True)
        outs[label] = np.fromfile(out, dtype=np.float32)
    return outs


def prepare(tmp, name, lines, extra=()):
    src, out = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name)
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = subprocess.run([BATCHSCALE, "prepare", "--format", "chat-jsonl", "--in", src, "--out", out, "--val-fraction",
                        "0", "--quiet"] + list(extra), capture_output=True, text=True)
    return p, out


def check_prepare(tmp):
    print("2. prepare --format chat-jsonl: tokens and loss mask")
    p, out = prepare(tmp, "two", [json.dumps({"prompt": "ab", "response": "cd"}),
                                  json.dumps({"messages": [{"role": "system", "content": "s"},
                                                           {"role": "user", "content": "x"},
                                                           {"role": "assistant", "content": "y"}]})])
    check("prepare ran", p.returncode == 0, p.stderr.strip())
    tokens = np.fromfile(os.path.join(out, "train_000000.bin"), dtype=np.uint16)[512:]
    mask = np.fromfile(os.path.join(out, "train_000000.mask"), dtype=np.uint8)
    want = [(256, 0)] + [(ord(c), 0) for c in "ab"] + [(ord(c), 1) for c in "cd"] + [(256, 1)]
    want += [(ord(c), 0) for c in "System: s\n"] + [(ord(c), 0) for c in "User: x\n"]
    want += [(ord(c), 0) for c in "Assistant: "] + [(ord(c), 1) for c in "y\n"]
    want += [(256, 1)] + [(256, 0)] * (128 - len(want) - 1)  # padding: the first ends the response
    want += [(256, 0)]  # the last window's last target
    check("tokens", tokens.tolist() == [t for t, _ in want], str(tokens.tolist()))
    check("loss mask", mask.tolist() == [m for _, m in want], str(mask.tolist()))
    summary = json.load(open(os.path.join(out, "prepare.json")))
    check("prepare.json counts the counted tokens", summary["train_counted_tokens"] == sum(m for _, m in want),
          str(summary.get("train_counted_tokens")))


def read_shards(out, prefix="train"):
    """Every shard's tokens and mask, in order."""
    files = sorted(f for f in os.listdir(out) if f.startswith(prefix) and f.endswith(".bin"))
    return [(np.fromfile(os.path.join(out, f), dtype=np.uint16)[512:],
             np.fromfile(os.path.join(out, f[:-4] + ".mask"), dtype=np.uint8)) for f in files]


def check_packing(tmp):
    print("2b. packing whole examples into windows of --seq-len")
    T = 32
    rng = np.random.default_rng(11)
    pairs = [("p" * int(a), "r" * int(b)) for a, b in zip(rng.integers(0, 30, 60), rng.integers(1, 30, 60))]
    lines = [json.dumps({"prompt": a, "response": b}) for a, b in pairs]
    p, out = prepare(tmp, "pack", lines, ["--seq-len", str(T), "--shard-tokens", "1024"])
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    too_long = sum(1 + len(a) + len(b) > T for a, b in pairs)
    check("prepare ran", p.returncode == 0, p.stderr.strip()[:200])
    check("some examples too long for a window (the test covers drops)", too_long > 0, str(too_long))
    check(f"one warning line: {too_long} examples dropped", len(err) == 1 and
          f"{too_long} examples dropped: longer than --seq-len" in err[0], p.stderr.strip())
    summary = json.load(open(os.path.join(out, "prepare.json")))
    check("prepare.json counts the drops and records seq_len",
          summary.get("dropped_examples") == too_long and summary.get("seq_len") == T, str(summary))
    shards = read_shards(out)
    check("several shards (cut on window boundaries)", len(shards) > 1 and all(len(t) % T == 1 for t, _ in shards),
          str([len(t) for t, _ in shards]))
    found, whole = [], True
    for tokens, mask in shards:
        for w in range((len(tokens) - 1) // T):
            window = tokens[w * T:w * T + T].tolist()
            whole &= window[0] == 256  # every window starts with an example's separator or padding
            text = "".join("|" if t == 256 else chr(t) for t in window)
            found += [piece for piece in text.split("|") if piece]
    want = [a + b for a, b in pairs if 1 + len(a) + len(b) <= T]
    check("every window starts at a separator", whole)
    check("every kept example whole inside one window, in order", found == want, f"{len(found)} vs {len(want)}")


SFT_T = 64  # the training sequence length the chat corpus is packed for


def chat_corpus(tmp):
    rng = np.random.default_rng(3)
    words = "the lord said unto moses speak unto the children of israel and say".split()
    lines = []
    for i in range(240):
        prompt = " ".join(rng.choice(words, rng.integers(1, 5)))
        response = " ".join(rng.choice(words, rng.integers(1, 7)))
        if i % 3 == 0:
            lines.append(json.dumps({"messages": [{"role": "user", "content": prompt},
                                                  {"role": "assistant", "content": response}]}))
        else:
            lines.append(json.dumps({"prompt": "Q: " + prompt + "\nA: ", "response": response}))
    p, out = prepare(tmp, "chat", lines, ["--seq-len", str(SFT_T)])
    assert p.returncode == 0, p.stderr
    return out


def train(data, prefix, ranks=1, micro=2, extra=()):
    metrics, model = prefix + ".jsonl", prefix + ".bin"
    cmd = [BATCHSCALE, "train", "--data", os.path.join(data, "train_000000.bin"), "--layers", "2", "--heads", "2",
           "--channels", "32", "--seq-len", str(SFT_T), "--micro-batch", str(micro), "--global-batch", "8", "--steps", "6",
           "--lr", "3e-3", "--warmup", "2", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1",
           "--data-order", "sequential", "--quiet", "--metrics", metrics, "--save-model", model] + list(extra)
    cmd = (MPIRUN + ["-np", str(ranks)] if ranks > 1 else []) + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return read_metrics(metrics), read_model(model)


def check_training(tmp):
    print("3. training on chat data: the loss over counted tokens; splits give the same update")
    data = chat_corpus(tmp)
    init = os.path.join(tmp, "sft_init.bin")
    cfg = dict(L=2, H=2, C=32, V=257, maxT=SFT_T)
    tg.write_model(init, cfg, tg.init_params(cfg, 9))
    runs = {label: train(data, os.path.join(tmp, "sft_" + label), ranks, micro, ["--init-from", init])
            for label, ranks, micro in (("one", 1, 8), ("dp2", 2, 2), ("micro1", 1, 1))}
    tokens = np.fromfile(os.path.join(data, "train_000000.bin"), dtype=np.uint16)[512:].astype(np.int64)
    mask = np.fromfile(os.path.join(data, "train_000000.mask"), dtype=np.uint8)
    T = SFT_T
    idx = torch.tensor(np.stack([tokens[s * T:s * T + T] for s in range(8)]))
    tgt = torch.tensor(np.stack([np.where(mask[s * T + 1:s * T + T + 1] == 1, tokens[s * T + 1:s * T + T + 1], -1)
                                 for s in range(8)]))
    p = {k: v for k, v in tg.read_model(init)[1].items()}
    logits, _ = tg.forward(cfg, p, idx, attn_mask=doc_mask(idx, 256), positions=doc_positions(idx, 256))
    ref = (masked_loss_sum(logits, tgt) / (tgt >= 0).sum()).item()
    first = runs["one"][0][0]["loss"]
    check("step 1 loss = PyTorch's mean over the counted tokens", abs(first - ref) / ref <= 1e-5, f"{first:.6f} vs {ref:.6f}")
    one_m, (_, one_p) = runs["one"]
    for label in ("dp2", "micro1"):
        m, (_, q) = runs[label]
        lg = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(m, one_m))
        check(f"{label}: losses", lg <= 1e-5, f"{lg:.2e}")
        check(f"{label}: final parameters", rel(q, one_p) <= 1e-5, f"{rel(q, one_p):.2e}")


def check_bad_input(tmp):
    print("4. bad input")
    for name, line, needle in (("notjson", "{oops", "bad_notjson.jsonl:2: not JSON"),
                               ("fields", json.dumps({"prompt": 1}), "bad_fields.jsonl:2: needs"),
                               ("role", json.dumps({"messages": [{"role": "robot", "content": "x"}]}),
                                "bad_role.jsonl:2: message 0 needs a role")):
        p, _ = prepare(tmp, "bad_" + name, [json.dumps({"prompt": "a", "response": "b"}), line])
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        check(f"prepare refuses {name}", p.returncode != 0 and len(lines) == 1 and needle in lines[0], p.stderr.strip())
    _, good = prepare(tmp, "good", [json.dumps({"prompt": "a" * 80, "response": "b" * 80})] * 4, ["--seq-len", "256"])
    os.remove(os.path.join(good, "train_000000.mask"))
    with open(os.path.join(good, "train_000001.bin"), "wb") as f:  # a second shard, with a mask
        f.write(open(os.path.join(good, "train_000000.bin"), "rb").read())
    count = int(np.fromfile(os.path.join(good, "train_000000.bin"), dtype=np.int32, count=3)[2])
    open(os.path.join(good, "train_000001.mask"), "wb").write(bytes(count))
    p = subprocess.run([BATCHSCALE, "train", "--data", good, "--layers", "1", "--heads", "1", "--channels", "8",
                        "--seq-len", "256", "--steps", "1", "--quiet"], capture_output=True, text=True)
    check("mixed masked and unmasked shards refused in one line",
          p.returncode != 0 and "all or none" in (one_line_error(p) or ""), p.stderr.strip())
    p = subprocess.run(MPIRUN + ["-np", "2", BATCHSCALE, "train", "--data", good, "--layers", "1", "--heads", "1",
                                 "--channels", "8", "--seq-len", "256", "--cp", "2", "--doc-mask", "on", "--steps",
                                 "1", "--quiet"], capture_output=True, text=True)
    check("--doc-mask on with --cp refused in one line",
          p.returncode != 0 and "--doc-mask on with --cp" in (one_line_error(p, 2) or ""), p.stderr.strip()[:200])
    os.remove(os.path.join(good, "train_000001.bin"))
    os.remove(os.path.join(good, "train_000001.mask"))
    p = subprocess.run([BATCHSCALE, "train", "--data", good, "--layers", "1", "--heads", "1", "--channels", "8",
                        "--seq-len", "128", "--steps", "1", "--quiet", "--doc-mask", "off"], capture_output=True, text=True)
    one_line(p, "train --seq-len 128 on data packed for 256 refused",
             "the sequence length 128: " + good + " packs its examples whole into windows of 256 tokens")
    one_line(p, "train --seq-len 128 on data packed for 256 refused: the flags", "(flags: --seq-len, --data or --val-data)")
    summary = json.load(open(os.path.join(good, "prepare.json")))
    del summary["seq_len"]  # as an earlier version wrote it
    json.dump(summary, open(os.path.join(good, "prepare.json"), "w"))
    p = subprocess.run([BATCHSCALE, "train", "--data", good, "--layers", "1", "--heads", "1", "--channels", "8",
                        "--seq-len", "128", "--steps", "1", "--quiet"], capture_output=True, text=True)
    check("SFT data prepared before whole-example packing: trains, with a warning", p.returncode == 0 and
          "prepared before examples were packed whole" in p.stderr, p.stderr.strip()[:300])
    p, _ = prepare(tmp, "bad_template", [json.dumps({"prompt": "a", "response": "b"})], ["--chat-template", "vicuna"])
    one_line(p, "an unknown --chat-template refused", "--chat-template must be plain, chatml, llama3")
    p = subprocess.run([BATCHSCALE, "prepare", "--in", os.path.join(tmp, "good.jsonl"), "--out", os.path.join(tmp, "t"),
                        "--chat-template", "chatml"], capture_output=True, text=True)
    one_line(p, "--chat-template with --format text refused", "--chat-template goes with --format chat-jsonl")


def one_line(p, label, needle):
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    check(label, p.returncode != 0 and len(lines) == 1 and needle in lines[0], p.stderr.strip()[:300])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_packed_batch(tmp)
        check_prepare(tmp)
        check_packing(tmp)
        check_training(tmp)
        check_bad_input(tmp)
    print("FAILED: " + "; ".join(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
