#!/usr/bin/python3
"""test_fp8.py: FP8 formats, quantization, the FP8 linear layer (the seam,
src/kernels/matmul_fp8.h) and delayed scaling (src/model/fp8_scaling.h),
through fp8_driver, against implementations nobody here wrote.

usage: test_fp8.py FP8_DRIVER formats|kernels

formats (ml_dtypes 0.6.0 from the venv of scripts/test-venv.sh, $BS_TEST_PYTHON;
exits 77, counted as skipped, with the reason, where it is missing):
1. E4M3 and E5M2, plain (non-saturating) casts of every float32 pattern class (all
   65536 high halves with 16 low halves each: both signs, every exponent, float32
   subnormals, the fp8 subnormal range, overflow, inf, NaN, -0) plus every midpoint
   between adjacent codes of each format and the floats either side of it (ties):
   bit for bit equal to ml_dtypes' float8_e4m3fn / float8_e5m2 casts, NaN codes
   compared as NaN with their sign (ml_dtypes' NaN codes are asserted too).
2. The saturating casts equal ml_dtypes' cast of the input clamped to +-max (inf
   too), bit for bit, and differ from the plain cast exactly where it overflows.
3. All 256 codes of each format decode to ml_dtypes' values.
kernels (numpy only):
4. Quantization (kernels/fp8.h), per tensor and in 1x128, 128x1 and 128x128 blocks
   on a 300 x 260 tensor (edge blocks) spanning 2^-30..2^20: every value equal to a
   numpy transcription (round x * s to the nearest code, ties to the even code,
   saturating; value = code * float32(1/s); block s = 2^floor(log2(fmax/amax))), and
   the underflow/overflow/nonzero counts and amax equal.
5. The FP8 linear layer, both recipes: forward, dgrad and wgrad equal the float64
   products of the numpy-quantized operands within fp32 accumulation's bound
   K u sum|a b| (K the reduction length, u = 2^-24), the block recipe's blocks along
   each product's reduction (1x128 X and dY, 128x128 W; 128x1 for wgrad); and the
   same bits at 1 and 3 threads.
6. Delayed scaling: the scale used at each step, for amax sequences with zeros,
   inf, NaN, growth and decay, history 1, 4 and 16, max and most_recent, margin 0
   and 2, E4M3 and E5M2, bit for bit equal to a float32 transcription of Transformer
   Engine's amax_and_scale_update (_default_get_amax, _update_amax_history,
   _default_sf_compute of transformer_engine/pytorch/fp8.py): the scale at step t
   depends only on the amaxes of steps before t.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import SKIP, Checks, probe_inputs, run_parts  # noqa: E402

DRIVER = sys.argv[1] if len(sys.argv) > 1 else ""
expect = Checks(print_ok=False)  # FAIL lines only
FORMATS = {"e4m3": (3, 7, 448.0), "e5m2": (2, 15, 57344.0)}  # mantissa bits, bias, max


def driver(*args, env=None):
    return subprocess.run([DRIVER] + [str(a) for a in args], check=True, capture_output=True, text=True,
                          env=env).stdout


def code_values(fmt):
    """The non-negative finite codes' values by the OCP definition, in code order."""
    m, bias, fmax = FORMATS[fmt]
    vals = [(1 + (q & (2 ** m - 1)) / 2 ** m) * 2.0 ** ((q >> m) - bias) if q >> m else
            (q & (2 ** m - 1)) * 2.0 ** (1 - bias - m) for q in range(128)]
    return np.array([v for v in vals if v <= fmax], np.float64)


def inputs(fmt):
    v = code_values(fmt)
    mids = ((v[:-1] + v[1:]) / 2).astype(np.float32)
    extra = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    return np.concatenate([probe_inputs(), extra, -extra]).astype(np.float32)


# ---- formats, against ml_dtypes ----

ML_DTYPES_PEER = r"""
import sys, numpy as np, ml_dtypes
out = {"version": ml_dtypes.__version__}
for name, t, fmax in (("e4m3", ml_dtypes.float8_e4m3fn, 448), ("e5m2", ml_dtypes.float8_e5m2, 57344)):
    x = np.fromfile(sys.argv[1] + name, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        out[name + "_plain"] = x.astype(t).view(np.uint8)
        out[name + "_sat"] = np.clip(x, -fmax, fmax).astype(t).view(np.uint8)
        out[name + "_values"] = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
np.savez(sys.argv[2], **out)
"""


def is_nan_code(q, fmt):
    return (q & 0x7F) > (0x7E if fmt == "e4m3" else 0x7C)


