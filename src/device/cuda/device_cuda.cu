/* device_cuda.cu: the device seam on an NVIDIA GPU (device.h): cudart
 * memory, streams and events, the kernels of cuda_kernels.cu, and the linear
 * layers through cuBLASLt (fp32 with TF32 off: CUBLAS_COMPUTE_32F; or bf16
 * operands with fp32 accumulation and output; or FP8 codes with their
 * scales, cuda_lt_fp8_product, for fp8_linear.cu). Row-major (rows, cols) is
 * column-major (cols, rows), so out (N,OC) = inp weight^T is
 * out^T = weight^T' inp^T with weight transposed: m = OC, n = N, k = IC. Any
 * cudart error while opening means "no GPU" (a machine with the toolkit but
 * no driver reports an insufficient driver). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "device/cuda/cublaslt_api.h"
#include "device/cuda/cuda_kernels.h"
#include "device/device_impl.h"
#include "device/fp8_math.h"

enum { LT_WORKSPACE = 32 << 20 };

typedef struct {
    Device base;
    CublasLtApi api; /* loaded when the device opens (cublaslt_api.h) */
    cublasLtHandle_t lt;
    void *workspace;
    CudaFp8 *fp8; /* the FP8 layer's buffers (fp8_linear.cu), made at first use */
} CudaDevice;

static CudaDevice *cuda(Device *d) { return (CudaDevice *)d; }

static int check(Device *d, cudaError_t e, const char *what) {
    return e == cudaSuccess ? 0 : device_fail(d, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static int check_lt(Device *d, cublasStatus_t s, const char *what) {
    return s == CUBLAS_STATUS_SUCCESS ? 0 : device_fail(d, "cuBLASLt: %s: status %d", what, (int)s);
}

static void *cuda_alloc(Device *d, size_t n) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 1);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        device_fail(d, "out of GPU memory: %zu bytes asked for, %zu of %zu free", n, free_bytes, total);
        return NULL;
    }
    if (check(d, e, "cudaMalloc")) return NULL;
    size_t free_bytes = 0, total = 0; /* device_memory_peak: the whole GPU's use, the context included */
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && total - free_bytes > d->memory_peak)
        d->memory_peak = total - free_bytes;
    return p;
}

static void cuda_free(Device *d, void *p) { check(d, cudaFree(p), "cudaFree"); }

