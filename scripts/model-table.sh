#!/usr/bin/env bash
# Modelled bandwidth of every executor of some collectives on some topologies, as a
# markdown table: `oxccl check COLL --topo T [--broken A-B]... --algo X -b 1K -e 1G -f 1024
# --json` per cell (the analyzer must pass for a figure to be printed), and a last row with
# select_alg's pick.
#
#   scripts/model-table.sh [topologies...]    (default: mesh8 2x8)
#   COLLS="all-reduce broadcast" scripts/model-table.sh mesh8
#   BROKEN="0-1 2-3" METRIC=algbw scripts/model-table.sh mesh8
#
# METRIC is busbw (default) or algbw, in GB/s.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- mesh8 2x8
colls=${COLLS:-all-reduce all-gather reduce-scatter broadcast}
metric=${METRIC:-busbw}
broken=()
for pair in ${BROKEN:-}; do broken+=(--broken "$pair"); done
cargo build --release -q -p oxccl-cli
bin=./target/release/oxccl
field="${metric}_gbps"
for topo in "$@"; do
  echo "### $topo${BROKEN:+ broken $BROKEN}: modelled $metric (GB/s) at 1 KiB / 1 MiB / 1 GiB"
  echo
  echo "| collective | executor | 1 KiB | 1 MiB | 1 GiB |"
  echo "|---|---|---|---|---|"
  for coll in $colls; do
    op=${coll//-/_}
    for algo in $($bin algs | awk -v op="$op" '$1 == op { print $2 }'); do
      if out=$($bin check "$coll" --topo "$topo" "${broken[@]}" --algo "$algo" -b 1K -e 1G -f 1024 --json 2>&1); then
        cells=$(FIELD=$field python3 -c 'import json,os,sys; d=json.loads(sys.stdin.read()); print(" | ".join("%.3g" % r[os.environ["FIELD"]] for r in d["rows"]))' <<<"$out")
      else
        cells="refused: $(tail -1 <<<"$out" | cut -c1-90)"
      fi
      echo "| $coll | $algo | $cells |"
    done
    sel=$($bin check "$coll" --topo "$topo" "${broken[@]}" -b 1K -e 1G -f 1024 --json 2>/dev/null \
      | FIELD=$field python3 -c 'import json,os,sys; d=json.loads(sys.stdin.read()); print(" | ".join("%.3g (%s)" % (r[os.environ["FIELD"]], r["executor"]) for r in d["rows"]))' || echo "error")
    echo "| $coll | *select_alg* | $sel |"
  done
  echo
done
