/* codec.h: lossy encodings of float arrays for communication
 * (--grad-compression none|fp16|bf16|fp8|int8|topk:FRACTION|onebit), with
 * the error bound each one guarantees and error feedback.
 *
 * An encoding of n floats is one self-contained byte string ("a unit") of
 * codec_encoded_bytes(n) bytes, always a multiple of 4 so that units can be
 * laid end to end and every scale stays aligned; padding bytes are zero.
 *
 *   codec   bytes for n floats                 scales            one round trip, element i
 *   none    4n                                 -                 exact
 *   fp16    2n (IEEE binary16, nearest even)   none (see below)  |e| <= 2^-11 |x| + 2^-25; |x| >= 65520 -> inf
 *   bf16    2n (upper half of fp32, nearest)   none              |e| <= 2^-8 |x| (+2^-134 below fp32's normals)
 *   fp8     n + 4 ceil(n/B) (e4m3fn, OCP)      amax/448 per B    |e| <= 2^-4 |x| + 2^-10 amax/448
 *   int8    n + 4 ceil(n/B) (-127..127)        amax/127 per B    |e| <= amax/254
 *   topk    8k, k = ceil(f n) (u32 index, f32) -                 the k largest |x| exact, the rest 0
 *   onebit  4 + ceil(n/8) (sign bits)          ||x||/sqrt(n)     x -> s sign(x) (x >= 0 -> +s)
 * (amax: largest |x| of the element's block of B. codec_bound gives the exact
 * constants, which add the float rounding of scaling (a few 2^-24) and an
 * absolute 2^-100 below which a block's scale is taken as 0.)
 *
 * fp16 keeps no scale: gradients summed over a data-parallel group stay far
 * below 65504 (a step that overflows becomes inf, which the trainer's
 * non-finite guard catches), and what it loses is precision below 2^-14
 * (6e-5), gradually down to 2^-24; that loss is what error feedback carries
 * into the next step. bf16 has fp32's exponent range, so it needs no scale.
 * fp8 and int8 have a 16- and 8-bit range only, hence a scale per block.
 * A block whose amax is inf or NaN decodes to NaN throughout (so a bad step
 * is seen, never silently rescaled); NaN in top-k counts as the largest
 * magnitude and NaN in 1-bit makes the scale NaN.
 *
 * top-k: ties at the k-th magnitude are taken in index order; indices are
 * relative to the unit (a unit holds at most 2^32 - 1 floats). The error is
 * exactly the dropped entries, so ||e||^2 <= (1 - k/n) ||x||^2.
 * 1-bit (DeepSpeed's 1-bit Adam compressor): s = ||x|| / sqrt(n); the error
 * satisfies ||e||^2 = 2 ||x||^2 - 2 s ||x||_1, at most 2 (1 - 1/sqrt(n)) ||x||^2.
 *
 * Error feedback: the caller owns a residual array the size of the data. At
 * each encode, x + residual is encoded and the residual becomes what was not
 * sent, (x + residual) - decode(encode(x + residual)), so that over any
 * number of steps  sum(sent) + final residual = sum(inputs)  (up to float
 * rounding). Deliberately not here: anything about ranks or MPI (the
 * compressed collectives in compressed.h use these functions). */
#ifndef BS_COMM_CODEC_H
#define BS_COMM_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CODEC_NONE, CODEC_FP16, CODEC_BF16, CODEC_FP8, CODEC_INT8, CODEC_TOPK, CODEC_ONEBIT } CodecKind;

#define CODEC_DEFAULT_BLOCK 256 /* elements per scale (fp8, int8): 1.6% overhead */

typedef struct {
    CodecKind kind;
    size_t block;    /* fp8, int8: elements per fp32 scale (>= 1) */
    double fraction; /* topk: share of the elements kept, in (0, 1] */
} Codec;

/* Parses a --grad-compression value ("none", "fp16", "bf16", "fp8", "int8",
 * "topk:FRACTION" with FRACTION in (0, 1], "onebit"); block is the
 * --compression-block value (elements per scale, >= 1). On a bad value
 * returns false with a one-line reason naming the flag in why. */
bool codec_parse(const char *spec, size_t block, Codec *codec, char *why, size_t why_size);
/* The spec codec_parse accepts for this codec ("int8", "topk:0.01", ...). */
void codec_format(const Codec *codec, char *out, size_t out_size);

/* Elementwise codecs can be summed hop by hop (a ring carries them); top-k
 * and 1-bit cannot (sparse sums densify, signs do not add). */
bool codec_is_elementwise(const Codec *codec);
/* Bytes of the encoding of n floats (a multiple of 4). */
size_t codec_encoded_bytes(const Codec *codec, size_t n);
/* top-k: the number of elements kept of n, ceil(fraction * n). */
size_t codec_topk_count(double fraction, size_t n);

/* The documented bound of one round trip of an elementwise codec:
 *   |decode(encode(x))_i - x_i| <= rel |x_i| + block_rel * amax(block of i) + abs
 * for finite x below fp16's overflow threshold (zeros for top-k and 1-bit,
 * whose bounds are the norm statements above). */
typedef struct {
    double rel, block_rel, abs;
} CodecBound;
CodecBound codec_bound(const Codec *codec);

void codec_encode(const Codec *codec, const float *x, size_t n, void *out);
void codec_decode(const Codec *codec, const void *in, size_t n, float *out);
/* out[i] += decode(in)[i] */
void codec_decode_add(const Codec *codec, const void *in, size_t n, float *out);
/* Error feedback: x += residual (NULL: none); out = encode(x);
 * residual = x - decode(out) (if not NULL); then x = decode(out), exactly what
 * a receiver decodes. */
void codec_encode_feedback(const Codec *codec, float *x, float *residual, size_t n, void *out);

/* The element formats, exposed for tests against other implementations:
 * IEEE binary16 and OCP fp8 e4m3fn (bias 7, max 448, no inf, NaN 0x7f),
 * both rounded to nearest even; fp8 saturates finite overflow to +-448.
 * fp8 is kernels/fp8.h's saturating e4m3 cast (which also has e5m2 and the
 * non-saturating casts): one cast for the codec and FP8 training. */
uint16_t codec_fp16_from_float(float x);
float codec_fp16_to_float(uint16_t h);
uint8_t codec_fp8_from_float(float x);
float codec_fp8_to_float(uint8_t q);

#endif