static DeviceStream *cuda_stream_create(Device *d) {
    cudaStream_t s = NULL;
    return check(d, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ? NULL
                                                                                                : (DeviceStream *)s;
}

static void cuda_stream_destroy(Device *d, DeviceStream *s) {
    check(d, cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
}

static DeviceEvent *cuda_event_create(Device *d) {
    cudaEvent_t e = NULL;
    return check(d, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate") ? NULL
                                                                                              : (DeviceEvent *)e;
}

static void cuda_event_destroy(Device *d, DeviceEvent *e) {
    check(d, cudaEventDestroy((cudaEvent_t)e), "cudaEventDestroy");
}

static int cuda_copy(Device *d, DeviceStream *s, void *dst, const void *src, size_t n, DeviceCopyKind kind) {
    cudaMemcpyKind k = kind == COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                       : kind == COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                     : cudaMemcpyDeviceToDevice;
    return check(d, cudaMemcpyAsync(dst, src, n, k, (cudaStream_t)s), "cudaMemcpyAsync");
}

static int cuda_zero(Device *d, DeviceStream *s, void *p, size_t n) {
    return check(d, cudaMemsetAsync(p, 0, n, (cudaStream_t)s), "cudaMemsetAsync");
}

static int cuda_event_record(Device *d, DeviceStream *s, DeviceEvent *e) {
    return check(d, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
}

static int cuda_stream_wait(Device *d, DeviceStream *s, DeviceEvent *e) {
    return check(d, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
}

/* One cuBLASLt product D (m,n) = alpha op(A) op(B) + beta D, column-major,
 * A (lda) and B (ldb) of type ab, D fp32; bias (m) added when not NULL.
 * lt_matmul returns 0, -1 on an error, -2 where cuBLASLt has no algorithm. */
typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb;
    const void *A, *B;
    float *D, beta;
    const float *bias;
    cudaDataType_t ab;
    float *pre_gelu; /* GELU epilogue: D = gelu(product + bias), the argument here (ld m); NULL: none */
} LtProduct;

/* An FP8 product's extras: B's type (A's is the product's ab), the scales by pointer and how they are read. */
typedef struct {
    cudaDataType_t b_type;
    const float *a_scale, *b_scale;
    int32_t a_mode, b_mode;
} LtFp8;

static int lt_layouts(Device *d, const LtProduct *p, cudaDataType_t b_type, cublasLtMatrixLayout_t l[3]) {
    int rows_a = p->ta == CUBLAS_OP_N ? p->m : p->k, cols_a = p->ta == CUBLAS_OP_N ? p->k : p->m;
    int rows_b = p->tb == CUBLAS_OP_N ? p->k : p->n, cols_b = p->tb == CUBLAS_OP_N ? p->n : p->k;
    if (check_lt(d, cuda(d)->api.MatrixLayoutCreate(&l[0], p->ab, rows_a, cols_a, p->lda), "layout A")) return -1;
    if (check_lt(d, cuda(d)->api.MatrixLayoutCreate(&l[1], b_type, rows_b, cols_b, p->ldb), "layout B")) return -1;
    return check_lt(d, cuda(d)->api.MatrixLayoutCreate(&l[2], CUDA_R_32F, p->m, p->n, p->m), "layout D");
}

/* A pointer's alignment in bytes, at most 256 (cuBLASLt assumes 256 unless told:
 * tensors at flat-buffer offsets may be less aligned). */
static uint32_t alignment(const void *p) {
    uintptr_t a = (uintptr_t)p & (~(uintptr_t)p + 1);
    return a == 0 || a > 256 ? 256u : (uint32_t)a;
}

static int lt_alignments(Device *d, cublasLtMatmulPreference_t pref, const LtProduct *p) {
    const cublasLtMatmulPreferenceAttributes_t attr[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t align[] = {alignment(p->A), alignment(p->B), alignment(p->D), alignment(p->D)};
    for (int i = 0; i < 4; i++)
        if (check_lt(d, cuda(d)->api.MatmulPreferenceSetAttribute(pref, attr[i], &align[i], sizeof align[i]), "alignment"))
            return -1;
    return 0;
}

/* FP8: fast accumulation off (partial sums promoted to fp32), the scales; a scale mode this cuBLASLt lacks is
 * "no algorithm" (-2). */
static int lt_fp8_attributes(Device *d, cublasLtMatmulDesc_t desc, const LtFp8 *f) {
    const CublasLtApi *api = &cuda(d)->api;
    const int8_t fast = 0;
    if (check_lt(d, api->MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), "fast accumulation") ||
        check_lt(d, api->MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &f->a_scale, sizeof f->a_scale), "A scale") ||
        check_lt(d, api->MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &f->b_scale, sizeof f->b_scale), "B scale"))
        return -1;
    if (check_lt(d, api->MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &f->a_mode, sizeof f->a_mode), "A scale mode") ||
        check_lt(d, api->MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &f->b_mode, sizeof f->b_mode), "B scale mode"))
        return -2;
    return 0;
}

