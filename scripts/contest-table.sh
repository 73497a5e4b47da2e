#!/usr/bin/env bash
# The contest comparison of issue 5: AllReduce on mesh8 with the 0-1 link broken, modelled
# algbw (GB/s) at 1 KiB, 1 MiB and 1 GiB of
#   (a) the bidir-ring plugin over the twisted order 1,2,3,4,5,6,0,7,
#   (b) a mesh with a single relay for ranks 0 and 1 (`relay-mesh-single`),
#   (c) select_alg's pick,
# and the bound: ranks 0 and 1 have six links and must each move 2(N-1)/N of the data over
# them, so algbw <= 6 * 56 / (2 * 7 / 8) = 192 GB/s.
#
#   scripts/contest-table.sh [COLLECTIVE]     (default: all-reduce)
set -euo pipefail
cd "$(dirname "$0")/.."
coll=${1:-all-reduce}
cargo build --release -q -p oxccl-cli
bin=./target/release/oxccl
args=(check "$coll" --topo mesh8 --broken 0-1 -b 1K -e 1G -f 1024 --json)
row() {
  python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(" | ".join("%.4g (%s)" % (r["algbw_gbps"], r["executor"]) for r in d["rows"]))'
}
echo "| AllReduce, mesh8, 0-1 broken | 1 KiB | 1 MiB | 1 GiB |"
echo "|---|---|---|---|"
echo "| (a) bidir-ring, order 1,2,3,4,5,6,0,7 | $(OXCCL_BIDIR_RING_ORDER=1,2,3,4,5,6,0,7 $bin "${args[@]}" --algo bidir-ring | row) |"
echo "| (b) mesh, single relay | $($bin "${args[@]}" --algo relay-mesh-single | row) |"
echo "| (c) select_alg | $($bin "${args[@]}" | row) |"
echo "| bound | | | 192 |"
