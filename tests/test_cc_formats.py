#!/usr/bin/env python3
"""test_cc_formats.py: the codecs' formats (src/comm/codec.h) against
implementations nobody here wrote, through cc_driver. Two parts, two CTest
tests:

core (Debian's numpy and PyTorch, always there):
1. fp16: every float32 whose low 16 bits are 0, 1, 0x1000, 0x0fff, 0x1001
   (the rounding bit of binary16 is bit 12), 0xffff or random (all 65536
   high halves: both signs, every exponent, float32 subnormals, ties and
   either side of them, overflow, inf, NaN, -0), must encode to numpy's
   astype(float16) bit for bit, and every one of the 65536 codes must decode
   to numpy's float32 value (NaN compared as NaN).
2. bf16: the same inputs against PyTorch's .to(bfloat16), bit for bit.
3. int8: numpy transcription of the documented block format (scale
   amax/127 per block, q = rint(x * (127/amax)) in float32): same codes and
   scales, decoded values q * scale.
4. 1-bit: DeepSpeed's formulas in numpy: scale = ||x|| / sqrt(n),
   bits = packbits(x >= 0, little-endian bit order).
5. top-k: numpy's stable argsort of -|x|: the same k indices.

ml_dtypes (PyPI's, in the venv scripts/test-venv.sh makes; $BS_TEST_PYTHON):
6. fp8 e4m3fn, every element code (cc_driver fp8, no scale) of the same
   inputs plus every midpoint between codes and either side of it, against
   ml_dtypes.float8_e4m3fn, and all 256 decodes, bit for bit. Our codec
   saturates (codec.h: finite overflow to +-448; +-inf too), ml_dtypes'
   cast does not (above 464, the tie with the next binade, and +-inf it
   gives NaN): the reference is ml_dtypes' cast of the input clamped to
   +-448 (the OCP saturating mode), and the test also asserts that the plain
   cast differs from ours exactly on those inputs and nowhere else.
7. bf16 against ml_dtypes.bfloat16, encode and all 65536 decodes, bit for
   bit except NaN payloads: ml_dtypes makes every NaN 0x7fc0 with its sign,
   ours keeps the top payload bits (kernels/bf16.h); NaN must stay NaN with
   its sign. Our codecs have no fp8 e5m2: not tested.
Without that python (offline, or scripts/test-venv.sh not run) the part exits
77, which CTest counts as skipped, and prints why.
usage: test_cc_formats.py CC_DRIVER core|ml_dtypes"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import SKIP, Checks, probe_inputs, run_parts  # noqa: E402

DRIVER = sys.argv[1] if len(sys.argv) > 1 else ""
expect = Checks(print_ok=False)  # FAIL lines only


def run_codec(tmp, spec, block, x):
    src, enc, dec = (os.path.join(tmp, f) for f in ("x.f32", "x.enc", "x.dec"))
    x.astype(np.float32).tofile(src)
    subprocess.run([DRIVER, "codec", spec, str(block), src, enc, dec], check=True)
    return np.fromfile(enc, np.uint8), np.fromfile(dec, np.float32)


def same_or_both_nan(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


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


def test_bf16_torch(tmp):
    import torch
    x = probe_inputs()
    enc, _ = run_codec(tmp, "bf16", 1, x)
    ours = enc.view(np.uint16)[: x.size]
    theirs = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = (ours & 0x7FFF > 0x7F80) & (theirs & 0x7FFF > 0x7F80)  # PyTorch makes every NaN 0x7fc0
    ok = (ours == theirs) | nan
    expect(ok.all(), f"bf16 encode: {np.count_nonzero(~ok)} of {x.size} differ from PyTorch")
    print(f"bf16: {x.size} encodings equal PyTorch {torch.__version__}'s")


# Runs in the ml_dtypes venv: every cast the ml_dtypes part compares with.
ML_DTYPES_PEER = r"""
import sys, numpy as np, ml_dtypes
x = np.fromfile(sys.argv[1], np.float32)
e4m3, bf16 = ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16
with np.errstate(invalid="ignore", over="ignore"):
    np.savez(sys.argv[2], version=ml_dtypes.__version__,
             fp8_plain=x.astype(e4m3).view(np.uint8),
             fp8_saturated=np.clip(x, -448, 448).astype(e4m3).view(np.uint8),
             fp8_values=np.arange(256, dtype=np.uint8).view(e4m3).astype(np.float32),
             bf16=x.astype(bf16).view(np.uint16),
             bf16_values=np.arange(65536, dtype=np.uint16).view(bf16).astype(np.float32))
