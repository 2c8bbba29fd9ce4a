/* fp8_linear.cu: the FP8 linear layer on an NVIDIA GPU (DK_FP8_LINEAR_*):
 * device/fp8_gemm.h's plan, each product's two operands quantized by
 * DK_FP8_QUANTIZE into two slots of codes and scales (grown on demand, kept
 * between calls; the stream orders their reuse), then cuBLASLt's FP8 GEMM
 * (cuda_lt_fp8_product) or, where cuBLASLt has no algorithm for the
 * product, the plain DK_FP8_PRODUCT on the same codes and scales. Which of
 * the two ran is said in one line the first time each runs for each recipe. */
#include <stdlib.h>

#include "device/cuda/cuda_kernels.h"
#include "device/device_impl.h"
#include "device/fp8_gemm.h"

extern "C" {
#include "core/error.h"
}

struct CudaFp8 {
    uint8_t *codes[2];
    float *scales[2];
    size_t code_bytes[2], scale_floats[2];
    bool said[2][2]; /* [blocks][plain]: that path's line printed */
};

void cuda_fp8_free(CudaFp8 *f) {
    if (!f) return;
    for (int i = 0; i < 2; i++) cudaFree(f->codes[i]), cudaFree(f->scales[i]);
    free(f);
}

/* A slot's buffers at least as large as the operand's (cudaFree waits for the work that used the old ones). */
static int fp8_slot(Device *d, CudaFp8 *f, int slot, const DeviceFp8Layout *l) {
    const size_t bytes = fp8_codes_bytes(l), floats = fp8_scale_floats(l);
    cudaError_t e = cudaSuccess;
    if (bytes > f->code_bytes[slot]) {
        cudaFree(f->codes[slot]);
        f->codes[slot] = NULL;
        f->code_bytes[slot] = (e = cudaMalloc(&f->codes[slot], bytes)) == cudaSuccess ? bytes : 0;
    }
    if (e == cudaSuccess && floats > f->scale_floats[slot]) {
        cudaFree(f->scales[slot]);
        f->scales[slot] = NULL;
        f->scale_floats[slot] = (e = cudaMalloc(&f->scales[slot], sizeof(float) * floats)) == cudaSuccess ? floats : 0;
    }
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    return device_fail(d, "FP8 operand buffers (%zu bytes): %s", bytes, cudaGetErrorString(e));
}

static int fp8_launch(Device *d, const DeviceCall *call, cudaStream_t s, const char *what) {
    const cudaError_t e = cuda_fp8_launch(call, s);
    return e == cudaSuccess ? 0 : device_fail(d, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static void say_path(CudaFp8 *f, int blocks, int plain, const char *why) {
    if (f->said[blocks][plain]) return;
    f->said[blocks][plain] = true;
    if (plain)
        bs_warn("FP8 products (%s scales): the plain fp32 kernel on the FP8 codes (%s)", blocks ? "block" : "per-tensor", why);
    else
        bs_warn("FP8 products (%s scales): cuBLASLt FP8 GEMMs", blocks ? "block" : "per-tensor");
}

/* One product: its operands quantized, then cuBLASLt's GEMM or the plain product, then the bias. */
static int fp8_gemm_run(Device *d, CudaFp8 *f, Fp8Gemm *g, cudaStream_t s) {
    if (fp8_slot(d, f, 0, &g->qa.layout) || fp8_slot(d, f, 1, &g->qb.layout)) return -1;
    fp8_gemm_bind(g, f->codes, f->scales);
    DeviceCall qa, qb, product;
    qa.kernel = qb.kernel = DK_FP8_QUANTIZE;
    qa.a.fp8_quantize = g->qa;
    qb.a.fp8_quantize = g->qb;
    if (fp8_launch(d, &qa, s, "FP8 quantize") || fp8_launch(d, &qb, s, "FP8 quantize")) return -1;
    const int blocks = g->qa.layout.block_rows > 0;
    const int rc = cuda_lt_fp8_product(d, &g->product, s);
    if (rc == -1) return -1;
    if (rc == 0) {
        say_path(f, blocks, 0, NULL);
        if (!g->product.bias) return 0;
        const cudaError_t e = cuda_fp8_add_bias(g->product.out, g->product.bias, g->product.m, g->product.n, s);
        return e == cudaSuccess ? 0 : device_fail(d, "cuda: FP8 bias: %s", cudaGetErrorString(e));
    }
    say_path(f, blocks, 1, device_error(d)); /* rc -2: no algorithm, the reason in device_error */
    product.kernel = DK_FP8_PRODUCT;
    product.a.fp8_product = g->product;
    return fp8_launch(d, &product, s, "FP8 product");
}

int cuda_fp8_linear(Device *d, CudaFp8 **state, const DeviceCall *call, cudaStream_t s) {
    if (!*state && !(*state = (CudaFp8 *)calloc(1, sizeof(CudaFp8)))) return device_fail(d, "out of host memory");
    const Fp8LinearArgs *a = &call->a.fp8;
    const int forward = call->kernel == DK_FP8_LINEAR_FORWARD;
    if (!forward && a->dbias && cuda_bias_backward(a->dbias, a->dout, a->N, a->OC, s) != cudaSuccess)
        return device_fail(d, "cuda: FP8 bias backward: %s", cudaGetErrorString(cudaGetLastError()));
    Fp8Gemm gemms[2];
    const int count = fp8_gemm_plan(a, forward, gemms);
    for (int i = 0; i < count; i++)
        if (fp8_gemm_run(d, *state, &gemms[i], s)) return -1;
    return 0;
}