static int lt_matmul_with(Device *d, const LtProduct *p, const LtFp8 *fp8, cudaStream_t stream) {
    CudaDevice *cd = cuda(d);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t l[3] = {NULL, NULL, NULL};
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t algo;
    int found = 0, rc = check_lt(d, cuda(d)->api.MatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    size_t ws = LT_WORKSPACE;
    /* split-K may reduce in the workspace, never in place in the output (a fixed order) */
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    cublasLtEpilogue_t epi = p->pre_gelu ? (p->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                             : p->bias  ? CUBLASLT_EPILOGUE_BIAS
                                        : CUBLASLT_EPILOGUE_DEFAULT;
    const int64_t aux_ld = p->m;
    if (!rc) rc = check_lt(d, cuda(d)->api.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p->ta, sizeof p->ta), "transa");
    if (!rc) rc = check_lt(d, cuda(d)->api.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p->tb, sizeof p->tb), "transb");
    if (!rc) rc = check_lt(d, cuda(d)->api.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
    if (!rc && p->bias)
        rc = check_lt(d, cuda(d)->api.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias), "bias");
    if (!rc && p->pre_gelu)
        rc = check_lt(d, cuda(d)->api.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p->pre_gelu, sizeof p->pre_gelu), "aux");
    if (!rc && p->pre_gelu)
        rc = check_lt(d, cuda(d)->api.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld), "aux ld");
    if (!rc && fp8) rc = lt_fp8_attributes(d, desc, fp8);
    if (!rc) rc = lt_layouts(d, p, fp8 ? fp8->b_type : p->ab, l);
    if (!rc) rc = check_lt(d, cuda(d)->api.MatmulPreferenceCreate(&pref), "preference");
    if (!rc) rc = check_lt(d, cuda(d)->api.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace");
    if (!rc) rc = check_lt(d, cuda(d)->api.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes), "reduction");
    if (!rc) rc = lt_alignments(d, pref, p);
    if (!rc) {
        const cublasStatus_t h = cuda(d)->api.MatmulAlgoGetHeuristic(cd->lt, desc, l[0], l[1], l[2], l[2], pref, 1, &algo, &found);
        if (fp8 && h == CUBLAS_STATUS_NOT_SUPPORTED) found = 0; /* FP8: no algorithm, as found == 0 */
        else rc = check_lt(d, h, "heuristic");
    }
    if (!rc && found == 0)
        rc = device_fail(d, "cuBLASLt: no algorithm for a %d x %d x %d product", p->m, p->n, p->k) - 1; /* -2 */
    const float alpha = 1.0f;
    if (!rc)
        rc = check_lt(d, cuda(d)->api.Matmul(cd->lt, desc, &alpha, p->A, l[0], p->B, l[1], &p->beta, p->D, l[2], p->D, l[2],
                                        &algo.algo, cd->workspace, ws, stream), "matmul");
    if (pref) cuda(d)->api.MatmulPreferenceDestroy(pref);
    for (int i = 0; i < 3; i++)
        if (l[i]) cuda(d)->api.MatrixLayoutDestroy(l[i]);
    if (desc) cuda(d)->api.MatmulDescDestroy(desc);
    return rc;
}

static int lt_matmul(Device *d, const LtProduct *p, cudaStream_t stream) { return lt_matmul_with(d, p, NULL, stream); }

