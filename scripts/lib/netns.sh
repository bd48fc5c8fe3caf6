# shellcheck shell=bash
# Shared by the scripts that join two network namespaces by a veth pair (sourced, not run):
# the namespaces and the pair, the `uroce daemon`s serving its ends, CPU time of processes,
# the machine's description, the median. Callers set `set -euo pipefail` themselves.
#
#   netns_up A Z IA IZ SUBNET [MTU [QUEUES]]
#                               namespaces A and Z, veth IA (in A, SUBNET.1/24) to IZ (in
#                               Z, SUBNET.2/24), MTU (default 9000), QUEUES queues each way
#                               (default 2: one AF_XDP loop per queue, as the tests' veth
#                               pairs have), lo up, both carriers up before it returns
#   netns_down A Z              every process left in either namespace killed (by pid:
#                               the namespaces are the caller's own), then both deleted
#   daemons_start B BACKEND A:IA Z:IZ   one `B daemon --iface IF --backend BACKEND` per
#                               side, in the caller's foreground (pids in DAEMONS), logs
#                               in $NETNS_WORK; fails when one already serves an interface
#   daemons_stop B A:IA Z:IZ    SIGTERM, wait, and check that none serves either any more
#   daemon_datapath B NS IF     what the daemon serving IF says it runs on (its --check line)
#   ticks PID...                user + system clock ticks of the processes (every thread)
#   time_cpu FILE               user + system seconds that `/usr/bin/time -f '%U %S'` wrote
#   listening NS PORT           wait (up to 20 s) until something listens on TCP PORT in NS
#   machine                     one line: cores, kernel, CPU model
#   median                      the median of the numbers on stdin, one a line

DAEMONS=()
NETNS_WORK=${NETNS_WORK:-/tmp}

netns_up() {
  local a=$1 z=$2 ia=$3 iz=$4 net=$5 mtu=${6:-9000} q=${7:-2} s _
  ip netns add "$a"
  ip netns add "$z"
  ip link add "$ia" numtxqueues "$q" numrxqueues "$q" netns "$a" type veth peer name "$iz" \
    numtxqueues "$q" numrxqueues "$q" netns "$z"
  ip -n "$a" addr add "$net.1/24" dev "$ia"
  ip -n "$z" addr add "$net.2/24" dev "$iz"
  for s in "$a:$ia" "$z:$iz"; do
    ip -n "${s%%:*}" link set "${s#*:}" mtu "$mtu" up
    ip -n "${s%%:*}" link set lo up
  done
  # Both carriers up before the first run (a port still down fails ibv_open_device).
  for _ in $(seq 100); do
    if ip -n "$a" -o link show "$ia" | grep -q 'state UP' &&
      ip -n "$z" -o link show "$iz" | grep -q 'state UP'; then
      return 0
    fi
    sleep 0.05
  done
}

netns_down() {
  local ns p
  for ns in "$@"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  done
  sleep 0.2
  for ns in "$@"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

# serving B NS IF: whether a daemon serves IF in NS
serving() { ip netns exec "$2" "$1" daemon --iface "$3" --check >/dev/null 2>&1; }

daemons_start() {
  local b=$1 be=$2 s _
  shift 2
  DAEMONS=()
  for s in "$@"; do
    if serving "$b" "${s%%:*}" "${s#*:}"; then
      echo "a uroce daemon already serves ${s#*:} before ours started" >&2
      return 1
    fi
    ip netns exec "${s%%:*}" "$b" daemon --iface "${s#*:}" --backend "$be" \
      >"$NETNS_WORK/daemon-${s#*:}.log" 2>&1 &
    DAEMONS+=($!)
  done
  for _ in $(seq 200); do
    local up=1
    for s in "$@"; do serving "$b" "${s%%:*}" "${s#*:}" || up=0; done
    [ $up = 1 ] && return 0
    sleep 0.05
  done
  echo "the uroce daemons ($be) did not come up:" >&2
  cat "$NETNS_WORK"/daemon-*.log >&2
  return 1
}

daemons_stop() {
  local b=$1 p s
  shift
  for p in "${DAEMONS[@]}"; do
    kill -0 "$p" 2>/dev/null || {
      echo "uroce daemon $p died during the run:" >&2
      tail -n 5 "$NETNS_WORK"/daemon-*.log >&2
    }
    kill "$p" 2>/dev/null || true
  done
  for p in "${DAEMONS[@]}"; do wait "$p" 2>/dev/null || true; done
  DAEMONS=()
  for s in "$@"; do
    if serving "$b" "${s%%:*}" "${s#*:}"; then
      echo "a uroce daemon still serves ${s#*:} after ours stopped" >&2
      return 1
    fi
  done
}

daemon_datapath() {
  ip netns exec "$2" "$1" daemon --iface "$3" --check 2>&1 | head -n 1
}

ticks() {
  local t=0 p s
  for p in "$@"; do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }
    # After the command's name: field 3 is the state; utime and stime are 14 and 15.
    t=$((t + $(echo "$s" | awk '{ print $12 + $13 }')))
  done
  echo "$t"
}

time_cpu() { awk '{ u = $(NF - 1); s = $NF } END { print u + s }' "$1"; }

listening() {
  local _
  for _ in $(seq 400); do
    [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2")" ] && return 0
    sleep 0.05
  done
  return 1
}

machine() {
  echo "$(nproc) cores, kernel $(uname -r)," \
    "CPU $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
