#!/bin/bash
# gpu-check.sh: the CUDA backend's whole check in one device call of about 8
# minutes, on a machine with one NVIDIA GPU (H100/H200), the CUDA toolkit,
# compute-sanitizer and PyTorch. Each phase runs under its own timeout and
# writes its log to $OUT as it finishes; $OUT/summary.txt gets one line per
# phase (exit status, seconds) and the speed figures.
#
# Prepare on a development machine: scripts/gpu-bundle.sh (the binaries and
# the Debian libraries the GPU machine lacks, in build-gpu/gpu-bundle.tar.xz),
# then carry that file: run(command="scripts/gpu-check.sh",
# carry=["build-gpu/gpu-bundle.tar.xz"]).
#
# Phases: env (GPU, driver, toolkit, torch); unpack (the bundle, --version);
# the kernels against the CPU (test_device_kernels, a gate for what follows)
# and the fused AdamW against per-tensor launches bit for bit (test_device_adamw);
# the speed rows issue 45 asks for, most important first, few steps each:
# GPT-2 124M (T 1024, micro-batch 8) bf16 for batchscale and torch.compile,
# then the 1.3B-class model (L24 H16 C2048, T 2048, micro-batch 4: about 52
# GB on the device by the engine's buffers, derived in docs/journal) in bf16
# for batchscale and PyTorch eager and torch.compile, then batchscale's FP8
# (cuBLASLt) on the 1.3B model and 124M: every row tokens/s, MFU against the
# GPU's dense bf16 peak (FP8 rows also mfu_fp8_peak, against its dense FP8
# peak) and the peak GPU memory (batchscale: device_memory_peak_bytes of its
# metrics, cudaMemGetInfo's high-water mark over its allocations, the CUDA
# context included; PyTorch: torch.cuda.max_memory_allocated);
# tests (the gpu-labelled checks of tests/device.cmake and
# tests/device_comm.cmake with BS_REQUIRE_GPU=1: a skip fails;
# test_device_train.py's include the checkpoints moved bit for bit between
# the GPU and the CPU, test_device_bf16.py the bf16 run against the CPU's
# bf16 within 4x the floor measured beside it; test_device_fp8_gemm and
# test_device_fp8.py FP8 through cuBLASLt against the CPU's emulation); sanitizer (compute-sanitizer
# memcheck and racecheck on three steps of a tiny model); more speed (GPT-2
# 124M: batchscale --device cuda in fp32 and with bf16 activations, the
# PyTorch peer eager in fp32 and bf16, bench/gpu_torch_gpt.py; then, as time
# allows, fp32 with the unfused attention (causal) and the attention
# kernels alone, tests/bench_device_attention.c); the planner's prediction of
# the engine's step from `bench --calibrate --device cuda` (tests/test_plan_reality.py).
#
# layouts (issue 44): every parallel layout with 2-4 ranks sharing the GPU
# through the host path (tests/test_device_{dp,tp,cp,pp,moe}.py cuda, under
# the bundle's own mpirun), a planted timeout named within --comm-timeout,
# NCCL missing at run time (one line), the host-staged (and, with two GPUs or
# more, NCCL) all-reduce bandwidths beside the GPU's copy and host-link
# bandwidths, and DP 2 sharing the GPU: exposed communication as a share of
# the step against the same layout on the CPU.
#
# `scripts/gpu-check.sh tests` runs only the correctness phases, `layouts`
# only issue 44's, `speed` only the speed rows, `all` (the default) the three
# in that order: within one device call of 470 s the later phases are skipped
# as time runs out, so a session with time for three calls runs `tests`,
# `layouts`, then `speed`.
#
# The whole check stays within GPU_CHECK_SECONDS (default 470): each phase's
# limit is cut to the time left, and a phase with under 10 s left is skipped
# (said in the summary), so one device call of about 8 minutes holds it.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-check-out}
TOTAL=${GPU_CHECK_SECONDS:-470}
BUNDLE=${BUNDLE:-build-gpu/gpu-bundle.tar.xz}
mkdir -p "$OUT"
WORK=$(mktemp -d)
BS=$WORK/bin/batchscale
PY=${PYTHON:-python3}
export OUT BUNDLE WORK BS PY