def ml_dtypes_reference(tmp):
    python = os.environ.get("BS_TEST_PYTHON", "")
    if not python or not os.path.exists(python):
        print(f"SKIP: no ml_dtypes python at '{python}' (BS_TEST_PYTHON): run scripts/test-venv.sh")
        return None
    probe = subprocess.run([python, "-c", "import ml_dtypes"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: {python} has no ml_dtypes: run scripts/test-venv.sh")
        return None
    for fmt in FORMATS:
        inputs(fmt).tofile(os.path.join(tmp, "x_" + fmt))
    subprocess.run([python, "-c", ML_DTYPES_PEER, os.path.join(tmp, "x_"), os.path.join(tmp, "ref.npz")], check=True)
    return np.load(os.path.join(tmp, "ref.npz"))


def check_format(tmp, fmt, ref):
    x = inputs(fmt)
    src, out = os.path.join(tmp, "x_" + fmt), os.path.join(tmp, "q")
    fmax = FORMATS[fmt][2]
    results = {}
    for mode in ("plain", "sat"):
        driver("cast", fmt, mode, src, out)
        ours, theirs = np.fromfile(out, np.uint8), ref[f"{fmt}_{mode}"]
        nan = is_nan_code(ours, fmt) & is_nan_code(theirs, fmt) & ((ours >> 7) == (theirs >> 7))
        same = ours == theirs
        expect((same | nan).all(), f"{fmt} {mode}: {np.count_nonzero(~(same | nan))} of {x.size} differ from "
                                   f"ml_dtypes, e.g. {x[~(same | nan)][:3]} -> {ours[~(same | nan)][:3]} vs "
                                   f"{theirs[~(same | nan)][:3]}")
        results[mode] = (ours, np.count_nonzero(same), np.count_nonzero(nan & ~same))
    plain, sat = results["plain"][0], results["sat"][0]
    v = code_values(fmt)
    last_tie = v[-1] + (v[-1] - v[-2]) / 2  # halfway from max to the next step (NaN or inf)
    beyond = (np.abs(x) >= last_tie) & ~np.isnan(x)
    if fmt == "e4m3":
        beyond = (np.abs(x) > last_tie) & ~np.isnan(x)  # the tie 464 rounds to the even 448
    expect(np.array_equal(plain != sat, beyond), f"{fmt}: plain and saturating casts differ on "
                                                 f"{np.count_nonzero(plain != sat)}, expected {np.count_nonzero(beyond)}")
    expect(np.all(sat[beyond] & 0x7F == (0x7E if fmt == "e4m3" else 0x7B)), f"{fmt}: saturation is not +-max")
    classes = {"NaN": np.isnan(x), "inf": np.isinf(x), "-0": x.view(np.uint32) == 0x80000000,
               "float32 subnormal": (x.view(np.uint32) & 0x7F800000 == 0) & (x.view(np.uint32) & 0x7FFFFF != 0),
               "fp8 subnormal range": (np.abs(x) > 0) & (np.abs(x) < 2.0 ** (1 - FORMATS[fmt][1])),
               "ties": np.isin(np.abs(x), ((v[:-1] + v[1:]) / 2).astype(np.float32)),
               "finite overflow": beyond & np.isfinite(x)}
    for name, mask in classes.items():
        expect(mask.any(), f"{fmt}: no input of class {name}")
    driver("values", fmt, out)
    ours_v, theirs_v = np.fromfile(out, np.float32), ref[f"{fmt}_values"]
    nanv = np.isnan(ours_v) & np.isnan(theirs_v) & (np.signbit(ours_v) == np.signbit(theirs_v))
    expect(np.all((ours_v.view(np.uint32) == theirs_v.view(np.uint32)) | nanv), f"{fmt}: decoded values differ")
    print(f"{fmt}: {x.size} inputs ({', '.join(f'{k} {np.count_nonzero(m)}' for k, m in classes.items())}): "
          f"plain cast equal to ml_dtypes {ref['version']} on {results['plain'][1]} bit for bit and "
          f"{results['plain'][2]} NaN-as-NaN; saturating cast equal to ml_dtypes' of the clamped input on "
          f"{results['sat'][1]} (+{results['sat'][2]} NaN); the two differ exactly on the {np.count_nonzero(beyond)} "
          f"overflowing inputs; 256 decodes equal")


def formats_part(tmp):
    ref = ml_dtypes_reference(tmp)
    if ref is None:
        return SKIP
    for fmt in FORMATS:
        check_format(tmp, fmt, ref)
    return 0


# ---- quantization and the seam, against numpy ----

def np_round_fp8(y, fmt):
    """Round float32 y to the nearest code value of fmt, ties to the even code, saturating (numpy)."""
    v = code_values(fmt)
    a = np.minimum(np.abs(y.astype(np.float64)), v[-1])
    hi = np.clip(np.searchsorted(v, a), 1, len(v) - 1)
    lo = hi - 1
    dlo, dhi = a - v[lo], v[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (np.sign(y) * v[pick]).astype(np.float32), pick


def np_block_scale(amax, fmt):
    fmax = np.float32(FORMATS[fmt][2])
    with np.errstate(divide="ignore"):
        s = fmax / amax.astype(np.float32)
    s = np.where(np.isfinite(s), s, np.float32(2.0 ** 127)).astype(np.float32)
    s = (s.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
    return np.where((amax > 0) & np.isfinite(amax), s, np.float32(1)).astype(np.float32)


def np_quantize(x, fmt, br, bc, scale):
    """numpy transcription of fp8_quantize: values, and (nonzero, underflow, overflow, amax)."""
    rows, cols = x.shape
    if br == 0:
        s = np.full(x.shape, np.float32(scale), np.float32)
    else:
        s = np.empty(x.shape, np.float32)
        for r in range(0, rows, br):
            for c in range(0, cols, bc):
                blk = x[r:r + br, c:c + bc]
                s[r:r + br, c:c + bc] = np_block_scale(np.max(np.abs(blk)), fmt)
    y = (x * s).astype(np.float32)
    q, pick = np_round_fp8(y, fmt)
    vals = (q * (np.float32(1) / s)).astype(np.float32)
    counts = (np.count_nonzero(x), np.count_nonzero((x != 0) & (pick == 0)),
              np.count_nonzero(np.abs(y) > FORMATS[fmt][2]), float(np.max(np.abs(x))))
    return vals, counts


def run_quantize(tmp, x, fmt, br, bc, scale):
    src, out = os.path.join(tmp, "qx"), os.path.join(tmp, "qy")
    x.tofile(src)
    text = driver("quantize", fmt, br, bc, repr(float(scale)), x.shape[0], x.shape[1], src, out).split()
    st = dict(zip(text[0::2], text[1::2]))
    return np.fromfile(out, np.float32).reshape(x.shape), (int(st["nonzero"]), int(st["underflow"]),
                                                           int(st["overflow"]), float(st["amax"]))


def test_quantize(tmp):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 260)) * 2.0 ** rng.integers(-30, 20, (300, 260))).astype(np.float32)
    x[5, :] = 0
    cases = [("e4m3", 0, 0, 448 / 1e5), ("e5m2", 0, 0, 57344 / 1e4), ("e4m3", 0, 0, 1.0), ("e4m3", 1, 128, 0),
             ("e4m3", 128, 1, 0), ("e4m3", 128, 128, 0), ("e5m2", 1, 128, 0)]
    for fmt, br, bc, scale in cases:
        ours, ours_st = run_quantize(tmp, x, fmt, br, bc, scale)
        ref, ref_st = np_quantize(x, fmt, br, bc, scale)
        same = ours.view(np.uint32) == ref.view(np.uint32)
        expect(same.all(), f"quantize {fmt} {br}x{bc} s={scale}: {np.count_nonzero(~same)} values differ")
        expect(ours_st[:3] == ref_st[:3] and np.float32(ours_st[3]) == np.float32(ref_st[3]),
               f"quantize {fmt} {br}x{bc}: stats {ours_st} != {ref_st}")
        print(f"quantize {fmt} blocks {br}x{bc} scale {scale:g}: {x.size} values equal numpy's; nonzero {ref_st[0]}, "
              f"underflow {ref_st[1]}, overflow {ref_st[2]}")


def np_linear(recipe, X, W, G, scales):
    """Reference products of the quantized operands, float64, with the per-role blocks."""
    if recipe == "block":
        xf = np_quantize(X, "e4m3", 1, 128, 0)[0]
        wq = np_quantize(W, "e4m3", 128, 128, 0)[0]
        gd = np_quantize(G, "e4m3", 1, 128, 0)[0]
        gw = np_quantize(G, "e4m3", 128, 1, 0)[0]
        xw = np_quantize(X, "e4m3", 128, 1, 0)[0]
    else:
        sx, sw, sg = scales
        xf = xw = np_quantize(X, "e4m3", 0, 0, sx)[0]
        wq = np_quantize(W, "e4m3", 0, 0, sw)[0]
        gd = gw = np_quantize(G, "e5m2", 0, 0, sg)[0]
    pairs = [(xf, wq.T), (gd, wq), (gw.T, xw)]
    return [(a.astype(np.float64) @ b.astype(np.float64), np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)),
             a.shape[1]) for a, b in pairs]


