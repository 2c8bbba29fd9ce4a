/* classifier_device.c: the output layer and loss a block of rows at a time
 * (classifier_device.h). */
#include "model/classifier_device.h"

int classifier_device(Device *dev, DeviceStream *stream, const ClassifierArgs *a, ClassifierProduct product, void *ctx) {
    for (int r0 = 0; r0 < a->N; r0 += a->block_rows) {
        const int n = a->N - r0 < a->block_rows ? a->N - r0 : a->block_rows;
        const float *inp = a->inp + (size_t)r0 * a->C;
        const MatmulArgs logits = {.out = a->logits, .inp = inp, .weight = a->wte, .N = n, .IC = a->C, .OC = a->Vp};
        if (product(ctx, DK_MATMUL_FORWARD, &logits)) return -1;
        DeviceCall loss = {.kernel = DK_CLASSIFIER,
                           .a.xent = {a->logits, a->losses + r0, a->targets + r0, n, a->V, a->Vp, a->dloss}};
        if (device_launch(dev, stream, &loss)) return -1;
        if (a->dloss == 0) continue;
        const MatmulArgs back = {.dinp = a->dinp + (size_t)r0 * a->C, .dweight = a->dwte, .dout = a->logits,
                                 .inp = inp, .weight = a->wte, .N = n, .IC = a->C, .OC = a->Vp};
        if (product(ctx, DK_MATMUL_BACKWARD, &back)) return -1;
    }
    return 0;
}
