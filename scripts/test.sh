#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (unit, simulator,
# multi-process and the PyPI clients). Tests run one at a time: several measure device-time shares.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
cd build
ctest --output-on-failure --timeout 600 "$@"
