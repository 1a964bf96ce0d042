#!/usr/bin/env bash
# Faults between emulated hosts (scripts/cluster.sh), each a case of DDP on 2 + 2
# ranks with a comm timeout of 8 s, injected once the job is training:
#   cut          host 1's link cut: exit 4 within the timeout + 10 s, naming a rank
#                of host 1, its host and the operation; nothing left on any host
#   host-killed  host 1's processes killed (link up): exit 4 naming its ranks
#   stall-short  host 1 stopped for half the timeout: finishes, losses bitwise
#   trickle      host 1's link at 16kbit for half the timeout: finishes, bitwise
#   stall-long   host 1 stopped past the timeout: exit 4 naming the operation
#   loss         1 % of host 1's packets dropped all run: finishes, bitwise; the
#                median step time against the clean run's
#   checkpoint   host 1 dies while a checkpoint is written: exit 4; the previous
#                one verifies; `--resume auto` removes the uncommitted step and
#                goes on bitwise as the uninterrupted run
# Usage: cluster_faults.sh BRAID SRC [all | CASE...]; no case runs the CI subset
# (cut host-killed stall-short checkpoint). Prints per case "fault: NAME: ended
# after X s (...)", X from the fault (its command done) to the job's end, then
# "case NAME: S s", its wall time.
# Needs root and namespaces; skips, saying why, without them.
source "$(dirname "$0")/lib/common.bash" "$@"
emulated_hosts hf

