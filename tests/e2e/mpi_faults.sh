#!/usr/bin/env bash
# Faults under mpirun, each injected into rank 1 of 3 at step 2 with a 3 s deadline:
# a stopped rank (SIGSTOP), a rank hung outside communication, a killed rank and a
# raising rank. Every job must end on its own (never by this script's timeout), exit
# non-zero and name rank 1; the stalled ones within the deadline plus 10 s of the
# fault. Prints one line per fault with its detection time (docs/RELIABILITY.md).
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 3 200 "the jury said that an investigation of the election produced no evidence"
common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "" --seq-len 32 --batch 6
        --micro-batch 1 --steps 8 --quiet --comm-timeout 3)

# Sanitized builds run several times slower (scripts/check-deep.sh sets
# BRAID_E2E_TIME_SCALE for them); the limits are the product's, scaled.
scale="${BRAID_E2E_TIME_SCALE:-1}"

# fault KIND PATTERN MAX_SECONDS [MPIRUN FLAGS...]: runs the job, checks its output
# for PATTERN and that it ended within MAX_SECONDS (times the scale) of the fault.
fault() {
  local kind="$1" pattern="$2" max; max=$(/usr/bin/python3 -c "print($3 * $scale)"); shift 3
  local out="$tmp/$kind.txt"
  mkdir -p "$tmp/$kind"
  timeout 120 "${MPIRUN[@]}" "$@" -np 3 "$BRAID" train "${common[@]}" --metrics-out "$tmp/$kind/m.jsonl" \
    --inject-failure "1:2:$kind" > "$out" 2>&1 &
  local pid=$! t_fault="" rc
  # The fault's time: when rank 1 announces it (or, for throw, the job's first error).
  while kill -0 "$pid" 2>/dev/null; do
    if [ -z "$t_fault" ] && grep -q "injected\|braid: error" "$out" 2>/dev/null; then t_fault=$(date +%s.%N); fi
    sleep 0.05
  done
  wait "$pid"; rc=$?
  local t_end; t_end=$(date +%s.%N)
  [ -n "$t_fault" ] || t_fault=$t_end
  local took; took=$(/usr/bin/python3 -c "print(f'{$t_end - $t_fault:.1f}')")
  [ "$rc" -ne 124 ] || { cat "$out"; fail "$kind: the job hung (ended by timeout 120)"; }
  [ "$rc" -ne 0 ] || { cat "$out"; fail "$kind: the job exited 0"; }
  # A failed or stalled rank is exit code 4; a killed one is reported by mpirun.
  [ "$kind" = kill ] || [ "$rc" -eq 4 ] || { cat "$out"; fail "$kind: exit code $rc, want 4 (a failed rank)"; }
  grep -q -- "$pattern" "$out" || { cat "$out"; fail "$kind: output lacks '$pattern'"; }
  /usr/bin/python3 -c "import sys; sys.exit(0 if $took <= $max else 1)" \
    || { cat "$out"; fail "$kind: ended $took s after the fault (limit $max s)"; }
  echo "fault $kind: job ended $took s after the fault (exit $rc)"
}

# A stopped process answers nothing, not even its watchdog: named as not answering.
fault stop "No answer within .* rank 1\." 13
grep -q "comm timeout:" "$tmp/stop.txt" || fail "stop: no timeout message"
[ -f "$tmp/stop/flight_record_rank0.json" ] || fail "stop: rank 0 wrote no flight record"
# A hung rank's watchdog still answers: it never reached the operation.
fault hang "Never reached it: rank 1 " 13
[ -f "$tmp/hang/flight_record_rank1.json" ] || fail "hang: the hung rank wrote no flight record"
/usr/bin/python3 - "$tmp/hang/flight_record_rank0.json" <<'PY' || fail "hang: flight record"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["rank"] == 0 and j["world_size"] == 3, j
ops = [o for c in j["communicators"] for o in c["ops"]]
assert any(o["state"] == "started" for o in ops), ops
assert all({"op", "state", "count", "t_queued"} <= o.keys() for o in ops), ops
PY
# A killed rank: mpirun names it and its signal.
fault kill "rank 1 .*signal 9\|signal 9.*rank 1\|process rank 1" 13
# A raising rank: its message.
fault throw "injected failure on rank 1 at step 2" 13
# The same over TCP, the transport between hosts.
fault stop "No answer within .* rank 1\." 13 --mca pml ob1 --mca btl tcp,self
[ -n "${SHOW_FAULTS:-}" ] && for k in stop hang kill throw; do echo "--- $k"; grep -v "^    \|^  world\|flight record" "$tmp/$k.txt" | head -20; done
echo "PASS: every fault ended the job naming rank 1"
