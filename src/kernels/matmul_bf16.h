/* matmul_bf16.h: the linear layer with bf16 inputs and fp32 accumulation,
 * through oneDNN's matmul primitive, forward and backward.
 *
 * Same shapes and semantics as matmul_forward/matmul_backward in kernels.h;
 * only the operands of the products change precision:
 *   forward   out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC)
 *   backward  dinp (N,IC) = dout @ weight (written), dweight (OC,IC) +=
 *             dout^T @ inp, dbias (OC) += column sums of dout
 * inp and weight arrive in bf16; dout arrives in fp32 and is rounded to bf16
 * here, block by block by the thread that runs the block (it is used once,
 * so nobody else needs a bf16 copy); dbias sums the fp32 dout in row order,
 * as matmul.c does. Every product accumulates in fp32 and writes fp32.
 *
 * Why the caller converts inp and weight: each is converted once and then
 * read twice (the weight copy by every forward and backward until the next
 * update; the activation copy by forward and again by backward's dweight),
 * so the caller that owns their lifetimes keeps the bf16 copies. See
 * bf16.h for the conversions.
 *
 * A MatmulBF16 is the primitive cache: each product is cut into the fixed
 * blocks of matmul.c (kernels.h), and a oneDNN primitive per (product, block
 * shape), planned for one thread, is created on first use and reused with
 * its memory objects; later calls only point them at the data and execute.
 * The blocks run in the caller's OpenMP threads, so the results are the
 * same bits at any thread count, on both paths, and the thread count is not
 * part of the cache key. It also owns the scratch the primitives and the
 * conversions need (grown when a larger shape or thread count first
 * appears, never in steady state). It is not thread-safe: one per thread
 * that calls it. No globals.
 *
 * Two ways to compute, the same numbers up to summation order:
 *   MATMUL_BF16_ONEDNN  oneDNN bf16 primitives: AMX or AVX512-BF16 dot
 *                       products where the CPU has them; on AVX-512 without
 *                       them oneDNN emulates bf16 (its gemm:jit, several
 *                       times slower than fp32); below AVX-512 (an AVX2-only
 *                       AMD EPYC) oneDNN 2.6 has no bf16 matmul at all and
 *                       this path cannot run (matmul_bf16_onednn_available).
 *   MATMUL_BF16_WIDEN   the bf16 operands widened to fp32 (exact) and the
 *                       fp32 layer of matmul.c (OpenBLAS): bf16 inputs with
 *                       fp32 accumulation at fp32 speed, on every CPU.
 *                       Creates no primitives.
 *   MATMUL_BF16_AUTO    ONEDNN when oneDNN reports bf16 arithmetic on this
 *                       CPU and can run the primitives, else WIDEN. */
#ifndef BS_KERNELS_MATMUL_BF16_H
#define BS_KERNELS_MATMUL_BF16_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/bf16.h"

typedef enum { MATMUL_BF16_AUTO, MATMUL_BF16_ONEDNN, MATMUL_BF16_WIDEN } MatmulBF16Path;

typedef struct MatmulBF16 MatmulBF16;

/* The capability probe: whether oneDNN can run bf16 matmuls on this CPU.
 * Creates one tiny bf16 matmul primitive and reports whether oneDNN
 * implements it (oneDNN 2.6 has none below AVX-512; ONEDNN_MAX_CPU_ISA=AVX2
 * shows the same here). Each call probes again (about a millisecond): call
 * it once and keep the answer. */
bool matmul_bf16_onednn_available(void);
/* oneDNN's effective CPU ISA as it names it, e.g. "avx2", "avx512_core_amx"
 * (after ONEDNN_MAX_CPU_ISA) */
const char *matmul_bf16_cpu_isa(void);
/* true when this CPU has bf16 arithmetic oneDNN uses (what AUTO decides on) */
bool matmul_bf16_cpu_has_bf16(void);

/* A cache for path; AUTO resolves here (probing once). ONEDNN where
 * matmul_bf16_onednn_available() is false is a caller's error (it dies):
 * check first and tell the user. */
MatmulBF16 *matmul_bf16_create(MatmulBF16Path path);
void matmul_bf16_free(MatmulBF16 *mm);
/* the path in use (ONEDNN or WIDEN) and a name for a path */
MatmulBF16Path matmul_bf16_path(const MatmulBF16 *mm);
const char *matmul_bf16_path_name(MatmulBF16Path path);
/* oneDNN's name for the kernel of the last product run (e.g. "brg:avx512_core_amx") */
const char *matmul_bf16_last_kernel(const MatmulBF16 *mm);
/* primitives created so far: each new block shape of a product creates one
 * (a product with a tail block has two shapes); no other call creates any */
int matmul_bf16_primitives_created(const MatmulBF16 *mm);

/* out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias may be NULL */
void matmul_bf16_forward(MatmulBF16 *mm, float *out, const bf16 *inp, const bf16 *weight, const float *bias,
                         size_t N, int IC, int OC);
/* writes dinp (N,IC); dweight (OC,IC) +=, dbias (OC) +=; each may be NULL
 * (skipped, and then weight, resp. inp, is not read): the input and weight
 * gradients by separate calls give the bits of one call (each block is the
 * same primitive on the same operands) */
void matmul_bf16_backward(MatmulBF16 *mm, float *dinp, float *dweight, float *dbias, const float *dout,
                          const bf16 *inp, const bf16 *weight, size_t N, int IC, int OC);

/* The same products for a caller that keeps its bf16 values in floats
 * (every float already a bf16 value, e.g. through bf16_round_floats: the
 * model's layout, which keeps one set of fp32 kernels for both precisions).
 * On the ONEDNN path the operands are narrowed to bf16 (exactly, as they are
 * bf16 values) in the cache's scratch and the primitives run; on the WIDEN
 * path this is matmul_forward/matmul_backward on the floats as given, with no
 * copy. Given the same values, each gives the bits of the bf16-typed call
 * above. The weight is narrowed on every call: OC x IC conversions beside
 * N x OC x IC multiply-adds, 1/N of the product's work. The backward takes
 * dout already rounded and leaves dbias to the caller (summed from the fp32
 * dout, which only the caller still has). */
void matmul_bf16_forward_rounded(MatmulBF16 *mm, float *out, const float *inp, const float *weight,
                                 const float *bias, size_t N, int IC, int OC);
/* writes dinp (N,IC); dweight (OC,IC) +=; either may be NULL (skipped, as
 * matmul_bf16_backward) */
void matmul_bf16_backward_rounded(MatmulBF16 *mm, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, size_t N, int IC, int OC);

#endif
