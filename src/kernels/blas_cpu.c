/* blas_cpu.c: re-exec with OPENBLAS_CORETYPE when OpenBLAS fell back to
 * generic kernels (see blas_cpu.h). */
#include "kernels/blas_cpu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void blas_ensure_cpu_kernels(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = openblas_get_corename();
    if (!core || (strcasecmp(core, "prescott") != 0 && strcasecmp(core, "core2") != 0 &&
                  strcasecmp(core, "nehalem") != 0 && strcasecmp(core, "sandybridge") != 0))
        return;
    const char *want = NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2")) want = "Haswell";
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernels rather than stop */
    fprintf(stderr, "batchscale: warning: OpenBLAS uses generic '%s' kernels; set OPENBLAS_CORETYPE=%s\n", core, want);
}
