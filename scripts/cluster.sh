#!/usr/bin/env bash
# Emulated hosts on one machine: each host is a network namespace (its own address
# and link), a UTS namespace (its hostname) and a mount namespace (its own /dev/shm,
# so two hosts never share MPI's shared-memory segments). Hosts hang off one bridge
# through veth pairs; each link is shaped by tc's token bucket filter in both
# directions. Addresses come from the benchmarking range 198.18.0.0/15 only
# (RFC 2544); the root namespace gets none, so no traffic leaves the emulation.
#
#   cluster.sh up N [--rate R] [--burst B] [--limit L] [--shm SIZE]
#   cluster.sh run [--np P] [--hosts "2 2"] [--timeout S] -- COMMAND...
#   cluster.sh mpirun-args [--np P] [--hosts "2 2"] [--taskset]
#                                    the launcher `run` uses, one argument per line
#   cluster.sh exec H -- COMMAND...   run in host H (0-based)
#   cluster.sh link H down|up|loss PCT|clear   cut / restore H's link, drop PCT % of its packets
#   cluster.sh link H rate RATE|default   re-shape H's link (tbf, both ways), or back to `up`'s
#   cluster.sh host H kill|revive    H dies (processes, link) / comes back
#   cluster.sh host H stop|cont      H stalls (SIGSTOP to its processes) / goes on
#   cluster.sh stats H               bytes and packets through H's uplink (tc counters)
#   cluster.sh procs H               processes running in host H (its holder aside)
#   cluster.sh hosts                 the hosts, their addresses and holder processes
#   cluster.sh down                  remove everything (idempotent)
#
# Defaults: rate 1gbit, burst 256kb, limit 4mb (tbf queue), /dev/shm 1g, 2 ranks
# per host for `run`. BRAID_CLUSTER names the cluster (default "bc"; a
# lower-case letter then up to 10 letters or digits: it prefixes every interface,
# namespace and hostname, so clusters of different names run side by side); state
# lives in /run/braid-cluster/<name>.
#
# `run` starts mpirun inside host 0 over a hostfile of the hosts' addresses; mpirun
# enters the other hosts through an rsh agent (the file `agent` in the state
# folder) that runs the remote daemon under nsenter in that host's namespaces, so
# no sshd is needed. --hosts "2 1" puts 2 ranks on host 0 and 1 on host 1 (uneven
# nodes); otherwise --np ranks are spread by slot. When the machine has a core for
# every rank, each host's ranks run on cores of their own (host 0 the first ones,
# and so on, by taskset around each host's daemon); otherwise they share all cores.
# Exit status of `run`: the command's own, except that a rank killed by a signal
# or a lost host daemon gives 4 (braid's rank-failure code) with a line naming the
# rank and its host; every process the run left on any host is killed within 10 s
# of the failure.
#
# `mpirun-args` writes the hostfile and cores as `run` does and prints the mpirun
# command `run` starts (from `mpirun` on, BRAID_CLUSTER_MPIRUN_ARGS included), so
# a supervisor started in host 0 (`exec 0 -- env OMPI_ALLOW_RUN_AS_ROOT=1
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SUPERVISOR ... "${args[@]}" PROGRAM...`) launches
# the same way. `run` pins mpirun, and with it host 0's ranks, to host 0's cores;
# --taskset prints that `taskset -c CORES` first. Only `run` watches its run (ends
# a hung abort, kills what is left on the hosts): under mpirun-args that is the
# supervisor's job.
#
# Faults: `link H rate` keeps `up`'s burst and limit (a trickle such as 16kbit
# still lets one burst through); `host H kill` kill -9s H's processes, takes its
# link down and marks it dead, and the rsh agent then refuses it as ssh refuses an
# unreachable machine (exit 255, "No route to host"), until `host H revive`.
# `link H up` and `host H revive` return once H reaches every other host again
# (a launch at once would otherwise meet the neighbour entries that failed while
# the link was down: OpenMPI's daemon dies on that first "No route to host").
# `host H stop` leaves the link up: the peers' connections stay open, unanswered.
#
# Needs root (namespaces, veth, tc). `up` undoes what it made when it fails or is
# interrupted.
set -euo pipefail

NAME=${BRAID_CLUSTER:-bc}
STATE=/run/braid-cluster/$NAME
NET_PREFIX=198.18.0   # host i: 198.18.0.(i+1)/24
RANGE=198.18.0.0/15

die() { echo "cluster: $*" >&2; exit 2; }
need_value() { [ "$2" -ge 2 ] || die "$1 needs a value"; }  # need_value OPTION $#

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (network, UTS and mount namespaces, veth, tc); run it as root or with sudo"
  command -v ip >/dev/null || die "ip not found: install iproute2"
  command -v nsenter >/dev/null || die "nsenter not found: install util-linux"
}

ns() { echo "$NAME-h$1"; }            # network namespace of host i
veth() { echo "${NAME}v$1"; }         # host i's link, root side
bridge() { echo "${NAME}br"; }
addr() { echo "$NET_PREFIX.$(($1 + 1))"; }
holder() { cat "$STATE/h$1.pid"; }
nhosts() { cat "$STATE/hosts" 2>/dev/null || echo 0; }

# Runs a command in host i's network, UTS and mount namespaces, in the current folder.
in_host() {
  local i=$1; shift
  nsenter -t "$(holder "$i")" -n -u -m -- /bin/sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$PWD" "$@"
}

shape() {  # shape DEV RATE BURST LIMIT [in namespace]
  local dev=$1 rate=$2 burst=$3 limit=$4; shift 4
  "$@" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" limit "$limit"
}

start_holder() {  # a process that keeps host i's UTS and mount namespaces alive
  local i=$1 shm=$2
  setsid ip netns exec "$(ns "$i")" unshare --uts --mount --propagation private -- \
    /bin/sh -c "hostname $NAME-h$i && mount -t tmpfs -o size=$shm,mode=1777 tmpfs /dev/shm && exec sleep infinity" \
    </dev/null >/dev/null 2>&1 &
  echo $! >"$STATE/h$i.pid"
  local t=0
  until [ "$(nsenter -t $! -u hostname 2>/dev/null)" = "$NAME-h$i" ] &&
        nsenter -t $! -m -- sh -c 'mountpoint -q /dev/shm' 2>/dev/null; do
    kill -0 $! 2>/dev/null || die "host $i's holder process exited (unshare or mount failed)"
    t=$((t + 1)); [ $t -lt 100 ] || die "host $i did not come up within 10 s"
    sleep 0.1
  done
}

write_agent() {  # the rsh agent mpirun uses: `agent HOST COMMAND...`
  cat >"$STATE/agent" <<EOF
#!/bin/sh
# rsh agent of emulated cluster $NAME: runs COMMAND in the namespaces of HOST.
host=\$1; shift
i=\$(grep -n "^\$host\$" "$STATE/addresses" | cut -d: -f1)
[ -n "\$i" ] || { echo "cluster agent: unknown host \$host" >&2; exit 255; }
# A dead host (cluster.sh host H kill) is refused as ssh refuses a machine it cannot reach.
[ ! -e "$STATE/h\$((i - 1)).dead" ] || { echo "ssh: connect to host \$host port 22: No route to host" >&2; exit 255; }
cores=\$(sed -n "\${i}p" "$STATE/cores" 2>/dev/null)
exec nsenter -t "\$(cat "$STATE/h\$((i - 1)).pid")" -n -u -m -- taskset -c "\${cores:-0-\$((\$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) - 1))}" /bin/sh -c "\$*"
EOF
  chmod +x "$STATE/agent"
}

cmd_up() {
  [ $# -ge 1 ] || die "usage: cluster.sh up N [--rate R] [--burst B] [--limit L] [--shm SIZE]"
  local n=$1; shift
  local rate=1gbit burst=256kb limit=4mb shm=1g
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) need_value "$1" $#; rate=$2; shift 2 ;;
      --burst) need_value "$1" $#; burst=$2; shift 2 ;;
      --limit) need_value "$1" $#; limit=$2; shift 2 ;;
      --shm) need_value "$1" $#; shm=$2; shift 2 ;;
      *) die "up: unknown option '$1' (known: --rate --burst --limit --shm)" ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: N must be 1..200 hosts, got '$n'"
  [[ $NAME =~ ^[a-z][a-z0-9]{0,10}$ ]] ||
    die "BRAID_CLUSTER '$NAME' must be a lower-case letter then at most 10 letters or digits (interface names are limited to 15 characters)"
  [ ! -e "$STATE/hosts" ] || die "cluster '$NAME' is already up ($(nhosts) hosts); run 'cluster.sh down' first"
  mkdir -p "$STATE"
  # Whatever ends `up` early (a failed command, a refused value, an interrupt)
  # removes what it made.
  trap 'rc=$?; trap - EXIT; echo "cluster: up failed; removing what it made" >&2; cmd_down >/dev/null 2>&1; exit $((rc ? rc : 1))' EXIT
  trap 'exit 130' INT TERM
  echo "$n" >"$STATE/hosts"
  ip link add "$(bridge)" type bridge
  ip link set "$(bridge)" up
  : >"$STATE/addresses"
  for ((i = 0; i < n; i++)); do
    ip netns add "$(ns $i)"
    ip link add "$(veth $i)" type veth peer name eth0 netns "$(ns $i)"
    ip link set "$(veth $i)" master "$(bridge)" up
    ip -n "$(ns $i)" addr add "$(addr $i)/24" dev eth0
    ip -n "$(ns $i)" link set eth0 up
    ip -n "$(ns $i)" link set lo up
    shape "$(veth $i)" "$rate" "$burst" "$limit"                       # toward host i
    shape eth0 "$rate" "$burst" "$limit" ip netns exec "$(ns $i)"       # host i's uplink
    addr $i >>"$STATE/addresses"
    start_holder "$i" "$shm"
  done
  printf 'rate=%s burst=%s limit=%s shm=%s\n' "$rate" "$burst" "$limit" "$shm" >"$STATE/link"
  write_agent
  trap - EXIT INT TERM
  echo "cluster $NAME: $n hosts up, $(addr 0)..$(addr $((n - 1))), links tbf rate $rate burst $burst limit $limit, /dev/shm $shm each"
}

# Kills every process in host i's namespaces but its holder; with `all`, the holder too.
kill_host() {
  local i=$1 what=${2:-} hp
  hp=$(holder "$i" 2>/dev/null || true)
  local pids
  pids=$(ip netns pids "$(ns "$i")" 2>/dev/null || true)
  for p in $pids; do
    [ "$what" = all ] || [ "$p" != "$hp" ] || continue
    kill -9 "$p" 2>/dev/null || true
  done
}

cmd_down() {
  local n i
  n=$(nhosts)
  # Hosts from a run that died before writing its count are found by name.
  for nsname in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NAME-h[0-9]*$" || true); do
    i=${nsname#"$NAME-h"}
    [ "$i" -lt "$n" ] || n=$((i + 1))
  done
  [ ! -e "$STATE/hosts" ] || clear_sessions
  for ((i = 0; i < n; i++)); do
    kill_host "$i" all
    [ -f "$STATE/h$i.pid" ] && kill -9 "$(holder "$i")" 2>/dev/null || true
    ip link del "$(veth $i)" 2>/dev/null || true
    ip netns del "$(ns $i)" 2>/dev/null || true
  done
  ip link del "$(bridge)" 2>/dev/null || true
  rm -rf "$STATE"
  echo "cluster $NAME: down"
}

need_up() { [ -e "$STATE/hosts" ] || die "cluster '$NAME' is not up; run 'cluster.sh up N' first"; }
host_arg() {
  [[ ${1:-} =~ ^[0-9]+$ ]] && [ "$1" -lt "$(nhosts)" ] || die "host '${1:-}' is not one of 0..$(($(nhosts) - 1))"
}

cmd_exec() {
  need_up; host_arg "${1:-}"; local i=$1; shift
  [ "${1:-}" != -- ] || shift
  in_host "$i" "$@"
}

link_setting() { sed -E "s/.*(^| )$1=([^ ]*).*/\2/" "$STATE/link"; }  # rate, burst or limit of `up`

# reaches I ADDR: host i reaches ADDR. A refused TCP connection counts (the host
# answered); "No route to host" or silence does not.
reaches() {
  local out
  out=$(in_host "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ $out == *"Connection refused"* ]]
}

# link_up I: brings host i's link up and returns once host i reaches every other
# host. The neighbour entries that failed while the link was down are flushed
# first: a connection made at once would otherwise fail with "No route to host",
# and OpenMPI's daemon gives up on the first such failure (mpirun then waits for
# it for ever).
link_up() {
  local i=$1 j t
  ip link set "$(veth "$i")" up
  for ((j = 0; j < $(nhosts); j++)); do ip -n "$(ns "$j")" neigh flush dev eth0 2>/dev/null || true; done
  for ((j = 0; j < $(nhosts); j++)); do
    [ "$j" -ne "$i" ] || continue
    t=0
    until reaches "$i" "$(addr "$j")"; do
      t=$((t + 1)); [ $t -lt 50 ] || die "link $i up: host $i does not reach host $j ($(addr "$j")) after 10 s"
      sleep 0.2
    done
  done
}

cmd_link() {
  need_up; host_arg "${1:-}"; local i=$1 what=${2:-}
  case $what in
    down) ip link set "$(veth $i)" down ;;
    up) link_up "$i" ;;
    loss)
      local pct=${3:-}
      [[ $pct =~ ^[0-9]+$ ]] && [ "$pct" -le 100 ] || die "link loss: percent must be 0..100, got '$pct'"
      in_host "$i" nft -f - <<EOF
table inet braid_loss
delete table inet braid_loss
table inet braid_loss {
  chain out { type filter hook output priority 0; meta l4proto tcp numgen random mod 100 < $pct drop; }
  chain in { type filter hook input priority 0; meta l4proto tcp numgen random mod 100 < $pct drop; }
}
EOF
      ;;
    clear) in_host "$i" sh -c 'nft delete table inet braid_loss 2>/dev/null || true' ;;
    rate)
      local rate=${3:-}
      if [ "$rate" = default ]; then
        rate=$(link_setting rate)
      else
        # tc's own message for a bad rate names neither the host nor the form it wants.
        [[ $rate =~ ^[0-9]+(\.[0-9]+)?([kmgt]i?)?(bit|bps)$ ]] ||
          die "link rate: '$rate' is not a rate such as 16kbit, 500mbit or 1gbit (bit or bps after k, m, g or t), nor 'default' ($(link_setting rate), from up)"
      fi
      shape "$(veth $i)" "$rate" "$(link_setting burst)" "$(link_setting limit)"
      shape eth0 "$rate" "$(link_setting burst)" "$(link_setting limit)" in_host "$i"
      ;;
    *) die "link: expected down, up, loss PCT, clear or rate RATE|default, got '$what'" ;;
  esac
}

# host H kill: the host dies. It is marked dead first, so the agent refuses to start
# anything new there, and its link goes down before its processes do, as when a
# machine loses power: its peers see no FIN or RST, only silence.
cmd_host() {
  need_up; host_arg "${1:-}"; local i=$1 what=${2:-} p t=0
  case $what in
    kill)
      : >"$STATE/h$i.dead"
      ip link set "$(veth $i)" down
      # Repeated: a process may be forked while the first ones are killed.
      while [ -n "$(procs "$i")" ]; do
        kill_host "$i"
        t=$((t + 1)); [ $t -lt 50 ] || die "host $i: processes still running after 5 s of kill -9: $(procs "$i" | tr '\n' ' ')"
        sleep 0.1
      done ;;
    revive)
      rm -f "$STATE/h$i.dead"
      link_up "$i" ;;
    stop|cont)
      for p in $(procs "$i"); do kill -"${what^^}" "$p" 2>/dev/null || true; done ;;
    *) die "host: expected kill, revive, stop or cont, got '$what'" ;;
  esac
}

cmd_stats() {  # sent bytes and packets of host i's uplink, as tc counts them
  need_up; host_arg "${1:-}"
  in_host "$1" tc -s qdisc show dev eth0 | awk '/Sent/ {print "sent_bytes=" $2, "sent_packets=" $4; exit}'
}

cmd_procs() {  # what runs in host i besides its holder: "PID COMMAND" lines
  need_up; host_arg "${1:-}"
  local p; for p in $(procs "$1"); do echo "$p $(cat /proc/$p/comm 2>/dev/null)"; done
}

cmd_hosts() {
  need_up
  for ((i = 0; i < $(nhosts); i++)); do
    echo "host $i: $NAME-h$i $(addr $i) holder $(holder $i)"
  done
  cat "$STATE/link"
}

# The hostfile of a run: --hosts "2 1" gives per-host slots; else `slots` each.
write_hostfile() {
  local per=$1 n i=0; n=$(nhosts)
  : >"$STATE/hostfile"
  if [ -n "$per" ]; then
    for s in $per; do
      [ "$i" -lt "$n" ] || die "--hosts '$per' names more hosts than the $n that are up"
      [[ $s =~ ^[0-9]+$ ]] && [ "$s" -ge 1 ] || die "--hosts: '$s' is not a rank count >= 1"
      echo "$(addr $i) slots=$s max_slots=$s" >>"$STATE/hostfile"
      i=$((i + 1))
    done
  else
    for ((i = 0; i < n; i++)); do echo "$(addr $i) slots=2" >>"$STATE/hostfile"; done
  fi
}

# Whether mpirun has reported a failed rank or host (its abort is then under way).
# mpirun's reports of a killed rank and of a lost host daemon.
KILLED_RE="process rank [0-9]+ with PID [0-9]+ on node [^ ]+ exited on signal"
LOST_RE="lost communication with a remote daemon|daemon .*(failed|died)|ORTE has lost|unexpectedly failed"
# braid's own failure line counts too: mpirun can lose the MPI_Abort report
# (ORTE_ERROR_LOG in show_help.c) and, with a host cut off, then waits forever.
failure_seen() {
  grep -qE "$KILLED_RE|$LOST_RE|non-zero exit code|MPI_ABORT was invoked|^braid: error: " "$1"
}

# Each host's cores (one line per host, taskset's list form): its own block when
# the machine has a core for every slot, else every core. (nproc alone would count
# OMP_NUM_THREADS as the cores: every rank would share one core.)
write_cores() {
  local total cores next=0 s
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  total=$(awk '{split($2, a, "="); s += a[2]} END {print s}' "$STATE/hostfile")
  : >"$STATE/cores"
  while read -r _ slots _; do
    s=${slots#slots=}
    if [ "$total" -le "$cores" ]; then
      echo "$next-$((next + s - 1))" >>"$STATE/cores"
      next=$((next + s))
    else
      echo "0-$((cores - 1))" >>"$STATE/cores"
    fi
  done <"$STATE/hostfile"
}

# Names the killed rank or lost host from mpirun's report, if there is one.
failure_line() {
  local log=$1 line rank host
  line=$(grep -m1 -E "$KILLED_RE" "$log" || true)
  if [ -n "$line" ]; then
    rank=$(sed -E 's/.*process rank ([0-9]+) .*/\1/' <<<"$line")
    host=$(sed -E 's/.* on node ([^ ]+) exited.*/\1/' <<<"$line")
    echo "cluster: rank $rank on host $(host_of "$host") was killed ($(sed -E 's/.*exited on (signal [0-9]+).*/\1/' <<<"$line"))"
    return 0
  fi
  if grep -qE "$LOST_RE" "$log"; then
    host=$(grep -m1 -oE "198\.1[89]\.[0-9]+\.[0-9]+" "$log" || echo "?")
    echo "cluster: the daemon of host $(host_of "$host") was lost, and its ranks$(ranks_on "$host") with it"
    return 0
  fi
  return 1
}
host_of_rank() {  # ranks are placed by slot, host after host
  awk -v r="$1" '{split($2, a, "="); s += a[2]; if (r < s) {print NR - 1 " (" $1 ")"; exit}}' "$STATE/hostfile"
}
ranks_on() {  # " 2 3": the ranks of the host at that address, placed by slot ($NP of them)
  awk -v a="$1" -v np="${NP:-0}" '{split($2, s, "="); for (k = 0; k < s[2]; k++) { if (r < np && $1 == a) printf " %d", r; r++ }}' "$STATE/hostfile"
}
host_of() {  # "198.18.0.2" -> "1 (198.18.0.2)"
  local i; i=$(grep -n "^$1\$" "$STATE/addresses" 2>/dev/null | cut -d: -f1)
  [ -n "$i" ] && echo "$((i - 1)) ($1)" || echo "$1"
}

# The processes in host i's namespaces but its holder.
procs() {
  local hp p; hp=$(holder "$1" 2>/dev/null || true)
  for p in $(ip netns pids "$(ns "$1")" 2>/dev/null || true); do [ "$p" = "$hp" ] || echo "$p"; done
}

# Kills what a run left on every host (ranks, daemons), holders excepted, and waits
# (up to 5 s) until they are gone.
sweep() {
  local i t=0 left
  while :; do
    left=""
    for ((i = 0; i < $(nhosts); i++)); do left+=$(procs "$i"); done
    [ -n "$left" ] && [ $t -lt 50 ] || break
    for ((i = 0; i < $(nhosts); i++)); do kill_host "$i"; done
    sleep 0.1; t=$((t + 1))
  done
}

# placement "RANKS PER HOST" NP: the hostfile and cores of a run (see --hosts and
# --np of `run`); sets NP (all slots when empty).
placement() {
  local per=$1; NP=$2
  [ -z "$NP" ] || [[ $NP =~ ^[1-9][0-9]*$ ]] || die "--np '$NP' is not a rank count >= 1"
  write_hostfile "$per"
  if [ -z "$NP" ]; then NP=$(awk '{split($2, a, "="); s += a[2]} END {print s}' "$STATE/hostfile"); fi
  write_cores
  clear_sessions idle
}

# OpenMPI's session directories of this cluster's hosts (TMPDIR/ompi.HOSTNAME.UID,
# named after the emulated hostnames). A killed mpirun or daemon leaves its own
# behind, and a later job whose PID (so job family) repeats it could find it;
# `idle` removes those of hosts where nothing runs, otherwise all of them.
clear_sessions() {
  local i
  for ((i = 0; i < $(nhosts); i++)); do
    [ "${1:-}" != idle ] || [ -z "$(procs "$i")" ] || continue
    rm -rf "${TMPDIR:-/tmp}/ompi.$NAME-h$i".*
  done
}

# mpirun_command NP: sets LAUNCH to the mpirun command of a run of NP ranks over
# the hostfile, up to the program (BRAID_CLUSTER_MPIRUN_ARGS split at blanks).
mpirun_command() {
  local extra=()
  read -ra extra <<<"${BRAID_CLUSTER_MPIRUN_ARGS:-}"
  # shellcheck disable=SC2054  # the commas are mpirun's lists
  LAUNCH=(mpirun --hostfile "$STATE/hostfile" -np "$1" --bind-to none
    --mca plm_rsh_agent "$STATE/agent" --mca plm_rsh_no_tree_spawn 1
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$RANGE" --mca oob_tcp_if_include "$RANGE"
    --mca orte_abort_timeout 5 "${extra[@]}")
}

hosts_value() { [ -n "${1// /}" ] || die "--hosts is empty (ranks per host, e.g. --hosts \"2 2\")"; }

cmd_mpirun_args() {
  need_up
  local np="" per="" taskset="" NP LAUNCH
  while [ $# -gt 0 ]; do
    case $1 in
      --np) need_value "$1" $#; np=$2; shift 2 ;;
      --hosts) need_value "$1" $#; hosts_value "$2"; per=$2; shift 2 ;;
      --taskset) taskset=1; shift ;;
      *) die "mpirun-args: unknown option '$1' (known: --np --hosts --taskset)" ;;
    esac
  done
  placement "$per" "$np"
  mpirun_command "$NP"
  [ -z "$taskset" ] || LAUNCH=(taskset -c "$(head -1 "$STATE/cores")" "${LAUNCH[@]}")
  printf '%s\n' "${LAUNCH[@]}"
}

cmd_run() {
  need_up
  local np="" per="" limit=0 NP LAUNCH
  while [ $# -gt 0 ]; do
    case $1 in
      --np) need_value "$1" $#; np=$2; shift 2 ;;
      --hosts) need_value "$1" $#; hosts_value "$2"; per=$2; shift 2 ;;
      --timeout) need_value "$1" $#; limit=$2; shift 2 ;;
      --) shift; break ;;
      *) die "run: unknown option '$1' (known: --np --hosts --timeout, then -- COMMAND)" ;;
    esac
  done
  [ $# -gt 0 ] || die "run: no command (cluster.sh run [--np P] [--hosts \"2 2\"] -- COMMAND...)"
  [[ $limit =~ ^[0-9]+$ ]] || die "run: --timeout '$limit' is not a number of seconds"
  placement "$per" "$np"
  mpirun_command "$NP"
  local log="$STATE/run.log" rc=0
  : >"$log"
  in_host 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    taskset -c "$(head -1 "$STATE/cores")" "${LAUNCH[@]}" "$@" > >(tee -a "$log") 2> >(tee -a "$log" >&2) &
  local mp=$! start=$SECONDS failed_at=-1 killed="" now
  # Interrupted (Ctrl-C, a timeout): the run goes, and what it left on every host.
  trap 'kill -9 "$mp" 2>/dev/null; sweep; exit 130' INT TERM
  # Watch the run: once a failure is reported mpirun has a grace (of wall time,
  # however loaded the machine) to finish its abort, then everything left is killed
  # (a cut link would otherwise leave it hanging): 5 s after its own report of a
  # lost rank or daemon, time it needs to go on to name the rank; 2 s after an
  # MPI_Abort alone or braid's line, where braid's detection of a silent host has
  # already taken its --comm-timeout and up to 5 s more.
  local grace
  while kill -0 "$mp" 2>/dev/null; do
    sleep 0.2
    now=${EPOCHREALTIME//[!0-9]/}  # microseconds: whole seconds would stretch a grace by up to one
    if [ "$failed_at" -lt 0 ] && failure_seen "$log"; then failed_at=$now; fi
    if [ "$failed_at" -ge 0 ]; then
      grace=2000000
      ! grep -qE "$KILLED_RE|$LOST_RE|non-zero exit code" "$log" || grace=5000000
      [ $((now - failed_at)) -lt "$grace" ] || killed=abort
    fi
    if [ "$limit" -gt 0 ] && [ $((SECONDS - start)) -ge "$limit" ]; then killed=timeout; fi
    if [ -n "$killed" ]; then
      kill -9 "$mp" 2>/dev/null || true
      break
    fi
  done
  { wait "$mp"; } 2>/dev/null || rc=$?  # no job-control line for a killed mpirun
  sweep
  local named
  if named=$(failure_line "$log"); then
    echo "$named" >&2
    return 4
  fi
  case $killed in
    abort)
      # A rank that called MPI_Abort gave its own code (a refused flag: 2); a
      # rank that exited gave "Exit code"; anything else is a rank failure.
      local first abort
      abort=$(grep -m1 -A1 "MPI_ABORT was invoked on rank" "$log" | tr '\n' ' ' || true)
      first=$(grep -oE "on rank [0-9]+" <<<"$abort" | grep -oE "[0-9]+$" || true)
      rc=$(grep -oE "errorcode [0-9]+" <<<"$abort" | grep -oE "[0-9]+$" || true)
      [ -n "$first" ] || first=$(grep -m1 -oE "Process name: +\[\[[0-9]+,[0-9]+\],[0-9]+\]" "$log" | grep -oE "[0-9]+\]$" | tr -d ']' || true)
      [ -n "$rc" ] || rc=$(grep -m1 -oE "Exit code: +[0-9]+" "$log" | grep -oE "[0-9]+$" || true)
      rc=${rc:-4}
      [ -z "$first" ] || echo "cluster: rank $first on host $(host_of_rank "$first") failed first (exit code $rc)" >&2
      # The ranks braid's comm timeout names as silent or absent: their hosts.
      local r
      for r in $(grep -m1 -oE "(No answer within|Never reached it)[^:]*: ranks? [0-9 ]+" "$log" | sed -E 's/.*ranks? //'); do
        echo "cluster: rank $r on host $(host_of_rank "$r") did not answer in time" >&2
      done
      echo "cluster: mpirun did not finish its abort within $((grace / 1000000)) s; killed what was left on every host" >&2
      return "$rc" ;;
    timeout)
      echo "cluster: run killed after its --timeout of $limit s" >&2
      return 124 ;;
  esac
  return "$rc"
}

main() {
  local cmd=${1:-}; [ $# -eq 0 ] || shift
  case $cmd in
    up) need_root; cmd_up "$@" ;;
    down) need_root; cmd_down ;;
    run) need_root; cmd_run "$@" ;;
    mpirun-args) need_root; cmd_mpirun_args "$@" ;;
    exec) need_root; cmd_exec "$@" ;;
    link) need_root; cmd_link "$@" ;;
    host) need_root; cmd_host "$@" ;;
    stats) need_root; cmd_stats "$@" ;;
    procs) need_root; cmd_procs "$@" ;;
    hosts) need_root; cmd_hosts ;;
    *) die "usage: cluster.sh up N [options] | run [--np P] [--hosts \"2 1\"] [--timeout S] -- CMD | mpirun-args [--np P] [--hosts \"2 1\"] [--taskset] | exec H -- CMD | link H down|up|loss PCT|clear|rate RATE|default | host H kill|revive|stop|cont | stats H | procs H | hosts | down" ;;
  esac
}

# One line, so that bash, which reads a script as it goes, has read it all before
# main runs: an edit during a run cannot add to what this run executes.
main "$@"; exit