static cublasLtMatmulMatrixScale_t lt_scale_mode(const DeviceFp8Layout *l) {
    const FmTiling t = fm_tiling(l);
    if (!t.blocks) return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    return fm_grid(&t).vector ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

/* out (m,n) column-major = A^T B with A (k,m) and B (k,n) column-major: the codes as fp8_gemm.h lays them out
 * ("TN", the one layout Hopper's FP8 GEMMs take), fp32 accumulation and output. FP8 tensor cores need compute
 * capability 8.9 or newer: on an older GPU there is no algorithm (-2). */
int cuda_lt_fp8_product(Device *d, const Fp8ProductArgs *p, cudaStream_t s) {
    int dev = 0, major = 0, minor = 0;
    if (check(d, cudaGetDevice(&dev), "cudaGetDevice") ||
        check(d, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute") ||
        check(d, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute"))
        return -1;
    if (major * 10 + minor < 89)
        return device_fail(d, "FP8 GEMMs need compute capability 8.9 or newer (this GPU is %d.%d)", major, minor) - 1;
    const cudaDataType_t a_type = p->la.e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    const LtFp8 f = {p->lb.e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, p->a_scale_inv, p->b_scale_inv,
                     (int32_t)lt_scale_mode(&p->la), (int32_t)lt_scale_mode(&p->lb)};
    LtProduct q = {CUBLAS_OP_T, CUBLAS_OP_N, p->m, p->n, p->k, p->k, p->k, p->a, p->b, p->out, p->beta, NULL, a_type, NULL};
    return lt_matmul_with(d, &q, &f, s);
}

/* With pre_gelu, cuBLASLt's GELU epilogue where its auxiliary output's leading dimension allows (a multiple of 8)
 * and cuBLASLt has an algorithm for it, else the product into pre_gelu and the GELU kernel after it. */
static int cuda_matmul_forward(Device *d, const MatmulArgs *a, cudaStream_t s) {
    const int bf16 = a->inp_bf16 != NULL;
    LtProduct p = {CUBLAS_OP_T, CUBLAS_OP_N, a->OC, a->N, a->IC, a->IC, a->IC,
                   bf16 ? (const void *)a->weight_bf16 : (const void *)a->weight,
                   bf16 ? (const void *)a->inp_bf16 : (const void *)a->inp, a->out, 0.0f, a->bias,
                   bf16 ? CUDA_R_16BF : CUDA_R_32F, NULL};
    if (a->pre_gelu && a->OC % 8 == 0) {
        p.pre_gelu = a->pre_gelu;
        const int rc = lt_matmul(d, &p, s);
        if (rc != -2) return rc ? -1 : 0;
        p.pre_gelu = NULL; /* no algorithm with the epilogue: the product, then the GELU kernel */
    }
    if (!a->pre_gelu) return lt_matmul(d, &p, s) ? -1 : 0;
    p.D = a->pre_gelu;
    if (lt_matmul(d, &p, s)) return -1;
    DeviceCall gelu;
    gelu.kernel = DK_GELU_FORWARD;
    gelu.a.elementwise = ElementwiseArgs{a->out, a->pre_gelu, NULL, (size_t)a->N * a->OC};
    return check(d, cuda_launch_kernel(&gelu, s), "gelu");
}

/* dinp^T (IC,N) = weight^T (IC,OC) dout^T (OC,N); dweight^T (IC,OC) += inp^T (IC,N) dout (N,OC); with
 * dout_bf16 the products take the bf16 operands (fp32 accumulation) */
static int cuda_matmul_backward(Device *d, const MatmulArgs *a, cudaStream_t s) {
    const int bf16 = a->dout_bf16 != NULL;
    const void *weight = bf16 ? (const void *)a->weight_bf16 : (const void *)a->weight;
    const void *inp = bf16 ? (const void *)a->inp_bf16 : (const void *)a->inp;
    const void *dout = bf16 ? (const void *)a->dout_bf16 : (const void *)a->dout;
    const cudaDataType_t ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (a->dinp) {
        LtProduct p = {CUBLAS_OP_N, CUBLAS_OP_N, a->IC, a->N, a->OC, a->IC, a->OC, weight, dout, a->dinp, 0.0f, NULL, ab, NULL};
        if (lt_matmul(d, &p, s)) return -1;
    }
    if (a->dweight) {
        LtProduct p = {CUBLAS_OP_N, CUBLAS_OP_T, a->IC, a->OC, a->N, a->IC, a->OC, inp, dout, a->dweight, 1.0f, NULL, ab, NULL};
        if (lt_matmul(d, &p, s)) return -1;
    }
    return a->dbias ? check(d, cuda_bias_backward(a->dbias, a->dout, a->N, a->OC, s), "bias backward") : 0;
}

static int cuda_launch(Device *d, DeviceStream *s, const DeviceCall *call) {
    cudaStream_t stream = (cudaStream_t)s;
    if (call->kernel == DK_FP8_LINEAR_FORWARD || call->kernel == DK_FP8_LINEAR_BACKWARD)
        return cuda_fp8_linear(d, &cuda(d)->fp8, call, stream);
    if (call->kernel == DK_MATMUL_FORWARD) return cuda_matmul_forward(d, &call->a.matmul, stream);
    if (call->kernel == DK_MATMUL_BACKWARD) return cuda_matmul_backward(d, &call->a.matmul, stream);
    return check(d, cuda_launch_kernel(call, stream), "kernel launch");
}

static int cuda_stream_sync(Device *d, DeviceStream *s) {
    return check(d, cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
}

static int cuda_sync(Device *d) { return check(d, cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

static void *cuda_host_alloc(Device *d, size_t n) {
    void *p = NULL;
    return check(d, cudaMallocHost(&p, n ? n : 1), "cudaMallocHost") ? NULL : p;
}

static void cuda_host_free(Device *d, void *p) { check(d, cudaFreeHost(p), "cudaFreeHost"); }

static void *cuda_native_stream(Device *d, DeviceStream *s) {
    (void)d;
    return (void *)s;
}

static int cuda_event_done(Device *d, DeviceEvent *e) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaErrorNotReady) return 0;
    return check(d, r, "cudaEventQuery") ? -1 : 1;
}

static int cuda_gpu_count(Device *d) {
    int count = 0;
    return check(d, cudaGetDeviceCount(&count), "cudaGetDeviceCount") ? 0 : count;
}

static void cuda_close(Device *d) {
    CudaDevice *cd = cuda(d);
    cudaDeviceSynchronize();
    cuda_fp8_free(cd->fp8);
    cudaFree(cd->workspace);
    cd->api.Destroy(cd->lt);
    dlclose(cd->api.library);
    free(cd);
}

static const DeviceOps cuda_ops = {
    "cuda",         cuda_close,        cuda_alloc,        cuda_free,       cuda_stream_create,
    cuda_stream_destroy, cuda_event_create, cuda_event_destroy, cuda_copy, cuda_zero, cuda_event_record,
    cuda_stream_wait,    cuda_launch,       cuda_stream_sync,   cuda_sync,
    cuda_host_alloc,     cuda_host_free,    cuda_native_stream, cuda_event_done, cuda_gpu_count,
    cuda_capture_begin,  cuda_capture_end,  cuda_graph_launch,  cuda_graph_free,
};

extern "C" Device *device_cuda_open(int gpu, char *reason, size_t reason_size) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(reason, reason_size, "no CUDA GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return NULL;
    }
    if ((e = cudaSetDevice((gpu % count + count) % count)) != cudaSuccess) {
        snprintf(reason, reason_size, "cannot use GPU %d of %d: %s", (gpu % count + count) % count, count,
                 cudaGetErrorString(e));
        return NULL;
    }
    CudaDevice *cd = (CudaDevice *)calloc(1, sizeof *cd);
    if (!cd) {
        snprintf(reason, reason_size, "out of host memory");
        return NULL;
    }
    cd->base.ops = &cuda_ops;
    if (!cublaslt_load(&cd->api, reason, reason_size)) {
        free(cd);
        return NULL;
    }
    if ((e = cudaMalloc(&cd->workspace, LT_WORKSPACE)) != cudaSuccess || cd->api.Create(&cd->lt) != CUBLAS_STATUS_SUCCESS) {
        snprintf(reason, reason_size, "no usable CUDA GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "cublasLtCreate failed");
        cudaFree(cd->workspace);
        dlclose(cd->api.library);
        free(cd);
        return NULL;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, (gpu % count + count) % count) == cudaSuccess) {
        snprintf(cd->base.info.name, sizeof cd->base.info.name, "%.95s", prop.name);
        cd->base.info.memory_bytes = prop.totalGlobalMem;
        cd->base.info.multiprocessors = prop.multiProcessorCount;
    }
    return &cd->base;
}

#define BS_STR2(x) #x
#define BS_STR(x) BS_STR2(x)
extern "C" const char *device_cuda_build_info(void) {
    return "built in (sm_80, sm_90a; CUDA " BS_STR(__CUDACC_VER_MAJOR__) "." BS_STR(__CUDACC_VER_MINOR__) ")";
}
