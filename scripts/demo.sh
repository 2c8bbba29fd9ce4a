#!/bin/sh
# demo.sh: the main job on the embedded default. Extracts the King James
# Bible from Debian's bible-kjv package, prepares byte-level token shards,
# trains a small GPT for a few minutes, and prints the falling validation
# loss and a sample. Usage: scripts/demo.sh PATH/TO/batchscale
set -eu
BS=${1:-build/batchscale}
DATA=data/kjv
mkdir -p data runs
if [ ! -s data/kjv.txt ]; then
    echo "demo: extracting the King James Bible (bible-kjv)"
    bible -m 8192 Gen1:1-Rev22:21 > data/kjv.txt.tmp
    mv data/kjv.txt.tmp data/kjv.txt
fi
if [ ! -s "$DATA/train_000000.bin" ]; then
    "$BS" prepare --in data/kjv.txt --out "$DATA"
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
"$BS" train --data "$DATA/train_*.bin" --val-data "$DATA/val_*.bin" \
    --layers 4 --heads 4 --channels 192 --seq-len 128 \
    --micro-batch 16 --global-batch 16 --steps 300 --lr 3e-3 --min-lr 3e-4 --warmup 20 \
    --eval-every 50 --val-batches 16 --log-every 10 \
    --sample-tokens 300 --temperature 0.8 --top-k 40 \
    --out runs/demo --metrics runs/demo/metrics.jsonl
echo "demo: metrics in runs/demo/metrics.jsonl; try: $BS sample --ckpt runs/demo/ckpt --prompt 'And God said'"
