#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a CUDA toolkit: run what scripts/gpu-pack.sh packed
# (target/gpu-pack/bins.tar.xz), every part under its own time limit, and write each
# part's log and a summary (`part: exit N`) to $OUT (default target/gpu-check):
#
#   platform    the cuda backend's unit tests (kernels compiled by the toolkit's NVRTC)
#   cuda, cuda_device_buffer, cuda_graph, cuda_processes, cuda_capi
#               the backend's GPU tests: virtual ranks of GPU 0, device buffers, graph
#               mode replayed as CUDA graphs, ranks of a job joined over shared memory
#               and TCP, the C ABI on device pointers (none of them skips on a GPU)
#   executors   every executor test binary with OXCCL_TEST_DEVICE=cuda (GPU 0); not in the
#               default list: `cuda` already runs every executor on 2, 4 and 8 virtual
#               ranks, zero-copy and staged, and these take minutes a lease rarely has
#   perf        oxccl perf all-reduce --device cuda --ranks 8 -b 1K -e 1G -f 4, beside
#               the device-to-device copy bound (issue 13's figure)
#   perf-graph  the same through graph mode (--graph --graph-steps 8), to 64 MiB
#   perf-procs  oxccl perf all-reduce --device cuda --procs 2, to 256 MiB: two processes
#               on GPU 0, staged through host memory (page-locked), beside the copy bound
#   perf-procs-pageable
#               the same with OXCCL_CUDA_PIN_STAGING=0 (pageable staging), to weigh the
#               page-locking; not in the default list
#
# Arguments name the parts to run (default: all but executors and perf-procs-pageable,
# in this order), each under LIMIT seconds (default 240). A summary line counts the
# tests that skipped ("skipped: ..."), so a run that found no usable GPU cannot pass for
# a green one; the run stops at once when nvidia-smi sees no GPU. The kernel's module is
# kept in target/gpu-cache (OXCCL_CUDA_CACHE), so a second call on a warm machine
# compiles nothing. NVRTC comes from the toolkit (CUDA_HOME, default /usr/local/cuda):
# cudarc loads libnvrtc.so, so a toolkit that ships only a versioned library gets a link
# to it in a scratch folder.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-target/gpu-check}
mkdir -p "$out"
: > "$out/summary.txt"
pack=target/gpu-pack/bins.tar.xz
[ -e "$pack" ] || { echo "gpu-check: no $pack: run scripts/gpu-pack.sh first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$pack"
bin=$work/bin

cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$work/lib"
nvrtc=$(ls "$cuda"/lib64/libnvrtc.so* "$cuda"/targets/*/lib/libnvrtc.so* 2>/dev/null | grep -v builtins | head -1)
if [ -n "$nvrtc" ]; then
  ln -sf "$nvrtc" "$work/lib/libnvrtc.so"
else
  echo "gpu-check: no libnvrtc.so* under $cuda; set CUDA_HOME" | tee -a "$out/summary.txt"
fi
export LD_LIBRARY_PATH=$work/lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OXCCL_CUDA_INCLUDE=${OXCCL_CUDA_INCLUDE:-$cuda/include}
export OXCCL_CUDA_CACHE=${OXCCL_CUDA_CACHE:-$PWD/target/gpu-cache}
export OXCCL_CUDA_DEVICES=0
limit=${LIMIT:-240}
if ! nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1; then
  echo "gpu-check: nvidia-smi sees no GPU (see nvidia-smi.txt); nothing run" | tee -a "$out/summary.txt"
  exit 3
fi
nvidia-smi >> "$out/nvidia-smi.txt" 2>&1

# run PART SECONDS COMMAND...: the command's output in $OUT/PART.log, its status in the
# summary.
run() {
  local part=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$out/$part.log" 2>&1
  local code=$?
  local skipped
  skipped=$(grep -c '^skipped:' "$out/$part.log")
  echo "$part: exit $code in $((SECONDS - start)) s, $skipped skipped" | tee -a "$out/summary.txt"
}

part() {
  case "$1" in
    platform) run platform "$limit" "$bin/oxccl_platform" cuda:: ;;
    cuda | cuda_device_buffer | cuda_graph | cuda_processes | cuda_capi) run "$1" "$limit" "$bin/$1" ;;
    executors)
      for exe in "$bin"/*_executors; do
        OXCCL_TEST_DEVICE=cuda run "executors-$(basename "$exe")" "$limit" "$exe"
      done
      ;;
    perf) run perf "$limit" "$bin/oxccl" perf all-reduce --device cuda --ranks 8 -b 1K -e 1G -f 4 ;;
    perf-graph)
      run perf-graph "$limit" "$bin/oxccl" perf all-reduce --device cuda --ranks 8 -b 1K -e 64M -f 4 \
        --graph --graph-steps 8
      ;;
    perf-procs)
      run perf-procs "$limit" "$bin/oxccl" perf all-reduce --device cuda --procs 2 -b 1K -e 256M -f 4
      ;;
    perf-procs-pageable)
      OXCCL_CUDA_PIN_STAGING=0 run perf-procs-pageable "$limit" "$bin/oxccl" perf all-reduce \
        --device cuda --procs 2 -b 1K -e 256M -f 4
      ;;
    *) echo "gpu-check: unknown part $1" | tee -a "$out/summary.txt" ;;
  esac
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(platform cuda cuda_device_buffer cuda_graph cuda_processes cuda_capi perf perf-graph perf-procs)
for p in "${parts[@]}"; do
  part "$p"
done
