#!/usr/bin/env bash
# Install and build the peer benchmark (OpenMPI) that oxccl's figures are compared with,
# then run it next to `oxccl perf` for AllReduce, float32 sum, 8 ranks.
#
#   scripts/bench-peers.sh [sizes...]        (default: 1K 1M 64M)
#
# Needs root for apt-get (Debian packages openmpi-bin, libopenmpi-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 1K 1M 64M
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq openmpi-bin libopenmpi-dev
fi
peers=../shared/bench/peers
mkdir -p target
mpicc -O2 -o target/mpi_bench "$peers/mpi_bench.c"
cargo build --release -q -p oxccl-cli
for size in "$@"; do
  echo "== $size"
  ./target/release/oxccl perf all-reduce --ranks 8 -b "$size" -e "$size" -n 50 -w 5 | grep -E '^ +[0-9]'
  mpirun --allow-run-as-root --oversubscribe -np 8 target/mpi_bench allreduce "$size" | grep -E '^ +[0-9]'
done
