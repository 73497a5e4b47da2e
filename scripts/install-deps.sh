#!/usr/bin/env bash
# Install what the tests and benchmarks need beyond the Rust toolchain, idempotently:
# OpenMPI (Debian packages openmpi-bin, libopenmpi-dev) for the launcher tests (`mpirun`)
# and the peer benchmark (`mpicc`), and a C compiler (gcc, with binutils' `nm`) for the C
# ABI's tests. Does nothing when they are already there.
# Needs root (or sudo) for apt-get; .ci/run calls it on a fresh machine.
set -euo pipefail
need=()
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
command -v cc >/dev/null && command -v nm >/dev/null || need+=(gcc binutils)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openmpi-bin libopenmpi-dev
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc binutils
