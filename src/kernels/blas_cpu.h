/* blas_cpu.h: makes sure OpenBLAS runs its kernels for this CPU.
 *
 * Debian's OpenBLAS picks its kernels at load time from the CPU model. On
 * virtual machines that report a generic model ("Intel Xeon Processor") it
 * falls back to Prescott (SSE3) kernels and sgemm runs about 5x slower
 * (measured here: 34 vs 166 GFLOP/s). The core type can only be forced
 * through OPENBLAS_CORETYPE before the library loads, so when detection
 * failed and the CPU has AVX-512 (or AVX2), this sets the variable and
 * re-executes the program once. An explicit OPENBLAS_CORETYPE is respected. */
#ifndef BS_KERNELS_BLAS_CPU_H
#define BS_KERNELS_BLAS_CPU_H

/* Call first thing in main(); returns only if nothing needs to change. */
void blas_ensure_cpu_kernels(char **argv);

#endif
