#!/usr/bin/python3
"""test_sft_hf.py: supervised fine-tuning data against Hugging Face
transformers (the venv scripts/hf-venv.sh makes: transformers 4.36.2 on
Debian's torch); exits 77 (skipped, with the reason) without it.

1. Positions restart at each packed document: a random GPT2LMHeadModel saved
   with save_pretrained; gpt_dump (docs:EOT) on packed rows gives the logits
   transformers gives for each document run alone with explicit position_ids
   0..n-1, within 1e-5 (fp32, only the summation order differs).
2. Chat templates: `prepare --format chat-jsonl --tokenizer byte` (so the
   shard's tokens are the text's bytes) renders conversations and
   prompt/response pairs to exactly the text tokenizer.apply_chat_template
   renders from a tokenizer_config.json holding the template, for chatml
   and Llama 3 (contents with surrounding whitespace and Unicode spaces, which
   Llama 3's trim removes), whether the template is named (--chat-template
   chatml) or read from that tokenizer_config.json (also a chatml written with
   other quotes, spaces and '-' whitespace controls); the loss counts exactly
   the assistant contents and their end markers.
3. --vocab-dir with a Hugging Face tokenizer directory (vocab.json,
   merges.txt): the tokens GPT2Tokenizer.from_pretrained of that directory
   gives, and those of the same files named encoder.json / vocab.bpe.
4. Refused in one line each: an unknown chat_template, Llama 3's with another
   bos_token, an added token beyond vocab.json, a merges.txt without its
   "#version" line.
usage: test_sft_hf.py (env BATCHSCALE, GPT_DUMP, BS_HF_PYTHON)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import BATCHSCALE, SKIP, rel  # noqa: E402

HF_PYTHON = os.environ.get("BS_HF_PYTHON", "")
DUMP = os.environ.get("GPT_DUMP", "build/tests/gpt_dump")
GPT2_FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "gpt2")
TOL = 1e-5  # fp32: one process each side, only the summation order differs
failures = []

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_RESTYLED = ("{%- for message in messages -%}\n  {{- \"<|im_start|>\" + message[\"role\"] + \"\\n\" +  "
                   "message[\"content\"] + \"<|im_end|>\" + \"\\n\" -}}\n{%- endfor -%}{%- if add_generation_prompt -%}"
                   "{{ \"<|im_start|>assistant\\n\" }}{%- endif -%}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
          "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == "
          "0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
END_MARKER = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>"}

# Runs inside the venv: "model DIR" saves a random GPT-2 and the logits of each document of DIR/packed.bin run
# alone; "chat DIR" renders DIR/conversations.json with DIR's tokenizer; "encode DIR FILE" encodes a file's text.
PEER = r'''
import json, sys
import numpy as np, torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer
mode, directory = sys.argv[1], sys.argv[2]
if mode == "model":
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=70, n_positions=64, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "ln_" in name and name.endswith("weight") else 0.0, 0.1)
    model.save_pretrained(directory, safe_serialization=True)
    model.eval()
    B, T, eot = [int(v) for v in sys.argv[3:6]]
    packed = np.fromfile(directory + "/packed.bin", dtype=np.int32).reshape(B, T)
    out = []
    for row in packed:
        starts = sorted({0} | {i for i, t in enumerate(row) if t == eot})
        for s, e in zip(starts, starts[1:] + [T]):
            ids = torch.tensor(row[s:e], dtype=torch.long)[None]
            out.append(model(ids, position_ids=torch.arange(e - s)[None]).logits[0].detach().numpy())
    np.concatenate(out).astype(np.float32).tofile(directory + "/alone.bin")
elif mode == "chat":
    tok = GPT2Tokenizer.from_pretrained(directory)
    convs = json.load(open(directory + "/conversations.json"))
    json.dump([tok.apply_chat_template(c, tokenize=False) for c in convs], open(directory + "/rendered.json", "w"))
else:
    tok = GPT2Tokenizer.from_pretrained(directory)
    print(json.dumps(tok.encode(open(sys.argv[3], encoding="utf-8").read())))
'''


def check(label, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {label} {detail}", flush=True)
    if not ok:
        failures.append(label)


def run(cmd, check_rc=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check_rc and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def one_line(p, label, needle):
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    check(label, p.returncode != 0 and len(lines) == 1 and needle in lines[0], p.stderr.strip()[:300])


def hf_tokenizer_dir(path, config=None, merges_header=True):
    """A Hugging Face GPT-2 tokenizer directory from the GPT-2 files (the same formats under other names)."""
    os.makedirs(path, exist_ok=True)
    shutil.copy(os.path.join(GPT2_FILES, "encoder.json"), os.path.join(path, "vocab.json"))
    merges = open(os.path.join(GPT2_FILES, "vocab.bpe"), encoding="utf-8").read()
    if not merges_header:
        merges = merges.split("\n", 1)[1]
    open(os.path.join(path, "merges.txt"), "w", encoding="utf-8").write(merges)
    json.dump(config or {}, open(os.path.join(path, "tokenizer_config.json"), "w"))
    return path


def check_positions(tmp):
    print("1. positions restart at each packed document (transformers, explicit position_ids)")
    B, T, eot = 2, 48, 69
    d = os.path.join(tmp, "model")
    os.makedirs(d)
    rng = np.random.default_rng(1)
    packed = rng.integers(0, eot, (B, T)).astype(np.int32)
    packed[0, [0, 13, 30]] = eot
    packed[1, [0, 7, 20, 41]] = eot
    packed.tofile(os.path.join(d, "packed.bin"))
    run([HF_PYTHON, "-c", PEER, "model", d, str(B), str(T), str(eot)])
    out = os.path.join(tmp, "dump.bin")
    run([DUMP, d, os.path.join(d, "packed.bin"), os.path.join(d, "packed.bin"), str(B), str(T), out, f"docs:{eot}"])
    got = np.fromfile(out, dtype=np.float32)[:B * T * 70]
    e = rel(got, np.fromfile(os.path.join(d, "alone.bin"), dtype=np.float32))
    check("packed rows = each document alone in GPT2LMHeadModel", e <= TOL, f"{e:.2e}")


CONVERSATIONS = [
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "  What is 2+2?\n"},
     {"role": "assistant", "content": "\t4, of course. \n\n"}, {"role": "user", "content": "And 3+3?"},
     {"role": "assistant", "content": "\u00a0six\u3000"}],
    [{"role": "user", "content": "Grüße, 世界!"}, {"role": "assistant", "content": "Hallo.\nZweite Zeile."}],
]
PAIRS = [("Q: name a colour ", " blue")]


def read_examples(out):
    """Each example's text and counted text from byte-level shards (examples start at end-of-text, 256)."""
    examples = []
    for f in sorted(x for x in os.listdir(out) if x.startswith("train") and x.endswith(".bin")):
        tokens = np.fromfile(os.path.join(out, f), dtype=np.uint16)[512:]
        mask = np.fromfile(os.path.join(out, f[:-4] + ".mask"), dtype=np.uint8)
        for t, m in zip(tokens[:-1], mask[:-1]):  # the last token is the last window's target only
            if t == 256:
                examples.append((bytearray(), bytearray()))
            else:
                examples[-1][0].append(t)
                if m:
                    examples[-1][1].append(t)
    return [(a.decode("utf-8"), b.decode("utf-8")) for a, b in examples if a]


