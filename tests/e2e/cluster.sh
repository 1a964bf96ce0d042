#!/usr/bin/env bash
# Many hosts on one machine (scripts/cluster.sh: network, UTS and mount namespaces
# joined by shaped veth links): the collective suites under MPI on 2 + 1 hosts;
# DDP, ZeRO-1, ZeRO-3, FSDP and HSDP (shard group = node) on 2 + 2 and 2 + 1 hosts,
# and DP2 x TP2 x PP2 on 4 + 4 hosts, training the same model as one rank; DDP on
# 2 + 1 hosts bitwise the same as the local backend placed 2 + 1; a rank killed on the far host, and a cut link, ending
# the run with exit code 4 naming the rank; nothing of the cluster left afterwards.
# Needs root and namespaces; skips, saying why, without them.
source "$(dirname "$0")/lib/common.bash" "$@"
emulated_hosts bt
trap '"$CLUSTER" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"$CLUSTER" up 2 --shm 256m || fail "cluster up"

# The collective suites, closed-form data, on uneven hosts: the hierarchical
# all-reduce and broadcast, the flat reduce-scatter and all-gather (2 + 2 runs them
# all through the training runs below; tests/dist/test_comm_nodes.cpp runs every
# suite on 16 maps in the local backend).
TEST_MPI="$(dirname "$BRAID")/tests/test_mpi"
suites='CollectiveMpi.NodeMap*:CollectiveMpi.AllReduce:CollectiveMpi.AllGather:CollectiveMpi.ReduceScatter:CollectiveMpi.Broadcast:CollectiveMpi.Split:CollectiveMpi.Async'
for hosts in "2 1"; do
  [ -x "$TEST_MPI" ] || break
  BRAID_TEST_NODE_MAP=${hosts/ /+} timeout 300 "$CLUSTER" run --hosts "$hosts" -- \
    env BRAID_TEST_NODE_MAP="${hosts/ /+}" "$TEST_MPI" --gtest_filter="$suites" > "$tmp/coll.txt" 2>&1 ||
    { cat "$tmp/coll.txt"; fail "collectives on hosts $hosts"; }
done

make_tokens 5 200 "the jury said it did find that many of the registration practices were in need of reform"
common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 12
        --steps 4 --val-every 0 --grad-clip 0.5)
# on NAME "HOSTS" FLAGS...: braid train over the emulated hosts, metrics in NAME.jsonl.
on() {
  local name="$1" hosts="$2"; shift 2
  timeout 300 "$CLUSTER" run --hosts "$hosts" -- "$BRAID" train "${common[@]}" --metrics-out "$tmp/$name.jsonl" "$@" \
    > "$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "$name on hosts $hosts exited non-zero"; }
}
run one 1
on ddp "2 2" --check-replicas
grep -q "placement: dp: 1 group of 4 ranks, span nodes: hierarchical" "$tmp/ddp.txt" ||
  fail "start-up log does not name the hierarchical path: $(grep placement "$tmp/ddp.txt")"
on ddp21 "2 1"
on hsdp "2 2" --fsdp --fsdp-shard-size node --check-replicas
grep -q "placement: hsdp shard: 2 groups of 2 ranks, each inside one node" "$tmp/hsdp.txt" ||
  fail "HSDP's shard group is not the node: $(grep placement "$tmp/hsdp.txt")"
on zero1 "2 2" --zero 1
on zero3 "2 1" --zero 3
on fsdp "2 2" --fsdp
on threed "4 4" --tp 2 --pp 2 --check-replicas  # each TP group inside a host
grep -q "placement: tp: 4 groups of 2 ranks, each inside one node" "$tmp/threed.txt" ||
  fail "TP groups are not inside a host: $(grep placement "$tmp/threed.txt")"
same_run loss one ddp ddp21 hsdp zero1 zero3 fsdp threed
# The same node map in the local backend: bitwise the same run.
timeout 300 "$BRAID" train "${common[@]}" --backend local --ranks 3 --nodes 2+1 --metrics-out "$tmp/local21.jsonl" \
  > "$tmp/local21.txt" 2>&1 || { cat "$tmp/local21.txt"; fail "local 2+1"; }
same_run loss,grad_norm ddp21 local21:0

# A TP group across the link is refused with the reason.
out=$("$CLUSTER" run --hosts "1 1" -- "$BRAID" train "${common[@]}" --batch 4 --tp 2 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "spans 2 nodes" <<< "$out" || fail "TP across nodes rc=$rc: $out"

# A rank killed on the far host: exit 4 naming it and its host, nothing left behind.
start=$SECONDS
out=$(timeout 120 "$CLUSTER" run --hosts "2 2" -- "$BRAID" train "${common[@]}" --steps 50 --inject-failure 3:2:kill 2>&1)
rc=$?
[ $rc -eq 4 ] || fail "killed rank: exit $rc, not 4 ($((SECONDS - start)) s): $out"
grep -Eq "cluster: rank 3 on host 1 \(198\.18\.0\.2\)" <<< "$out" || fail "the killed rank is not named: $out"
for i in 0 1; do
  left=$("$CLUSTER" procs $i)
  [ -z "$left" ] || fail "processes left on host $i after the failed run: $left"
done
# The link to host 1 cut, then a rank on host 0 killed: mpirun's abort cannot reach
# host 1's daemon; the run still ends with 4 and leaves nothing on either host.
start=$SECONDS
timeout 120 "$CLUSTER" run --hosts "2 2" -- "$BRAID" train "${common[@]}" --steps 500 > "$tmp/cut.txt" 2>&1 &
runner=$!
until grep -q "^step     1/" "$tmp/cut.txt" 2>/dev/null || [ $((SECONDS - start)) -gt 60 ]; do sleep 0.2; done
"$CLUSTER" link 1 down
victim=$("$CLUSTER" procs 0 | awk '$2 == "braid" {print $1; exit}')
[ -n "$victim" ] || fail "no rank found on host 0: $(cat "$tmp/cut.txt")"
cut_at=$SECONDS
kill -9 "$victim"
wait "$runner"; rc=$?
[ $rc -eq 4 ] || fail "cut link: exit $rc, not 4: $(cat "$tmp/cut.txt")"
echo "cut link: the run ended $((SECONDS - cut_at)) s after the kill"
[ $((SECONDS - cut_at)) -le 20 ] || fail "cut link: the run took $((SECONDS - cut_at)) s to end"
for i in 0 1; do
  left=$("$CLUSTER" procs $i)
  [ -z "$left" ] || fail "processes left on host $i after the cut link: $left"
done
"$CLUSTER" link 1 up

"$CLUSTER" down >/dev/null
[ -z "$(ip netns list | grep "^$BRAID_CLUSTER-")" ] || fail "namespaces left: $(ip netns list)"
! ip link show "${BRAID_CLUSTER}br" >/dev/null 2>&1 || fail "bridge ${BRAID_CLUSTER}br left"
"$CLUSTER" down >/dev/null || fail "a second down is not idempotent"
echo "e2e cluster: ok"
