/* nf4.h: bitsandbytes' 4-bit NormalFloat format with double quantisation
 * (QLoRA, Dettmers et al. 2023; bitsandbytes quantize_4bit(quant_type="nf4",
 * blocksize=64, compress_statistics=True)), for one tensor:
 *   - the tensor flattened, cut into blocks of 64 (the last one may be short);
 *     absmax = max |x| of the block; each x * (1 / absmax), clamped to
 *     [-1, 1], becomes the index of the nearest of the 16 NF4 values (the
 *     first on a tie); two codes per byte, element 2i in the high nibble;
 *   - double quantisation of the absmax values: offset = their mean,
 *     c = absmax - offset cut into blocks of 256, each with its fp32
 *     absmax2 = max |c|, and each c * (1 / absmax2) the index of the nearest
 *     value of the signed 8-bit dynamic map (create_dynamic_map());
 *   - dequantisation: absmax' = map[q] x absmax2 + offset, x' = NF4[code] x
 *     absmax' (float32, each operation rounded: this file is compiled
 *     without FMA contraction).
 * Where bitsandbytes is ill-defined this file says what it does: a block of
 * zeros (bitsandbytes divides by 0) codes every element as NF4's 0; the mean
 * is taken in double and rounded once (torch's float32 mean may differ in
 * the last bit); the dynamic map is built in double and rounded once (torch's
 * float32 linspace gives some entries 1 ulp apart). It does not know
 * matrices or layers: model/frozen_linear.c keeps one such tensor per linear
 * weight matrix. */
#ifndef BS_MODEL_NF4_H
#define BS_MODEL_NF4_H

#include <stddef.h>
#include <stdint.h>

#define NF4_BLOCK 64
#define NF4_ABSMAX_BLOCK 256

/* The storage of one tensor of n elements. */
typedef struct {
    size_t code_bytes;   /* (n + 1) / 2 */
    size_t blocks;       /* ceil(n / 64): one 8-bit absmax code each */
    size_t groups;       /* ceil(blocks / 256): one fp32 absmax2 each */
} Nf4Sizes;
Nf4Sizes nf4_sizes(size_t n);

/* Where one tensor's quantized form lives (sizes from nf4_sizes). */
typedef struct {
    uint8_t *codes;        /* code_bytes */
    uint8_t *absmax_codes; /* blocks */
    float *absmax2;        /* groups */
    float *offset;         /* one */
} Nf4Tensor;

/* The 16 NF4 values and the 256 values of the signed dynamic map, ascending. */
const float *nf4_code_book(void);
void nf4_dynamic_map(float map[256]);

/* Quantizes x (n floats); scratch holds nf4_sizes(n).blocks floats. */
void nf4_quantize(const float *x, size_t n, Nf4Tensor t, float *scratch);
/* The same in pieces, with the same bits: elements first .. first+count-1
 * (x holds them; first a multiple of NF4_BLOCK) coded and their blocks'
 * absmax kept in scratch, then, once every piece of the n elements is in,
 * the double quantisation of the absmax values. */
void nf4_quantize_range(const float *x, size_t first, size_t count, Nf4Tensor t, float *scratch);
void nf4_quantize_finish(size_t n, Nf4Tensor t, float *scratch);
/* Dequantizes into x (n floats). */
void nf4_dequantize(Nf4Tensor t, size_t n, float *x);
/* Elements first .. first+count-1 (any range) into x, given the dynamic map. */
void nf4_dequantize_range(Nf4Tensor t, const float map[256], size_t first, size_t count, float *x);

#endif