def test_linear(tmp):
    rng = np.random.default_rng(4)
    N, IC, OC = 200, 192, 320  # 192 and 200 leave partial 128-blocks
    X = (rng.standard_normal((N, IC)) * 3).astype(np.float32)
    X[:, 7] *= 1000  # an outlier channel
    W = (rng.standard_normal((OC, IC)) * 0.02).astype(np.float32)
    G = (rng.standard_normal((N, OC)) * 1e-4).astype(np.float32)
    paths = [os.path.join(tmp, p) for p in ("X", "W", "G", "out")]
    for arr, p in zip((X, W, G), paths):
        arr.tofile(p)
    scales = (np.float32(448) / np.max(np.abs(X)), np.float32(448) / np.max(np.abs(W)),
              np.float32(57344) / np.max(np.abs(G)) / np.float32(4))
    for recipe in ("block", "delayed:%r:%r:%r" % tuple(float(s) for s in scales)):
        outs = {}
        for threads in (1, 3):
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            driver("linear", recipe, N, IC, OC, *paths, env=env)
            outs[threads] = np.fromfile(paths[3], np.float32)
        expect(np.array_equal(outs[1].view(np.uint32), outs[3].view(np.uint32)),
               f"linear {recipe[:7]}: bits differ between 1 and 3 threads")
        got = np.split(outs[1], [N * OC, N * OC + N * IC])
        for name, g, (ref, mag, K) in zip(("forward", "dgrad", "wgrad"), got, np_linear(recipe[:7], X, W, G, scales)):
            err = np.abs(g.reshape(ref.shape) - ref)
            bound = K * 2.0 ** -24 * mag + 1e-45
            expect(np.all(err <= bound), f"linear {recipe[:7]} {name}: error {np.max(err / bound):.3g} x the bound")
            print(f"linear {recipe[:7]} {name}: within {np.max(err / bound):.3g} of the fp32 accumulation bound "
                  f"K u sum|ab| (K={K}); same bits at 1 and 3 threads")


