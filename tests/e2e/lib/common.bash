# Sourced by the end-to-end scripts as `source lib/common.bash "$@"`: the braid
# binary and source dir from the arguments, a temporary directory removed on
# exit, one compute thread per rank, mpirun allowed as root, fail(), MPIRUN,
# and make_tokens to build a small token file pair for the run.
set -uo pipefail
BRAID="$1"; SRC="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; exit 1; }
MPIRUN=(mpirun --oversubscribe --bind-to none)

# make_tokens SEED PARAGRAPHS "words ...": random sentences over the words,
# tokenized into $tmp/t_train.bin and $tmp/t_val.bin.
make_tokens() {
  /usr/bin/python3 - "$tmp/text.txt" "$1" "$2" "$3" <<'PY'
import sys, random
random.seed(int(sys.argv[2]))
words = sys.argv[4].split()
with open(sys.argv[1], "w") as f:
    for p in range(int(sys.argv[3])):
        f.write(" ".join(random.choice(words) for _ in range(50)).capitalize() + ".\n\n")
PY
  "$BRAID" prepare-data --input "$tmp/text.txt" --out-dir "$tmp" --name t >/dev/null 2>&1 || fail "prepare-data"
}
