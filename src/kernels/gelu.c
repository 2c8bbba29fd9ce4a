/* gelu.c: GELU with the tanh approximation (GPT-2's), forward and backward.
 *
 * 0.5 x (1 + tanh(u)) is rewritten as x * sigmoid(2u), u = sqrt(2/pi)(x +
 * 0.044715 x^3), so one vectorizable exp replaces tanh. With s = sigmoid(2u):
 * d/dx = s + 2 x s (1 - s) u'. */
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_A 0.044715

void gelu_forward(real *out, const real *inp, size_t N) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        real u = (real)GELU_K * (x + (real)GELU_A * x * x * x);
        out[i] = x / (1 + real_exp(-2 * u));
    }
}

void gelu_backward(real *dinp, const real *inp, const real *dout, size_t N) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        real u = (real)GELU_K * (x + (real)GELU_A * x * x * x);
        real du = (real)GELU_K * (1 + 3 * (real)GELU_A * x * x);
        real s = 1 / (1 + real_exp(-2 * u));
        dinp[i] = (s + 2 * x * s * (1 - s) * du) * dout[i];
    }
}
