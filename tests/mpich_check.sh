#!/bin/sh
# mpich_check.sh: the CI-tested MPICH configuration. Runs the collectives test
# and batchscale built against MPICH (tests/mpich.cmake: the comm layer
# compiled against MPICH, linked with the build's other layers) with MPICH's
# launcher: every collective for 2 and 3 ranks and an emulated 2x2 node
# layout, and a 2-rank ZeRO-1 training run against the single-process run,
# and an error every rank meets (one line, status 2).
# usage: mpich_check.sh SOURCE_DIR BATCHSCALE_MPICH TEST_COLLECTIVES_MPICH
set -eu
SRC=$1
BS=$2
COLLECTIVES=$3
# Only the comm layer is compiled against MPICH: that stands for a whole MPICH build while no other file includes
# mpi.h, directly or through one of comm's headers that does.
INCLUDES_MPI='#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]'
for header in $(cd "$SRC" && grep -lE "$INCLUDES_MPI" src/comm/*.h || true); do
    INCLUDES_MPI="$INCLUDES_MPI|#[[:space:]]*include[[:space:]]*\"comm/${header#src/comm/}\""
done
OTHERS=$(cd "$SRC" && grep -rlE "$INCLUDES_MPI" src | grep -v '^src/comm/' || true)
if [ -n "$OTHERS" ]; then
    echo "mpi.h included outside src/comm ($OTHERS): tests/mpich.cmake compiles only src/comm against MPICH"
    exit 1
fi
for program in "$BS" "$COLLECTIVES"; do
    ldd "$program" | grep -q libmpich || { echo "$program: not linked against MPICH"; exit 1; }
    if ldd "$program" | grep -q 'libmpi\.so'; then echo "$program: linked against OpenMPI too"; exit 1; fi
done
RUN="mpiexec.mpich"
$RUN -np 2 "$COLLECTIVES"
$RUN -np 3 "$COLLECTIVES"
$RUN -np 4 "$COLLECTIVES" 2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 - "$T/train.bin" <<'PY'
import sys, numpy as np
h = np.zeros(256, np.int32); n = 50000; h[:3] = [20240520, 1, n]
open(sys.argv[1], "wb").write(h.tobytes() + np.random.default_rng(0).integers(0, 257, n).astype(np.uint16).tobytes())
PY
ARGS="train --data $T/train.bin --layers 2 --heads 2 --channels 32 --seq-len 32 --global-batch 8 --steps 5
      --eval-every 0 --sample-tokens 0 --threads 1 --quiet"
OMP_NUM_THREADS=1 "$BS" $ARGS --micro-batch 8 --metrics "$T/one.jsonl"
OMP_NUM_THREADS=1 $RUN -np 2 "$BS" $ARGS --micro-batch 4 --zero 1 --metrics "$T/two.jsonl"
/usr/bin/python3 - "$T/one.jsonl" "$T/two.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 5, (a, b)
worst = max(abs(x - y) / y for x, y in zip(a, b))
print(f"MPICH 2-rank ZeRO-1 vs 1 process: max relative loss difference {worst:.1e}")
assert worst < 1e-5
PY
# An error every rank meets (issue 48): one line from rank 0, status 2 from every rank, no MPI_Abort.
set +e
OUT=$(OMP_NUM_THREADS=1 $RUN -np 2 "$BS" $ARGS --micro-batch 4 --no-such-flag 2>&1)
RC=$?
set -e
if [ "$RC" != 2 ] || [ "$(printf '%s\n' "$OUT" | wc -l)" != 1 ]; then
    printf 'a bad flag on 2 MPICH ranks: status %s (expected 2), output (expected one line):\n%s\n' "$RC" "$OUT"
    exit 1
fi
echo "MPICH: a bad flag on 2 ranks is one line, status 2"
