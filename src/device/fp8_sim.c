/* fp8_sim.c: sim's FP8 linear layer (DK_FP8_LINEAR_FORWARD/BACKWARD): the
 * CPU's FP8 layer itself (kernels/matmul_fp8.h: each operand quantized with
 * its scale, the products in fp32), its statistics added to the device's. */
#include <stddef.h>
#include <stdlib.h>

#include "device/kernel_math.h"
#include "device/sim_kernels.h"
#include "kernels/kernels.h"
#include "kernels/matmul_fp8.h"

static Fp8Operand operand(const DeviceFp8Operand *o, Fp8Stats *stats) {
    return (Fp8Operand){o->e5m2 ? FP8_E5M2 : FP8_E4M3, o->blocks ? FP8_SCALING_BLOCKS : FP8_SCALING_TENSOR, o->scale,
                        o->stats ? stats : NULL};
}

static void add_stats(DeviceFp8Stats *to, const Fp8Stats *s) {
    if (!to) return;
    to->values += s->values;
    to->nonzero += s->nonzero;
    to->underflow += s->underflow;
    to->overflow += s->overflow;
    if (s->amax > to->amax) to->amax = s->amax;
}

/* The weight as floats: its bf16 copy widened (exact; the caller frees it) or itself. */
static const float *weight_floats(const Fp8LinearArgs *a, float **owned) {
    *owned = NULL;
    if (!a->weight_bf16) return a->weight;
    const size_t n = (size_t)a->OC * a->IC;
    *owned = malloc(sizeof(float) * n);
    for (size_t i = 0; *owned && i < n; i++) (*owned)[i] = km_bf16_to_float(a->weight_bf16[i]);
    return *owned;
}

void sim_fp8_linear(const DeviceCall *call) {
    const Fp8LinearArgs *a = &call->a.fp8;
    float *widened;
    const float *weight = weight_floats(a, &widened);
    if (!weight) return;
    Fp8Stats st[3] = {{0}};
    const Fp8Operand x = operand(&a->x, &st[0]), w = operand(&a->w, &st[1]), g = operand(&a->g, &st[2]);
    Fp8Matmul *mm = fp8_matmul_create();
    if (call->kernel == DK_FP8_LINEAR_FORWARD) {
        fp8_linear_forward(mm, a->out, a->inp, &x, weight, &w, a->bias, (size_t)a->N, a->IC, a->OC);
    } else {
        if (a->dbias) bias_backward(a->dbias, a->dout, (size_t)a->N, a->OC);
        fp8_linear_backward(mm, a->dinp, a->dweight, a->dout, &g, a->inp, &x, weight, &w, (size_t)a->N, a->IC, a->OC);
    }
    fp8_matmul_free(mm);
    free(widened);
    add_stats(a->x.stats, &st[0]);
    add_stats(a->w.stats, &st[1]);
    add_stats(a->g.stats, &st[2]);
}
