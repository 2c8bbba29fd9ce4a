#!/bin/sh
# demo.sh: the main job on the embedded default. Extracts the King James
# Bible from Debian's bible-kjv package, prepares byte-level token shards,
# measures one process briefly, then trains a small GPT on 2 processes (data
# parallel, ZeRO stage 1) for a few minutes: progress, the falling validation
# loss, tokens/s, the exposed share of communication, the scaling efficiency
# against the 1-process measurement, and a sample.
# Usage: scripts/demo.sh PATH/TO/batchscale
set -eu
BS=${1:-build/batchscale}
DATA=data/kjv
mkdir -p runs/demo
"$(dirname "$0")/demo-data.sh" "$BS"
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export OMP_NUM_THREADS=1
MODEL="--layers 4 --heads 4 --channels 192 --seq-len 128 --micro-batch 16"

echo "demo: measuring one process (1 thread) for the scaling baseline"
"$BS" train --data "$DATA/train_*.bin" $MODEL --steps 8 --eval-every 0 --sample-tokens 0 --quiet \
    --metrics runs/demo/baseline.jsonl
BASELINE=$(/usr/bin/python3 -c "
import json, statistics
m = [json.loads(l) for l in open('runs/demo/baseline.jsonl')][2:]
print(round(statistics.median(x['tokens_per_s'] for x in m)))")
echo "demo: 1 process: $BASELINE tokens/s; now 2 processes, ZeRO stage 1"

$MPIRUN -np 2 "$BS" train --data "$DATA/train_*.bin" --val-data "$DATA/val_*.bin" $MODEL \
    --zero 1 --global-batch 32 --steps 600 --lr 3e-3 --min-lr 3e-4 --warmup 30 \
    --eval-every 100 --val-batches 16 --log-every 20 \
    --sample-tokens 300 --temperature 0.8 --top-k 40 \
    --baseline-tokens-per-s "$BASELINE" \
    --out runs/demo --metrics runs/demo/metrics.jsonl
echo "demo: metrics in runs/demo/metrics.jsonl; try: $BS sample --ckpt runs/demo/ckpt --prompt 'And God said'"
