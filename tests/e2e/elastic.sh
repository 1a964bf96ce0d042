#!/usr/bin/env bash
# Elastic restart on emulated hosts (scripts/cluster.sh): `braid run --elastic`
# started in host 0 over 3 hosts (2 ranks each); host 2 dies mid-run (its
# processes killed, its link down, the launcher refused there); the supervisor
# finds it gone, relaunches on the 4 ranks of hosts 0 and 1 with the global batch
# kept by gradient accumulation, from the newest checkpoint, and the job
# finishes. Its losses after the restart are bitwise those of a run resumed by
# hand at that layout. Then: a memory budget only the 6-rank layout meets (exit
# 2, nothing fits), and, with `all`, --min-nodes and --max-restarts stopping it.
# Nothing of the cluster is left afterwards. Needs root and namespaces; skips,
# saying why, without them.
#   bash tests/e2e/elastic.sh BRAID SRC [all | CASE...]   (cases: restart budget min-nodes max-restarts figures)
source "$(dirname "$0")/lib/common.bash" "$@"
shift 2
emulated_hosts be
trap '"$CLUSTER" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"$CLUSTER" up 3 --shm 256m >/dev/null || fail "cluster up"

make_tokens 7 200 "the jury said it did find that many of the registration practices were in need of reform"
common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 12
        --micro-batch 2 --val-every 0 --grad-clip 0.5)

# elastic NAME TIMEOUT ELASTIC_FLAGS -- TRAIN_FLAGS: braid run --elastic in host 0
# over hosts "2 2 2" in the background; output in NAME.txt, metrics in NAME.jsonl,
# the supervisor's PID in $sup.
elastic() {
  local name=$1 ctimeout=$2; shift 2
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  mapfile -t launcher < <("$CLUSTER" mpirun-args --hosts "2 2 2")
  "$CLUSTER" exec 0 -- env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    "$BRAID" run --elastic "${flags[@]}" -- "${launcher[@]}" "$BRAID" train "${common[@]}" \
    --comm-timeout "$ctimeout" --metrics-out "$tmp/$name.jsonl" "$@" > "$tmp/$name.txt" 2>&1 &
  sup=$!
}

# wait_step NAME N: until the job's metrics reach step N (60 s at most).
wait_step() {
  local t=0 n
  while n=$(grep -c '"loss"' "$tmp/$1.jsonl" 2>/dev/null); [ "${n:-0}" -lt "$2" ]; do
    sleep 0.2; t=$((t + 1))
    [ $t -lt 300 ] || { cat "$tmp/$1.txt"; fail "$1 did not reach step $2"; }
  done
}

# Nothing of a finished job on any host, allowing the far side up to 15 s to
# follow (an aborting rank's daemon reaper lives 5 s).
nothing_left() {
  local i left t=0
  while :; do
    left=""
    for i in 0 1 2; do left+=$("$CLUSTER" procs $i | sed "s/^/host $i: /"); done
    [ -n "$left" ] || return 0
    [ $t -lt 75 ] || fail "$1: processes left 15 s after the job: $left"
    sleep 0.2; t=$((t + 1))
  done
}

# at_line NAME REGEX: seconds (EPOCHREALTIME) when NAME.txt first has a line matching REGEX.
at_line() {
  local t=0
  until grep -qE "$2" "$tmp/$1.txt" 2>/dev/null; do
    sleep 0.05; t=$((t + 1)); [ $t -lt 6000 ] || return 1
  done
  echo "$EPOCHREALTIME"
}

# restart_case NAME COMM_TIMEOUT KILL_AT_STEP TRAIN_FLAGS...: host 2 killed once
# the job has reached the step; the job must finish on hosts 0 and 1 with the
# losses of a resume by hand. Prints detection, restart and steps lost.
restart_case() {
  local name=$1 ctimeout=$2 kill_at=$3; shift 3
  elastic "$name" "$ctimeout" --min-nodes 2 --max-restarts 1 -- "$@" --save "$tmp/$name.ck"
  wait_step "$name" "$kill_at"
  "$CLUSTER" host 2 kill
  local killed=$EPOCHREALTIME reported resumed_at
  reported=$(at_line "$name" "^braid run: restart 1 of") || { cat "$tmp/$name.txt"; fail "$name: no restart"; }
  resumed_at=$(at_line "$name" "^braid run: restart 1: resumed") || { cat "$tmp/$name.txt"; fail "$name: no resume"; }
  wait "$sup"; local rc=$?
  [ $rc -eq 0 ] || { cat "$tmp/$name.txt"; fail "$name: elastic run exit $rc, not 0"; }
  local log="$tmp/$name.txt"
  grep -q "restart 1 of at most 1: cause: .*hosts lost: 198.18.0.3 (2); new layout: 4 ranks (DP 4)" "$log" ||
    { cat "$log"; fail "$name: the restart is not logged with its cause, lost host and layout"; }
  grep -q "the job finished after 1 restart" "$log" || fail "$name: no end line: $(tail -5 "$log")"
  resumed=$(grep -oE "restart 1: resumed at step [0-9]+" "$log" | grep -oE "[0-9]+$")
  /usr/bin/python3 -c "import sys; k, r, s = map(float, sys.argv[1:4]); print('%s: host 2 killed at step %s; failure found and hosts probed %.1f s later; resumed %.1f s after the kill (at step %s: %s)' % (sys.argv[4], sys.argv[5], r - k, s - k, sys.argv[6], sys.argv[7]))" \
    "$killed" "$reported" "$resumed_at" "$name" "$kill_at" "$resumed" "$(grep -oE "steps lost: [0-9]+" "$log")"
  nothing_left "$name"
  # By hand: the same checkpoint resumed on hosts 0 and 1 at the layout the supervisor chose.
  "$CLUSTER" host 2 revive
  local flags=("$@") mb
  mb=$(grep -oE "new layout: 4 ranks \(DP 4\), micro-batch [0-9]+" "$log" | grep -oE "[0-9]+$")
  timeout 600 "$CLUSTER" run --hosts "2 2" -- "$BRAID" train "${common[@]}" "${flags[@]}" --micro-batch "$mb" \
    --resume "$tmp/$name.ck/step_$resumed" --save "$tmp/$name.hand.ck" --metrics-out "$tmp/$name.hand.jsonl" > "$tmp/$name.hand.txt" 2>&1 ||
    { cat "$tmp/$name.hand.txt"; fail "$name: resume by hand"; }
  /usr/bin/python3 - "$tmp/$name.jsonl" "$tmp/$name.hand.jsonl" "$resumed" "$name" <<'PY' || fail "$name: elastic losses differ from the resume by hand"
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r and "step" in r}
got, want, s = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
after = sorted(k for k in want if k > s)
assert after and after == sorted(k for k in got if k > s), (sorted(got), sorted(want))
for k in after:
    assert got[k] == want[k], (k, got[k], want[k])  # bitwise: the same floats printed in full