CI_CASES=(cut host-killed stall-short checkpoint)
ALL_CASES=(cut host-killed stall-short trickle stall-long loss checkpoint)
cases=("${@:3}")
[ ${#cases[@]} -gt 0 ] || cases=("${CI_CASES[@]}")
[ "${cases[*]}" != all ] || cases=("${ALL_CASES[@]}")
for c in "${cases[@]}"; do
  [[ " ${ALL_CASES[*]} " == *" $c "* ]] || fail "unknown case '$c' (known: all ${ALL_CASES[*]})"
done

# Sanitized builds run several times slower; the limits are the product's, scaled.
scale="${BRAID_E2E_TIME_SCALE:-1}"
TIMEOUT=8
LIMIT=$(awk -v t=$TIMEOUT -v s="$scale" 'BEGIN {print (t + 10) * s}')  # fault to the job's end
STEPS=12      # the runs that finish (and the reference they are compared with)
LONG=400      # the runs a fault ends
H1="$BRAID_CLUSTER-h1|198\.18\.0\.2"   # host 1 as a report may name it
OPS="all_reduce|all_gather|reduce_scatter|broadcast|barrier"

JOB=""
# Whatever ends the script: a stopped host goes on, the job and the cluster go.
cleanup() {
  "$CLUSTER" host 1 cont >/dev/null 2>&1
  [ -z "$JOB" ] || { pkill -TERM -P "$JOB"; kill "$JOB"; } 2>/dev/null
  "$CLUSTER" down >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$CLUSTER" up 2 --shm 256m >/dev/null || fail "cluster up"

make_tokens 5 200 "the jury said it did find that many of the registration practices were in need of reform"
common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 12
        --val-every 0 --comm-timeout "$TIMEOUT")

# launch NAME "HOSTS" FLAGS...: `braid train "${common[@]}" FLAGS` over the hosts,
# output in $tmp/NAME.txt, metrics in $tmp/NAME.jsonl; returns the job's exit code.
# The one place that knows the launcher: `braid run` in host 0 around the mpirun
# command cluster.sh builds, as a user runs it. Nothing here sweeps the hosts: a
# job that fails must end on every host by itself (braid run ends mpirun; the
# daemons and ranks cut off from it end themselves).
launch() {
  local name="$1" hosts="$2" launcher; shift 2
  mapfile -t launcher < <("$CLUSTER" mpirun-args --taskset --hosts "$hosts")
  # "taskset -c CORES" goes around braid run (mpirun inherits it); braid run takes mpirun ...
  timeout 300 "$CLUSTER" exec 0 -- env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    "${launcher[@]:0:3}" "$BRAID" run -- "${launcher[@]:3}" "$BRAID" train "${common[@]}" --metrics-out "$tmp/$name.jsonl" "$@" \
    > "$tmp/$name.txt" 2>&1
}

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}'; }
within() { awk -v x="$1" -v m="$2" 'BEGIN {exit !(x <= m)}'; }

# start NAME FLAGS...: launches NAME on 2 + 2 in the background (JOB) and returns
# once it trains (its step N line, N=2 unless AT_STEP says).
start() {
  local name="$1"; shift
  launch "$name" "2 2" "$@" & JOB=$!
  local t0=$SECONDS
  until grep -qE "^step +${AT_STEP:-2}/" "$tmp/$name.txt" 2>/dev/null; do
    kill -0 "$JOB" 2>/dev/null || { cat "$tmp/$name.txt"; fail "$name ended before training"; }
    [ $((SECONDS - t0)) -lt 120 ] || { cat "$tmp/$name.txt"; fail "$name: no step ${AT_STEP:-2} within 120 s"; }
    sleep 0.1
  done
}
# finish: waits for the job; RC its exit code.
finish() { wait "$JOB"; RC=$?; JOB=""; }

# nothing_left: every host empty, allowing the far side up to 15 s to follow;
# SETTLE the seconds it took.
nothing_left() {
  local t0=$EPOCHREALTIME left i
  while :; do
    left=""
    for i in 0 1; do left+=$("$CLUSTER" procs $i | sed "s/^/host $i: /"); done
    [ -n "$left" ] || break
    within "$(since "$t0")" 15 || fail "processes left 15 s after the job: $left"
    sleep 0.2
  done
  SETTLE=$(since "$t0")
}

# failed NAME: the job of a fault ended by itself with 4 within LIMIT of T_FAULT,
# naming a rank of host 1 with its host; ELAPSED the seconds it took.
failed() {
  local name="$1" out="$tmp/$1.txt"
  ELAPSED=$(since "$T_FAULT")
  [ "$RC" -ne 124 ] || { cat "$out"; fail "$name: the job hung (ended by timeout 300)"; }
  [ "$RC" -eq 4 ] || { cat "$out"; fail "$name: exit $RC, not 4 ($ELAPSED s after the fault)"; }
  within "$ELAPSED" "$LIMIT" || { cat "$out"; fail "$name: ended $ELAPSED s after the fault (limit $LIMIT s)"; }
  grep -E "$H1" "$out" | grep -qE "\branks?( [0-9]+)* [23]\b" ||
    { cat "$out"; fail "$name: no line names a rank of host 1 with its host"; }
}

# The uninterrupted run the finishing cases are compared with (once).
ref() {
  [ -f "$tmp/ref.jsonl" ] && return
  local t0=$EPOCHREALTIME
  # No fault here: a longer deadline keeps a rank that the machine's load holds back
  # from ending it (the deadline changes no number).
  launch ref "2 2" --steps $STEPS --comm-timeout 60 || { cat "$tmp/ref.txt"; fail "the clean run exited non-zero"; }
  REF_S=$(since "$t0")
}

# the median step time (ms) of run NAME
median_ms() {
  /usr/bin/python3 -c 'import json, statistics, sys
print("%.0f" % statistics.median(json.loads(l)["ms"] for l in open(sys.argv[1]) if "\"ms\"" in l))' "$tmp/$1.jsonl"
}

# bitwise NAME: run NAME finished (after the fault) with the clean run's losses.
bitwise() {
  local name="$1"
  ELAPSED=$(since "$T_FAULT")
  [ "$RC" -eq 0 ] || { cat "$tmp/$name.txt"; fail "$name: exit $RC after the fault, not 0"; }
  same_run loss ref "$name:0"
}

case_cut() {
  start cut --steps $LONG
  "$CLUSTER" link 1 down
  T_FAULT=$EPOCHREALTIME  # once the command is done: under load it takes a while to start
  finish
  failed cut
  grep -qE "$OPS" "$tmp/cut.txt" || { cat "$tmp/cut.txt"; fail "cut: the operation is not named"; }
  nothing_left
  "$CLUSTER" link 1 up
  echo "fault: cut: ended after $ELAPSED s (exit 4; hosts empty $SETTLE s later)"
}

case_host_killed() {
  start killed --steps $LONG
  # The processes only (the link stays up): their connections end at once.
  "$CLUSTER" procs 1 | awk '{print $1}' | xargs -r kill -9
  T_FAULT=$EPOCHREALTIME
  finish
  failed killed
  nothing_left
  echo "fault: host-killed: ended after $ELAPSED s (exit 4; hosts empty $SETTLE s later)"
}

case_stall_short() {
  ref
  local t0=$EPOCHREALTIME
  start stall --steps $STEPS
  "$CLUSTER" host 1 stop
  T_FAULT=$EPOCHREALTIME
  sleep $((TIMEOUT / 2))
  "$CLUSTER" host 1 cont
  finish
  bitwise stall
  echo "fault: stall-short: ended after $ELAPSED s (exit 0, $((TIMEOUT / 2)) s stopped; run $(since "$t0") s, clean $REF_S s; losses bitwise)"
}

case_trickle() {
  ref
  local t0=$EPOCHREALTIME
  start trickle --steps $STEPS
  "$CLUSTER" link 1 rate 16kbit
  T_FAULT=$EPOCHREALTIME
  sleep $((TIMEOUT / 2))
  "$CLUSTER" link 1 rate default
  finish
  bitwise trickle
  echo "fault: trickle: ended after $ELAPSED s (exit 0, $((TIMEOUT / 2)) s at 16kbit; run $(since "$t0") s, clean $REF_S s; losses bitwise)"
}

case_stall_long() {
  start stall_long --steps $LONG
  "$CLUSTER" host 1 stop
  T_FAULT=$EPOCHREALTIME
  finish
  "$CLUSTER" host 1 cont
  failed stall_long
  grep -qE "$OPS" "$tmp/stall_long.txt" || { cat "$tmp/stall_long.txt"; fail "stall-long: the operation is not named"; }
  nothing_left
  echo "fault: stall-long: ended after $ELAPSED s (exit 4; hosts empty $SETTLE s later)"
}

case_loss() {
  ref
  "$CLUSTER" link 1 loss 1
  T_FAULT=$EPOCHREALTIME
  launch loss "2 2" --steps $STEPS; RC=$?
  "$CLUSTER" link 1 clear
  bitwise loss
  local ms ref_ms; ms=$(median_ms loss); ref_ms=$(median_ms ref)
  echo "fault: loss: ended after $ELAPSED s (exit 0; median step $ms ms, clean $ref_ms ms: $(awk -v a="$ms" -v b="$ref_ms" 'BEGIN {printf "%.2f", a / b}')x; losses bitwise)"
}

# Host 1 dies while its ranks write their pieces of a checkpoint after step 4 or
# later (step 2's committed before). A build with the payload-stop fault stops rank
# 2 mid-file, so the save waits for it; without it, host 1's processes are stopped
# within a millisecond or two of a step directory appearing without metadata (a
# save takes tens of ms; starting cluster.sh takes longer), and let go again to try
# the next save if that one still committed. Then host 1 dies.
case_checkpoint() {
  ref
  local dir="$tmp/ckpt" fault=() caught step
  "$BRAID" train --help 2>/dev/null | grep -q payload-stop && fault=(--inject-save-fault 4:payload-stop:5000@2)
  AT_STEP=1 start ckpt --steps $STEPS --save "$dir" --save-every 2 "${fault[@]}"
  # shellcheck disable=SC2046  # one PID an argument
  caught=$(/usr/bin/python3 - "$dir" "$JOB" "$CLUSTER" $("$CLUSTER" procs 1 | awk '{print $1}') <<'PY'
import os, signal, subprocess, sys, time
d, job, cluster, pids = sys.argv[1], int(sys.argv[2]), sys.argv[3], [int(p) for p in sys.argv[4:]]
def alive(p):
    try: os.kill(p, 0); return True
    except OSError: return False
def signal_all(sig):
    for p in pids:
        try: os.kill(p, sig)
        except OSError: pass
n = 4
while alive(job):
    s = os.path.join(d, "step_%d" % n)
    if os.path.isdir(s):
        if not os.path.exists(os.path.join(s, "metadata")):
            signal_all(signal.SIGSTOP)
            if not os.path.exists(os.path.join(s, "metadata")):
                subprocess.run([cluster, "host", "1", "kill"], check=True)
                print(n, time.time()); sys.exit(0)
            signal_all(signal.SIGCONT)
        n += 2
        continue
    time.sleep(0.001)
sys.exit(1)
PY
  ) || { cat "$tmp/ckpt.txt"; fail "checkpoint: no save caught in progress"; }
  read -r step T_FAULT <<< "$caught"
  finish
  failed ckpt
  local prev=$((step - 2))
  [ ! -e "$dir/step_$step/metadata" ] ||
    fail "checkpoint: step $step committed before host 1 died (the kill came too late)"
  "$BRAID" verify "$dir/step_$prev" > "$tmp/verify.txt" 2>&1 || { cat "$tmp/verify.txt"; fail "checkpoint: step $prev does not verify"; }
  "$CLUSTER" host 1 revive
  launch ckpt_resume "2 2" --steps $STEPS --save "$dir" --save-every 2 --resume auto --comm-timeout 60 ||
    { cat "$tmp/ckpt_resume.txt"; fail "checkpoint: the resumed run exited non-zero"; }
  grep -q "removed $dir/step_$step, left by an interrupted save" "$tmp/ckpt_resume.txt" ||
    { cat "$tmp/ckpt_resume.txt"; fail "checkpoint: the uncommitted step $step's removal was not said"; }
  grep -q "resumed from $dir/step_$prev at step $prev" "$tmp/ckpt_resume.txt" ||
    { cat "$tmp/ckpt_resume.txt"; fail "checkpoint: did not resume from step $prev"; }
  grep '"step"' "$tmp/ref.jsonl" | /usr/bin/python3 -c 'import json, sys
for l in sys.stdin:
    if json.loads(l)["step"] > int(sys.argv[1]): print(l, end="")' "$prev" > "$tmp/ref_after.jsonl"
  same_run loss ref_after ckpt_resume:0
  echo "fault: checkpoint: ended after $ELAPSED s (exit 4, host 1 died saving step $step${fault:+ (payload-stop)}; step $prev verifies; resumed bitwise)"
}

for c in "${cases[@]}"; do
  t0=$SECONDS
  "case_${c//-/_}"
  echo "case $c: $((SECONDS - t0)) s"
done
echo "e2e cluster faults: ok (${cases[*]})"
