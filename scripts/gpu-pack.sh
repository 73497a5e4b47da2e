#!/usr/bin/env bash
# Build, here, what a machine with an NVIDIA GPU checks (scripts/gpu-check.sh runs it
# there): the oxccl CLI and the test binaries that exercise the cuda backend, built with
# the `cuda` feature, stripped, packed into target/gpu-pack/bins.tar.xz. A GPU machine
# lent for a few minutes then spends them running, not compiling:
#
#   scripts/gpu-pack.sh                      # here (a few minutes; prints the pack's size)
#   # carry target/gpu-pack (git ignores target/) to the GPU machine, then there:
#   scripts/gpu-check.sh                     # logs and a summary in $OUT (or target/gpu-check)
#
# The test binaries: the cuda unit tests of the platform, tests/cuda.rs,
# cuda_device_buffer.rs, cuda_graph.rs, cuda_processes.rs, cuda_capi.rs, and every executor test (run there with
# OXCCL_TEST_DEVICE=cuda). Needs python3 (to read cargo's list of test binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/gpu-pack
rm -rf "$out"
mkdir -p "$out/bin"

# The executables cargo built for `cargo test ... --no-run` with these arguments.
test_binaries() {
  cargo test "$@" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg.get("profile", {}).get("test"):
        print(msg["target"]["name"], exe)
'
}

cargo build -p oxccl-cli --features cuda --bin oxccl >&2
cp target/debug/oxccl "$out/bin/oxccl"
{
  test_binaries -p oxccl-platform --features cuda --lib
  test_binaries -p oxccl-tests --features cuda --tests
} | while read -r name exe; do
  case "$name" in
    oxccl_platform | cuda | cuda_device_buffer | cuda_graph | cuda_processes | cuda_capi | *_executors) cp "$exe" "$out/bin/$name" ;;
  esac
done
strip --strip-debug "$out"/bin/*
tar -C "$out" -cJf "$out/bins.tar.xz" bin
rm -rf "$out/bin"
ls -l "$out/bins.tar.xz" >&2
