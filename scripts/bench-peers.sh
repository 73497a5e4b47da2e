#!/usr/bin/env bash
# Install and build the peer benchmark (OpenMPI) that oxccl's figures are compared with,
# then run it next to `oxccl perf` on 8 ranks, float32 (sum), in the same run.
#
#   scripts/bench-peers.sh [sizes...]        (default: 1K 1M 64M)
#   COLLS="all-reduce broadcast" scripts/bench-peers.sh 1M
#
# COLLS (default: all-reduce all-gather reduce-scatter broadcast) are oxccl's names; sizes
# follow nccl-tests (per rank for all-reduce and broadcast, total for the others) in both.
# OXCCL_BASELINE=path/to/an/older/oxccl adds that binary's rows to every comparison, so a
# change is judged against its predecessor in the same run (machines are shared and noisy).
# Installs OpenMPI through scripts/install-deps.sh (Debian packages; needs root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 1K 1M 64M
colls=${COLLS:-all-reduce all-gather reduce-scatter broadcast}
scripts/install-deps.sh
peers=../shared/bench/peers
mkdir -p target
mpicc -O2 -o target/mpi_bench "$peers/mpi_bench.c"
cargo build --release -q -p oxccl-cli
mpi_name() {
  case $1 in
    all-reduce) echo allreduce ;; all-gather) echo allgather ;;
    reduce-scatter) echo reducescatter ;; broadcast) echo bcast ;;
    *) echo "no MPI peer for $1" >&2; exit 2 ;;
  esac
}
for coll in $colls; do
  for size in "$@"; do
    iters=50; [ "$size" = 64M ] && iters=10
    echo "== $coll $size"
    ./target/release/oxccl perf "$coll" --ranks 8 -b "$size" -e "$size" -n $iters -w 5 | grep -E '^ +[0-9]'
    if [ -n "${OXCCL_BASELINE:-}" ]; then
      echo "   (baseline $OXCCL_BASELINE)"
      "$OXCCL_BASELINE" perf "$coll" --ranks 8 -b "$size" -e "$size" -n $iters -w 5 | grep -E '^ +[0-9]'
    fi
    mpirun --allow-run-as-root --oversubscribe -np 8 target/mpi_bench "$(mpi_name "$coll")" "$size" | grep -E '^ +[0-9]'
  done
done
