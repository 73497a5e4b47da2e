#!/usr/bin/env bash
# oxccl with ranks in processes beside OpenMPI, in the same run: 8 processes, float32
# sum AllReduce, each size given (default 1K 1M 64M).
#
#   scripts/bench-procs.sh [sizes...]
#
# oxccl runs `oxccl perf all-reduce --procs 8`, through shared memory (staged through the
# CCL buffers, then zero-copy on `--shared-buffers`), then as two hosts of 4 processes
# (`--hosts 2`; TCP between them, staged and then zero-copy per peer), and then with
# OXCCL_TRANSPORT=tcp (TCP on loopback); MPI runs the peer benchmark with
# `--mca btl vader,self` (its shared-memory transport) and `--mca btl tcp,self`.
# Installs OpenMPI through scripts/install-deps.sh (Debian packages; needs root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 1K 1M 64M
scripts/install-deps.sh
mkdir -p target
mpicc -O2 -o target/mpi_bench ../shared/bench/peers/mpi_bench.c
cargo build --release -q -p oxccl-cli
# The peer benchmark's iterations for a size (see mpi_bench.c), so that both sides average
# as many calls: 1000 up to 64 KiB, 200 up to 1 MiB, 20 up to 16 MiB, then 5; a tenth of
# that (at least 2) to warm up.
bytes_of() {
  local n=${1%[KMG]}
  case $1 in *K) echo $((n << 10)) ;; *M) echo $((n << 20)) ;; *G) echo $((n << 30)) ;; *) echo "$n" ;; esac
}
for size in "$@"; do
  b=$(bytes_of "$size")
  if [ "$b" -le 65536 ]; then iters=1000; elif [ "$b" -le 1048576 ]; then iters=200
  elif [ "$b" -le 16777216 ]; then iters=20; else iters=5; fi
  warm=$((iters / 10)); [ $warm -lt 2 ] && warm=2
  echo "== all-reduce $size, 8 processes"
  echo "   oxccl --procs 8 (shared memory)"
  ./target/release/oxccl perf all-reduce --procs 8 -b "$size" -e "$size" -n $iters -w $warm | grep -E '^ +[0-9]'
  echo "   oxccl --procs 8 --shared-buffers (shared memory, zero-copy)"
  ./target/release/oxccl perf all-reduce --procs 8 --shared-buffers -b "$size" -e "$size" -n $iters -w $warm \
    | grep -E '^ +[0-9]'
  echo "   MPI --mca btl vader,self"
  mpirun --allow-run-as-root --oversubscribe --mca btl vader,self -np 8 \
    target/mpi_bench allreduce "$size" | grep -E '^ +[0-9]'
  for shared in "" --shared-buffers; do
    echo "   oxccl --procs 8 --hosts 2 $shared (2 hosts of 4 processes, TCP between)"
    ./target/release/oxccl perf all-reduce --procs 8 --hosts 2 $shared -b "$size" -e "$size" \
      -n $iters -w $warm | grep -E '^ +[0-9]'
  done
  echo "   oxccl --procs 8, OXCCL_TRANSPORT=tcp"
  OXCCL_TRANSPORT=tcp ./target/release/oxccl perf all-reduce --procs 8 -b "$size" -e "$size" \
    -n $iters -w $warm | grep -E '^ +[0-9]'
  echo "   MPI --mca btl tcp,self"
  mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 8 \
    target/mpi_bench allreduce "$size" | grep -E '^ +[0-9]'
done
