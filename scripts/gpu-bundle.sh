#!/bin/bash
# gpu-bundle.sh: prepares, on a development machine, what scripts/gpu-check.sh
# runs on the GPU machine, which has the CUDA toolkit and PyTorch but none of
# the Debian libraries batchscale links (OpenBLAS, OpenMPI, jansson, oneDNN,
# cairo) and no package registry. The choice: build here and carry a
# compressed copy of those libraries, not a second lean build of the engine
# (every layer links them). Writes BUILD_DIR/gpu-bundle.tar.xz (about 20 MB;
# the device call carries at most 64 MiB) holding:
#   bin/   batchscale and the device test programs, built for any x86-64 CPU
#          (BS_NATIVE=OFF) with the CUDA backend (BS_CUDA=ON)
#          and OpenMPI's launcher (bin/mpirun, Debian's orterun) for the layouts
#          whose ranks share the GPU (gpu-check.sh layouts)
#   lib/   every shared library they load except glibc's, the GCC runtime's
#          and CUDA's (the GPU machine has its own), and OpenMPI's and PMIx's
#          plug-ins (lib/openmpi3, lib/pmix), which MPI_Init loads even alone,
#          with the libraries those load
#   share/openmpi  the launcher's help texts and parameter sets (OPAL_PKGDATADIR)
# usage: scripts/gpu-bundle.sh [BUILD_DIR]   (default build-gpu), from the repository root
set -euo pipefail
BUILD=${1:-build-gpu}
PROGRAMS="batchscale tests/test_device_kernels tests/test_device_sim tests/test_gpt_device tests/test_device_comm
  tests/test_device_flash tests/test_device_classifier tests/bench_device_attention tests/bf16_driver
  tests/test_device_fp8_gemm tests/test_device_acts_bf16 tests/test_gpt_device_graphs tests/test_device_moe_kernels tests/test_device_adamw"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBS_NATIVE=OFF -DBS_CUDA=ON >/dev/null
# every program of the list, by its target's name (one list: a program added there is built too)
cmake --build "$BUILD" -j"$(nproc)" --target $(for p in $PROGRAMS; do basename "$p"; done)
STAGE=$BUILD/bundle
rm -rf "$STAGE" && mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/share"
for p in $PROGRAMS; do cp "$BUILD/$p" "$STAGE/bin/"; done
cp -L "$(command -v orterun)" "$STAGE/bin/mpirun"
cp -rL /usr/share/openmpi "$STAGE/share/openmpi"
# The GPU machine's own: the C library and loader, the GCC runtime, CUDA's libraries.
KEEP_OUT='/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt)\.so'
# copy_needs FILE...: the shared libraries they load, but the GPU machine's own
copy_needs() {
    for f in "$@"; do ldd "$f" 2>/dev/null; done | awk '$3 ~ /^\// {print $3}' | sort -u | grep -Ev "$KEEP_OUT" |
        while read -r lib; do [ -e "$STAGE/lib/$(basename "$lib")" ] || cp -L "$lib" "$STAGE/lib/"; done
}
copy_needs "$STAGE"/bin/*
MULTIARCH=/usr/lib/x86_64-linux-gnu
cp -rL "$MULTIARCH/openmpi/lib/openmpi3" "$STAGE/lib/openmpi3"
if [ -d "$MULTIARCH/pmix2/lib/pmix" ]; then cp -rL "$MULTIARCH/pmix2/lib/pmix" "$STAGE/lib/pmix"; fi
copy_needs "$STAGE"/lib/openmpi3/*.so "$STAGE"/lib/pmix/*.so
tar -C "$STAGE" -cJf "$BUILD/gpu-bundle.tar.xz" bin lib share
echo "$BUILD/gpu-bundle.tar.xz: $(du -h "$BUILD/gpu-bundle.tar.xz" | cut -f1) ($(ls "$STAGE/lib" | wc -l) libraries and plug-in folders)"
