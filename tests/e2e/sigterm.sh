#!/usr/bin/env bash
# End-to-end: a stop signal (how schedulers preempt) ends braid train at a step
# boundary on every rank, exit code 0, with a checkpoint; resuming it gives the
# same per-step losses as an uninterrupted run. Covers the DDP, pipeline and
# parameter-server step paths, a signal to one rank, and signals to mpirun.
#
# Runs are endless (--steps far beyond what they reach) with a constant lr, so
# --steps does not shape the schedule: the signal is sent once the first step is
# in the metrics file, and nothing depends on how fast the machine is.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 1 100 "the jury said that an investigation of the election produced no evidence of irregularities in the city"

common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 4
        --micro-batch 1 --val-every 0 --lr 1e-3 --min-lr 1e-3 --warmup 0)
ENDLESS=1000000

# interrupt NAME NP SIGNAL TARGET FLAGS...: starts an endless run, waits for its
# first step (or for the output line $ready_out when that is set), sends SIGNAL
# to rank TARGET's process (or to mpirun itself when TARGET is "mpirun") and
# waits for the job to end. Sets rc (the job's exit code) and stopped (the step
# of the stop line, empty if none); output in $tmp/NAME.txt, metrics in
# $tmp/NAME.jsonl, checkpoint in $tmp/NAME.ckpt.
interrupt() {
  local name="$1" np="$2" sig="$3" target="$4"; shift 4
  timeout 120 "${MPIRUN[@]}" -np "$np" "$BRAID" train "${common[@]}" --steps $ENDLESS \
    --metrics-out "$tmp/$name.jsonl" --save "$tmp/$name.ckpt" "$@" > "$tmp/$name.txt" 2>&1 &
  local job=$! mpi="" pid="" p
  local watch="$tmp/$name.jsonl" pattern='"loss"'
  [ -z "${ready_out:-}" ] || { watch="$tmp/$name.txt"; pattern="$ready_out"; }
  for _ in $(seq 1200); do  # 120 s at most
    grep -q "$pattern" "$watch" 2>/dev/null && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  grep -q "$pattern" "$watch" 2>/dev/null || { cat "$tmp/$name.txt"; fail "$name: not started before the signal"; }
  mpi=$(pgrep -P $job -x mpirun)
  if [ "$target" = mpirun ]; then
    pid=$mpi
  else
    # The ranks are mpirun's children; OpenMPI gives each its rank in the environment.
    for p in $(pgrep -P "$mpi"); do
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$target" && pid=$p
    done
  fi
  [ -n "$pid" ] || fail "$name: no process for $target"
  kill -s "$sig" "$pid"
  wait $job; rc=$?
  stopped=$(sed -n 's/^braid train: SIG[A-Z0-9]* received: stopped after step \([0-9]*\) of.*/\1/p' "$tmp/$name.txt")
}

# last_step NAME: the last step in NAME's metrics (empty if none).
last_step() { grep -o '"step":[0-9]*' "$tmp/$1.jsonl" | tail -n 1 | cut -d: -f2; }

# expect_stop NAME SIGNAL: the job exited 0 after printing the stop line and
# writing the checkpoint, and the metrics end at the stop step.
expect_stop() {
  [ $rc -ne 124 ] || { cat "$tmp/$1.txt"; fail "$1: the job hung after $2"; }
  [ $rc -eq 0 ] || { cat "$tmp/$1.txt"; fail "$1: exit code $rc after $2"; }
  grep -q "^braid train: $2 received: stopped after step $stopped of $ENDLESS; checkpoint saved to $tmp/$1.ckpt/step_$stopped (resume with --resume $tmp/$1.ckpt)$" \
    "$tmp/$1.txt" || { cat "$tmp/$1.txt"; fail "$1: no stop line"; }
  [ -s "$tmp/$1.ckpt/step_$stopped/metadata" ] || fail "$1: no checkpoint"
  local last; last=$(last_step "$1")
  [ "${last:-0}" = "$stopped" ] || fail "$1: metrics end at step $last, the stop line says $stopped"
}

# resumes_exactly NAME NP FLAGS...: resuming NAME's checkpoint for two more
# steps gives the per-step losses of an uninterrupted run to that step.
resumes_exactly() {
  local name="$1" np="$2"; shift 2
  local end=$((stopped + 2))
  run "$name" "$np" --steps $end --resume "$tmp/$name.ckpt" "$@"
  grep -q "resumed from $tmp/$name.ckpt/step_$stopped at step $stopped" "$tmp/$name.txt" || fail "$name: resume line"
  run "$name.ref" "$np" --steps $end "$@"
  same_run loss "$name.ref" "$name:0"
}

# 1. DDP: SIGTERM to rank 1 only; rank 0 learns of it in the step-boundary agreement.
interrupt ddp 2 TERM 1
expect_stop ddp SIGTERM
resumes_exactly ddp 2

# 1b. DDP with asynchronous saves every step: the stop waits for the save in
# flight and commits the stopped step's before the job exits.
interrupt ddpa 2 TERM 1 --async-save --save-every 1
expect_stop ddpa SIGTERM
resumes_exactly ddpa 2

# 2. Pipeline (2 stages, 1F1B): SIGTERM to the last stage.
interrupt pp 2 TERM 1 --pp 2
expect_stop pp SIGTERM
resumes_exactly pp 2 --pp 2

# 3. Synchronous parameter server: SIGINT to a worker.
interrupt ps 3 INT 2 --dp-mode ps
expect_stop ps SIGINT
resumes_exactly ps 3 --dp-mode ps

# 4. Asynchronous parameter server: a worker's SIGTERM reaches the server in
# its push; the server ends the run (updates arrive in any order, so the
# resumed run is only checked to train on). Its records are written at the
# end, so the signal follows the start-up line, and may stop it at step 0.
ready_out="^braid train |" interrupt psa 3 TERM 1 --dp-mode ps --ps-async --staleness 1
expect_stop psa SIGTERM
run psa 3 --steps $((stopped + 2)) --resume "$tmp/psa.ckpt" --dp-mode ps --ps-async --staleness 1

# 5. SIGUSR1 to mpirun: OpenMPI forwards it to every rank, and the job stops
# as on SIGTERM (mpirun exits 0).
interrupt usr1 2 USR1 mpirun
expect_stop usr1 SIGUSR1

# 6. SIGTERM to mpirun: OpenMPI kills the job instead (SIGTERM to the ranks
# after odls_base_sigkill_timeout seconds, SIGKILL as long again later) and
# exits non-zero. braid stops if it can in that time; whatever the timing,
# the job ends and a checkpoint, if written, is whole (written atomically).
interrupt mpiterm 2 TERM mpirun
[ $rc -ne 124 ] || fail "mpiterm: the job hung after SIGTERM to mpirun"
[ $rc -ne 0 ] || fail "mpiterm: mpirun exited 0 after SIGTERM (OpenMPI's behaviour changed: update docs/USAGE.md, \"Stopping a run\")"
# --save creates its directory at start-up: resume only if a checkpoint was
# written into it before the job was killed (under load it may not have been).
if compgen -G "$tmp/mpiterm.ckpt/step_*/metadata" > /dev/null; then
  run mpiterm 2 --steps $(($(last_step mpiterm) + 1)) --resume "$tmp/mpiterm.ckpt"
fi
echo "PASS"
