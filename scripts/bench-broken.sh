#!/usr/bin/env bash
# Host-device AllReduce on mesh8 with the 0-1 link broken, against healthy mesh8 and the
# OpenMPI peer (scripts/bench-peers.sh builds target/mpi_bench), in one run; then
# `oxccl tune` on the broken topology and `oxccl perf` without and with its table.
# Figures of issue 5 note. Usage: scripts/bench-broken.sh
set -e
cd "$(dirname "$0")/.."
cargo build --release -q -p oxccl-cli
B=target/release/oxccl
for s in 1K 1M 64M; do
  n=50; [ $s = 64M ] && n=10
  echo "== size $s"
  $B perf all-reduce --topo mesh8 --broken 0-1 -b $s -e $s -n $n -w 5 | grep -E '^ +[0-9]'
  $B perf all-reduce --topo mesh8 -b $s -e $s -n $n -w 5 | grep -E '^ +[0-9]'
  mpirun --allow-run-as-root --oversubscribe -np 8 target/mpi_bench allreduce $s | grep -E '^ +[0-9]'
done
echo "== tune"
rm -f /tmp/tune-broken.txt
$B tune all-reduce --topo mesh8 --broken 0-1 -b 1K -e 16M -f 4 -o /tmp/tune-broken.txt | tail -30
echo "== perf without table"
$B perf all-reduce --topo mesh8 --broken 0-1 -b 1K -e 16M -f 4 -n 20 -w 3 | grep -E '^ +[0-9]'
echo "== perf with table"
OXCCL_TUNE_FILE=/tmp/tune-broken.txt $B perf all-reduce --topo mesh8 --broken 0-1 -b 1K -e 16M -f 4 -n 20 -w 3 | grep -E '^ +[0-9]'
