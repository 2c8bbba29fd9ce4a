#!/usr/bin/env python3
"""test_cc_formats.py: the codecs' formats (src/comm/codec.h) against
implementations nobody here wrote, through cc_driver:

1. fp16: every float32 whose low 16 bits are 0, 1, 0x1000, 0x0fff, 0x1001
   (the rounding bit of binary16 is bit 12), 0xffff or random, must encode
   to numpy's astype(float16) bit for bit, and every one of the 65536 codes
   must decode to numpy's float32 value (NaN compared as NaN).
2. bf16: the same inputs against PyTorch's .to(bfloat16), bit for bit.
3. fp8 e4m3fn: against PyTorch's float8_e4m3fn (torch >= 2.1: the bench
   venv's, if it is there; Debian's 1.13 has no fp8) for every midpoint
   between codes, either side of it, and random values below the saturation
   point, and all 256 decodes. Skipped, saying so, without such a PyTorch
   (test_cc_codec checks nearest rounding by brute force either way).
4. int8: numpy transcription of the documented block format (scale
   amax/127 per block, q = rint(x * (127/amax)) in float32): same codes and
   scales, decoded values q * scale.
5. 1-bit: DeepSpeed's formulas in numpy: scale = ||x|| / sqrt(n),
   bits = packbits(x >= 0, little-endian bit order).
6. top-k: numpy's stable argsort of -|x|: the same k indices.
usage: test_cc_formats.py CC_DRIVER"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

DRIVER = sys.argv[1]
VENV_PYTHON = os.path.expanduser(os.environ.get("BS_BENCH_VENV", "~/.cache/batchscale/bench-venv")) + "/bin/python"
FAILURES = []


def expect(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL", msg)


def run_codec(tmp, spec, block, x):
    src, enc, dec = (os.path.join(tmp, f) for f in ("x.f32", "x.enc", "x.dec"))
    x.astype(np.float32).tofile(src)
    subprocess.run([DRIVER, "codec", spec, str(block), src, enc, dec], check=True)
    return np.fromfile(enc, np.uint8), np.fromfile(dec, np.float32)


def same_or_both_nan(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


def probe_inputs():
    rng = np.random.default_rng(1)
    lows = np.array([0x0000, 0x0001, 0x1000, 0x0fff, 0x1001, 0xffff] + list(rng.integers(0, 65536, 10)), np.uint32)
    highs = np.arange(65536, dtype=np.uint32)
    return (highs[:, None] << 16 | lows[None, :]).ravel().view(np.float32)


def test_fp16(tmp):
    x = probe_inputs()
    enc, dec = run_codec(tmp, "fp16", 1, x)
    ours = enc.view(np.uint16)[: x.size]
    with np.errstate(over="ignore", invalid="ignore"):
        theirs = x.astype(np.float16)
    ours_f, theirs_f = ours.view(np.float16), theirs
    ok = (ours == theirs.view(np.uint16)) | (np.isnan(ours_f) & np.isnan(theirs_f))
    expect(ok.all(), f"fp16 encode: {np.count_nonzero(~ok)} of {x.size} differ from numpy, "
                     f"e.g. {x[~ok][:3]} -> {ours[~ok][:3]} vs {theirs.view(np.uint16)[~ok][:3]}")
    all_halfs = np.arange(65536, dtype=np.uint16).view(np.float16)
    enc2, dec2 = run_codec(tmp, "fp16", 1, all_halfs.astype(np.float32))
    expect(same_or_both_nan(dec2, all_halfs.astype(np.float32)).all(), "fp16: a code does not round-trip numpy's value")
    print(f"fp16: {x.size} encodings and 65536 decodes equal numpy's")


def test_bf16(tmp):
    x = probe_inputs()
    enc, _ = run_codec(tmp, "bf16", 1, x)
    ours = enc.view(np.uint16)[: x.size]
    theirs = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = (ours & 0x7FFF > 0x7F80) & (theirs & 0x7FFF > 0x7F80)
    ok = (ours == theirs) | nan
    expect(ok.all(), f"bf16 encode: {np.count_nonzero(~ok)} of {x.size} differ from PyTorch")
    print(f"bf16: {x.size} encodings equal PyTorch {torch.__version__}'s")


FP8_PEER = r"""
import sys, numpy as np, torch
x = np.fromfile(sys.argv[1], np.float32)
torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy().tofile(sys.argv[2])
torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float().numpy().tofile(sys.argv[3])
"""


def test_fp8(tmp):
    if not os.path.exists(VENV_PYTHON) or subprocess.run(
            [VENV_PYTHON, "-c", "import torch; torch.float8_e4m3fn"], capture_output=True).returncode != 0:
        print(f"fp8: skipped, no PyTorch with float8_e4m3fn at {VENV_PYTHON} (bench/run.sh creates it); "
              "test_cc_codec checks nearest rounding by brute force")
        return
    values = np.array([(1 + (q & 7) / 8) * 2.0 ** ((q >> 3) - 7) if q >> 3 else (q & 7) * 2.0 ** -9
                       for q in range(127)], np.float64)
    mids = (values[:-1] + values[1:]) / 2
    rng = np.random.default_rng(2)
    rand = rng.uniform(-1, 1, 200000) * 2.0 ** rng.uniform(-12, 8.85, 200000)
    x = np.concatenate([mids, -mids, np.nextafter(mids.astype(np.float32), 0), np.nextafter(mids.astype(np.float32), 999),
                        rand, [0.0, -0.0, 448.0, -448.0, 463.9]]).astype(np.float32)
    src, ours_path, theirs_path, dec_path = (os.path.join(tmp, f) for f in ("y.f32", "ours.u8", "theirs.u8", "dec.f32"))
    x.tofile(src)
    subprocess.run([DRIVER, "fp8", src, ours_path], check=True)
    subprocess.run([VENV_PYTHON, "-c", FP8_PEER, src, theirs_path, dec_path], check=True)
    ours, theirs = np.fromfile(ours_path, np.uint8), np.fromfile(theirs_path, np.uint8)
    ok = (ours == theirs) | ((ours & 0x7F == 0) & (theirs & 0x7F == 0))
    expect(ok.all(), f"fp8 encode: {np.count_nonzero(~ok)} of {x.size} differ from PyTorch, "
                     f"e.g. {x[~ok][:3]} -> {ours[~ok][:3]} vs {theirs[~ok][:3]}")
    subprocess.run([DRIVER, "fp8-values", ours_path], check=True)
    ours_values, peer_values = np.fromfile(ours_path, np.float32), np.fromfile(dec_path, np.float32)
    expect(same_or_both_nan(ours_values, peer_values).all(), "fp8: decoded code values differ from PyTorch's")
    print(f"fp8: {x.size} encodings and the 256 code values equal PyTorch's float8_e4m3fn")


def test_int8(tmp):
    rng = np.random.default_rng(3)
    for block in (1, 7, 256):
        x = (rng.standard_normal(10007) * 10.0 ** rng.uniform(-6, 3, 10007)).astype(np.float32)
        x[500:500 + block] = 0
        enc, dec = run_codec(tmp, "int8", block, x)
        nb = -(-x.size // block)
        scales = enc[: 4 * nb].view(np.float32)
        q = enc[4 * nb: 4 * nb + x.size].view(np.int8)
        pad = np.zeros(nb * block - x.size, np.float32)
        blocks = np.concatenate([x, pad]).reshape(nb, block)
        amax = np.abs(blocks).max(axis=1).astype(np.float32)
        with np.errstate(divide="ignore"):
            want_scale = np.where(amax > 0, amax / np.float32(127), 0).astype(np.float32)
            inv = np.where(amax > 0, np.float32(127) / amax, 0).astype(np.float32)
        want_q = np.rint((blocks * inv[:, None]).astype(np.float32)).astype(np.int8).ravel()[: x.size]
        expect(np.array_equal(scales, want_scale), f"int8 block {block}: scales differ")
        expect(np.array_equal(q, want_q), f"int8 block {block}: {np.count_nonzero(q != want_q)} codes differ")
        want_dec = (q.astype(np.float32).reshape(-1) * np.repeat(want_scale, block)[: x.size]).astype(np.float32)
        expect(np.array_equal(dec, want_dec), f"int8 block {block}: decoded values differ")
    print("int8: codes, scales and decodes equal the numpy transcription (blocks 1, 7, 256)")


def test_onebit(tmp):
    rng = np.random.default_rng(4)
    for n in (1, 13, 1000, 65537):
        x = rng.standard_normal(n).astype(np.float32)
        x[0] = -0.0
        enc, dec = run_codec(tmp, "onebit", 1, x)
        scale = enc[:4].view(np.float32)[0]
        want = np.linalg.norm(x.astype(np.float64)) / np.sqrt(n)
        expect(abs(scale - want) <= 1e-6 * want, f"1-bit n {n}: scale {scale} vs {want}")
        bits = enc[4: 4 + (n + 7) // 8]
        want_bits = np.packbits(x >= 0, bitorder="little")
        expect(np.array_equal(bits, want_bits), f"1-bit n {n}: sign bits differ")
        expect(np.array_equal(dec, np.where(x >= 0, scale, -scale).astype(np.float32)), f"1-bit n {n}: decode")
    print("1-bit: scales and sign bits equal DeepSpeed's formulas in numpy")


def test_topk(tmp):
    rng = np.random.default_rng(5)
    for n, f in ((1000, 0.01), (100003, 0.01), (5000, 0.3), (777, 1.0)):
        x = rng.standard_normal(n).astype(np.float32)
        x[::3] = np.round(x[::3])  # ties
        enc, dec = run_codec(tmp, f"topk:{f}", 1, x)
        k = int(np.ceil(f * n))
        idx = enc[: 4 * k].view(np.uint32)
        want = np.sort(np.argsort(-np.abs(x), kind="stable")[:k])
        expect(np.array_equal(idx, want), f"top-k {f} of {n}: indices differ from numpy's")
        expect(np.array_equal(enc[4 * k: 8 * k].view(np.float32), x[want]), f"top-k {f} of {n}: values")
    print("top-k: indices equal numpy's stable argsort")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_fp16(tmp)
        test_bf16(tmp)
        test_fp8(tmp)
        test_int8(tmp)
        test_onebit(tmp)
        test_topk(tmp)
    print("FAILED" if FAILURES else "ok", f"{len(FAILURES)} failure(s)")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
