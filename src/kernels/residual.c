/* residual.c: the residual connection, out = a + b (its backward is a copy
 * of the incoming gradient to both inputs, done by the model). */
#include "kernels/kernels.h"

void residual_forward(real *out, const real *a, const real *b, size_t N) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}
