#!/usr/bin/python3
"""test_nf4.py: QLoRA's frozen base (--base-weights nf4) against a
transcription of bitsandbytes' published algorithm, and the base streamed
into its format.

The transcription (NumPy, below) follows bitsandbytes 0.50: functional.py
quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True) and
create_dynamic_map(signed=True), and the default backend's quantize_4bit /
quantize_blockwise / dequantize (backends/default/ops.py): the tensor
flattened in blocks of 64, absmax per block, x * (1 / absmax) clamped to
[-1, 1] and coded as the nearest NF4 value (argmin: the first on a tie),
two codes per byte with element 2i in the high nibble; the absmax values
minus their mean, in blocks of 256 with an fp32 absmax2 each, coded on the
8-bit dynamic map; dequantized as NF4[code] x (map[q] x absmax2 + offset).
bitsandbytes itself is not run: its wheels need torch >= 2 and this
machine's torch is Debian's 1.13. Three choices where bitsandbytes leaves
the bits to torch, the same here and in model/nf4.c: the mean in double,
rounded once (torch's float32 mean may differ in the last bit); the dynamic
map in double, rounded once (bitsandbytes' float32 linspace: where torch is
installed the two maps are compared below and differ by at most 1 ulp in a
few entries); a block of zeros codes as NF4's 0 (bitsandbytes divides by 0
there; either way the block dequantizes to zeros).

1. model/nf4.c (tests/test_nf4_driver.c) on tensors with a short last block,
   an odd length, a block of zeros and more than 256 blocks: codes, absmax
   codes, absmax2, offset, dequantized values and the dynamic map equal the
   transcription's value for value.
2. A LoRA run with --base-weights nf4 equals, bit for bit (losses and merged
   weights), fp32 LoRA over a file whose linear weights are the
   transcription's dequantized NF4 and whose wte is rounded to bf16 (by
   torch where importable), and itself from the same base saved as
   safetensors; with --lr 0 the merged model is that file.
2b. wte kept in bf16 (any reduced base) with the tied head in blocks of
   vocabulary rows: --base-weights bf16 with a vocabulary of 2500 (ten
   blocks) equals fp32 LoRA over the bf16-rounded file bit for bit, at 1 and
   2 threads and under TP 2; on GPT-2's vocabulary it saves half of wte's
   fp32 bytes of peak memory. An NF4 base's fp32 scratch is one block of
   rows (the frozen products dequantize a block at a time), not a matrix.
3. Streaming: each layer (C 768) of a base read from a file adds to the
   peak resident memory its weights' bytes once: at most 1.25x their fp32
   bytes with an fp32 base, from an llm.c or a safetensors file (loading
   through a second fp32 copy made it 2x),
   and NF4's bytes + 15% of fp32's with an NF4 base; and NF4 saves at least
   80% of what it should at 4 layers. Under TP 2 (bf16 base) a rank's cost
   per layer is at most half the layer's fp32 bytes (its half in bf16 is a
   quarter; reading the whole layer in fp32, as before, costs all of it):
   each rank reads only its shard.
4. --base-weights nf4 with --tp 2 is refused, and a safetensors base whose
   lm_head differs from its wte (checked as wte is streamed), in one line.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import MPIRUN, Checks, make_corpus, read_model  # noqa: E402
from harness.lora_runs import train as lora_run  # noqa: E402

check = Checks()
F = np.float32

# bitsandbytes' NF4 code book (functional.py get_4bit_type("nf4"); backends/utils.py _NF4_QUANT_TABLE)
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=F)


def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for i in 0..6 the midpoints of
    linspace(0.1, 1, 2^i + 1) times 10^(i - 6), both signs, then 0 and 1, sorted (in double, rounded once)."""
    data = []
    for i, p in enumerate([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]):
        n = 2 ** i + 1
        step = (1.0 - 0.1) / (n - 1)
        b = [0.1 + j * step for j in range(n - 1)] + [1.0]
        for j in range(n - 1):
            mean = (b[j] + b[j + 1]) / 2.0
            data += [F(p * mean), F(-p * mean)]
    data += [F(0), F(1)]
    assert len(data) == 256
    return np.sort(np.array(data, dtype=F))