def te_scales(amaxes, history, algo, margin, fmax):
    """float32 transcription of Transformer Engine's delayed scaling (amax_and_scale_update, one tensor):
    forward/backward write the step's amax into amax_history[0]; after the step
      amax = max(amax_history) (max) or amax_history[0] (most_recent)   # _default_get_amax
      amax_history = roll(amax_history, -1); amax_history[0] = 0        # _update_amax_history
      sf = (fp8_max / amax) / 2**margin; sf = where(amax > 0, sf, scale)
      sf = where(isfinite(amax), sf, scale)                             # _default_sf_compute
      sf = where(isinf(sf), float32 max, sf)
    Returns the scale in use at each step, then the one after the last update."""
    h = np.zeros(history, np.float32)
    scale = np.float32(1.0)
    used = []
    for a in amaxes:
        used.append(scale)
        h[0] = a
        amax = np.max(h) if algo == "max" else h[0]
        if np.isnan(h).any() and algo == "max":
            amax = np.float32(np.nan)  # torch.max propagates NaN
        h = np.roll(h, -1)
        h[0] = 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            sf = (np.float32(fmax) / np.float32(amax)) / np.float32(2.0 ** margin)
        if not (amax > 0) or not np.isfinite(amax):
            sf = scale
        if np.isinf(sf):
            sf = np.finfo(np.float32).max
        scale = np.float32(sf)
    return np.array(used + [scale], np.float32)


def test_scaling(tmp):
    rng = np.random.default_rng(5)
    seq = np.concatenate([[0.0, 3.0, 0.0, 2.5, 1e-3, 40.0], rng.uniform(0.1, 10, 20), [np.inf, 5.0, 1e-40, 7.0],
                          2.0 ** np.arange(-10, 10), 2.0 ** -np.arange(0, 20, 2.0), [np.nan, 6.0, 6.0]])
    seq = seq.astype(np.float32)
    src, out = os.path.join(tmp, "amax"), os.path.join(tmp, "scales")
    seq.tofile(src)
    n = 0
    for history in (1, 4, 16):
        for algo in ("max", "most_recent"):
            for margin in (0, 2):
                for fmt in FORMATS:
                    driver("scaling", history, algo, margin, fmt, src, out)
                    ours, ref = np.fromfile(out, np.float32), te_scales(seq, history, algo, margin, FORMATS[fmt][2])
                    same = (ours.view(np.uint32) == ref.view(np.uint32))
                    expect(same.all(), f"scaling h{history} {algo} m{margin} {fmt}: steps {np.nonzero(~same)[0][:5]} "
                                       f"differ: {ours[~same][:3]} vs {ref[~same][:3]}")
                    n += 1
    print(f"delayed scaling: {n} configurations x {seq.size} steps equal the transcription of TE's update bit for bit")


def kernels_part(tmp):
    test_quantize(tmp)
    test_linear(tmp)
    test_scaling(tmp)
    return 0


def main():
    run_parts("usage: test_fp8.py FP8_DRIVER formats|kernels", {"formats": formats_part, "kernels": kernels_part},
              expect.failed)


if __name__ == "__main__":
    main()
