#!/bin/sh
# run.sh: `make bench`. Sets up the current PyTorch from PyPI in its own
# virtual environment (once; the peer, never a dependency of the product),
# then runs each benchmark. Results: build/bench/*.json and stdout; each
# JSON records the CPU and the kernels every process ran (kernel_report.py).
# No OPENBLAS_CORETYPE is forced: batchscale sets it only where OpenBLAS
# misdetects the CPU, and the benchmarks give Debian's OpenBLAS processes the
# same rule (`batchscale bench cpu`). BS_BENCH_STEPS=N shortens the training
# benchmarks (a smoke run: its numbers are not for the docs).
set -eu
BS=${1:-build/batchscale}
VENV=${BS_BENCH_VENV:-$HOME/.cache/batchscale/bench-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, numpy, threadpoolctl" 2>/dev/null; then
    echo "bench: installing the current PyTorch from PyPI into $VENV (once)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q torch numpy threadpoolctl
fi
mkdir -p build/bench
/usr/bin/python3 bench/bench_engine.py "$BS" build/bench/engine.json "$VENV/bin/python"
/usr/bin/python3 bench/bench_scaling.py "$BS" build/bench/scaling.json "$VENV/bin/python"
/usr/bin/python3 bench/bench_parallel.py "$BS" build/bench/parallel.json
/usr/bin/python3 bench/bench_pipeline.py "$BS" build/bench/pipeline.json
/usr/bin/python3 bench/bench_cp.py "$BS" build/bench/cp.json
echo "collectives, 2 ranks (batchscale bench comm):"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 env OMP_NUM_THREADS=1 "$BS" bench comm \
    --ops all-reduce,reduce-scatter,all-gather | tee build/bench/comm.txt
/usr/bin/python3 bench/bench_batch_scaling.py "$BS" build/bench/batch_scaling
/usr/bin/python3 bench/bench_critical_batch.py "$BS" build/bench/critical_batch.json
/usr/bin/python3 bench/bench_schedule_race.py "$BS" build/bench/schedule_race.json
/usr/bin/python3 bench/bench_tokenizer.py "$BS" build/bench/tokenizer.json
/usr/bin/python3 bench/bench_bf16.py "$BS" build/bench/bf16.json "$VENV/bin/python"
/usr/bin/python3 bench/bench_fp8.py "$BS" build/bench/fp8.json
/usr/bin/python3 bench/bench_ckpt.py "$BS" build/bench/ckpt.json
/usr/bin/python3 bench/bench_compress.py "$BS" build/bench/compress.json
/usr/bin/python3 bench/bench_diloco.py "$BS" build/bench/diloco.json
/usr/bin/python3 bench/bench_lora.py "$BS" build/bench/lora.json
/usr/bin/python3 bench/bench_nf4.py "$BS" build/bench/nf4.json
/usr/bin/python3 bench/bench_moe.py "$BS" build/bench/moe.json
echo "split backward (B + W) against the fused one, bf16 widen (test_backward_split timing):"
"$(dirname "$BS")/tests/test_backward_split" timing | tee build/bench/backward_split.txt
