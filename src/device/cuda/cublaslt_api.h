/* cublaslt_api.h: the cuBLASLt functions the CUDA device calls, loaded with
 * dlopen when a CUDA device opens, not linked: linking libcublasLt (and
 * relocating it at start-up) cost every process, CPU runs included, about
 * 210 MB of resident memory. cudart is linked statically for the same
 * reason. A missing library is a reason, as a missing GPU is. */
#ifndef BS_DEVICE_CUDA_CUBLASLT_API_H
#define BS_DEVICE_CUDA_CUBLASLT_API_H

#include <cublasLt.h>
#include <cublas_api.h>

#include "core/dynamic_library.h"

typedef struct {
    void *library;
    decltype(&cublasLtCreate) Create;
    decltype(&cublasLtDestroy) Destroy;
    decltype(&cublasLtMatmul) Matmul;
    decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
    decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
    decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
    decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
    decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
    decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
    decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
    decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
} CublasLtApi;

/* Opens libcublasLt of the toolkit this was built with; false with the reason. */
static inline bool cublaslt_load(CublasLtApi *api, char *reason, size_t reason_size) {
#define BS_LT_STR2(x) #x
#define BS_LT_STR(x) BS_LT_STR2(x)
    const char *name = "libcublasLt.so." BS_LT_STR(CUBLAS_VER_MAJOR);
    if (!(api->library = dynamic_library_open(name, reason, reason_size))) return false;
#define BS_LT_SYMBOL(field)                                                                                   \
    if (!(api->field = (decltype(api->field))dynamic_library_symbol(&api->library, name, "cublasLt" #field, reason, \
                                                                    reason_size)))                            \
        return false;
    BS_LT_SYMBOL(Create) BS_LT_SYMBOL(Destroy) BS_LT_SYMBOL(Matmul) BS_LT_SYMBOL(MatmulAlgoGetHeuristic)
    BS_LT_SYMBOL(MatmulDescCreate) BS_LT_SYMBOL(MatmulDescDestroy) BS_LT_SYMBOL(MatmulDescSetAttribute)
    BS_LT_SYMBOL(MatmulPreferenceCreate) BS_LT_SYMBOL(MatmulPreferenceDestroy)
    BS_LT_SYMBOL(MatmulPreferenceSetAttribute) BS_LT_SYMBOL(MatrixLayoutCreate) BS_LT_SYMBOL(MatrixLayoutDestroy)
#undef BS_LT_SYMBOL
    return true;
}

#endif
