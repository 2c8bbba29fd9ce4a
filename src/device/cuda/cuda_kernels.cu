/* cuda_kernels.cu: the engine's kernels on an NVIDIA GPU. The arithmetic of
 * each element is kernel_math.h's (shared with sim); what is here is how the
 * work is cut. Every reduction a gradient passes through has a fixed order
 * (a thread owns a column and sums rows in order, or a block sums in a fixed
 * tree), so two runs give the same bits: no floating-point atomics. Simple
 * first: one thread per attention row, one per column of a parameter
 * gradient. */
#include "device/cuda/cuda_kernels.h"
#include "device/adamw_math.h"
#include "device/kernel_math.h"
#include "device/kernel_rows.h"

enum { THREADS = 256, WARP = 32 };

static unsigned blocks_for(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

__device__ static float warp_sum(float x) {
    for (int o = WARP / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* The block's sum (or max) of x in a fixed tree: shared[THREADS] scratch. */
template <bool MAX>
__device__ static float block_reduce(float x, float *shared) {
    shared[threadIdx.x] = x;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) {
            float y = shared[threadIdx.x + o];
            shared[threadIdx.x] = MAX ? fmaxf(shared[threadIdx.x], y) : shared[threadIdx.x] + y;
        }
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

__global__ static void encoder_forward_kernel(EncoderArgs a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)a.B * a.T * a.C) km_encoder_forward_element(&a, i);
}

__global__ static void encoder_backward_kernel(EncoderArgs a) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < a.C) km_encoder_backward_column(&a, c);
}

/* One warp per row: the row's layernorm by its lanes. */
__device__ static void layernorm_row(const LayernormArgs &a, int row, int lane) {
    const float *x = a.inp + (size_t)row * a.C;
    float m = 0, v = 0;
    for (int c = lane; c < a.C; c += WARP) m += x[c];
    m = warp_sum(m) / a.C;
    for (int c = lane; c < a.C; c += WARP) v += (x[c] - m) * (x[c] - m);
    float s = km_ln_rstd(warp_sum(v) / a.C);
    for (int c = lane; c < a.C; c += WARP) a.out[(size_t)row * a.C + c] = km_ln_out(x[c], m, s, a.weight[c], a.bias[c]);
    if (lane == 0) {
        a.mean[row] = m;
        a.rstd[row] = s;
    }
}

__global__ static void layernorm_forward_kernel(LayernormArgs a) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row < a.N) layernorm_row(a, row, lane);
}

/* One warp per row: each lane sums the residual at its columns, then reads
 * back only those columns in the row's layernorm (no wait between lanes). */
__global__ static void residual_layernorm_kernel(ResidualLayernormArgs a) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= a.ln.N) return;
    for (int c = lane; c < a.ln.C; c += WARP) km_residual_element(&a, (size_t)row * a.ln.C + c);
    layernorm_row(a.ln, row, lane);
}

__global__ static void layernorm_backward_input_kernel(LayernormArgs a) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= a.N) return;
    const float *d = a.dout + (size_t)row * a.C, *x = a.inp + (size_t)row * a.C;
    float m = a.mean[row], s = a.rstd[row], dmean = 0, dnorm_mean = 0;
    for (int c = lane; c < a.C; c += WARP) {
        float norm = (x[c] - m) * s, dnorm = a.weight[c] * d[c];
        dmean += dnorm;
        dnorm_mean += dnorm * norm;
    }
    dmean = warp_sum(dmean) / a.C;
    dnorm_mean = warp_sum(dnorm_mean) / a.C;
    for (int c = lane; c < a.C; c += WARP)
        a.dinp[(size_t)row * a.C + c] += km_ln_dinp((x[c] - m) * s, a.weight[c] * d[c], dmean, dnorm_mean, s);
}

__global__ static void layernorm_backward_params_kernel(LayernormArgs a) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < a.C) km_layernorm_params_column(&a, c);
}

__global__ static void elementwise_kernel(DeviceKernel k, ElementwiseArgs a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) km_elementwise(k, &a, i);
}

/* One thread per attention row (kernel_rows.h): forward and dq per query
 * row, then dk and dv per key row. */
