#!/usr/bin/env bash
# End-to-end: `braid plan --print-cluster this-machine` under mpirun measures the
# machine among the MPI processes and only rank 0 prints one cluster file, which
# `braid plan --cluster FILE` reads back to predict a layout; `--cluster
# this-machine` predicts directly; --json carries the breakdown.
source "$(dirname "$0")/lib/common.bash" "$@"

timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" plan --print-cluster this-machine > "$tmp/here.toml" 2> "$tmp/err.txt" \
  || { cat "$tmp/here.toml" "$tmp/err.txt"; fail "plan --print-cluster this-machine under mpirun"; }
[ "$(grep -c '^name = "this-machine"' "$tmp/here.toml")" = 1 ] || { cat "$tmp/here.toml"; fail "not exactly one cluster printed"; }
grep -q '^comm_overlaps_compute = false$' "$tmp/here.toml" || { cat "$tmp/here.toml"; fail "no comm_overlaps_compute = false"; }
grep -Eq '^backward_matmul_fraction = 0?\.[0-9]+|^backward_matmul_fraction = 1$' "$tmp/here.toml" \
  || { cat "$tmp/here.toml"; fail "backward_matmul_fraction missing or outside (0, 1]"; }

out=$("$BRAID" plan --model small --ranks 2 --zero 1 --cluster "$tmp/here.toml" --json 2>&1) || { echo "$out"; fail "plan --cluster FILE"; }
/usr/bin/python3 - <<PY || fail "the prediction"
import json
j = json.loads('''$out''')
p = j["prediction"]
assert j["cluster"] == "this-machine" and j["accelerators"] == 2, j
assert p["step_s"] > 0 and p["compute_s"] > 0 and p["optimizer_s"] > 0, p
# communication on the computing cores is charged in full
assert p["dp_exposed_s"] > 0, p
assert abs(p["step_s"] - (p["compute_s"] + p["dp_exposed_s"] + p["optimizer_s"])) < 1e-9 * p["step_s"] + 1e-12, p
PY

out=$("$BRAID" plan --model tiny --cluster this-machine 2>&1) || { echo "$out"; fail "plan --cluster this-machine"; }
grep -q "predicted on 1 accelerators of this-machine" <<< "$out" || { echo "$out"; fail "no prediction line"; }
echo OK
