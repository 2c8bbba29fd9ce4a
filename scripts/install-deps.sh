#!/bin/sh
# install-deps.sh: installs every Debian package batchscale needs to build,
# test and run its demo. Idempotent: packages already present are skipped,
# so the make targets call it every time at almost no cost. chromium renders
# `batchscale report` pages in tests/ops_report_browser; vim-runtime ships the
# user manual bench_critical_batch trains on; slurmctld, slurmd,
# slurm-client and munge make the one-node cluster of tests/ops_slurm.
set -eu

PACKAGES="build-essential cmake pkg-config
libopenblas-openmp-dev libopenmpi-dev openmpi-bin libmpich-dev mpich
libjansson-dev libxxhash-dev libutf8proc-dev libcairo2-dev libdnnl-dev clang-14 libclang-rt-14-dev
python3 python3-torch python3-numpy
bible-kjv gnuplot-nox vim-runtime
chromium slurmctld slurmd slurm-client munge"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "install-deps: done"