def torch_dynamic_map():
    """bitsandbytes' own construction in torch's float32 (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    data = []
    for i in range(7):
        b = torch.linspace(0.1, 1, 2 ** i + 1)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist() + ((-(10 ** (-6 + i))) * means).tolist()
    data += [0, 1.0]
    data.sort()
    return torch.tensor(data).numpy()


def blockwise(x, block, values, zero):
    """quantize_blockwise: per block absmax, x * (1 / absmax) clamped to [-1, 1], the nearest value's index."""
    blocks = -(-x.size // block)
    padded = np.zeros(blocks * block, dtype=F)
    padded[:x.size] = x
    padded = padded.reshape(blocks, block)
    absmax = np.abs(padded).max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.clip(padded * (F(1) / absmax)[:, None], F(-1), F(1))
    codes = np.argmin(np.abs(scaled[..., None] - values), axis=-1)
    codes[absmax == 0] = zero
    return codes.reshape(-1)[:x.size].astype(np.uint8), absmax


def quantize(x):
    """quantize_4bit(nf4, blocksize 64, compress_statistics=True): packed codes, absmax codes, absmax2, offset."""
    codes, absmax = blockwise(x, 64, NF4, 7)
    if codes.size % 2:
        codes = np.append(codes, np.uint8(0))
    packed = (codes[0::2] << 4 | codes[1::2]).astype(np.uint8)
    offset = F(np.mean(absmax.astype(np.float64)))
    dmap = dynamic_map()
    q, absmax2 = blockwise(absmax - offset, 256, dmap, int(np.flatnonzero(dmap == 0)[0]))
    return packed, q, absmax2, offset


def dequantize(packed, q, absmax2, offset, n):
    absmax = dynamic_map()[q] * np.repeat(absmax2, 256)[:q.size] + offset
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2], codes[1::2] = packed >> 4, packed & 15
    return NF4[codes[:n]] * np.repeat(absmax, 64)[:n]


