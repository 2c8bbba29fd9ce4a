#!/usr/bin/python3
"""bench_tokenizer.py: GPT-2 BPE encoding throughput (MB of text per second) of
batchscale against tiktoken and Hugging Face tokenizers (PyPI), on the same
text, the same vocabulary files, at 1 and 2 threads, in the same run.

Texts: the King James Bible (English prose, 4.3 MB) and the tests' varied text
(many scripts, emoji, numbers, whitespace; 1.9 MB). Each tool encodes the text
in 64 KB chunks cut where GPT-2's pre-tokenisation allows (so the chunks give
the tokens of the whole text) spread over the threads; each takes the best of 3 runs, timing encoding
only (text already in memory; our word caches start empty each run). The
three must agree on the token count. Ratios > 1 mean batchscale is faster.
The JSON's "machine" is `batchscale bench cpu` (the CPU model).

Usage: bench_tokenizer.py BATCHSCALE OUT.json
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import harness.tok_peers as peers  # noqa: E402

sys.path.insert(0, HERE)
import kernel_report  # noqa: E402

REPEAT = 3
CHUNK = 1 << 16


def chunks_at_cuts(text, size=CHUNK):
    """Chunks of about `size` characters, cut before a newline that follows an ASCII character
    other than a space or an apostrophe: a place where GPT-2's pattern always ends a piece, so
    encoding the chunks gives the tokens of the whole text."""
    cut = re.compile(r"[!-&(-~](?=\n)")
    out, start = [], 0
    while start < len(text):
        m = cut.search(text, start + size)
        end = m.end() if m else len(text)
        out.append(text[start:end])
        start = end
    return out


def peer_run(path, threads):
    """In a child with the peers' thread pools sized: prints JSON {tool: [seconds, tokens]}."""
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    with open(path, encoding="utf-8", newline="") as f:
        chunks = chunks_at_cuts(f.read())
    tk, hf = peers.tiktoken_gpt2(), peers.hf_bpe()
    hf_encode = getattr(hf, "encode_batch_fast", hf.encode_batch)
    runs = {
        "tiktoken": lambda: sum(len(x) for x in tk.encode_ordinary_batch(chunks, num_threads=threads)),
        "hf_tokenizers": lambda: sum(len(e.ids) for e in hf_encode(chunks, add_special_tokens=False)),
    }
    result = {}
    for name, fn in runs.items():
        best, count = 1e30, 0
        for _ in range(REPEAT):
            t0 = time.perf_counter()
            count = fn()
            best = min(best, time.perf_counter() - t0)
        result[name] = [best, count]
    print(json.dumps(result))


def ours(bs, path, threads):
    p = subprocess.run([bs, "tokenizer", "encode", "--tokenizer", "gpt2", "--vocab-dir", peers.GPT2_DIR, "--in", path,
                        "--threads", str(threads), "--repeat", str(REPEAT), "--out", os.devnull],
                       capture_output=True, text=True, check=True)
    m = re.search(r"into (\d+) tokens in ([0-9.]+) s", p.stderr)
    return float(m.group(2)), int(m.group(1))


def main():
    bs, out_json = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 4 and sys.argv[3] == "--peer":
        return peer_run(sys.argv[4], int(sys.argv[5]))
    python = peers.peer_python()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        texts = {"kjv": os.path.join(tmp, "kjv.txt"), "varied": os.path.join(tmp, "varied.txt")}
        with open(texts["kjv"], "wb") as f:
            f.write(subprocess.run(["bible", "-m", "8192", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout)
        with open(texts["varied"], "w", encoding="utf-8", newline="") as f:
            f.write(peers.varied_text())
        print(f"{'text':8s} {'threads':>7s} {'batchscale':>11s} {'tiktoken':>9s} {'HF tok.':>8s}   "
              f"{'vs tiktoken':>11s} {'vs HF':>6s}   (MB/s)")
        for name, path in texts.items():
            mb = os.path.getsize(path) / 1e6
            for threads in (1, 2):
                t_ours, n_ours = ours(bs, path, threads)
                p = subprocess.run([python, os.path.abspath(__file__), bs, out_json, "--peer", path, str(threads)],
                                   capture_output=True, text=True, check=True)
                peer = json.loads(p.stdout.strip().splitlines()[-1])
                for tool, (_, count) in peer.items():
                    if count != n_ours:
                        raise SystemExit(f"{tool} made {count} tokens of {name}, batchscale {n_ours}")
                row = {"text": name, "mb": mb, "threads": threads, "tokens": n_ours, "batchscale_mb_s": mb / t_ours,
                       "tiktoken_mb_s": mb / peer["tiktoken"][0], "hf_mb_s": mb / peer["hf_tokenizers"][0]}
                row["ratio_vs_tiktoken"] = row["batchscale_mb_s"] / row["tiktoken_mb_s"]
                row["ratio_vs_hf"] = row["batchscale_mb_s"] / row["hf_mb_s"]
                results.append(row)
                print(f"{name:8s} {threads:7d} {row['batchscale_mb_s']:11.1f} {row['tiktoken_mb_s']:9.1f} "
                      f"{row['hf_mb_s']:8.1f}   {row['ratio_vs_tiktoken']:10.2f}x {row['ratio_vs_hf']:5.2f}x",
                      flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
    with open(out_json, "w") as f:
        json.dump({"benchmark": "tokenizer", "machine": kernel_report.machine(bs), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
