/* real.h: the scalar type of the kernels.
 *
 * The product builds every kernel in float. The finite-difference gradient
 * checks (tests/test_gradcheck.c) compile the same kernel sources a second
 * time with BS_REAL_DOUBLE defined, so the checks run in double precision on
 * the very code that trains. Nothing else should define BS_REAL_DOUBLE. */
#ifndef BS_KERNELS_REAL_H
#define BS_KERNELS_REAL_H

#include <cblas.h>
#include <math.h>

#ifdef BS_REAL_DOUBLE
typedef double real;
#define bs_gemm cblas_dgemm
#define real_sqrt sqrt
#define real_log log
#define real_exp exp
#else
typedef float real;
#define bs_gemm cblas_sgemm
#define real_sqrt sqrtf
#define real_log logf
#define real_exp bs_expf
#endif

#endif
