#!/bin/sh
# demo-data.sh: the demo corpus, prepared once: the King James Bible from
# Debian's bible-kjv package as byte-level token shards in data/kjv.
# Usage: scripts/demo-data.sh PATH/TO/batchscale
set -eu
BS=${1:-build/batchscale}
mkdir -p data
if [ ! -s data/kjv.txt ]; then
    echo "extracting the King James Bible (bible-kjv)"
    bible -m 8192 Gen1:1-Rev22:21 > data/kjv.txt.tmp
    mv data/kjv.txt.tmp data/kjv.txt
fi
if [ ! -s data/kjv/train_000000.bin ]; then
    "$BS" prepare --in data/kjv.txt --out data/kjv
fi