print("%s: losses of steps %d..%d bitwise those of the resume by hand" % (sys.argv[4], after[0], after[-1]))
PY
}

case_restart() { restart_case restart 8 5 --steps 12 --save-every 2; }

# The figure of docs/RELIABILITY.md: `small` on 3 hosts -> 2.
case_figures() { restart_case small 20 8 --model small --seq-len 64 --steps 24 --save-every 5; }

# A --max-memory that the 6-rank ZeRO-3 layout meets and no layout of 4 ranks
# does (micro-batch 1 already, shards a third larger): the supervisor gives up
# with exit code 2 and the reason.
case_budget() {
  local zero3=(--steps 40 --zero 3 --micro-batch 1 --save "$tmp/ckb" --save-every 2) six four
  six=$(peak_mib 6 "${zero3[@]}"); four=$(peak_mib 4 "${zero3[@]}")
  /usr/bin/python3 -c "import sys; assert float(sys.argv[2]) > float(sys.argv[1]) + 1" "$six" "$four" ||
    fail "budget: 4 ranks need $four MiB, not more than 6 ranks' $six MiB"
  elastic budget 3 --min-nodes 2 --max-restarts 2 -- "${zero3[@]}" \
    --max-memory "$(/usr/bin/python3 -c "import sys; print('%.1fM' % ((float(sys.argv[1]) + float(sys.argv[2])) / 2))" "$six" "$four")"
  wait_step budget 3
  "$CLUSTER" host 2 kill
  wait "$sup"; local rc=$?
  [ $rc -eq 2 ] || { cat "$tmp/budget.txt"; fail "budget: exit $rc, not 2"; }
  grep -q "giving up: no layout of this job runs on the 4 ranks that remain" "$tmp/budget.txt" ||
    { cat "$tmp/budget.txt"; fail "budget: no reason given"; }
  echo "budget ($six MiB on 6 ranks, $four on 4): $(grep -oE "giving up: .{0,160}" "$tmp/budget.txt")"
  nothing_left budget
  "$CLUSTER" host 2 revive
}

# peak_mib N FLAGS...: the MiB braid train's memory check says a rank needs on N ranks.
peak_mib() {
  local n=$1; shift
  "$BRAID" train "${common[@]}" "$@" --backend local --ranks "$n" --max-memory 1M 2>&1 |
    grep -oE "needs [0-9.]+ MiB" | head -1 | grep -oE "[0-9.]+"
}

# stopped_case NAME "ELASTIC FLAGS" MESSAGE: host 2 killed; the supervisor must
# stop with exit 4 and MESSAGE instead of restarting.
stopped_case() {
  local name=$1 message=$3 flags
  read -ra flags <<< "$2"
  elastic "$name" 3 "${flags[@]}" -- --steps 40 --save "$tmp/$name.ck" --save-every 2
  wait_step "$name" 3
  "$CLUSTER" host 2 kill
  wait "$sup"; local rc=$?
  [ $rc -eq 4 ] || { cat "$tmp/$name.txt"; fail "$name: exit $rc, not 4"; }
  grep -qF "$message" "$tmp/$name.txt" || { cat "$tmp/$name.txt"; fail "$name: no reason given"; }
  echo "$name: stopped: $(grep -oF "$message" "$tmp/$name.txt")"
  nothing_left "$name"
  "$CLUSTER" host 2 revive
}

case_min_nodes() {
  stopped_case min-nodes "--min-nodes 3" "stopping: 2 hosts answer (lost: 198.18.0.3 (2)), fewer than --min-nodes 3"
}

case_max_restarts() { stopped_case max-restarts "--max-restarts 0" "and --max-restarts 0 are used"; }

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(restart budget)
[ "${cases[*]}" != all ] || cases=(restart budget min-nodes max-restarts figures)
for c in "${cases[@]}"; do "case_${c//-/_}"; done
"$CLUSTER" down >/dev/null
echo "e2e elastic: ok"
