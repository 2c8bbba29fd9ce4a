/* blas_cpu.h: makes sure OpenBLAS runs its kernels for this CPU.
 *
 * Debian's OpenBLAS picks its kernels at load time from the CPU model. On
 * virtual machines that report a generic model ("Intel Xeon Processor") it
 * falls back to Prescott (SSE3) kernels and sgemm runs about 5x slower
 * (measured here: 34 vs 166 GFLOP/s). The core type can only be forced
 * through OPENBLAS_CORETYPE before the library loads, so when detection
 * failed this sets the variable to the best core the CPU can run (SkylakeX
 * where it has AVX-512, Haswell where it has AVX2) and re-executes the
 * program once. An explicit OPENBLAS_CORETYPE is respected; a core the CPU
 * lacks is never chosen.
 *
 * The rule is one function, blas_core_to_set, so that the benchmarks apply
 * the same rule to other processes that load Debian's OpenBLAS (numpy,
 * Debian's PyTorch): `batchscale bench cpu` prints its answer. */
#ifndef BS_KERNELS_BLAS_CPU_H
#define BS_KERNELS_BLAS_CPU_H

/* The environment variable the re-exec leaves for the new image: the core
 * OpenBLAS had detected before OPENBLAS_CORETYPE was set. */
#define BLAS_DETECTED_ENV "BATCHSCALE_OPENBLAS_DETECTED"

/* The OPENBLAS_CORETYPE to set when OpenBLAS detected `detected` on this
 * CPU: a core for the CPU's flags when `detected` is a generic fallback
 * (Prescott, Core2, Nehalem, Sandybridge), else NULL (detection is right,
 * or the CPU has neither AVX-512 nor AVX2). */
const char *blas_core_to_set(const char *detected);

/* The core OpenBLAS chose by itself in this process, or before the re-exec;
 * NULL when OPENBLAS_CORETYPE came from outside (then only a process started
 * without it can tell, see cli/bench_cpu.c). */
const char *blas_detected_core(void);

/* Call first thing in main(); returns only if nothing needs to change. */
void blas_ensure_cpu_kernels(char **argv);

#endif