"""


def fp8_code_values():
    """The 127 non-negative finite e4m3fn values, by the OCP definition (bias 7, 3 mantissa bits)."""
    return np.array([(1 + (q & 7) / 8) * 2.0 ** ((q >> 3) - 7) if q >> 3 else (q & 7) * 2.0 ** -9
                     for q in range(127)], np.float64)


def fp8_inputs():
    """probe_inputs() plus every midpoint between adjacent codes (ties), either side of each, and signs."""
    mids = (fp8_code_values()[:-1] + fp8_code_values()[1:]) / 2
    m32 = mids.astype(np.float32)
    extra = np.concatenate([m32, np.nextafter(m32, np.float32(0)), np.nextafter(m32, np.float32(np.inf))])
    return np.concatenate([probe_inputs(), extra, -extra]).astype(np.float32)


def bits(x):
    return x.view(np.uint32)


def is_nan_code(q, bits_mask, inf_bits):
    return (q & bits_mask) > inf_bits


def test_fp8_ml_dtypes(tmp, x, ref):
    src, ours_path = os.path.join(tmp, "fp8.f32"), os.path.join(tmp, "fp8.u8")
    x.tofile(src)
    subprocess.run([DRIVER, "fp8", src, ours_path], check=True)
    ours = np.fromfile(ours_path, np.uint8)
    plain, saturated = ref["fp8_plain"], ref["fp8_saturated"]
    ok = ours == saturated
    expect(ok.all(), f"fp8 encode: {np.count_nonzero(~ok)} of {x.size} differ from ml_dtypes' saturating cast, "
                     f"e.g. {x[~ok][:3]} -> {ours[~ok][:3]} vs {saturated[~ok][:3]}")
    # Where the plain (non-saturating) cast differs, it must be exactly the inputs beyond the last
    # tie (|x| > 464) and +-inf, which it makes NaN and our codec clamps to +-448.
    beyond = (np.abs(x) > 464) & ~np.isnan(x)
    expect(np.array_equal(ours != plain, beyond),
           f"fp8: ours and ml_dtypes' plain cast differ on {np.count_nonzero(ours != plain)} inputs, "
           f"expected exactly the {np.count_nonzero(beyond)} with |x| > 464 or inf")
    expect(np.all(plain[beyond] & 0x7F == 0x7F) and np.all(ours[beyond] & 0x7F == 0x7E),
           "fp8 beyond range: expected NaN from ml_dtypes and +-448 from ours")
    classes = {"NaN": np.isnan(x), "inf": np.isinf(x), "-0": bits(x) == 0x80000000,
               "float32 subnormal": (bits(x) & 0x7F800000 == 0) & (bits(x) & 0x7FFFFF != 0),
               "fp8 subnormal range": (np.abs(x) > 0) & (np.abs(x) < 2.0 ** -6),
               "ties": np.isin(np.abs(x), ((fp8_code_values()[:-1] + fp8_code_values()[1:]) / 2).astype(np.float32)),
               "finite overflow": beyond & np.isfinite(x)}
    for name, mask in classes.items():
        expect(mask.any(), f"fp8: no input of class {name}: the probe does not cover it")
    subprocess.run([DRIVER, "fp8-values", ours_path], check=True)
    ours_values, peer_values = np.fromfile(ours_path, np.float32), ref["fp8_values"]
    nan = np.isnan(ours_values) & np.isnan(peer_values) & (np.signbit(ours_values) == np.signbit(peer_values))
    expect(np.all((bits(ours_values) == bits(peer_values)) | nan), "fp8: decoded code values differ from ml_dtypes'")
    print(f"fp8: {x.size} encodings ({', '.join(f'{k} {np.count_nonzero(v)}' for k, v in classes.items())}) "
          f"equal ml_dtypes {ref['version']}'s float8_e4m3fn cast of x clamped to +-448; its plain cast differs "
          f"exactly on the {np.count_nonzero(beyond)} inputs beyond +-464 or inf (NaN there, +-448 here); "
          "all 256 code values equal")


def test_bf16_ml_dtypes(tmp, x, ref):
    enc, _ = run_codec(tmp, "bf16", 1, x)
    ours, theirs = enc.view(np.uint16)[: x.size], ref["bf16"]
    nan = is_nan_code(ours, 0x7FFF, 0x7F80) & is_nan_code(theirs, 0x7FFF, 0x7F80) & (ours >> 15 == theirs >> 15)
    ok = (ours == theirs) | nan
    expect(ok.all(), f"bf16 encode: {np.count_nonzero(~ok)} of {x.size} differ from ml_dtypes, "
                     f"e.g. {x[~ok][:3]} -> {ours[~ok][:3]} vs {theirs[~ok][:3]}")
    codes = np.arange(65536, dtype=np.uint32) << 16
    _, dec = run_codec(tmp, "bf16", 1, codes.view(np.float32))
    want = ref["bf16_values"]
    nan = np.isnan(dec) & np.isnan(want) & (np.signbit(dec) == np.signbit(want))
    expect(np.all((bits(dec) == bits(want)) | nan), "bf16: decoded code values differ from ml_dtypes'")
    print(f"bf16: {x.size} encodings and 65536 decodes equal ml_dtypes {ref['version']}'s "
          f"(the {np.count_nonzero(nan)} NaN codes compared as NaN with their sign)")


def ml_dtypes_reference(tmp, x):
    """The peer's casts of x, or None (after saying why) where the venv's python is missing."""
    python = os.environ.get("BS_TEST_PYTHON", "")
    if not python or not os.access(python, os.X_OK):
        print(f"SKIP: no ml_dtypes python at '{python}' (BS_TEST_PYTHON): run scripts/test-venv.sh "
              "(make test does; it needs PyPI once)")
        return None
    probe = subprocess.run([python, "-c", "import ml_dtypes"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: {python} has no ml_dtypes ({probe.stderr.strip().splitlines()[-1]}): run scripts/test-venv.sh")
        return None
    src, out = os.path.join(tmp, "peer.f32"), os.path.join(tmp, "peer.npz")
    x.tofile(src)
    subprocess.run([python, "-c", ML_DTYPES_PEER, src, out], check=True)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def ml_dtypes_part(tmp):
    x = fp8_inputs()
    ref = ml_dtypes_reference(tmp, x)
    if ref is None:
        return SKIP
    test_fp8_ml_dtypes(tmp, x, ref)
    n = probe_inputs().size  # fp8_inputs() starts with probe_inputs()
    test_bf16_ml_dtypes(tmp, x[:n], {"bf16": ref["bf16"][:n], "bf16_values": ref["bf16_values"],
                                     "version": ref["version"]})
    return 0


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


def core_part(tmp):
    test_fp16(tmp)
    test_bf16_torch(tmp)
    test_int8(tmp)
    test_onebit(tmp)
    test_topk(tmp)
    return 0


def main():
    run_parts("usage: test_cc_formats.py CC_DRIVER core|ml_dtypes", {"core": core_part, "ml_dtypes": ml_dtypes_part},
              expect.failed)


if __name__ == "__main__":
    main()
