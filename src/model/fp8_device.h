/* fp8_device.h: the FP8 linear layers of the device step (gpt_device.h's
 * fp8 mode): a site's product launched as DK_FP8_LINEAR_* with the scales
 * of the host's delayed-scaling state (model/fp8_scaling.h), and the step's
 * statistics summed on the device, then added to that state's record. */
#ifndef BS_MODEL_FP8_DEVICE_H
#define BS_MODEL_FP8_DEVICE_H

#include "device/device.h"
#include "model/fp8_scaling.h"

typedef struct Fp8Device Fp8Device;

/* round_floats > 0: bf16 outside FP8, with room for the largest output
 * gradient (floats) rounded. NULL with the reason in device_error (out of
 * device memory). */
Fp8Device *fp8_device_create(Device *dev, Fp8State *state, size_t round_floats);
void fp8_device_free(Fp8Device *f);
/* Site's linear layer: forward (a->out = product + bias, or with a->pre_gelu
 * the product + bias there and its GELU in a->out, as the fc layer's
 * epilogue) or backward (a->dinp, a->dweight, a->dbias), as
 * fp8_scaling_forward/backward. With bf16 outside FP8 a->weight_bf16 is the
 * weight's bf16 copy, and as gpt.c's bf16 mode the input is rounded in place
 * (forward), dbias sums the fp32 dout and the products take dout rounded. */
int fp8_device_linear(Fp8Device *f, DeviceStream *s, DeviceKernel k, int site, const MatmulArgs *a);
/* A training step's record: begun (the state's and the device's cleared),
 * then ended (the device's statistics added to the state's; recording off). */
int fp8_device_begin_step(Fp8Device *f, DeviceStream *s);
int fp8_device_end_step(Fp8Device *f, DeviceStream *s);

#endif
