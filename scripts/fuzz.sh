#!/usr/bin/env bash
# The fuzzers with more cases than `cargo test` runs: the topology and tuning-table
# parsers (framework/tests/fuzz_inputs.rs), the command-line planner
# (adapters/cli/src/fuzz_args.rs) and the eager and group API of every operator, with
# guard bytes around every buffer (tests/tests/fuzz_api/, one module per operator family). Each harness prints
# "fuzz NAME: N cases (...)".
# Usage: scripts/fuzz.sh [cases per harness, default 5000]
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${1:-5000}"
echo "# fuzzing with PROPTEST_CASES=$PROPTEST_CASES"
cargo test -p oxccl-framework --test fuzz_inputs -- --nocapture --test-threads=2 2>&1 \
    | grep -E '^fuzz |^test result|panicked|minimal failing'
cargo test -p oxccl-cli --lib fuzz_ -- --nocapture --test-threads=2 2>&1 \
    | grep -E '^fuzz |^test result|panicked|minimal failing'
cargo test -p oxccl-tests --test fuzz_api -- --nocapture --test-threads=2 2>&1 \
    | grep -E '^fuzz |^test result|panicked|minimal failing'
