#!/usr/bin/env bash
# The longer fault sweep on emulated hosts (root): every fault of
# tests/e2e/cluster_faults.sh (cut link, killed host, short and long stalls, a
# trickling link, 1 % packet loss, a host dying mid-checkpoint) ROUNDS times, then
# every case of tests/e2e/elastic.sh (restart, memory budget, --min-nodes,
# --max-restarts, and the figure: `small` on 3 hosts -> 2), and a table of the
# medians: seconds from each fault to the job's end (or the run's slowdown).
# CI runs the short subsets of both; docs/RELIABILITY.md has the table.
#   sudo scripts/fault_sweep.sh [BRAID] [ROUNDS]     (defaults: build/braid, 3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
braid="$(realpath "${1:-$root/build/braid}")"
rounds="${2:-3}"
[ -x "$braid" ] || { echo "fault_sweep: no braid binary at $braid; build first (cmake --build build)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "fault_sweep: ROUNDS '$rounds' is not a count >= 1" >&2; exit 2; }
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r of $rounds: cluster faults"
  bash "$root/tests/e2e/cluster_faults.sh" "$braid" "$root" all | tee -a "$log" | grep -E "^(fault|case|e2e)"
done
echo "== elastic restart"
bash "$root/tests/e2e/elastic.sh" "$braid" "$root" all | tee -a "$log" | grep -E "^(restart|small|budget|e2e)"
echo "== medians over $rounds rounds (CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
/usr/bin/python3 - "$log" <<'PY'
import re, statistics, sys
ended, notes = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"fault: ([a-z-]+): ended after ([0-9.]+) s \((.*)\)", line)
    if m:
        ended.setdefault(m[1], []).append(float(m[2]))
        notes[m[1]] = m[3]
for name, xs in ended.items():
    print("%-12s ended after %5.1f s (median; %s) | last: %s" % (
        name, statistics.median(xs), ", ".join("%.1f" % x for x in xs), notes[name]))
PY
