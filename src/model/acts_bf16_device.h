/* acts_bf16_device.h: --activations bf16 on a device: what each transformer
 * layer keeps for its backward, stored as bf16 (2 bytes, not 4) in one
 * allocation: the layer's input (the residual stream), its two layernorms'
 * outputs, qkv, the attention's output, the residual after attention and
 * the fc layer's output before and after GELU. A layer's forward rounds each
 * of them in place as it is made and keeps the bits (acts_bf16_keep, or the
 * fused residual kernel writing acts_bf16_slot), so every later reader, in
 * forward and in backward, sees the value kept; before a layer's backward
 * acts_bf16_restore widens them (exactly) into the fp32 buffers the layers
 * share. Layernorm statistics, the attention's log-sum-exp (or its
 * probabilities), the logits, the loss and every sum stay fp32, as do the
 * master weights and the gradients. Errors: -1 (NULL) with the reason in
 * device_error. */
#ifndef BS_MODEL_ACTS_BF16_DEVICE_H
#define BS_MODEL_ACTS_BF16_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

/* What a layer keeps; ACT_INPUT of layer L (one past the last) is the final layernorm's input. */
typedef enum { ACT_INPUT, ACT_LN1, ACT_QKV, ACT_ATTY, ACT_RESIDUAL2, ACT_LN2, ACT_FCH, ACT_FCH_GELU, ACT_KINDS } ActKind;

typedef struct ActsBf16 ActsBf16;

/* The store of `layers` layers of rows x channels activations. */
ActsBf16 *acts_bf16_create(Device *dev, int layers, size_t rows, size_t channels);
void acts_bf16_free(ActsBf16 *a);
/* Bytes the store allocates. */
size_t acts_bf16_bytes(int layers, size_t rows, size_t channels);
/* The bits of layer's activation k (rows x its width). */
uint16_t *acts_bf16_slot(const ActsBf16 *a, int layer, ActKind k);
/* x (layer's activation k, fp32 on the device) rounded to bf16 in place, its bits kept. */
int acts_bf16_keep(ActsBf16 *a, DeviceStream *s, int layer, ActKind k, float *x);
/* Every activation of layer widened into dst[k] (NULL: not wanted). */
int acts_bf16_restore(ActsBf16 *a, DeviceStream *s, int layer, float *const dst[ACT_KINDS]);

#endif
