#!/usr/bin/env bash
# Collectives between emulated hosts (scripts/cluster.sh; needs root): 2 hosts x 2
# ranks over one shaped link. For each of all-reduce, reduce-scatter and all-gather
# at 256 KiB .. 64 MiB, three paths: braid's hierarchical one, braid's flat policy
# (BRAID_COMM_HIERARCHICAL=0: today's ring / Rabenseifner over all 4 ranks) and MPI's
# own; busbw from `braid bench-comm`, and the bytes that crossed host 0's uplink per
# call from tc's counters (two runs of 1 and 6 timed calls, the difference over 5, so
# set-up traffic cancels). The link's rate is measured beside them by the same tool
# (`bench-comm --ops link`: every rank streams to its peer on the other host), in
# wire bytes as tc counts them, and utilisation = uplink bytes / time / that rate.
#   usage: sudo [OPS="all_reduce ..."] bench/cluster_table.sh [RATE=1gbit] [OUT_DIR=out/cluster_table]
# Prints a markdown table; the raw rows land in OUT_DIR/rows.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BRAID="$root/build/braid"
CL="$root/scripts/cluster.sh"
rate=${1:-1gbit}
out=${2:-$root/out/cluster_table}
mkdir -p "$out"
export BRAID_CLUSTER=bk OMP_NUM_THREADS=1
trap '"$CL" down >/dev/null 2>&1' EXIT
"$CL" down >/dev/null 2>&1 || true
"$CL" up 2 --rate "$rate" >&2
uplink() { "$CL" stats 0 | sed -E 's/sent_bytes=([0-9]+).*/\1/'; }

# bench NAME ENV ALGO OP BYTES ITERS: one bench-comm run; prints the uplink bytes it sent.
bench() {
  local name=$1 envs=$2 algo=$3 op=$4 bytes=$5 iters=$6 b0 b1
  b0=$(uplink)
  # shellcheck disable=SC2086
  "$CL" run --hosts "2 2" -- env $envs "$BRAID" bench-comm --ops "$op" --algos "$algo" --zero-copy 0 \
    --min-bytes "$bytes" --max-bytes "$bytes" --iters "$iters" --warmup 1 --json "$out/$name.json" > "$out/$name.txt" 2>&1 ||
    { cat "$out/$name.txt" >&2; exit 1; }
  b1=$(uplink)
  echo $((b1 - b0))
}

# cell PATH OP BYTES: appends {"path", "op", "bytes", "uplink_bytes_per_call", "json"} to rows.
rows="$out/rows.jsonl"
: > "$rows"
cell() {
  local path=$1 op=$2 bytes=$3 envs="BRAID_COMM_HIERARCHICAL=1" algo=ring one six
  [ "$path" != flat ] || envs="BRAID_COMM_HIERARCHICAL=0"
  [ "$path" != mpi ] || algo=native
  one=$(bench "$path-$op-$bytes-1" "$envs" "$algo" "$op" "$bytes" 1)
  six=$(bench "$path-$op-$bytes" "$envs" "$algo" "$op" "$bytes" 6)
  printf '{"path": "%s", "op": "%s", "bytes": %s, "uplink_bytes_per_call": %s, "json": "%s"}\n' \
    "$path" "$op" "$bytes" "$(( (six - one) / 5 ))" "$out/$path-$op-$bytes.json" >> "$rows"
}

for bytes in 67108864 16777216 4194304; do cell link link "$bytes"; done
for op in ${OPS:-all_reduce reduce_scatter all_gather}; do
  for bytes in 262144 1048576 4194304 16777216 67108864; do
    for path in hierarchical flat mpi; do cell "$path" "$op" "$bytes"; done
  done
done
/usr/bin/python3 "$root/bench/cluster_table.py" "$rows" "$rate"
