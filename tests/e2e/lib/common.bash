# Sourced by the end-to-end scripts as `source lib/common.bash "$@"`: the braid
# binary and source dir from the arguments, a temporary directory removed on
# exit, one compute thread per rank, mpirun allowed as root, fail(), MPIRUN,
# make_tokens to build a small token file pair for the run, run and same_run to
# train and compare, same_over_tcp to repeat a run over TCP, and emulated_hosts
# for the scripts that run on hosts emulated by scripts/cluster.sh.
set -uo pipefail
BRAID="$1"; SRC="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; exit 1; }
MPIRUN=(mpirun --oversubscribe --bind-to none)
# Ranks on different hosts talk over TCP sockets, not shared memory; pml ob1
# makes the btl list the transport actually used (no UCX bypass).
TCP=(--mca pml ob1 --mca btl tcp,self)
declare -A run_args  # NAME -> NP and flags of `run NAME`, shell-quoted

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

# run NAME NP FLAGS...: `braid train "${common[@]}" FLAGS` on NP ranks under
# mpirun, metrics in $tmp/NAME.jsonl, output in $tmp/NAME.txt; fails the script
# (showing the output) if the job fails.
run() {
  local name="$1" np="$2"; shift 2
  run_args[$name]="$(printf '%q ' "$np" "$@")"
  timeout 300 "${MPIRUN[@]}" -np "$np" "$BRAID" train "${common[@]}" --metrics-out "$tmp/$name.jsonl" "$@" \
    > "$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "$name exited non-zero"; }
}

# same_run KEYS REF NAME[:RTOL]...: every metric in KEYS (comma-separated, e.g.
# loss,val_loss) of each run NAME equals run REF's to RTOL (default 1e-5).
same_run() {
  /usr/bin/python3 - "$tmp" "$@" <<'PY' || fail "runs differ from $2"
import json, os, sys
d, keys, ref, runs = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4:]
def rows(n, key):
    return [json.loads(l)[key] for l in open(os.path.join(d, n + ".jsonl")) if '"%s"' % key in l]
for key in keys:
    want = rows(ref, key)
    for spec in runs:
        name, _, rtol = spec.partition(":")
        got = rows(name, key)
        assert len(got) == len(want) > 0, (name, key, got)
        for a, b in zip(got, want):
            assert abs(a - b) <= float(rtol or 1e-5) * abs(b), (name, key, a, b)
PY
}

# same_over_tcp NAME...: repeats each `run NAME` (same ranks and flags) with the
# ranks talking over TCP, as NAME.tcp, and checks its loss, grad_norm and
# val_loss equal NAME's bitwise: the collectives are deterministic whatever
# the transport.
same_over_tcp() {
  local name keys args MPIRUN=("${MPIRUN[@]}" "${TCP[@]}")  # the local MPIRUN is the one run sees
  for name in "$@"; do
    [ -n "${run_args[$name]:-}" ] || fail "same_over_tcp: no run named $name"
    eval "args=(${run_args[$name]})"
    run "$name.tcp" "${args[@]}"
    keys=loss,grad_norm
    grep -q val_loss "$tmp/$name.jsonl" && keys+=,val_loss
    same_run "$keys" "$name" "$name.tcp:0"
  done
}

# emulated_hosts PREFIX: the cluster of scripts/cluster.sh this script uses
# ($CLUSTER, named PREFIX and the PID so copies running at once never share an
# interface, namespace or hostname), or exit 0 saying why the machine cannot
# make one (not root; no network, UTS or mount namespaces).
emulated_hosts() {
  CLUSTER="$SRC/scripts/cluster.sh"
  export BRAID_CLUSTER=$1$$
  [ "$(id -u)" = 0 ] || { echo "SKIP: emulated hosts need root (namespaces, veth, tc)"; exit 0; }
  # Anonymous namespaces probe the permission without a name another run could hold.
  unshare --net true 2>/dev/null || { echo "SKIP: cannot make network namespaces here"; exit 0; }
  unshare --uts --mount true 2>/dev/null || { echo "SKIP: cannot make UTS and mount namespaces here"; exit 0; }
}