def driver_case(driver, x):
    out = subprocess.run([driver, str(x.size)], input=x.astype(F).tobytes(), capture_output=True, check=True).stdout
    n, blocks = x.size, -(-x.size // 64)
    groups = -(-blocks // 256)
    sizes = [(n + 1) // 2, blocks, 4 * groups, 4, 4 * n, 4 * 256]
    parts, at = [], 0
    for s in sizes:
        parts.append(out[at:at + s])
        at += s
    return (np.frombuffer(parts[0], np.uint8), np.frombuffer(parts[1], np.uint8), np.frombuffer(parts[2], F),
            np.frombuffer(parts[3], F)[0], np.frombuffer(parts[4], F), np.frombuffer(parts[5], F))


def check_driver(driver):
    rng = np.random.default_rng(0)
    zeros = rng.standard_normal(64 * 300 + 37).astype(F)
    zeros[640:704] = 0  # block 10 all zeros
    cases = {"normal, 513 blocks, short odd tail": rng.standard_normal(64 * 512 + 37).astype(F),
             "heavy-tailed (t, 2 dof)": rng.standard_t(2, 64 * 300).astype(F),
             "a block of zeros": zeros,
             "one short block": (rng.standard_normal(5) * 0.02).astype(F)}
    for name, x in cases.items():
        c_codes, c_q, c_a2, c_off, c_back, c_map = driver_case(driver, x)
        codes, q, a2, off = quantize(x)
        back = dequantize(codes, q, a2, off, x.size)
        same = (np.array_equal(c_codes, codes) and np.array_equal(c_q, q) and np.array_equal(c_a2, a2)
                and c_off == off and np.array_equal(c_back, back) and np.array_equal(c_map, dynamic_map()))
        err = np.abs(back - x).max() / np.abs(x).max()
        check(same, f"{name}: codes, absmax codes, absmax2, offset, dequantized values and map equal the "
                    f"transcription (max |x' - x| / max |x| = {err:.3f})")
    tmap = torch_dynamic_map()
    if tmap is None:
        print("torch not importable: bitsandbytes' float32 dynamic map not compared")
        return
    ulps = np.abs(tmap.view(np.int32).astype(np.int64) - dynamic_map().view(np.int32).astype(np.int64))
    check(ulps.max() <= 1, f"the dynamic map against bitsandbytes' float32 construction under torch "
                           f"{__import__('torch').__version__}: {np.count_nonzero(ulps)} of 256 entries 1 ulp apart")


def bf16_round(x):
    """x rounded to bfloat16 (to nearest, ties to even) and back, by torch where it is importable."""
    try:
        import torch
    except ImportError:  # the same rounding on the bits (x finite): add 0x7fff plus the lowest kept bit, cut
        u = x.astype(F).view(np.uint32).astype(np.uint64)
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(F)
    return torch.from_numpy(np.ascontiguousarray(x, dtype=F)).to(torch.bfloat16).float().numpy()


def reduced_file(body, header, linear_round):
    """The llm.c file's values as a reduced frozen base holds them: wte in bf16, each layer's four linear
    weights (out, in) through linear_round."""
    T, V, L, C, Vp = (int(header[i]) for i in (2, 3, 4, 6, 7))
    sizes = [("wte", Vp * C), ("wpe", T * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
             ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
             ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C)]
    linear = {"qkvw", "attprojw", "fcw", "fcprojw"}
    out, at = body.copy(), 0
    for name, n in sizes:
        if name in linear:
            for layer in range(L):
                w = out[at + layer * n // L:at + (layer + 1) * n // L]
                w[...] = linear_round(w)
        elif name == "wte":
            out[at:at + n] = bf16_round(out[at:at + n])
        at += n
    return out


def nf4_file(body, header):
    return reduced_file(body, header, lambda w: dequantize(*quantize(w), w.size))


def write_model(path, header, body):
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(body.tobytes())


def with_head(d, path):
    """A copy of safetensors file `path` with an lm_head.weight that is its wte but for one element."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    key = "transformer.wte.weight" if "transformer.wte.weight" in header else "wte.weight"
    begin, end = header[key]["data_offsets"]
    head = np.frombuffer(data[begin:end], dtype=F).copy()
    head[5] += 1
    header["lm_head.weight"] = dict(header[key], data_offsets=[len(data), len(data) + head.nbytes])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    out = os.path.join(d, "untied.safetensors")
    with open(out, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data + head.tobytes())
    return out


def train(d, name, extra, ranks=1, check_rc=True, threads=1):
    return lora_run(d, name, extra, ranks, check_rc, global_batch=4, threads=threads)


def peak_rss_mb(d, extra, ranks=1):
    """Peak resident memory (MB) of a run (under mpirun: its largest process), measured by a parent that runs
    nothing else."""
    args = (MPIRUN + ["-np", str(ranks)] if ranks > 1 else []) + [os.environ["BATCHSCALE"], "train", "--data", os.path.join(d, "data", "train_000000.bin"),
            "--seq-len", "32", "--micro-batch", "1", "--global-batch", "1", "--steps", "1", "--eval-every", "0",
            "--sample-tokens", "0", "--threads", "1", "--quiet"] + extra
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", probe] + args, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{p.stderr}")
    return int(p.stdout.split()[-1]) / 1024


def check_streaming(d):
    """Peak memory per layer of the base: the difference between 4 and 2 layers of C 768, over 2 layers."""
    C = 768
    fp32_layer = 12 * C * C * 4 / 2 ** 20
    nf4_layer = 12 * C * C * (0.5 + 1 / 64 + 4 / 64 / 256) / 2 ** 20
    rss = {}
    for L in (2, 4):
        shape = ["--layers", str(L), "--heads", "12", "--channels", str(C)]
        train(d, f"big{L}", shape + ["--steps", "1"])
        train(d, f"big{L}_st", shape + ["--steps", "1", "--save-model", os.path.join(d, f"big{L}.safetensors")],
              check_rc=False).check_returncode()
        for kind, file in (("fp32", "bin"), ("nf4", "bin"), ("fp32", "safetensors")):
            rss[(kind, file, L)] = peak_rss_mb(d, shape + ["--lora-rank", "4", "--base-weights", kind, "--init-from",
                                                           os.path.join(d, f"big{L}.{file}")])
        rss[("bf16 tp2", "bin", L)] = peak_rss_mb(d, shape + ["--lora-rank", "4", "--base-weights", "bf16", "--tp", "2",
                                                              "--init-from", os.path.join(d, f"big{L}.bin")], ranks=2)
    per_layer = {key[:2]: (rss[key[:2] + (4,)] - rss[key[:2] + (2,)]) / 2 for key in rss if key[2] == 4}
    # its half of the layer in bf16 is fp32_layer / 4 (6.8 MB) plus activations (1.4 MB measured); a rank that
    # reads the whole layer in fp32 pays fp32_layer (27 MB) or more: the bound halfway between tells them apart
    check(per_layer[("bf16 tp2", "bin")] <= fp32_layer / 2,
          f"bf16 base, TP 2: each layer costs a rank {per_layer[('bf16 tp2', 'bin')]:.1f} MB of peak memory (its half "
          f"in bf16: {fp32_layer / 4:.1f} MB; at most {fp32_layer / 2:.1f}): each rank reads only its shard")
    for file in ("bin", "safetensors"):
        check(per_layer[("fp32", file)] <= 1.25 * fp32_layer,
              f"fp32 base from a .{file} file: each layer costs {per_layer[('fp32', file)]:.1f} MB of peak memory, "
              f"its {fp32_layer:.1f} MB of weights once (at most 1.25x; a second fp32 copy while loading makes it 2x)")
    per_layer = {kind: per_layer[(kind, "bin")] for kind in ("fp32", "nf4")}
    rss = {(kind, L): rss[(kind, "bin", L)] for kind in ("fp32", "nf4") for L in (2, 4)}
    check(per_layer["nf4"] <= nf4_layer + 0.15 * fp32_layer,
          f"nf4 base: each layer costs {per_layer['nf4']:.1f} MB of peak memory: its {nf4_layer:.1f} MB of NF4 "
          f"(+ at most 15% of its fp32 size for activations; an fp32 copy while loading would add 100%)")
    saved = rss[("fp32", 4)] - rss[("nf4", 4)]
    check(saved >= 0.8 * 4 * (fp32_layer - nf4_layer),
          f"NF4 saves {saved:.0f} MB of peak memory at 4 layers, at least 80% of the {4 * (fp32_layer - nf4_layer):.0f}"
          f" MB it should (peak {rss[('nf4', 4)]:.0f} MB vs {rss[('fp32', 4)]:.0f} MB: "
          f"{rss[('nf4', 4)] / rss[('fp32', 4)]:.2f}x)")


def check_embedding(d):
    """A reduced base keeps wte in bf16 and runs the tied head over it in blocks of 256 vocabulary rows: with a
    vocabulary of 2500 (ten blocks, five under TP 2) --base-weights bf16 equals fp32 LoRA over a file whose wte
    and linear weights were rounded to bf16 beforehand, bit for bit, at 1 and 2 threads and under TP 2."""
    shape = ["--layers", "2", "--heads", "4", "--channels", "96", "--vocab-size", "2500"]
    _, body = train(d, "wide", shape + ["--steps", "4"])
    header = read_model(os.path.join(d, "wide.bin"))[0]
    write_model(os.path.join(d, "wide_bf16.bin"), header, reduced_file(body, header, bf16_round))
    lora = ["--steps", "4", "--lora-rank", "4", "--lora-alpha", "8", "--lora-merge"]
    runs = {}
    for threads, ranks in ((1, 1), (2, 1), (1, 2)):
        extra = lora + (["--tp", "2"] if ranks == 2 else [])
        q_m, q_w = train(d, f"wq{threads}{ranks}", ["--init-from", os.path.join(d, "wide.bin"), "--base-weights",
                                                      "bf16"] + extra, ranks, threads=threads)
        o_m, o_w = train(d, f"wo{threads}{ranks}", ["--init-from", os.path.join(d, "wide_bf16.bin")] + extra, ranks,
                         threads=threads)
        losses = [x["loss"] for x in q_m]
        runs[(threads, ranks)] = (losses, q_w)
        same = losses == [x["loss"] for x in o_m] and np.array_equal(q_w, o_w)
        check(same, f"bf16 base with wte in bf16, {threads} thread(s), TP {ranks}: equals fp32 LoRA over the "
                    f"bf16-rounded file bit for bit ({np.count_nonzero(q_w != o_w)} merged values differ; state bytes "
                    f"{q_m[-1]['state_bytes']} vs {o_m[-1]['state_bytes']})")
    check(runs[(1, 1)][0] == runs[(2, 1)][0] and np.array_equal(runs[(1, 1)][1], runs[(2, 1)][1]),
          "bf16 base: 1 and 2 threads give the same bits")


def check_embedding_memory(d):
    """GPT-2's vocabulary on one layer of C 768: a bf16 base saves half of wte's and of the linear weights' fp32
    bytes of peak memory, less at most one matrix of fp32 scratch (an fp32 wte beside it saved only the linear
    weights' half)."""
    C, Vp = 768, 50304
    shape = ["--layers", "1", "--heads", "12", "--channels", str(C), "--vocab-size", "50257"]
    train(d, "gpt2v", shape + ["--steps", "1"])
    rss = {kind: peak_rss_mb(d, shape + ["--lora-rank", "4", "--base-weights", kind, "--init-from",
                                         os.path.join(d, "gpt2v.bin")]) for kind in ("fp32", "bf16")}
    wte, linear, scratch = Vp * C * 4 / 2 ** 20, 12 * C * C * 4 / 2 ** 20, 4 * C * C * 4 / 2 ** 20
    saved, should = rss["fp32"] - rss["bf16"], (wte + linear) / 2 - scratch
    check(saved >= 0.9 * should,
          f"bf16 base, vocabulary 50257: {saved:.1f} MB less peak memory than the fp32 base's ({rss['bf16']:.0f} vs "
          f"{rss['fp32']:.0f} MB), at least 90% of the {should:.1f} MB it should (half wte's {wte:.1f} MB and the "
          f"layer's {linear:.1f} MB, less the {scratch:.1f} MB fp32 scratch; the linear weights alone would save "
          f"{linear / 2 - scratch:.1f} MB)")


def check_scratch_memory(d):
    """GPT-2's vocabulary on one layer of C 768: an NF4 base saves half of wte's fp32 bytes and its linear
    weights' fp32 bytes less their NF4 bytes, less only one block of rows of fp32 scratch (the frozen products
    dequantize a block of rows at a time: 256 rows of wte or 64 of fcproj, 0.75 MB), not a whole matrix (fc's 9 MB,
    as when each use dequantized the matrix)."""
    C, Vp = 768, 50304
    shape = ["--layers", "1", "--heads", "12", "--channels", str(C), "--vocab-size", "50257"]
    train(d, "gpt2s", shape + ["--steps", "1"])
    rss = {kind: peak_rss_mb(d, shape + ["--lora-rank", "4", "--base-weights", kind, "--init-from",
                                         os.path.join(d, "gpt2s.bin")]) for kind in ("fp32", "nf4")}
    MB = 2 ** 20
    wte, linear = Vp * C * 4 / MB, 12 * C * C * 4 / MB
    nf4 = 12 * C * C * (0.5 + 1 / 64 + 4 / 64 / 256) / MB
    block, matrix = 256 * C * 4 / MB, 4 * C * C * 4 / MB
    should = wte / 2 + linear - nf4 - block
    saved = rss["fp32"] - rss["nf4"]
    # the two scratch sizes differ by 8.25 MB: the bound halfway between tells them apart
    check(saved >= should - (matrix - block) / 2,
          f"NF4 base, one layer of C {C}: {saved:.1f} MB less peak memory than the fp32 base's ({rss['nf4']:.0f} vs "
          f"{rss['fp32']:.0f} MB); it should save {should:.1f} MB (half wte's {wte:.1f}, the layer's {linear:.1f} "
          f"less its {nf4:.1f} in NF4, less one block of scratch, {block:.2f}; a whole matrix of scratch, "
          f"{matrix:.1f}, would save {should + block - matrix:.1f})")


def main():
    driver = sys.argv[1]
    check_driver(driver)
    with tempfile.TemporaryDirectory() as d:
        make_corpus(d)
        base = os.path.join(d, "base.bin")
        _, base_w = train(d, "base", ["--layers", "2", "--heads", "4", "--channels", "96", "--steps", "4"])
        header = read_model(base)[0]
        rounded = os.path.join(d, "base_nf4.bin")
        rounded_w = nf4_file(base_w, header)
        write_model(rounded, header, rounded_w)
        # the same model again (training is deterministic) as safetensors
        train(d, "base_st", ["--layers", "2", "--heads", "4", "--channels", "96", "--steps", "4", "--save-model",
                             os.path.join(d, "base.safetensors")], check_rc=False).check_returncode()
        lora = ["--init-from", base, "--steps", "6", "--lora-rank", "4", "--lora-alpha", "8", "--lora-merge"]
        _, zero_w = train(d, "zero", lora + ["--base-weights", "nf4", "--lr", "0", "--min-lr", "0"])
        check(np.array_equal(zero_w, rounded_w), "with --lr 0 the merged model is the transcription's NF4 base "
                                                 f"value for value ({np.count_nonzero(zero_w != rounded_w)} differ)")
        q_m, q_w = train(d, "q", lora + ["--base-weights", "nf4"])
        o_m, o_w = train(d, "o", ["--init-from", rounded] + lora[2:])
        s_m, s_w = train(d, "s", ["--init-from", os.path.join(d, "base.safetensors")] + lora[2:] +
                         ["--base-weights", "nf4"])
        check([x["loss"] for x in s_m] == [x["loss"] for x in q_m]
              and np.array_equal(s_w, q_w), "--base-weights nf4 from the same base as safetensors: the same run")
        f_m, _ = train(d, "f", lora)
        same = [x["loss"] for x in q_m] == [x["loss"] for x in o_m] and np.array_equal(q_w, o_w)
        check(same, f"--base-weights nf4 equals fp32 LoRA over the NF4-rounded file bit for bit (state bytes "
                    f"{q_m[-1]['state_bytes']} vs {f_m[-1]['state_bytes']} with an fp32 base; final loss "
                    f"{q_m[-1]['loss'] / f_m[-1]['loss'] - 1:+.2e} relative to the fp32 base)")
        p = train(d, "bad", ["--init-from", base, "--steps", "1", "--lora-rank", "4", "--base-weights", "nf4",
                             "--tp", "2"], 2, check_rc=False)
        lines = [x for x in p.stderr.strip().splitlines()
                 if "an nf4 base under tensor parallelism" in x and "(flags: --lora-rank, --base-weights, --tp)" in x]
        check(p.returncode != 0 and len(lines) >= 1,
              f"--base-weights nf4 --tp 2 refused ({lines[0][:150] if lines else p.stderr.strip()[:150]})")
        untied = with_head(d, os.path.join(d, "base.safetensors"))
        p = train(d, "untied", ["--init-from", untied] + lora[2:] + ["--base-weights", "nf4"], check_rc=False)
        lines = p.stderr.strip().splitlines()
        check(p.returncode != 0 and len(lines) == 1 and "lm_head.weight differs from wte.weight" in lines[0],
              f"a safetensors base whose lm_head is not its wte: one line ({lines[0][:150] if lines else 'none'})")
        check_embedding(d)
        check_embedding_memory(d)
        check_scratch_memory(d)
        check_streaming(d)
    print(f"{len(check.failed)} failure(s)")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
