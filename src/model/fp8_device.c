/* fp8_device.c: the device step's FP8 linear layers (fp8_device.h). */
#include "model/fp8_device.h"

#include <stdlib.h>

struct Fp8Device {
    Device *dev;
    Fp8State *state;
    int tensors;                  /* FP8_KINDS x sites, tensor = FP8_KINDS x site + kind, as fp8_scaling.c's */
    DeviceFp8Stats *stats;        /* (tensors) on the device: the step's */
    DeviceFp8Stats *host_stats;   /* (tensors) their copy on the host */
};

Fp8Device *fp8_device_create(Device *dev, Fp8State *state) {
    Fp8Device *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->dev = dev;
    f->state = state;
    f->tensors = FP8_KINDS * fp8_scaling_sites(state);
    const size_t bytes = sizeof(DeviceFp8Stats) * (size_t)(f->tensors ? f->tensors : 1);
    f->stats = device_alloc(dev, bytes);
    f->host_stats = malloc(bytes);
    if (!f->stats || !f->host_stats) {
        fp8_device_free(f);
        return NULL;
    }
    return f;
}

void fp8_device_free(Fp8Device *f) {
    if (!f) return;
    device_free(f->dev, f->stats);
    free(f->host_stats);
    free(f);
}

/* How tensor `kind` of `site` is quantized now; counted on the device where the state records. */
static DeviceFp8Operand operand(Fp8Device *f, int site, int kind, bool counted) {
    const Fp8Operand o = fp8_scaling_operand(f->state, site, kind);
    return (DeviceFp8Operand){o.format == FP8_E5M2, o.scaling == FP8_SCALING_BLOCKS, o.scale,
                              o.stats && counted ? f->stats + FP8_KINDS * site + kind : NULL};
}

int fp8_device_linear(Fp8Device *f, DeviceStream *s, DeviceKernel k, int site, const MatmulArgs *a) {
    const bool forward = k == DK_MATMUL_FORWARD;
    DeviceCall call = {.kernel = forward ? DK_FP8_LINEAR_FORWARD : DK_FP8_LINEAR_BACKWARD};
    call.a.fp8 = (Fp8LinearArgs){a->pre_gelu ? a->pre_gelu : a->out, a->dinp, a->dweight, a->dbias, a->inp, a->weight,
                                 a->bias, a->dout, operand(f, site, FP8_INPUT, forward),
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