note() { echo "$*" | tee -a "$OUT/summary.txt"; }
# phase NAME SECONDS COMMAND...: the command's output in $OUT/NAME.log (a function of
# this script runs in a bash of its own: timeout runs programs)
phase() {
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    if [ $((TOTAL - SECONDS)) -lt 10 ]; then
        note "$name: skipped: the check's $TOTAL s are spent"
        return 1
    fi
    [ "$limit" -gt $((TOTAL - SECONDS)) ] && limit=$((TOTAL - SECONDS))
    [ "$(type -t "$1")" = function ] && set -- bash -c "$*"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc in $((SECONDS - start)) s (limit $limit s)$([ $rc = 124 ] && echo ': timed out')"
    return $rc
}

env_report() {
    nvidia-smi; nvcc --version; compute-sanitizer --version | head -2
    $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
    echo "NCCL: $(ldconfig -p | grep -m1 'libnccl\.so\.2 ' || echo "not in the loader's cache; LD_LIBRARY_PATH=$LD_LIBRARY_PATH")"
}

unpack() {
    tar -xJf "$BUNDLE" -C "$WORK" && "$BS" --version
}
# The bundle's libraries first; OpenMPI and PMIx find their plug-ins in it, and
# a process alone starts no server of its own.
export LD_LIBRARY_PATH=$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# mpirun is the bundle's (Debian's orterun): its help texts and parameter sets in share/openmpi.
export OMPI_MCA_mca_base_component_path=$WORK/lib/openmpi3 PMIX_MCA_mca_base_component_path=$WORK/lib/pmix
export OPAL_PKGDATADIR=$WORK/share/openmpi PATH=$WORK/bin:$PATH
export OMPI_MCA_ess_singleton_isolated=1 OMP_NUM_THREADS=4 BS_REQUIRE_GPU=1 BATCHSCALE=$BS BF16_DRIVER=$WORK/bin/bf16_driver
export PATH=$PATH:/usr/local/cuda/bin # nvcc, compute-sanitizer
# NCCL (comm/ loads libnccl.so.2 with dlopen): the system's, else the CUDA toolkit's or PyTorch's copy.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
    for d in /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda-*/lib \
        "$($PY -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
        if [ -e "$d/libnccl.so.2" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; fi
    done
fi

# A byte-level corpus (word salad, tests/bstest.py) prepared into shards.
corpus() {
    $PY -c 'import sys; sys.path.insert(0, "tests"); import bstest; bstest.BATCHSCALE = sys.argv[1]; print(bstest.make_corpus(sys.argv[2], nbytes=400_000))' "$BS" "$WORK"
}

TINY=(train --device cuda --layers 2 --heads 2 --channels 64 --seq-len 64 --micro-batch 4 --steps 3 --quiet
      --sample-tokens 0 --eval-every 0 --data "$WORK/data/train_000000.bin")
GPT2=(train --device cuda --layers 12 --heads 12 --channels 768 --seq-len 1024 --vocab-size 50257 --micro-batch 8
      --steps 12 --warmup 2 --quiet --sample-tokens 0 --eval-every 0 --data "$WORK/data/train_000000.bin")
# The 1.3B-class model (1.32e9 parameters), micro-batch 4 (8192 tokens a step), as GPT-2 XL's width at 24 layers.
GPT1B3=(train --device cuda --layers 24 --heads 16 --channels 2048 --seq-len 2048 --vocab-size 50257 --micro-batch 4
        --steps 8 --warmup 2 --quiet --sample-tokens 0 --eval-every 0 --data "$WORK/data/train_000000.bin")
TORCH1B3=(--L 24 --H 16 --C 2048 --T 2048 --B 4)

# speed_line METRICS PRECISION MODEL [KERNEL]: a metrics file's tokens/s (median of the steps after the second),
# MFU against the GPU's dense peak (bf16's; fp32 rows the fp32 one; FP8 rows also mfu_fp8_peak, against the dense
# FP8 peak) and peak_memory_bytes (its last step's device_memory_peak_bytes); MODEL is 124m (GPT-2 124M, T 1024) or
# 1.3b (L24 H16 C2048, T 2048); KERNEL names a non-default attention kernel or option.
speed_line() {
    $PY - "$1" "$2" "$3" "${4:-}" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
import gpu_torch_gpt as g
import torch
path, precision, model, kernel = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
tps = statistics.median(r["tokens_per_s"] for r in rows[2:])
L, H, C, T = {"124m": (12, 12, 768, 1024), "1.3b": (24, 16, 2048, 2048)}[model]
flops = tps * g.flops_per_token(dict(L=L, H=H, C=C, V=50257, maxT=T))
name = torch.cuda.get_device_name()
def mfu(p): return flops / (p * 1e12) if p else None
row = dict(peer="batchscale", model=model, mode="device-" + precision + ("-" + kernel if kernel else ""),
           tokens_per_s=tps, mfu=mfu(g.peak(name, "fp32" if precision == "fp32" else "bf16")),
           peak_memory_bytes=rows[-1].get("device_memory_peak_bytes"))
if precision == "fp8":
    row["mfu_fp8_peak"] = mfu(g.peak(name, "fp8"))
print(json.dumps(row))
PY
}
# speed NAME SECONDS PRECISION MODEL [KERNEL] -- ARGS...: a batchscale speed phase and its row in the summary.
speed() {
    local name=$1 limit=$2 precision=$3 model=$4 kernel=${5:-}
    shift 5
    phase "$name" "$limit" "$BS" "$@" --metrics "$OUT/$name.jsonl" &&
        speed_line "$OUT/$name.jsonl" "$precision" "$model" "$kernel" | tee -a "$OUT/summary.txt"
}
# torch_rows NAME SECONDS ARGS...: the PyTorch peer's rows (each printed as its mode ends: kept when a later one times out)
torch_rows() {
    local name=$1 limit=$2
    shift 2
    phase "$name" "$limit" "$PY" bench/gpu_torch_gpt.py "$@"
    grep -s '^{' "$OUT/$name.log" >>"$OUT/summary.txt"
}

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
# the functions below run in a bash of their own (phase), where arrays are not exported
mpirun_np() { mpirun --allow-run-as-root --oversubscribe --bind-to none "$@"; }
# expect NAME SECONDS REGEX COMMAND...: a phase that must end non-zero (a planted fault, a refusal) with a line
# matching REGEX, not by the phase's timeout.
expect() {
    local name=$1 limit=$2 regex=$3 rc
    shift 3
    phase "$name" "$limit" "$@"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -Eq "$regex" "$OUT/$name.log"; then
        note "$name: as expected: $(grep -Em1 "$regex" "$OUT/$name.log")"
        return 0
    fi
    note "$name: FAILED: expected a non-zero exit with a line matching /$regex/"
    return 1
}
# The host-staged all-reduce (two ranks sharing the GPU) and, with two GPUs or more, NCCL's (one rank each), beside
# the GPU's copy and host-link bandwidths, from `bench --calibrate --device cuda` (GB/s; busbw as nccl-tests').
bandwidths() {
    mpirun_np -np 2 "$BS" bench --calibrate "$OUT/calibration_host.json" --device cuda || return 1
    local gpus
    gpus=$(nvidia-smi -L | grep -c '^GPU')
    if [ "$gpus" -ge 2 ]; then
        mpirun_np -np "$gpus" "$BS" bench --calibrate "$OUT/calibration_nccl.json" --device cuda || return 1
    fi
    $PY - "$OUT/calibration_host.json" "$OUT/calibration_nccl.json" <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    if not os.path.exists(path):
        print(json.dumps(dict(row="bandwidth", path="nccl", note="one GPU: NCCL has no second GPU to move bytes to")))
        continue
    c = json.load(open(path))
    coll, link = c.get("collectives", {}), c["host_link"]
    print(json.dumps(dict(row="bandwidth", path=coll.get("path"), ranks=coll.get("ranks"),
                          copy_gbps=c["memory_bandwidth"]["bytes_per_s"] / 1e9,
                          host_to_device_gbps=link["host_to_device_bytes_per_s"] / 1e9,
                          device_to_host_gbps=link["device_to_host_bytes_per_s"] / 1e9,
                          allreduce_busbw_gbps={k: v["busbw_bytes_per_s"] / 1e9 for k, v in coll.items()
                                                if isinstance(v, dict)})))
PY
}
# DP 2 sharing the GPU against DP 2 on the CPU, the same model and batch: exposed communication as a share of the
# step (the metrics' comm_exposed_ms over ms, the steps after the second).
dp2_exposed() {
    local shape=(train --layers 6 --heads 6 --channels 384 --seq-len 256 --micro-batch 8 --global-batch 32 --steps 8
                 --warmup 2 --quiet --sample-tokens 0 --eval-every 0 --data "$WORK/data/train_000000.bin")
    mpirun_np -np 2 "$BS" "${shape[@]}" --device cuda --metrics "$OUT/dp2_cuda.jsonl" || return 1
    OMP_NUM_THREADS=$(( $(nproc) / 2 )) mpirun_np -np 2 "$BS" "${shape[@]}" --threads $(( $(nproc) / 2 )) \
        --metrics "$OUT/dp2_cpu.jsonl" || return 1
    $PY - "$OUT/dp2_cuda.jsonl" "$OUT/dp2_cpu.jsonl" <<'PY'
import json, sys
for path, device in zip(sys.argv[1:], ("cuda", "cpu")):
    rows = [json.loads(l) for l in open(path)][2:]
    step, exposed = sum(r["ms"] for r in rows), sum(r["comm_exposed_ms"] for r in rows)
    print(json.dumps(dict(row="dp2_exposed", device=device, step_ms=step / len(rows), exposed_share=exposed / step)))
PY
}
export -f env_report unpack corpus mpirun_np bandwidths dp2_exposed
phase env 20 env_report
phase unpack 60 unpack || { note "no binary: stopping"; exit 1; }
phase corpus 30 corpus
PART=${1:-all}
case $PART in tests | layouts | speed | all) ;; *) echo "usage: scripts/gpu-check.sh [tests|layouts|speed|all]" >&2; exit 2 ;; esac
# The correctness checks first (a wrong kernel voids every speed figure), then the speed rows.
if [[ $PART == tests || $PART == all ]]; then
phase test_device_kernels 40 "$WORK/bin/test_device_kernels" cuda
phase test_device_adamw 20 "$WORK/bin/test_device_adamw" cuda # the fused optimizer against per-tensor launches
phase test_device_seam 30 "$WORK/bin/test_device_sim" cuda
phase test_device_flash 30 "$WORK/bin/test_device_flash" cuda
phase test_device_classifier 30 "$WORK/bin/test_device_classifier" cuda
phase test_device_gpt 60 "$WORK/bin/test_gpt_device" cuda
phase test_device_graphs 30 "$WORK/bin/test_gpt_device_graphs" cuda
phase test_device_comm_nccl 60 "$WORK/bin/test_device_comm" cuda nccl # one rank: every NCCL operation
phase test_device_comm_host 60 "$WORK/bin/test_device_comm" cuda host # pinned staging through MPI
phase test_device_train 120 "$PY" tests/test_device_train.py cuda
phase test_device_bf16 60 "$PY" tests/test_device_bf16.py cuda
phase test_device_moe_kernels 20 "$WORK/bin/test_device_moe_kernels" cuda # DK_MOE_* against model/moe.c
phase test_device_moe 40 "$PY" tests/test_device_moe.py cuda # MoE layers against the CPU through train
# FP8: quantization bit for bit and the cuBLASLt FP8 products within the summation-order bound of the CPU's
# emulation; then ten delayed-scaling steps against the CPU's FP8 run (and its reorderings, the floor), the amax
# history step for step (the whole test_device_fp8.py, both recipes and bf16, took 281 s on sim on 2 CPU cores)
phase test_device_fp8_gemm 40 "$WORK/bin/test_device_fp8_gemm" cuda
phase test_device_fp8 90 "$PY" tests/test_device_fp8.py cuda DeviceFp8Test.test_delayed_within_the_floor
phase test_device_acts_bf16 30 "$WORK/bin/test_device_acts_bf16" cuda # fused residual layernorm, bf16 activations
phase memcheck 40 compute-sanitizer --tool memcheck --error-exitcode 3 "$BS" "${TINY[@]}"
phase racecheck 40 compute-sanitizer --tool racecheck --error-exitcode 3 "$BS" "${TINY[@]}"
fi
if [[ $PART == layouts || $PART == all ]]; then
# Issue 44: every layout with its ranks sharing the GPU through the host path, each against one CPU process (the
# bundle's mpirun first: without it no layout can start).
phase mpirun_start 30 "${MPIRUN[@]}" -np 2 "$BS" --version
phase layout_dp 150 "$PY" tests/test_device_dp.py cuda
phase layout_tp 60 "$PY" tests/test_device_tp.py cuda
phase layout_pp 120 "$PY" tests/test_device_pp.py cuda
phase layout_pptp 120 "$PY" tests/test_device_pptp.py cuda # tp x pp (x dp: 8 ranks), cp x pp
phase layout_cp 90 "$PY" tests/test_device_cp.py cuda
phase layout_zero 90 "$PY" tests/test_device_zero_layouts.py cuda # ZeRO 2-3 with tp, cp, pp
phase layout_precision_cp 90 "$PY" tests/test_device_precision_cp.py cuda # bf16 and FP8 cp 2 within the floor
phase layout_moe 60 "$PY" tests/test_device_moe.py cuda ranks
# a rank that never joins: the device all-reduce names itself, the group and the rank within --comm-timeout (1 s)
expect comm_timeout 30 'all-reduce .* on the world group timed out after 1 s waiting for rank 1' \
    "${MPIRUN[@]}" -np 2 "$WORK/bin/test_device_comm" cuda host stall
