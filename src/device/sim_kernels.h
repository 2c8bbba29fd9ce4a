/* sim_kernels.h: the device kernels run on the host for the sim device: the
 * CUDA kernels' per-element arithmetic (kernel_math.h) in plain loops, the
 * products through the CPU's matmul (kernels/kernels.h). */
#ifndef BS_DEVICE_SIM_KERNELS_H
#define BS_DEVICE_SIM_KERNELS_H

#include "device/device_kernels.h"

void sim_run_kernel(const DeviceCall *call);
/* The fused attention kernels (flash_sim.c). */
void sim_flash(const DeviceCall *call);
/* The fused classifier (classifier_sim.c). */
void sim_classifier(const XentArgs *a);
/* The FP8 linear layer (fp8_sim.c). */
void sim_fp8_linear(const DeviceCall *call);
/* FP8 quantization and the plain FP8 product (fp8_quantize_sim.c). */
void sim_fp8_quantize(const Fp8QuantizeArgs *a);
void sim_fp8_product(const Fp8ProductArgs *p);
/* The MoE kernels (moe_sim.c): DK_MOE_*. */
void sim_moe(const DeviceCall *call);

#endif
