#!/usr/bin/env bash
# The four collectives at a large size against their memory-traffic bound, in one run.
#
#   scripts/bench-bound.sh [size=64M] [ranks=8]
#   OXCCL_BASELINE=path/to/an/older/oxccl scripts/bench-bound.sh    (adds its rows)
#
# The bound of a collective is the least memory traffic it can make (every byte it must
# read and every byte it must write, once) over the traffic rate of a plain copy, which
# `../shared/bench/peers/memcpy_bench.c` measures in the same run with as many threads as
# the host device has workers (a copy of B bytes reads B and writes B). With n ranks and
# the perf size S (per rank for all-reduce and broadcast, total for the others):
#
#   collective       reads + writes, out of place     in place
#   all-reduce       nS + nS                           the same
#   all-gather       S + nS (each block read once)     S + (n-1)S
#   reduce-scatter   nS + S                            the same
#   broadcast        S + nS (the root's buffer once)   S + (n-1)S
#
# (A rank may read a block more than once: these are floors, not what an executor makes.)
# The fraction printed is bound time / measured time, so 1.0 is the memory bus.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-64M}
ranks=${2:-8}
mkdir -p target
cc -O2 -pthread -o target/memcpy_bench ../shared/bench/peers/memcpy_bench.c
cargo build --release -q -p oxccl-cli
threads=${OXCCL_HOST_THREADS:-0}
[ "$threads" = 0 ] && threads=$(nproc)
bytes=$(numfmt --from=iec "$size")
run() { # binary collective -> "out_us in_us executor"
  "$1" perf "$2" --ranks "$ranks" -b "$size" -e "$size" -n 10 -w 3 |
    awk '/^ +[0-9]/ { print $6, $10, $NF }'
}
copy=$(./target/memcpy_bench "$threads" 256 10 | sed -E 's/.*mean ([0-9.]+) GB\/s.*/\1/')
echo "# memcpy_bench $threads threads: $copy GB/s copied (mean), $size, $ranks ranks"
printf '# %-15s %-10s %12s %12s %8s %8s  %s\n' collective binary out_us in_us out/bnd in/bnd executor
for coll in all-reduce all-gather reduce-scatter broadcast; do
  case $coll in
    all-reduce) out=$((2 * ranks)); in=$out ;;
    reduce-scatter) out=$((ranks + 1)); in=$out ;;
    *) out=$((ranks + 1)); in=$ranks ;;
  esac
  for bin in ./target/release/oxccl ${OXCCL_BASELINE:-}; do
    read -r t_out t_in exe < <(run "$bin" "$coll") || true
    if [ -z "${exe:-}" ]; then
      echo "bench-bound: $bin perf $coll printed no row" >&2
      exit 1
    fi
    awk -v c="$coll" -v b="$(basename "$bin")" -v o="$t_out" -v i="$t_in" -v e="$exe" \
        -v S="$bytes" -v fo="$out" -v fi="$in" -v bw="$copy" 'BEGIN {
      bound_out = fo * S / (2 * bw * 1e3); bound_in = fi * S / (2 * bw * 1e3)   # us
      printf "  %-15s %-10s %12.1f %12.1f %8.2f %8.2f  %s\n", c, b, o, i, bound_out / o, bound_in / i, e
    }'
  done
done
