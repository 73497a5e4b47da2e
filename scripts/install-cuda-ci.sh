#!/usr/bin/env bash
# NVRTC and the CUDA headers for the `cuda` feature's kernel-compilation test, on a machine
# without a CUDA toolkit (CI): the PyPI wheels nvidia-cuda-nvrtc-cu12 (libnvrtc.so.12 and
# its builtins) and nvidia-cuda-runtime-cu12 (cuda_fp16.h, cuda_bf16.h, ...), installed
# with pip into target/cuda-wheels. Idempotent: a second run installs nothing.
#
#   eval "$(scripts/install-cuda-ci.sh)"
#
# prints, on stdout, the two exports the tests need:
#   LD_LIBRARY_PATH   the wheel's lib folder (cudarc loads libnvrtc.so.12 from there)
#   OXCCL_CUDA_INCLUDE the runtime wheel's include folder (NVRTC's -I)
# Everything else goes to stderr. Needs python3 with pip and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
NVRTC=nvidia-cuda-nvrtc-cu12==12.9.86
RUNTIME=nvidia-cuda-runtime-cu12==12.9.79
prefix=$PWD/target/cuda-wheels
stamp=$prefix/.installed-$NVRTC-$RUNTIME
if [ ! -e "$stamp" ]; then
  rm -rf "$prefix"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --target "$prefix" "$NVRTC" "$RUNTIME" >&2
  touch "$stamp"
fi
lib=$prefix/nvidia/cuda_nvrtc/lib
include=$prefix/nvidia/cuda_runtime/include
[ -e "$lib/libnvrtc.so.12" ] || { echo "install-cuda-ci: no libnvrtc.so.12 in $lib" >&2; exit 1; }
[ -e "$include/cuda_fp16.h" ] || { echo "install-cuda-ci: no cuda_fp16.h in $include" >&2; exit 1; }
echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export OXCCL_CUDA_INCLUDE=$include"
