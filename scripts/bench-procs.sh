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
for size in "$@"; do
  iters=50; [ "$size" = 64M ] && iters=10
  echo "== all-reduce $size, 8 processes"
  echo "   oxccl --procs 8 (shared memory)"
  ./target/release/oxccl perf all-reduce --procs 8 -b "$size" -e "$size" -n $iters -w 5 | grep -E '^ +[0-9]'
  echo "   oxccl --procs 8 --shared-buffers (shared memory, zero-copy)"
  ./target/release/oxccl perf all-reduce --procs 8 --shared-buffers -b "$size" -e "$size" -n $iters -w 5 \
    | grep -E '^ +[0-9]'
  echo "   MPI --mca btl vader,self"
  mpirun --allow-run-as-root --oversubscribe --mca btl vader,self -np 8 \
    target/mpi_bench allreduce "$size" | grep -E '^ +[0-9]'
  for shared in "" --shared-buffers; do
    echo "   oxccl --procs 8 --hosts 2 $shared (2 hosts of 4 processes, TCP between)"
    ./target/release/oxccl perf all-reduce --procs 8 --hosts 2 $shared -b "$size" -e "$size" \
      -n $iters -w 5 | grep -E '^ +[0-9]'
  done
  echo "   oxccl --procs 8, OXCCL_TRANSPORT=tcp"
  OXCCL_TRANSPORT=tcp ./target/release/oxccl perf all-reduce --procs 8 -b "$size" -e "$size" \
    -n $iters -w 5 | grep -E '^ +[0-9]'
  echo "   MPI --mca btl tcp,self"
  mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 8 \
    target/mpi_bench allreduce "$size" | grep -E '^ +[0-9]'
done
