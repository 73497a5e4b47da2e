#!/usr/bin/env bash
# Modelled bus bandwidth of every executor of some collectives on some topologies, as a
# markdown table: `oxccl check COLL --topo T --algo X -b 1K -e 1G -f 1024 --json` per cell
# (the analyzer must pass for a figure to be printed).
#
#   scripts/model-table.sh [topologies...]    (default: mesh8 2x8)
#   COLLS="all-reduce broadcast" scripts/model-table.sh mesh8
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- mesh8 2x8
colls=${COLLS:-all-reduce all-gather reduce-scatter broadcast}
cargo build --release -q -p oxccl-cli
bin=./target/release/oxccl
for topo in "$@"; do
  echo "### $topo: modelled busbw (GB/s) at 1 KiB / 1 MiB / 1 GiB"
  echo
  echo "| collective | executor | 1 KiB | 1 MiB | 1 GiB |"
  echo "|---|---|---|---|---|"
  for coll in $colls; do
    op=${coll//-/_}
    for algo in $($bin algs | awk -v op="$op" '$1 == op { print $2 }'); do
      if out=$($bin check "$coll" --topo "$topo" --algo "$algo" -b 1K -e 1G -f 1024 --json 2>&1); then
        cells=$(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(" | ".join("%.3g" % r["busbw_gbps"] for r in d["rows"]))' <<<"$out")
      else
        cells="refused: $(tail -1 <<<"$out" | cut -c1-90)"
      fi
      echo "| $coll | $algo | $cells |"
    done
    sel=$($bin check "$coll" --topo "$topo" -b 1K -e 1G -f 1024 --json 2>/dev/null \
      | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(" | ".join("%.3g (%s)" % (r["busbw_gbps"], r["executor"]) for r in d["rows"]))' || echo "error")
    echo "| $coll | *select_alg* | $sel |"
  done
  echo
done
