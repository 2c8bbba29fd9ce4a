/* acts_bf16_device.c: the bf16 activation store (acts_bf16_device.h): one
 * allocation, each layer's activations one after the other in ActKind order. */
#include "model/acts_bf16_device.h"

#include <stdlib.h>

struct ActsBf16 {
    Device *dev;
    int layers;
    size_t rows, channels;
    uint16_t *bits;
};

/* Each kind's width in channels (the fc layer's 4), then where it starts in a layer. */
static const int WIDTH[ACT_KINDS] = {1, 1, 1, 4};

static size_t start(ActKind k) {
    size_t at = 0;
    for (int i = 0; i < (int)k; i++) at += (size_t)WIDTH[i];
    return at;
}

static size_t elements(int layers, size_t rows, size_t channels) {
    return (size_t)layers * start(ACT_KINDS) * rows * channels;
}

size_t acts_bf16_bytes(int layers, size_t rows, size_t channels) {
    return sizeof(uint16_t) * elements(layers, rows, channels);
}

ActsBf16 *acts_bf16_create(Device *dev, int layers, size_t rows, size_t channels) {
    ActsBf16 *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    *a = (ActsBf16){dev, layers, rows, channels, device_alloc(dev, acts_bf16_bytes(layers, rows, channels))};
    if (a->bits) return a;
    free(a);
    return NULL;
}

void acts_bf16_free(ActsBf16 *a) {
    if (!a) return;
    device_free(a->dev, a->bits);
    free(a);
}

static size_t count(const ActsBf16 *a, ActKind k) { return (size_t)WIDTH[k] * a->rows * a->channels; }

static uint16_t *slot(const ActsBf16 *a, int layer, ActKind k) {
    return a->bits + ((size_t)layer * start(ACT_KINDS) + start(k)) * a->rows * a->channels;
}

const uint16_t *acts_bf16_bits(const ActsBf16 *a, int layer, ActKind k) { return slot(a, layer, k); }

int acts_bf16_keep(ActsBf16 *a, DeviceStream *s, int layer, ActKind k, const float *x) {
    DeviceCall call = {.kernel = DK_BF16_ROUND, .a.round = {NULL, slot(a, layer, k), x, count(a, k)}};
    return device_launch(a->dev, s, &call);
}

int acts_bf16_restore(ActsBf16 *a, DeviceStream *s, int layer, float *const dst[ACT_KINDS]) {
    for (int k = 0; k < ACT_KINDS; k++) {
        if (!dst[k]) continue;
        DeviceCall call = {.kernel = DK_BF16_WIDEN, .a.widen = {dst[k], slot(a, layer, (ActKind)k), count(a, (ActKind)k)}};
        if (device_launch(a->dev, s, &call) != 0) return -1;
    }
    return 0;
}
