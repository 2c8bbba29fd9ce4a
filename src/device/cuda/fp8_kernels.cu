/* fp8_kernels.cu: the FP8 kernels on an NVIDIA GPU: DK_FP8_QUANTIZE (one
 * thread block per tile: the tile's amax reduced, its power-of-two scale or
 * the tensor's, its codes written in the layout the product reads, its
 * counts reduced and added to the statistics with integer atomics and an
 * atomic max, so the result is the same whatever order blocks run in),
 * DK_FP8_PRODUCT (the plain fp32 product: one thread per output) and the
 * forward's bias. The arithmetic is fp8_math.h's, shared with sim. */
#include "device/cuda/cuda_kernels.h"
#include "device/fp8_math.h"

enum { FP8_THREADS = 256, PRODUCT_SIDE = 16 };

static unsigned fp8_blocks_for(size_t n) { return (unsigned)((n + FP8_THREADS - 1) / FP8_THREADS); }

__device__ static float fp8_source(const Fp8QuantizeArgs &a, size_t i) {
    return a.src_bf16 ? km_bf16_to_float(a.src_bf16[i]) : a.src[i];
}

/* The block's max of x (a fixed tree; shared[FP8_THREADS] scratch). */
__device__ static float fp8_block_max(float x, float *shared) {
    shared[threadIdx.x] = x;
    __syncthreads();
    for (int o = FP8_THREADS / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + o]);
        __syncthreads();
    }
    const float r = shared[0];
    __syncthreads();
    return r;
}

/* The block's sum of x (shared[FP8_THREADS] scratch). */
__device__ static unsigned long long fp8_block_count(unsigned long long x, unsigned long long *shared) {
    shared[threadIdx.x] = x;
    __syncthreads();
    for (int o = FP8_THREADS / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) shared[threadIdx.x] += shared[threadIdx.x + o];
        __syncthreads();
    }
    const unsigned long long r = shared[0];
    __syncthreads();
    return r;
}

__device__ static void fp8_add_counts(DeviceFp8Stats *st, const FmCounts &c, float *fshared,
                                      unsigned long long *ushared) {
    const unsigned long long nonzero = fp8_block_count(c.nonzero, ushared);
    const unsigned long long underflow = fp8_block_count(c.underflow, ushared);
    const unsigned long long overflow = fp8_block_count(c.overflow, ushared);
    const float amax = fp8_block_max(c.amax, fshared);
    if (threadIdx.x != 0) return;
    atomicAdd((unsigned long long *)&st->nonzero, nonzero);
    atomicAdd((unsigned long long *)&st->underflow, underflow);
    atomicAdd((unsigned long long *)&st->overflow, overflow);
    atomicMax((int *)&st->amax, __float_as_int(amax)); /* non-negative floats order as their bits */
}

__global__ static void fp8_quantize_kernel(Fp8QuantizeArgs a, FmTiling t, MiniFormat f) {
    __shared__ float fshared[FP8_THREADS];
    __shared__ unsigned long long ushared[FP8_THREADS];
    const int across = fm_tiles_across(&t);
    const size_t tr = blockIdx.x / (unsigned)across, tc = blockIdx.x % (unsigned)across;
    const int r0 = (int)tr * t.tile_rows, c0 = (int)tc * t.tile_cols;
    const int h = min(t.tile_rows, t.rows - r0), w = min(t.tile_cols, t.cols - c0), n = h * w;
    const float fmax = fm_max(a.layout.e5m2);
    float s = a.scale;
    if (t.blocks) {
        float amax = 0;
        for (int i = threadIdx.x; i < n; i += FP8_THREADS)
            amax = fmaxf(amax, fabsf(fp8_source(a, (size_t)(r0 + i / w) * t.cols + c0 + i % w)));
        s = fm_block_scale(fp8_block_max(amax, fshared), fmax);
    }
    FmCounts c = {0, 0, 0, 0.0f};
    for (int i = threadIdx.x; i < n; i += FP8_THREADS) {
        const int r = r0 + i / w, col = c0 + i % w;
        a.codes[fm_code_index(&t, r, col)] = fm_quantize(fp8_source(a, (size_t)r * t.cols + col), s, fmax, &f, &c);
    }
    if (threadIdx.x == 0 && (t.blocks || blockIdx.x == 0)) a.scale_inv[fm_scale_index(&t, tr, tc)] = 1.0f / s;
    if (!a.stats) return;
    fp8_add_counts(a.stats, c, fshared, ushared);
    if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd((unsigned long long *)&a.stats->values, (unsigned long long)t.rows * t.cols);
}

__global__ static void fp8_product_kernel(Fp8ProductArgs p, MiniFormat fa, MiniFormat fb) {
    const int i = blockIdx.x * PRODUCT_SIDE + threadIdx.x, j = blockIdx.y * PRODUCT_SIDE + threadIdx.y;
    if (i < p.m && j < p.n) fm_product(&p, &fa, &fb, i, j);
}

__global__ static void fp8_bias_kernel(float *out, const float *bias, int m, size_t n) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) out[e] += bias[e % (size_t)m];
}

cudaError_t cuda_fp8_launch(const DeviceCall *call, cudaStream_t stream) {
    if (call->kernel == DK_FP8_QUANTIZE) {
        const Fp8QuantizeArgs &a = call->a.fp8_quantize;
        const FmTiling t = fm_tiling(&a.layout);
        const size_t tiles = t.rows > 0 && t.cols > 0 ? fm_tiles(&t) : 0;
        if (tiles) fp8_quantize_kernel<<<(unsigned)tiles, FP8_THREADS, 0, stream>>>(a, t, fm_format(a.layout.e5m2));
        return cudaGetLastError();
    }
    const Fp8ProductArgs &p = call->a.fp8_product;
    const dim3 grid((unsigned)(p.m + PRODUCT_SIDE - 1) / PRODUCT_SIDE, (unsigned)(p.n + PRODUCT_SIDE - 1) / PRODUCT_SIDE);
    if (p.m > 0 && p.n > 0)
        fp8_product_kernel<<<grid, dim3(PRODUCT_SIDE, PRODUCT_SIDE), 0, stream>>>(p, fm_format(p.la.e5m2), fm_format(p.lb.e5m2));
    return cudaGetLastError();
}

cudaError_t cuda_fp8_add_bias(float *out, const float *bias, int m, int n, cudaStream_t stream) {
    const size_t count = (size_t)m * n;
    if (count) fp8_bias_kernel<<<fp8_blocks_for(count), FP8_THREADS, 0, stream>>>(out, bias, m, count);
    return cudaGetLastError();
}