# NCCL missing at run time (a library file that is not there): one line naming it
expect nccl_missing 20 'nccl path: cannot load /nonexistent/libnccl' \
    env BATCHSCALE_NCCL=/nonexistent/libnccl.so.2 "$WORK/bin/test_device_comm" cuda nccl
phase bandwidths 90 bandwidths && grep -s '^{' "$OUT/bandwidths.log" >>"$OUT/summary.txt"
phase dp2_exposed 120 dp2_exposed && grep -s '^{' "$OUT/dp2_exposed.log" >>"$OUT/summary.txt"
fi
if [[ $PART == speed || $PART == all ]]; then
# the speed rows, most important first: 124M bf16 against torch.compile, the 1.3B model in bf16, then FP8
speed speed_batchscale_bf16 45 bf16 124m "" "${GPT2[@]}" --precision bf16
torch_rows speed_pytorch_compile 90 --steps 12 --warmup 4 --modes compile-bf16
speed speed_batchscale_1b3_bf16 90 bf16 1.3b "" "${GPT1B3[@]}" --precision bf16
torch_rows speed_pytorch_1b3 150 "${TORCH1B3[@]}" --steps 8 --warmup 3 --modes eager-bf16,compile-bf16
speed speed_batchscale_1b3_fp8 90 fp8 1.3b "" "${GPT1B3[@]}" --precision fp8
speed speed_batchscale_fp8 45 fp8 124m "" "${GPT2[@]}" --precision fp8
speed speed_batchscale_fp32 60 fp32 124m "" "${GPT2[@]}"
speed speed_batchscale_bf16_acts 60 bf16 124m bf16-activations "${GPT2[@]}" --precision bf16 --activations bf16
torch_rows speed_pytorch 80 --steps 15 --modes eager-fp32,eager-bf16
# bf16 again with the step replayed from CUDA graphs (--cuda-graphs on; off is the default until this is read)
speed speed_batchscale_bf16_graphs 60 bf16 124m graphs "${GPT2[@]}" --precision bf16 --cuda-graphs on
# the same model with the unfused attention kernel (it keeps P: 12 x 400 MB at T 1024), fewer steps
speed speed_batchscale_fp32_causal 45 fp32 124m causal "${GPT2[@]}" --steps 6 --attention causal
# the attention kernels alone at GPT-2 124M's shapes (B 8, T 1024, C 768, H 12): fused against unfused, ms per call
phase speed_attention 45 "$WORK/bin/bench_device_attention" cuda 8 1024 768 12 10
grep -s '^{' "$OUT/speed_attention.log" >>"$OUT/summary.txt"
# The planner against the engine on this GPU (issue 44): bench --calibrate --device cuda, then plan's
# prediction of a measured step, GPT-2 124M and 350M (target 15%).
phase plan_reality_124m 60 "$PY" tests/test_plan_reality.py --device cuda --model gpt2-124m --layouts 1x1x1 \
    --micro-batch 8 --steps 10 --target 0.15
phase plan_reality_350m 90 "$PY" tests/test_plan_reality.py --device cuda --model gpt2-350m --layouts 1x1x1 \
    --micro-batch 8 --steps 10 --target 0.15
fi
rm -rf "$WORK"
