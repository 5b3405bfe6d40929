#!/usr/bin/env bash
# shardlab on one GPU or TPU in under 5 minutes: the default sweep, an 8192^3 bfloat16 matmul
# with the check on, the README's program with `analysis profile`, and a short table.
#   bash tests/accelerator/run.sh [--out DIR] [--cpu-dry-run]
# (tests/accelerator/accelerator_check.py says what it runs; docs/testing.md, "On an accelerator".)
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/accelerator_check.py" "$@"
