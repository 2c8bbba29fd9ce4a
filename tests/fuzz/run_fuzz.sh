#!/bin/sh
# run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS_EACH]: builds the libFuzzer
# harnesses of tests/fuzz with clang, writes their seed corpora, and runs each
# harness for SECONDS_EACH seconds (default 20). Fails on any crash, sanitizer
# report, leak, timeout or broken property; the input that did it is kept as
# BUILD_DIR/crash-<harness>-*. The corpus grows across runs in BUILD_DIR/corpus.
set -eu
src=$1
build=$2
seconds=${3:-20}
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
    for c in clang-14 clang; do
        if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
    done
fi
[ -n "$cc" ] || { echo "run_fuzz: clang not found (scripts/install-deps.sh installs clang-14)" >&2; exit 1; }
cmake -S "$src/tests/fuzz" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug -DBS_SOURCE_DIR="$src" >/dev/null
cmake --build "$build" -j 2 >/dev/null
rm -rf "$build/seeds"
/usr/bin/python3 "$src/tests/fuzz/make_seeds.py" "$build/seeds"
scratch=$(mktemp -d /dev/shm/bs-fuzz.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export FUZZ_SCRATCH="$scratch"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for h in manifest ckpt_files shard safetensors; do
    mkdir -p "$build/corpus/$h"
    dict=""
    [ -f "$src/tests/fuzz/$h.dict" ] && dict="-dict=$src/tests/fuzz/$h.dict"
    log="$build/fuzz_$h.log"
    # shellcheck disable=SC2086
    if "$build/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -print_final_stats=1 -artifact_prefix="$build/crash-$h-" $dict "$build/corpus/$h" "$build/seeds/$h" \
        >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz_$h: ${seconds} s, $runs inputs, no crash"
    else
        echo "fuzz_$h FAILED (log $log):"
        grep -v '^#' "$log" | tail -40
        status=1
    fi
done
exit $status
