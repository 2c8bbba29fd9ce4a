/* cuda_kernels.h: the CUDA implementation's launchers (cuda_kernels.cu for
 * the engine's own kernels, device_cuda.cu for the cuBLASLt products). */
#ifndef BS_DEVICE_CUDA_CUDA_KERNELS_H
#define BS_DEVICE_CUDA_CUDA_KERNELS_H

#include <cuda_runtime.h>

extern "C" {
#include "device/device.h" /* plain C: its functions keep C linkage */
}
#include "device/device_kernels.h"

/* Queues call's kernels on stream (every kernel but the matmuls); returns
 * the launch's error. */
cudaError_t cuda_launch_kernel(const DeviceCall *call, cudaStream_t stream);
/* dbias (OC) += column sums of dout (N,OC), each column in row order */
/* The fused attention kernels (flash_attention.cu): DK_FLASH_*. */
cudaError_t cuda_flash_launch(const DeviceCall *call, cudaStream_t stream);
/* The fused classifier (classifier.cu): DK_CLASSIFIER. */
cudaError_t cuda_classifier(const XentArgs *a, cudaStream_t stream);
/* The MoE kernels (moe_kernels.cu): DK_MOE_*. */
cudaError_t cuda_moe_launch(const DeviceCall *call, cudaStream_t stream);
cudaError_t cuda_bias_backward(float *dbias, const float *dout, int N, int OC, cudaStream_t stream);
/* The FP8 kernels (fp8_kernels.cu): DK_FP8_QUANTIZE, DK_FP8_PRODUCT; out (n, m) += bias (m) per row. */
cudaError_t cuda_fp8_launch(const DeviceCall *call, cudaStream_t stream);
cudaError_t cuda_fp8_add_bias(float *out, const float *bias, int m, int n, cudaStream_t stream);
/* The FP8 linear layer (fp8_linear.cu): DK_FP8_LINEAR_* with its buffers in *state (made at first use). */
typedef struct CudaFp8 CudaFp8;
int cuda_fp8_linear(Device *d, CudaFp8 **state, const DeviceCall *call, cudaStream_t stream);
void cuda_fp8_free(CudaFp8 *state);
/* An FP8 product through cuBLASLt (device_cuda.cu): 0, -1 on an error, -2 where cuBLASLt has no algorithm
 * (the reason in device_error); the bias is not added. */
int cuda_lt_fp8_product(Device *d, const Fp8ProductArgs *p, cudaStream_t stream);

#endif