def counted_text(name, conv):
    """What the loss should count: each assistant content (trimmed by Llama 3) and its end marker."""
    strip = (lambda s: s.strip()) if name == "llama3" else (lambda s: s)
    return "".join(strip(m["content"]) + END_MARKER[name] for m in conv if m["role"] == "assistant")


def check_templates(tmp):
    print("2. chat templates: the text apply_chat_template renders; the loss counts the assistant's part")
    src = os.path.join(tmp, "chat.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for conv in CONVERSATIONS:
            f.write(json.dumps({"messages": conv}) + "\n")
        for prompt, response in PAIRS:
            f.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    convs = CONVERSATIONS + [[{"role": "user", "content": p}, {"role": "assistant", "content": r}] for p, r in PAIRS]
    for name, source, bos in (("chatml", CHATML, None), ("chatml", CHATML_RESTYLED, None),
                              ("llama3", LLAMA3, "<|begin_of_text|>")):
        config = {"chat_template": source}
        if bos:
            config["bos_token"] = bos
        d = hf_tokenizer_dir(os.path.join(tmp, f"tok_{name}_{len(source)}"), config)
        json.dump(convs, open(os.path.join(d, "conversations.json"), "w"))
        run([HF_PYTHON, "-c", PEER, "chat", d])
        want = json.load(open(os.path.join(d, "rendered.json")))
        for how in (name, d):
            out = os.path.join(tmp, f"out_{name}_{len(source)}_{how == d}")
            p = run([BATCHSCALE, "prepare", "--format", "chat-jsonl", "--in", src, "--out", out, "--val-fraction", "0",
                     "--seq-len", "1024", "--chat-template", how, "--quiet"], check_rc=False)
            label = f"{name} ({'tokenizer_config.json' if how == d else 'named'}{', restyled' if source == CHATML_RESTYLED else ''})"
            check(f"{label}: prepare ran", p.returncode == 0, p.stderr.strip()[:200])
            got = read_examples(out) if p.returncode == 0 else []
            check(f"{label}: the text apply_chat_template renders", [t for t, _ in got] == want,
                  "" if [t for t, _ in got] == want else f"\n    got  {[t for t, _ in got]}\n    want {want}")
            check(f"{label}: counted = assistant contents + end markers",
                  [c for _, c in got] == [counted_text(name, conv) for conv in convs], str([c for _, c in got]))


def check_vocab_dir(tmp):
    print("3. --vocab-dir: a Hugging Face tokenizer directory")
    text = os.path.join(tmp, "text.txt")
    open(text, "w", encoding="utf-8").write("Hello world, it's 2024!\n\n  Grüße   aus   Köln 12345 don't\tstop.\n")
    d = hf_tokenizer_dir(os.path.join(tmp, "hf_vocab"))
    want = json.loads(run([HF_PYTHON, "-c", PEER, "encode", d, text]).stdout)
    got = {}
    for label, vocab in (("hf", d), ("gpt2", GPT2_FILES)):
        out = os.path.join(tmp, "vocab_" + label)
        p = run([BATCHSCALE, "prepare", "--in", text, "--out", out, "--tokenizer", "gpt2", "--vocab-dir", vocab,
                 "--val-fraction", "0", "--quiet"], check_rc=False)
        check(f"prepare --vocab-dir ({label} file names) ran", p.returncode == 0, p.stderr.strip()[:200])
        got[label] = np.fromfile(os.path.join(out, "train_000000.bin"), dtype=np.uint16)[513:].tolist() \
            if p.returncode == 0 else []
    check("the tokens GPT2Tokenizer.from_pretrained(dir) gives", got["hf"] == want, f"{got['hf']} vs {want}")
    check("the same as encoder.json / vocab.bpe", got["hf"] == got["gpt2"])


def check_refusals(tmp):
    print("4. refused in one line")
    src = os.path.join(tmp, "one.jsonl")
    open(src, "w").write(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    zephyr = "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token }}{% endfor %}"
    for label, config, needle in (("an unknown chat_template", {"chat_template": zephyr}, "not one of the known"),
                                  ("Llama 3's template with bos_token <s>", {"chat_template": LLAMA3, "bos_token": "<s>"},
                                   "bos_token \"<s>\"")):
        d = hf_tokenizer_dir(os.path.join(tmp, "bad_" + label.split()[1]), config)
        p = run([BATCHSCALE, "prepare", "--format", "chat-jsonl", "--in", src, "--out", os.path.join(tmp, "x"),
                 "--chat-template", d], check_rc=False)
        one_line(p, label, needle)
    added = {"added_tokens_decoder": {"50257": {"content": "<|im_start|>", "special": True}}}
    for label, d, needle in (("an added token beyond vocab.json", hf_tokenizer_dir(os.path.join(tmp, "added"), added),
                              "added token \"<|im_start|>\" (id 50257)"),
                             ("merges.txt without its #version line",
                              hf_tokenizer_dir(os.path.join(tmp, "nohead"), merges_header=False), "merges.txt line 1")):
        p = run([BATCHSCALE, "prepare", "--in", src, "--out", os.path.join(tmp, "y"), "--tokenizer", "gpt2",
                 "--vocab-dir", d], check_rc=False)
        one_line(p, label, needle)


def main():
    if not HF_PYTHON or subprocess.run([HF_PYTHON, "-c", "import transformers, torch, jinja2"],
                                       capture_output=True).returncode != 0:
        print(f"SKIP: no Hugging Face venv at {HF_PYTHON or '(unset)'} (scripts/hf-venv.sh makes it from PyPI; "
              "offline it cannot)")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        check_positions(tmp)
        check_templates(tmp)
        check_vocab_dir(tmp)
        check_refusals(tmp)
    print("FAILED: " + "; ".join(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
