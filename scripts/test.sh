#!/usr/bin/env bash
# Builds (running set-up first when needed) and runs the whole test suite:
# unit, kernel (vs PyTorch and finite differences), distributed (ranks as
# threads), MPI (2, 3, 4 processes) and end-to-end CLI tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export OMP_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
ctest --test-dir build --output-on-failure -j2 "$@"
