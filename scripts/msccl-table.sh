#!/usr/bin/env bash
# The MSCCL-IR test files as a markdown table: every file the generators of
# `tests/src/msccl/` write (`msccl_files`), with its operator, ranks, step types, the
# importer's and the analyzer's verdict, and for the correct ones the modelled busbw on one
# server of its rank count (`1x4`, `mesh8`, `1x16`) next to select_alg's built-in pick at
# the same count (`oxccl check --json`, the analyzer must pass for a figure).
#
#   scripts/msccl-table.sh            (about 16 MiB in the larger buffer per rank)
#   MIB=1 scripts/msccl-table.sh
#
# Files that need more link channels than the default get them (OXCCL_LINK_CHANNELS=32: the 12-channel 16-rank file needs 24).
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${MIB:-16}
# The dev profile is optimized (Cargo.toml); it shares the test build.
cargo build -q -p oxccl-cli -p oxccl-tests --bins
bin=./target/debug/oxccl
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
./target/debug/msccl_files "$dir" >/dev/null
export OXCCL_LINK_CHANNELS=32
topo_for() { case $1 in 8) echo mesh8 ;; *) echo "1x$1" ;; esac; }
coll_arg() {
  case $1 in
    allreduce) echo all-reduce ;; allgather | all_gather) echo all-gather ;;
    reducescatter | reduce_scatter) echo reduce-scatter ;; alltoall) echo all-to-all ;;
    *) echo "$1" ;;
  esac
}
busbw() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read())["rows"][0]; print("%.2f %s" % (r["busbw_gbps"], r["executor"]))'; }
echo "| file | operator | ranks | step types | verdict | count | file busbw (GB/s) | select_alg's pick (GB/s) |"
echo "|---|---|---|---|---|---|---|---|"
tail -n +2 "$dir/index.tsv" | while IFS=$'\t' read -r file op ranks steps verdict stage root _; do
  f="$dir/$file"
  if [ "$verdict" != pass ]; then
    coll=$(coll_arg "$op")
    if out=$($bin check "$coll" --ranks "$ranks" --algo-file "$f" -r "$root" --count 0 2>&1); then
      got="accepted?"
    else
      got=$(grep -oE "$verdict|Semantics|Memory|Deadlock|LostWakeup|malformed|outside|cycle" <<<"$out" | head -1)
    fi
    # Wrong-but-well-formed files import; the analyzer must catch them at a real count.
    if [ "$stage" = analyze ]; then
      name=$(grep -o '<algo name="[^"]*"' "$f" | cut -d'"' -f2)
      n=$(grep -o 'nchunksperloop="[0-9]*"' "$f" | cut -d'"' -f2)
      out=$($bin check "$coll" --ranks "$ranks" --algo-file "$f" --algo "$name" -r "$root" --count $((n * 4)) 2>&1 || true)
      got=$(grep -oE "FAIL at [0-9]+ B: \[[A-Za-z]+\]" <<<"$out" | head -1 | sed 's/.*\[\(.*\)\]/analyzer: \1/')
    fi
    echo "| $file | $op | $ranks | $steps | expected $verdict: ${got:-not caught} | | | |"
    continue
  fi
  name=$(grep -o '<algo name="[^"]*"' "$f" | cut -d'"' -f2)
  n=$(grep -o 'nchunksperloop="[0-9]*"' "$f" | cut -d'"' -f2)
  coll=$(coll_arg "$op")
  mult=1
  case $coll in all-reduce | broadcast | reduce) ;; *) mult=$ranks ;; esac
  g=$(python3 -c "import math; print(math.gcd($n, $mult))")
  unit=$((n / g))
  count=$(((mib * 262144 / mult) / unit * unit))
  topo=$(topo_for "$ranks")
  mine=$($bin check "$coll" --topo "$topo" --algo-file "$f" --algo "$name" -r "$root" --count "$count" --json 2>/dev/null | busbw | cut -d' ' -f1 || echo "FAIL")
  pick=$($bin check "$coll" --topo "$topo" -r "$root" --count "$count" --json 2>/dev/null | busbw || echo "error")
  echo "| $file | $op | $ranks | $steps | PASS | $count | $mine | ${pick#* } ${pick%% *} |"
done
