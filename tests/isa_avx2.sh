#!/bin/sh
# isa_avx2.sh: runs a test as an AVX2-only CPU (AMD EPYC Zen 3) would: OpenBLAS's
# Haswell kernels and oneDNN capped at AVX2. On a CPU without AVX2 those kernels
# cannot run: the test is skipped (exit 77) and says why; nothing is forced.
if ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    echo "skipped: this CPU has no AVX2, so the AVX2 pass cannot run here"
    exit 77
fi
export OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2
exec "$@"
