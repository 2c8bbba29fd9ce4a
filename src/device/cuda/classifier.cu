/* classifier.cu: the fused classifier (DK_CLASSIFIER) on an NVIDIA GPU,
 * the arithmetic of classifier_math.h (shared with sim). One thread block
 * per row: each thread takes every THREADS-th logit for its online max and
 * sum, the block merges the threads' statistics in a fixed tree (the same
 * bits every run), then every thread writes its logits' gradient. */
#include "device/classifier_math.h"
#include "device/cuda/cuda_kernels.h"

enum { THREADS = 256 };

__global__ static void classifier_kernel(XentArgs a) {
    __shared__ float m[THREADS], s[THREADS];
    const int i = blockIdx.x, target = a.targets[i];
    if (target < 0) {
        if (threadIdx.x == 0) a.losses[i] = 0;
        for (int j = threadIdx.x; j < a.Vp && a.dloss != 0; j += THREADS) a.logits[(size_t)i * a.Vp + j] = 0;
        return;
    }
    SoftmaxStat st = km_classifier_stat(&a, i, threadIdx.x, THREADS);
    m[threadIdx.x] = st.m, s[threadIdx.x] = st.s;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) {
            SoftmaxStat mine = {m[threadIdx.x], s[threadIdx.x]}, other = {m[threadIdx.x + o], s[threadIdx.x + o]};
            mine = km_softmax_merge(mine, other);
            m[threadIdx.x] = mine.m, s[threadIdx.x] = mine.s;
        }
        __syncthreads();
    }
    const SoftmaxStat row = {m[0], s[0]};
    const float target_logit = a.logits[(size_t)i * a.Vp + target];
    __syncthreads(); /* every thread has read the target's logit before it is overwritten */
    if (threadIdx.x == 0) a.losses[i] = km_xent_loss(row.s, target_logit, row.m);
    if (a.dloss != 0) km_classifier_grad(&a, i, row, threadIdx.x, THREADS);
}

cudaError_t cuda_classifier(const XentArgs *a, cudaStream_t stream) {
    classifier_kernel<<<a->N, THREADS, 0, stream>>>(*a);
    return cudaGetLastError();
}
