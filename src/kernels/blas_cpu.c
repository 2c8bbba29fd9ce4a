/* blas_cpu.c: the OpenBLAS core rule, and the re-exec that applies it when
 * OpenBLAS fell back to generic kernels (see blas_cpu.h). */
#include "kernels/blas_cpu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int is_generic_core(const char *core) {
    static const char *const generic[] = {"prescott", "core2", "nehalem", "sandybridge"};
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (strcasecmp(core, generic[i]) == 0) return 1;
    return 0;
}

const char *blas_core_to_set(const char *detected) {
    if (!detected || !is_generic_core(detected)) return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "Haswell";
    return NULL;
}

const char *blas_detected_core(void) {
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (!forced) return openblas_get_corename();
    /* set by our re-exec: the variable holds what the rule says for the recorded core */
    const char *before = getenv(BLAS_DETECTED_ENV);
    const char *want = blas_core_to_set(before);
    return want && strcmp(want, forced) == 0 ? before : NULL;
}

void blas_ensure_cpu_kernels(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = openblas_get_corename();
    const char *want = blas_core_to_set(core);
    if (!want) return;
    setenv(BLAS_DETECTED_ENV, core, 1);
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernels rather than stop */
    fprintf(stderr, "batchscale: warning: OpenBLAS uses generic '%s' kernels; set OPENBLAS_CORETYPE=%s\n", core, want);
}
