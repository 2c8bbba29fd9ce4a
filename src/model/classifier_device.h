/* classifier_device.h: GPT-2's output layer and loss on a device, a block of
 * rows at a time: per block the logits (rows, Vp) = inp wte^T, the fused
 * classifier's loss and gradient in place (DK_CLASSIFIER), then the
 * block's input gradient and its share of wte's (+=). The logits of only
 * one block exist at a time (block_rows x Vp floats), where the plain step
 * keeps all N rows: at GPT-2 124M, T 1024 and micro-batch 8, 206 MB for
 * 1024-row blocks against 1.65 GB. Errors: -1 with the reason in
 * device_error. */
#ifndef BS_MODEL_CLASSIFIER_DEVICE_H
#define BS_MODEL_CLASSIFIER_DEVICE_H

#include <stdint.h>

#include "device/device.h"
#include "device/device_kernels.h"

/* Rows per block in the device model step. */
enum { CLASSIFIER_BLOCK_ROWS = 1024 };

typedef struct {
    float *losses;      /* (N) written */
    float *dinp, *dwte; /* (N,C) written, (Vp,C) += ; with dloss 0 neither is touched */
    float *logits;      /* (block_rows, Vp): the block's logits, then their gradient */
    const float *inp, *wte;  /* (N,C), (Vp,C) */
    const int32_t *targets;  /* (N); < 0: masked (no loss, no gradient) */
    int N, C, V, Vp, block_rows;
    float dloss;
} ClassifierArgs;

/* Runs one of the block's products (forward: logits; backward: dinp and
 * dwte), so that the model's operand precision applies; ctx is the model. */
typedef int (*ClassifierProduct)(void *ctx, DeviceKernel kernel, const MatmulArgs *a);

int classifier_device(Device *dev, DeviceStream *stream, const ClassifierArgs *a, ClassifierProduct product, void *ctx);

#endif
