/* moe_kernels.cu: the MoE kernels (DK_MOE_*) on an NVIDIA GPU, the
 * arithmetic of moe_math.h (shared with sim): one thread per row for the
 * router and its backward, one per slot for the combine's backward, one per
 * element for the gather, combine and scatter; the dispatch (a counting
 * sort and the statistics' sums in row order) is one serial thread, so its
 * sums come out the same bits every run. */
#include "device/cuda/cuda_kernels.h"
#include "device/moe_math.h"

enum { THREADS = 256 };

static unsigned blocks(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

__global__ static void route_kernel(MoeArgs a) {
    const int t = blockIdx.x * THREADS + threadIdx.x;
    if (t < a.N) km_moe_route_row(&a, t);
}

__global__ static void dispatch_kernel(MoeArgs a) { km_moe_dispatch(&a); }

__global__ static void gather_kernel(MoeArgs a) {
    const size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x;
    if (i < (size_t)a.N * a.K * a.C) km_moe_gather(&a, i / a.C, (int)(i % a.C));
}

__global__ static void combine_kernel(MoeArgs a) {
    const size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x;
    if (i < (size_t)a.N * a.C) km_moe_combine(&a, (int)(i / a.C), (int)(i % a.C));
}

__global__ static void combine_backward_kernel(MoeArgs a) {
    const size_t j = (size_t)blockIdx.x * THREADS + threadIdx.x;
    if (j < (size_t)a.N * a.K) km_moe_combine_backward(&a, j);
}

__global__ static void router_backward_kernel(MoeArgs a) {
    const int t = blockIdx.x * THREADS + threadIdx.x;
    if (t < a.N) km_moe_router_backward_row(&a, t);
}

__global__ static void scatter_backward_kernel(MoeArgs a) {
    const size_t i = (size_t)blockIdx.x * THREADS + threadIdx.x;
    if (i < (size_t)a.N * a.C) km_moe_scatter_backward(&a, (int)(i / a.C), (int)(i % a.C));
}

cudaError_t cuda_moe_launch(const DeviceCall *call, cudaStream_t stream) {
    const MoeArgs a = call->a.moe;
    const size_t rows = (size_t)a.N, slots = rows * a.K;
    if (rows == 0) return cudaSuccess;
    switch (call->kernel) {
    case DK_MOE_ROUTE: route_kernel<<<blocks(rows), THREADS, 0, stream>>>(a); break;
    case DK_MOE_DISPATCH:
        dispatch_kernel<<<1, 1, 0, stream>>>(a);
        gather_kernel<<<blocks(slots * a.C), THREADS, 0, stream>>>(a);
        break;
    case DK_MOE_COMBINE: combine_kernel<<<blocks(rows * a.C), THREADS, 0, stream>>>(a); break;
    case DK_MOE_COMBINE_BACKWARD: combine_backward_kernel<<<blocks(slots), THREADS, 0, stream>>>(a); break;
    case DK_MOE_ROUTER_BACKWARD: router_backward_kernel<<<blocks(rows), THREADS, 0, stream>>>(a); break;
    case DK_MOE_SCATTER_BACKWARD: scatter_backward_kernel<<<blocks(rows * a.C), THREADS, 0, stream>>>(a); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
