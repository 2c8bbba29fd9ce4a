"""numpy_sgemm_peer.py: sgemm through numpy, C = A B^T (float32), the shape
`batchscale bench gemm` times: the BLAS rate of a library batchscale does
not call (Debian's numpy: Debian's OpenBLAS as the process loads it; PyPI's
numpy: the OpenBLAS it carries, with its own CPU detection). Threads come
from OPENBLAS_NUM_THREADS/OMP_NUM_THREADS in the environment. Prints one
JSON line: numpy version, GFLOP/s and ms (median of REPS after a warm-up),
and the kernels the process ran (kernel_report.this_process).
usage: numpy_sgemm_peer.py M N K REPS"""
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_report  # noqa: E402


def main():
    m, n, k, reps = map(int, sys.argv[1:5])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k), dtype=np.float32)
    c = np.empty((m, n), np.float32)
    np.matmul(a, b.T, out=c)  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.matmul(a, b.T, out=c)
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    print(json.dumps(dict(version=np.__version__, gflops=2.0 * m * n * k / s / 1e9, ms=s * 1e3,
                          kernels=kernel_report.this_process())))


if __name__ == "__main__":
    main()
