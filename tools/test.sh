#!/usr/bin/env bash
# Builds graphrun and runs the whole test suite (unit, conformance, end-to-end) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 1200
