/* frozen_matrix.h: a frozen weight matrix W (rows = output channels, cols =
 * input channels) as LoRA's frozen products read it: in fixed blocks of rows,
 * each read in place when W is fp32, or else widened (bf16, int8, NF4
 * dequantized) into an fp32 scratch of one block just before its product, so
 * no fp32 copy of a reduced matrix larger than one block ever exists. The
 * blocks depend on the shape alone, not on the storage or the thread count,
 * so a reduced matrix gives the bits of an fp32 one holding its values:
 *   out (N, rows) = x (N, cols) @ W^T (+ bias), a block of out's columns at a time;
 *   dx (N, cols) = dout (N, rows) @ W, the blocks' products summed in order.
 * The tied head runs over wte in blocks of FROZEN_HEAD_BLOCK vocabulary rows,
 * a linear layer in blocks of FROZEN_LINEAR_BLOCK output rows (a multiple of
 * NF4's 64-element blocks for any width). */
#ifndef BS_MODEL_FROZEN_MATRIX_H
#define BS_MODEL_FROZEN_MATRIX_H

#include <stddef.h>

enum { FROZEN_HEAD_BLOCK = 256, FROZEN_LINEAR_BLOCK = 64 };

/* Rows row0 .. row0+n-1 of matrix `index` of source, in fp32, into dst (n x cols). */
typedef void (*FrozenRows)(const void *source, int index, size_t row0, size_t n, float *dst);

typedef struct {
    const float *values; /* the fp32 matrix read in place, or NULL: widened by */
    FrozenRows widen;    /* (source, index) into scratch (block x cols floats) */
    const void *source;
    int index;
    float *scratch;
    size_t rows, block;  /* rows in all, rows per block */
    int cols;
} FrozenMatrix;

/* out (N, rows) = x (N, cols) @ W^T + bias (rows; may be NULL). */
void frozen_matrix_forward(FrozenMatrix w, float *out, const float *x, const float *bias, size_t N);
/* dx (N, cols) = dout (N, rows) @ W (written, not added). */
void frozen_matrix_backward(FrozenMatrix w, float *dx, const float *dout, size_t N);

#endif
