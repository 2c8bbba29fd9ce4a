/* cuda_kernels.h: the CUDA implementation's launchers (cuda_kernels.cu for
 * the engine's own kernels, device_cuda.cu for the cuBLASLt products). */
#ifndef BS_DEVICE_CUDA_CUDA_KERNELS_H
#define BS_DEVICE_CUDA_CUDA_KERNELS_H

#include <cuda_runtime.h>

#include "device/device_kernels.h"

/* Queues call's kernels on stream (every kernel but the matmuls); returns
 * the launch's error. */
cudaError_t cuda_launch_kernel(const DeviceCall *call, cudaStream_t stream);
/* dbias (OC) += column sums of dout (N,OC), each column in row order */
/* The fused attention kernels (flash_attention.cu): DK_FLASH_*. */
cudaError_t cuda_flash_launch(const DeviceCall *call, cudaStream_t stream);
/* The fused classifier (classifier.cu): DK_CLASSIFIER. */
cudaError_t cuda_classifier(const XentArgs *a, cudaStream_t stream);
cudaError_t cuda_bias_backward(float *dbias, const float *dout, int N, int OC, cudaStream_t stream);

#endif
