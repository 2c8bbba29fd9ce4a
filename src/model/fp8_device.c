/* fp8_device.c: the device step's FP8 linear layers (fp8_device.h). */
#include "model/fp8_device.h"

#include <stdlib.h>

struct Fp8Device {
    Device *dev;
    Fp8State *state;
    int tensors;                  /* FP8_KINDS x sites, tensor = FP8_KINDS x site + kind, as fp8_scaling.c's */
    DeviceFp8Stats *stats;        /* (tensors) on the device: the step's */
    DeviceFp8Stats *host_stats;   /* (tensors) their copy on the host */
    float *dround;                /* bf16 outside FP8: an output gradient rounded (NULL: fp32) */
};

Fp8Device *fp8_device_create(Device *dev, Fp8State *state, size_t round_floats) {
    Fp8Device *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->dev = dev;
    f->state = state;
    f->tensors = FP8_KINDS * fp8_scaling_sites(state);
    const size_t bytes = sizeof(DeviceFp8Stats) * (size_t)(f->tensors ? f->tensors : 1);
    f->stats = device_alloc(dev, bytes);
    f->host_stats = malloc(bytes);
    if (round_floats) f->dround = device_alloc(dev, sizeof(float) * round_floats);
    if (!f->stats || !f->host_stats || (round_floats && !f->dround)) {
        fp8_device_free(f);
        return NULL;
    }
    return f;
}

void fp8_device_free(Fp8Device *f) {
    if (!f) return;
    device_free(f->dev, f->stats);
    device_free(f->dev, f->dround);
    free(f->host_stats);
    free(f);
}

/* How tensor `kind` of `site` is quantized now; counted on the device where the state records. */
static DeviceFp8Operand operand(Fp8Device *f, int site, int kind, bool counted) {
    const Fp8Operand o = fp8_scaling_operand(f->state, site, kind);
    return (DeviceFp8Operand){o.format == FP8_E5M2, o.scaling == FP8_SCALING_BLOCKS, o.scale,
                              o.stats && counted ? f->stats + FP8_KINDS * site + kind : NULL};
}

static int round_bf16(Fp8Device *f, DeviceStream *s, float *out, const float *inp, size_t n) {
    DeviceCall call = {.kernel = DK_BF16_ROUND, .a.round = {out, NULL, inp, n}};
    return device_launch(f->dev, s, &call);
}

/* bf16 outside FP8 (gpt.c's bf16 mode): forward rounds the input in place; backward sums dbias from the fp32
 * dout, then rounds dout for the products: *dout becomes the rounded copy, *dbias NULL. */
static int bf16_operands(Fp8Device *f, DeviceStream *s, bool forward, const MatmulArgs *a, const float **dout,
                         float **dbias) {
    const size_t N = (size_t)a->N;
    if (forward) return round_bf16(f, s, (float *)a->inp, a->inp, N * (size_t)a->IC);
    if (*dbias) {
        DeviceCall bias = {.kernel = DK_MATMUL_BACKWARD,
                           .a.matmul = {.dbias = *dbias, .dout = *dout, .N = a->N, .IC = a->IC, .OC = a->OC}};
        if (device_launch(f->dev, s, &bias) != 0) return -1;
    }
    *dbias = NULL;
    *dout = f->dround;
    return round_bf16(f, s, f->dround, a->dout, N * (size_t)a->OC);
}

int fp8_device_linear(Fp8Device *f, DeviceStream *s, DeviceKernel k, int site, const MatmulArgs *a) {
    const bool forward = k == DK_MATMUL_FORWARD;
    const float *dout = a->dout;
    float *dbias = a->dbias;
    if (f->dround && bf16_operands(f, s, forward, a, &dout, &dbias) != 0) return -1;
    DeviceCall call = {.kernel = forward ? DK_FP8_LINEAR_FORWARD : DK_FP8_LINEAR_BACKWARD};
    call.a.fp8 = (Fp8LinearArgs){a->pre_gelu ? a->pre_gelu : a->out, a->dinp, a->dweight, dbias, a->inp, a->weight,
                                 a->bias, dout, a->weight_bf16, operand(f, site, FP8_INPUT, forward),
                                 operand(f, site, FP8_WEIGHT, forward), operand(f, site, FP8_GRAD, !forward && a->dinp),
                                 a->N, a->IC, a->OC};
    if (device_launch(f->dev, s, &call) != 0) return -1;
    if (!forward || !a->pre_gelu) return 0;
    DeviceCall gelu = {.kernel = DK_GELU_FORWARD, .a.elementwise = {a->out, a->pre_gelu, NULL, (size_t)a->N * a->OC}};
    return device_launch(f->dev, s, &gelu);
}

int fp8_device_begin_step(Fp8Device *f, DeviceStream *s) {
    fp8_scaling_begin_step(f->state);
    return device_zero(f->dev, s, f->stats, sizeof(DeviceFp8Stats) * (size_t)f->tensors);
}

int fp8_device_end_step(Fp8Device *f, DeviceStream *s) {
    const size_t bytes = sizeof(DeviceFp8Stats) * (size_t)f->tensors;
    if (device_copy(f->dev, s, f->host_stats, f->stats, bytes, COPY_DEVICE_TO_HOST) != 0 ||
        device_stream_sync(f->dev, s) != 0)
        return -1;
    for (int t = 0; t < f->tensors; t++) {
        const DeviceFp8Stats *d = &f->host_stats[t];
        Fp8Stats *record = fp8_scaling_operand(f->state, t / FP8_KINDS, t % FP8_KINDS).stats;
        const Fp8Stats st = {d->values, d->nonzero, d->underflow, d->overflow, d->amax};
        if (record) fp8_stats_add(record, &st);
    }
    fp8_scaling_set_recording(f->state, false);
    return 0;
}
