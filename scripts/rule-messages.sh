#!/bin/bash
# rule-messages.sh BIN DATA_SHARD: prints the exit code and stderr of `train` on 43 flag combinations (all refused by
# train_config_check's area rules and --lora-init's settling), so a change that moves or rewrites the rules can be diffed:
#   scripts/rule-messages.sh old/batchscale data/train_000000.bin > before; ... after; diff before after
# (issue 46 item 3: the rules moved beside their areas' code with the same messages, order and exit codes).
B=$1; D=$2
T="--layers 2 --heads 2 --channels 32 --seq-len 32 --micro-batch 4 --steps 1 --eval-every 0 --sample-tokens 0 --threads 1 --quiet --data $D"
M="--experts 4 --moe-top-k 2"
TMP=$(mktemp -d)
while IFS= read -r extra; do
  [ -z "$extra" ] && continue
  err=$(cd "$TMP" && eval timeout 60 "$B" train $T $extra 2>&1 >/dev/null); rc=$?
  printf '%s\n  rc=%s %s\n' "$extra" "$rc" "$err"
done <<'CASES'
--balance --zero 2
--balance --batch-schedule adaptive:4:16
--balance --batch-schedule goodput:4:16
--balance --pp-schedule interleaved
--goodput-noise-scale 10
--goodput-noise-curve x.tsv
--batch-schedule goodput:4:16 --goodput-noise-scale 5 --goodput-noise-curve x.tsv
--goodput-temperature
--resume-new-batch
--virtual-stages 2 --grad-compression fp16
--virtual-stages 2 --zero-quant-grads
--lora-merge
--lora-init adapters-none
--save-adapters adapters-out
--base-weights int8
--lora-dropout 0.1
--lora-rank 4 --lora-targets nope
--lora-rank 4 --optimizer onebit-adam --freeze-step 2
--local-steps-jitter 2
--capacity-factor abc
--capacity-factor 1
--dropless
--moe-bias-update 0.01
--ep 2
--debug-moe-skew 2
--moe-every 2
--moe-gates normalized
--moe-routed-scale 2
$M --pp 2 --pp-schedule zbh1
$M --cp 2 --capacity-factor 1
$M --zero 3
$M --precision bf16
$M --lora-rank 4
$M --balance
$M --local-steps 2
$M --save-model m.bin
$M --moe-every 3
$M --ep 3
$M --tp 2 --moe-ffn 33
$M --moe-top-k 5
$M --dropless --capacity-factor 1
--device sim --precision bf16
--debug-outlier-scale 10 --zero 3
CASES
rm -rf "$TMP"
