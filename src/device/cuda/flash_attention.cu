/* flash_attention.cu: fused causal attention on an NVIDIA GPU
 * (FlashAttention-2's algorithm; the arithmetic is flash_math.h's, shared
 * with sim). How the work is cut: one thread block per (batch, head) and
 * tile of FLASH_TILE rows, one thread per row. Forward and dq: the block
 * stages each tile of keys and values in shared memory, and every thread
 * runs its query row over it. dk and dv: a second kernel, one thread per
 * key row, stages each tile of queries, output gradients, lse and D. Each
 * accumulator belongs to one thread and sums in a fixed order: no atomics,
 * the same bits every run. A tile no row of the block sees (above the
 * causal diagonal, before the documents) is skipped by the whole block. */
#include "device/cuda/cuda_kernels.h"
#include "device/flash_math.h"

/* rows [i0, i0 + n) of src (their channels of head h, `stride` floats apart) into dst (n, hs) */
__device__ static void stage_rows(float *dst, const float *src, size_t first, int stride, int n, int hs) {
    for (int e = threadIdx.x; e < n * hs; e += blockDim.x) dst[e] = src[first + (size_t)(e / hs) * stride + e % hs];
}

static __device__ int tile_len(int start, int rows) { return rows - start < FLASH_TILE ? rows - start : FLASH_TILE; }

/* WHICH 0: forward (out, lse); 1: dq. */
template <int WHICH>
__global__ static void flash_query_kernel(FlashArgs a) {
    __shared__ float kt[FLASH_TILE * FLASH_MAX_HEAD], vt[FLASH_TILE * FLASH_MAX_HEAD];
    const int i = blockIdx.x * FLASH_TILE + threadIdx.x, live = i < a.Tq;
    const FlashRow r = km_flash_row(&a, (int)blockIdx.y * a.Tq + (live ? i : 0), a.Tq);
    const float *q = a.q + km_flash_q_at(&a, r.b, r.h, r.i), *d = WHICH ? a.dout + km_flash_out_at(&a, r.b, r.h, r.i) : NULL;
    const float lse = WHICH ? a.lse[km_flash_lse_at(&a, r.b, r.h, r.i)] : 0.0f;
    const float D = WHICH && live ? km_flash_delta(&a, r.b, r.h, r.i) : 0.0f;
    FlashState st;
    km_flash_begin(&st, r.hs);
    for (int j0 = 0; j0 < a.Tk; j0 += FLASH_TILE) {
        const int n = tile_len(j0, a.Tk);
        if (!__syncthreads_or(live && km_flash_sees_tile(&a, r.b, r.i, j0, n))) continue;
        const size_t first = km_flash_kv_at(&a, r.b, r.h, j0);
        stage_rows(kt, a.k, first, a.kv_stride, n, r.hs);
        stage_rows(vt, a.v, first, a.kv_stride, n, r.hs);
        __syncthreads();
        if (live && WHICH == 0) km_flash_forward_tile(&a, &r, q, j0, n, kt, vt, r.hs, &st);
        if (live && WHICH == 1) km_flash_dq_tile(&a, &r, q, d, lse, D, j0, n, kt, vt, r.hs, st.acc);
        __syncthreads();
    }
    if (!live) return;
    if (WHICH == 0) km_flash_finish(&a, &r, &st);
    else km_flash_store(a.dq + km_flash_q_at(&a, r.b, r.h, r.i), st.acc, r.scale, r.hs, a.accumulate);
}

/* Whether any query of [i0, i0 + n) sees key j. */
__device__ static int seen_by_tile(const FlashArgs *a, int b, int i0, int n, int j) {
    for (int ii = 0; ii < n; ii++)
        if (km_flash_sees(a, b, i0 + ii, j)) return 1;
    return 0;
}

__global__ static void flash_dkv_kernel(FlashArgs a) {
    __shared__ float qt[FLASH_TILE * FLASH_MAX_HEAD], dt[FLASH_TILE * FLASH_MAX_HEAD], lse[FLASH_TILE], D[FLASH_TILE];
    const int j = blockIdx.x * FLASH_TILE + threadIdx.x, live = j < a.Tk;
    const FlashRow r = km_flash_row(&a, (int)blockIdx.y * a.Tk + (live ? j : 0), a.Tk);
    const size_t at = km_flash_kv_at(&a, r.b, r.h, r.i);
    float dk[FLASH_MAX_HEAD], dv[FLASH_MAX_HEAD];
    for (int c = 0; c < r.hs; c++) dk[c] = dv[c] = 0;
    for (int i0 = 0; i0 < a.Tq; i0 += FLASH_TILE) {
        const int n = tile_len(i0, a.Tq), ii = threadIdx.x;
        if (!__syncthreads_or(live && seen_by_tile(&a, r.b, i0, n, r.i))) continue;
        stage_rows(qt, a.q, km_flash_q_at(&a, r.b, r.h, i0), a.q_stride, n, r.hs);
        stage_rows(dt, a.dout, km_flash_out_at(&a, r.b, r.h, i0), a.C, n, r.hs);
        if (ii < n) {
            lse[ii] = a.lse[km_flash_lse_at(&a, r.b, r.h, i0 + ii)];
            D[ii] = km_flash_delta(&a, r.b, r.h, i0 + ii);
        }
        __syncthreads();
        if (live) km_flash_dkv_tile(&a, &r, a.k + at, a.v + at, i0, n, qt, r.hs, dt, r.hs, lse, D, dk, dv);
        __syncthreads();
    }
    if (!live) return;
    km_flash_store(a.dk + at, dk, r.scale, r.hs, a.accumulate);
    km_flash_store(a.dv + at, dv, 1.0f, r.hs, a.accumulate);
}

__global__ static void flash_merge_kernel(FlashMergeArgs a) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < a.B * a.H * a.T) km_flash_merge_row(&a, idx);
}

static unsigned tiles(int rows) { return (unsigned)((rows + FLASH_TILE - 1) / FLASH_TILE); }

cudaError_t cuda_flash_launch(const DeviceCall *call, cudaStream_t stream) {
    const FlashArgs &a = call->a.flash;
    if (call->kernel == DK_FLASH_MERGE) {
        const FlashMergeArgs &m = call->a.flash_merge;
        flash_merge_kernel<<<(unsigned)((m.B * m.H * m.T + 255) / 256), 256, 0, stream>>>(m);
        return cudaGetLastError();
    }
    if (a.C / a.H > FLASH_MAX_HEAD) return cudaErrorInvalidValue;
    const dim3 queries(tiles(a.Tq), (unsigned)(a.B * a.H)), keys(tiles(a.Tk), (unsigned)(a.B * a.H));
    if (call->kernel == DK_FLASH_FORWARD) {
        flash_query_kernel<0><<<queries, FLASH_TILE, 0, stream>>>(a);
        return cudaGetLastError();
    }
    flash_query_kernel<1><<<queries, FLASH_TILE, 0, stream>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    flash_dkv_kernel<<<keys, FLASH_TILE, 0, stream>>>(a);
    return cudaGetLastError();
}