__global__ static void attention_kernel(AttentionArgs a, int which) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= a.B * a.H * a.T) return;
    if (which == 0) km_attention_forward_row(&a, idx);
    else if (which == 1) km_attention_dq_row(&a, idx);
    else km_attention_dkv_row(&a, idx);
}

/* One block per row: max and sum in the block's fixed tree. */
__global__ static void softmax_xent_kernel(XentArgs a) {
    __shared__ float shared[THREADS];
    const int i = blockIdx.x, target = a.targets[i];
    float *row = a.logits + (size_t)i * a.Vp;
    if (target < 0) {
        if (threadIdx.x == 0) a.losses[i] = 0;
        for (int j = threadIdx.x; j < a.Vp && a.dloss != 0; j += THREADS) row[j] = 0;
        return;
    }
    float m = -INFINITY, sum = 0;
    for (int j = threadIdx.x; j < a.V; j += THREADS) m = fmaxf(m, row[j]);
    m = block_reduce<true>(m, shared);
    for (int j = threadIdx.x; j < a.V; j += THREADS) sum += km_exp_shifted(row[j], m);
    sum = block_reduce<false>(sum, shared);
    const float target_logit = row[target];
    __syncthreads(); /* every thread has read the target's logit before it is overwritten */
    if (threadIdx.x == 0) a.losses[i] = km_xent_loss(sum, target_logit, m);
    if (a.dloss == 0) return;
    const float s = a.dloss / sum;
    for (int j = threadIdx.x; j < a.Vp; j += THREADS)
        row[j] = j < a.V ? km_exp_shifted(row[j], m) * s - (j == target ? a.dloss : 0.0f) : 0.0f;
}

/* All the segments in one launch: a block finds its first segment once, each thread walks on from it. */
__global__ static void adamw_kernel(AdamWArgs a) {
    __shared__ int first;
    const size_t start = (size_t)blockIdx.x * blockDim.x, i = start + threadIdx.x;
    if (threadIdx.x == 0) first = km_adamw_segment_of(&a, start);
    __syncthreads();
    if (i < a.n) km_adamw_element(&a, km_adamw_walk(&a, first, i), i);
}

/* One block per tensor, double partial sums in a fixed tree. */
__global__ static void sum_of_squares_kernel(SumSquaresArgs a) {
    __shared__ double shared[THREADS];
    const int t = blockIdx.x;
    double s = 0;
    for (int64_t i = a.offsets[t] + threadIdx.x; i < a.offsets[t + 1]; i += THREADS) s += (double)a.x[i] * a.x[i];
    shared[threadIdx.x] = s;
    __syncthreads();
    for (int o = THREADS / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) shared[threadIdx.x] += shared[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) a.sums[t] = shared[0];
}

/* The flag is an integer OR: any order gives the same answer. */
__global__ static void nonfinite_kernel(NonfiniteArgs a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n && km_nonfinite(a.x[i])) atomicOr(a.flag, 1);
}

__global__ static void bias_backward_kernel(float *dbias, const float *dout, int N, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < OC) km_bias_column(dbias, dout, N, OC, c);
}

cudaError_t cuda_bias_backward(float *dbias, const float *dout, int N, int OC, cudaStream_t stream) {
    bias_backward_kernel<<<blocks_for((size_t)OC), THREADS, 0, stream>>>(dbias, dout, N, OC);
    return cudaGetLastError();
}

static void launch_layernorm(DeviceKernel k, const LayernormArgs &a, cudaStream_t stream) {
    const unsigned rows = blocks_for((size_t)a.N * WARP);
    if (k == DK_LAYERNORM_FORWARD) {
        layernorm_forward_kernel<<<rows, THREADS, 0, stream>>>(a);
        return;
    }
    if (a.dinp) layernorm_backward_input_kernel<<<rows, THREADS, 0, stream>>>(a);
    if (a.dweight) layernorm_backward_params_kernel<<<blocks_for((size_t)a.C), THREADS, 0, stream>>>(a);
}

