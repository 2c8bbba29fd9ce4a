/* dynamic_library.h: a shared library opened with dlopen when it is first
 * needed, and its functions looked up by name, each failure a one-line
 * reason. The CUDA device loads cuBLASLt this way (device/cuda/
 * cublaslt_api.h) and comm/ loads NCCL (comm/nccl_api.h): linked, they
 * would cost every process, CPU runs included, their memory and start-up.
 * Header-only, so that C and CUDA C++ both include it. */
#ifndef BS_CORE_DYNAMIC_LIBRARY_H
#define BS_CORE_DYNAMIC_LIBRARY_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

/* The library `name`, or NULL with the reason. */
static inline void *dynamic_library_open(const char *name, char *reason, size_t reason_size) {
    void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!library) snprintf(reason, reason_size, "cannot load %s: %s", name, dlerror());
    return library;
}

/* The function `symbol` of *library (opened as `name`), or NULL with the
 * reason; on failure the library is closed and *library set to NULL. */
static inline void *dynamic_library_symbol(void **library, const char *name, const char *symbol, char *reason,
                                           size_t reason_size) {
    void *function = dlsym(*library, symbol);
    if (!function) {
        snprintf(reason, reason_size, "%s has no %s", name, symbol);
        dlclose(*library);
        *library = NULL;
    }
    return function;
}

#endif
