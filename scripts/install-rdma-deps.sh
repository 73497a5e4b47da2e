#!/usr/bin/env bash
# Install what the `rdma` feature needs to build, idempotently (Debian packages):
# libibverbs-dev (rdma-core's headers and libibverbs.so, which the build links), cmake
# and python3 (ibverbs-sys configures its vendored rdma-core to generate its bindings),
# libclang-dev (bindgen), pkg-config and gcc. Installs no RDMA device, and needs none:
# without one the transport's tests run against the fake fabric and the device tests say
# `skipped`. Does nothing when every package is there.
# Needs root (or sudo) for apt-get; .ci/run calls it on a fresh machine.
set -euo pipefail
packages=(libibverbs-dev cmake python3 libclang-dev pkg-config gcc)
need=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