static void launch_attention(DeviceKernel k, const AttentionArgs &a, cudaStream_t stream) {
    const unsigned rows = blocks_for((size_t)a.B * a.H * a.T);
    if (k == DK_ATTENTION_FORWARD) {
        attention_kernel<<<rows, THREADS, 0, stream>>>(a, 0);
        return;
    }
    attention_kernel<<<rows, THREADS, 0, stream>>>(a, 1);
    attention_kernel<<<rows, THREADS, 0, stream>>>(a, 2);
}

__global__ static void bf16_round_kernel(Bf16RoundArgs a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) km_bf16_round_element(&a, i);
}

__global__ static void bf16_widen_kernel(Bf16WidenArgs a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) km_bf16_widen_element(&a, i);
}

cudaError_t cuda_launch_kernel(const DeviceCall *call, cudaStream_t stream) {
    const DeviceKernel k = call->kernel;
    switch (k) {
    case DK_ENCODER_FORWARD:
        encoder_forward_kernel<<<blocks_for((size_t)call->a.encoder.B * call->a.encoder.T * call->a.encoder.C),
                                 THREADS, 0, stream>>>(call->a.encoder);
        break;
    case DK_ENCODER_BACKWARD:
        encoder_backward_kernel<<<blocks_for((size_t)call->a.encoder.C), THREADS, 0, stream>>>(call->a.encoder);
        break;
    case DK_LAYERNORM_FORWARD:
    case DK_LAYERNORM_BACKWARD: launch_layernorm(k, call->a.layernorm, stream); break;
    case DK_GELU_FORWARD:
    case DK_GELU_BACKWARD:
    case DK_RESIDUAL_FORWARD:
        elementwise_kernel<<<blocks_for(call->a.elementwise.n), THREADS, 0, stream>>>(k, call->a.elementwise);
        break;
    case DK_ATTENTION_FORWARD:
    case DK_ATTENTION_BACKWARD: launch_attention(k, call->a.attention, stream); break;
    case DK_SOFTMAX_XENT: softmax_xent_kernel<<<call->a.xent.N, THREADS, 0, stream>>>(call->a.xent); break;
    case DK_ADAMW: adamw_kernel<<<blocks_for(call->a.adamw.n), THREADS, 0, stream>>>(call->a.adamw); break;
    case DK_SUM_OF_SQUARES:
        sum_of_squares_kernel<<<call->a.sumsq.tensors, THREADS, 0, stream>>>(call->a.sumsq);
        break;
    case DK_NONFINITE: {
        cudaError_t e = cudaMemsetAsync(call->a.nonfinite.flag, 0, sizeof(int32_t), stream);
        if (e != cudaSuccess) return e;
        if (call->a.nonfinite.n)
            nonfinite_kernel<<<blocks_for(call->a.nonfinite.n), THREADS, 0, stream>>>(call->a.nonfinite);
        break;
    }
    case DK_FLASH_FORWARD:
    case DK_FLASH_BACKWARD:
    case DK_FLASH_MERGE: return cuda_flash_launch(call, stream);
    case DK_CLASSIFIER: return cuda_classifier(&call->a.xent, stream);
    case DK_MOE_ROUTE:
    case DK_MOE_DISPATCH:
    case DK_MOE_COMBINE:
    case DK_MOE_COMBINE_BACKWARD:
    case DK_MOE_ROUTER_BACKWARD:
    case DK_MOE_SCATTER_BACKWARD: return cuda_moe_launch(call, stream);
    case DK_FP8_QUANTIZE:
    case DK_FP8_PRODUCT: return cuda_fp8_launch(call, stream);
    case DK_BF16_ROUND:
        if (call->a.round.n) bf16_round_kernel<<<blocks_for(call->a.round.n), THREADS, 0, stream>>>(call->a.round);
        break;
    case DK_BF16_WIDEN:
        if (call->a.widen.n) bf16_widen_kernel<<<blocks_for(call->a.widen.n), THREADS, 0, stream>>>(call->a.widen);
        break;
    case DK_RESIDUAL_LAYERNORM_FORWARD:
        residual_layernorm_kernel<<<blocks_for((size_t)call->a.residual_ln.ln.N * WARP), THREADS, 0, stream>>>(
            call->a.residual_ln);
        break;
    default: return cudaErrorInvalidValue; /* the matmuls go through cuBLASLt (device_cuda.cu) */
    }
    return cudaGetLastError();
}
