/* acts_bf16_device.h: --activations bf16 on a device: what each transformer
 * layer keeps for its backward, stored as bf16 (2 bytes, not 4) in one
 * allocation: what its products read as bf16 operands (both layernorms'
 * outputs, the attention's output, the GELU's output: 7 of the 16 channels'
 * worth a layer keeps), values the bf16 step rounds to bf16 already, so
 * storing them loses nothing and training is bitwise the fp32 storage's. A
 * layer's forward keeps each one's bf16 bits as it is made (acts_bf16_keep),
 * which its products then read as their bf16 operand
 * (acts_bf16_bits), in forward and in backward, with no rounding pass of
 * their own; before its backward acts_bf16_restore widens what an fp32
 * kernel reads (the attention's output) into the buffers the layers share. The residual stream, qkv
 * and the fc layer's output before GELU stay fp32: rounding them too (as
 * llm.c does) moved ten steps of training 6-10x the reordering floor
 * (docs/journal/performance.md), beyond what tests/layout_floor.py admits.
 * Layernorm statistics, the attention's log-sum-exp (or its probabilities),
 * the logits, the loss and every sum stay fp32, as do the master weights
 * and the gradients. Errors: -1 (NULL) with the reason in device_error. */
#ifndef BS_MODEL_ACTS_BF16_DEVICE_H
#define BS_MODEL_ACTS_BF16_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

/* What a layer keeps in bf16. */
typedef enum { ACT_LN1, ACT_ATTY, ACT_LN2, ACT_FCH_GELU, ACT_KINDS } ActKind;

typedef struct ActsBf16 ActsBf16;

/* The store of `layers` layers of rows x channels activations. */
ActsBf16 *acts_bf16_create(Device *dev, int layers, size_t rows, size_t channels);
void acts_bf16_free(ActsBf16 *a);
/* Bytes the store allocates. */
size_t acts_bf16_bytes(int layers, size_t rows, size_t channels);
/* The bits of layer's activation k (rows x its width). */
const uint16_t *acts_bf16_bits(const ActsBf16 *a, int layer, ActKind k);
/* The bf16 bits of x (layer's activation k, fp32 on the device) kept. */
int acts_bf16_keep(ActsBf16 *a, DeviceStream *s, int layer, ActKind k, const float *x);
/* Every activation of layer widened into dst[k] (NULL: not wanted). */
int acts_bf16_restore(ActsBf16 *a, DeviceStream *s, int layer, float *const dst[ACT_KINDS]);

#endif
