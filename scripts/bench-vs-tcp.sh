#!/bin/bash
# Does uroce beat kernel TCP for an AI-training user? One run over a veth pair between two
# namespaces (as root; MTU 9000, two queues each way), each round alternating uroce and TCP
# (TCP first in odd rounds, last in even ones) so that the ratios hold on a noisy shared
# machine; at the end the medians over rounds of the per-round ratios uroce/TCP against
# the goals, met or not met.
#   1. nccl: NCCL's own net plugins (the real libnccl.so.2, scripts/nccl-net/fetch.sh; when
#      it cannot be had, this part says why and is skipped) driven by
#      scripts/nccl-net/harness.c (scripts/nccl-net/lib.sh's pair): ncclNetIb on uroce
#      under `uroce run` against ncclNetSocket on TCP, both directions at once; GB/s per
#      direction and CPU-seconds per GB moved (both processes, every thread, plus both
#      uroce daemons). Messages of 512 KiB, 8 in flight each way (the harness's defaults):
#      what NCCL's ring collectives post, a step of NCCL_BUFFSIZE (4 MiB) / NCCL_STEPS (8)
#      = 512 KiB with up to NCCL_STEPS in flight; NCCL's point-to-point chunk
#      (NCCL_P2P_NET_CHUNKSIZE, 128 KiB) is smaller: NCCL_HARNESS_ARGS="--size 131072"
#      measures that instead. COUNT = 400 x SECONDS messages each way per run.
#   2. bulk: `uroce perf write`, 64 KiB messages, path MTU 4096, 1, 4 and 8 QPs of one
#      process (--threads N: N loops on threads, one QP each, where the machine has N
#      cores; else --qps N, one loop driving N QPs) against iperf3 -P N (1, 4, 8
#      streams), SECONDS each; Gb/s, CPU-seconds per GB of both ends (GNU time) plus
#      both uroce daemons (/proc/PID/stat during the run).
#   3. rtt: the 8-byte RC WRITE round trip p50 (`uroce perf write --lat`, SECONDS) against
#      kernel TCP's 8-byte request/response (examples/tcp_rr, 10,000 round trips).
# uroce rows: `auto` is what a user gets by default (`--backend auto`, through the
# `uroce daemon` of each side, which this script starts with that backend before each uroce
# run and stops after it, so no daemon lingers into a TCP run and its CPU is counted);
# `udp` and `xdp` the same with that backend; `direct` is `--backend auto --no-daemon`
# (the process owns the interface's datapath); `shards` (added by --shards N) is the `udp`
# row (through the daemons) with UROCE_SHARDS=N exported, as `uroce run --shards N` gives:
# the drop-in library's sharded engine (N sans-IO contexts, each with its progress thread,
# each attached to the daemon as a process of its own, with a socket of its own), for the
# NCCL part only (`uroce perf` does not go through the library: its rows scale with
# --threads).
# Each row's datapath is printed the first time (the daemon's own line, or `uroce perf`'s).
# The goals are judged on `auto`; the best other row is shown beside it.
# Goals: ncclNetIb on uroce >= 2.0x ncclNetSocket's GB/s; one QP >= 1.0x one TCP stream
# (Gb/s); with 8 cores or more, 8 QPs of one process >= 2.0x iperf3 -P 8 (Gb/s), with fewer
# (the two ends share the cores: throughput then measures the scheduler) instead CPU-seconds
# per GB of 8 QPs <= 0.5x iperf3 -P 8's (both ends); the 8-byte round trip p50 <= 0.5x
# TCP's.
# Usage: scripts/bench-vs-tcp.sh [--quick] [--only nccl|bulk|rtt] [--shards N] [ROUNDS] [SECONDS]
#   default 2 rounds of 2 s per run (a few minutes on 2 cores); --quick: 1 round of 1 s
#   (a smoke check). UROCE_BIN=path/to/uroce runs another build (its libibverbs.so.1 next
#   to it, as `uroce run` looks for it; its examples/tcp_rr when there) instead of building
#   this checkout's (release); NCCL_NET_LIB=path/to/libnccl.so.2 another library instead
#   of fetch.sh's; NCCL_HARNESS=path a harness built already (no gcc needed);
#   GNU_TIME=path GNU time where it is not /usr/bin/time; NCCL_SKIP=REASON skips the NCCL
#   part, saying why. ROWS (default "auto udp xdp direct", plus "shards" with --shards N)
#   chooses the uroce rows. UROCE_SHARDS in the caller's environment is ignored: only the
#   shards row gets it.
set -euo pipefail
QUICK=0
ONLY=all
SHARDS=
POS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --only)
      ONLY=${2:-}
      shift
      ;;
    --only=*) ONLY=${1#--only=} ;;
    --shards)
      SHARDS=${2:-}
      shift
      ;;
    --shards=*) SHARDS=${1#--shards=} ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "bench-vs-tcp.sh: unknown option $1 (--help)" >&2
      exit 2
      ;;
    *) POS+=("$1") ;;
  esac
  shift
done
case "$ONLY" in all | nccl | bulk | rtt) ;; *)
  echo "bench-vs-tcp.sh: --only takes nccl, bulk or rtt" >&2
  exit 2
  ;;
esac
if [ -n "$SHARDS" ] && ! { [[ "$SHARDS" =~ ^[0-9]+$ ]] && [ "$SHARDS" -ge 1 ] && [ "$SHARDS" -le 64 ]; }; then
  echo "bench-vs-tcp.sh: --shards takes a number from 1 to 64" >&2
  exit 2
fi
if [ $QUICK = 1 ]; then
  ROUNDS=${POS[0]:-1}
  DUR=${POS[1]:-1}
else
  ROUNDS=${POS[0]:-2}
  DUR=${POS[1]:-2}
fi
read -r -a ROWS <<<"${ROWS:-auto udp xdp direct${SHARDS:+ shards}}"
for row in "${ROWS[@]}"; do
  if [ "$row" = shards ] && [ -z "$SHARDS" ]; then
    echo "bench-vs-tcp.sh: the shards row needs --shards N" >&2
    exit 2
  fi
done
# Only the shards row runs sharded (it exports UROCE_SHARDS for its own runs).
unset UROCE_SHARDS
want() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }
cd "$(dirname "$0")/.."
T0=$(date +%s)

if [ "$(id -u)" != 0 ]; then
  echo "bench-vs-tcp.sh: needs root (network namespaces, veth, AF_XDP); not run" >&2
  exit 1
fi
# GNU time: /usr/bin/time, or GNU_TIME (scripts/device/run.sh's copy).
GNU_TIME=${GNU_TIME:-/usr/bin/time}
for t in "$GNU_TIME" python3 ss; do
  command -v "$t" >/dev/null || {
    echo "bench-vs-tcp.sh: $t is missing; not run" >&2
    exit 1
  }
done
if want bulk && ! command -v iperf3 >/dev/null; then
  echo "bench-vs-tcp.sh: iperf3 is missing (scripts/setup.sh --bench); not run" >&2
  exit 1
fi

if [ -n "${UROCE_BIN:-}" ]; then
  B=$UROCE_BIN
else
  cargo build --release -q -p uroce-tools -p uroce-verbs
  B=$PWD/target/release/uroce
fi
TCP_RR=
if want rtt; then
  TCP_RR=$(dirname "$B")/examples/tcp_rr
  if [ -z "${UROCE_BIN:-}" ] || [ ! -x "$TCP_RR" ]; then
    cargo build --release -q -p uroce-tools --example tcp_rr
    TCP_RR=$PWD/target/release/examples/tcp_rr
  fi
fi

WORK=$(mktemp -d /tmp/uroce-vs-tcp.XXXXXX)
NETNS_WORK=$WORK
# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh
# shellcheck source=scripts/nccl-net/lib.sh
. scripts/nccl-net/lib.sh
A=uroce-vs-$$-a
Z=uroce-vs-$$-b
IA=uv$$a
IZ=uv$$b
cleanup() {
  local p
  for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_down "$A" "$Z"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

CORES=$(nproc)
echo "bench-vs-tcp: $(machine)"
echo "  uroce: $B ($(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ', modified'));" \
  "$ROUNDS rounds, $DUR s per run; uroce rows: ${ROWS[*]}; parts: $ONLY"

# NCCL: the library, or why not.
NCCL=0
if want nccl && [ -n "${NCCL_SKIP:-}" ]; then
  echo "  nccl: skipped, $NCCL_SKIP"
elif want nccl; then
  if [ -n "${NCCL_NET_LIB:-}" ]; then
    LIB=$NCCL_NET_LIB
  elif LIB=$(scripts/nccl-net/fetch.sh 2>"$WORK/fetch.err" | tail -n 1) && [ -n "$LIB" ]; then
    :
  else
    LIB=
    echo "  nccl: skipped, scripts/nccl-net/fetch.sh could not get libnccl.so.2: $(tr '\n' ' ' <"$WORK/fetch.err")"
  fi
  if [ -n "$LIB" ] && [ ! -s "$LIB" ]; then
    echo "  nccl: skipped, $LIB is not there"
  elif [ -n "$LIB" ] && [ -z "${NCCL_HARNESS:-}" ] && ! command -v gcc >/dev/null; then
    echo "  nccl: skipped, gcc is missing to build scripts/nccl-net/harness.c (scripts/setup.sh --bench)"
  elif [ -n "$LIB" ]; then
    nccl_harness
    NCCL=1
    echo "  nccl: $LIB"
  fi
fi

netns_up "$A" "$Z" "$IA" "$IZ" 10.96.0
SIDES=("$A:$IA" "$Z:$IZ")
CLK=$(getconf CLK_TCK)
RESULTS=$WORK/results
: >"$RESULTS"
declare -A SEEN

# with_uroce ROW FUNCTION ARGS...: FUNCTION ARGS with the datapath of ROW: for a daemon row,
# both daemons started with that backend (their pids in DAEMONS) and stopped after; prints
# the row's datapath the first time. FUNCTION sees UFLAGS (the `uroce` flags of the row).
with_uroce() {
  local row=$1 rc=0
  shift
  if [ "$row" = direct ]; then
    UFLAGS=(--backend auto --no-daemon)
    if [ -z "${SEEN[daemon.$row]:-}" ]; then
      SEEN[daemon.$row]=1
      echo "    datapath of direct: no daemon, each process its own (AF_XDP where it may set it up, else UDP)"
    fi
    "$@" || rc=1
    return $rc
  fi
  local be=$row
  if [ "$row" = shards ]; then
    be=udp
  fi
  UFLAGS=(--backend "$be")
  daemons_start "$B" "$be" "${SIDES[@]}" || return 1
  if [ -z "${SEEN[daemon.$row]:-}" ]; then
    SEEN[daemon.$row]=1
    local extra=
    if [ "$row" = shards ]; then
      extra=", UROCE_SHARDS=$SHARDS: each engine attached on its own"
    fi
    echo "    datapath of $row: $(daemon_datapath "$B" "$A" "$IA")$extra"
  fi
  "$@" || rc=1
  daemons_stop "$B" "${SIDES[@]}" || rc=1
  return $rc
}

# order ROUND: the rows of a round, TCP first in odd rounds and last in even ones (a
# machine getting busier or quieter during a round then favours neither side throughout)
order() {
  if [ $(($1 % 2)) = 1 ]; then echo tcp "${ROWS[@]}"; else echo "${ROWS[@]}" tcp; fi
}

# record PART ROUND ROW N VALUE CPU_S GB: one result (VALUE: GB/s per direction, Gb/s or
# p50 us; CPU_S the CPU-seconds of both ends and daemons; GB moved)
record() { echo "$*" >>"$RESULTS"; }

# ---- 1. NCCL ----
NCOUNT=$((400 * DUR))
nccl_one() { # ROW ROUND
  local row=$1 r=$2 out d0 d1 gbs cpu gb net=Socket
  d0=$(ticks "${DAEMONS[@]}")
  if [ "$row" = tcp ]; then
    out=$(nccl_pair tcp "$NCOUNT" ends) || return 1
  elif [ "$row" = direct ]; then
    out=$(nccl_pair auto "$NCOUNT" ends --no-daemon) || return 1
    net=Ib
  elif [ "$row" = shards ]; then
    out=$(
      export UROCE_SHARDS=$SHARDS
      nccl_pair udp "$NCOUNT" ends
    ) || return 1
    net="Ib, UROCE_SHARDS=$SHARDS"
  else
    out=$(nccl_pair "$row" "$NCOUNT" ends) || return 1
    net=Ib
  fi
  d1=$(ticks "${DAEMONS[@]}")
  gbs=$(grep -o '[0-9.]* GB/s' <<<"$out" | awk '{ s += $1 } END { printf "%.3f", s / NR }')
  cpu=$(grep -o 'cpu [0-9.]* s' <<<"$out" | awk -v d=$((d1 - d0)) -v c="$CLK" '{ s += $2 } END { printf "%.3f", s + d / c }')
  gb=$(awk -v n="$NCOUNT" -v s="${NCCL_SIZE:-524288}" 'BEGIN { printf "%.4f", 2 * n * s / 1e9 }')
  record nccl "$r" "$row" 0 "$gbs" "$cpu" "$gb"
  printf '  %-5s %-7s %-6s %10s GB/s/dir %8.3f cpu-s/GB   (%s)\n' "$r" nccl "$row" "$gbs" \
    "$(awk -v c="$cpu" -v g="$gb" 'BEGIN { print c / g }')" "ncclNet$net"
}
if [ "$NCCL" = 1 ]; then
  # A --size in NCCL_HARNESS_ARGS changes the bytes moved.
  NCCL_SIZE=$(awk '{ for (i = 1; i < NF; i++) if ($i == "--size") print $(i + 1) }' <<<"${NCCL_HARNESS_ARGS:-}")
  echo "1. NCCL net plugins, $NCOUNT x $((${NCCL_SIZE:-524288} / 1024)) KiB each way per run, 8 in flight; ncclNetIb on uroce (rows) / ncclNetSocket on TCP (tcp)"
  for r in $(seq "$ROUNDS"); do
    for row in $(order "$r"); do
      if [ "$row" = tcp ]; then
        nccl_one tcp "$r" || echo "  $r nccl tcp failed"
      else
        with_uroce "$row" nccl_one "$row" "$r" || echo "  $r nccl $row failed"
      fi
    done
  done
fi

# ---- 2. bulk ----
# bulk_uroce ROW N ROUND: `uroce perf write` with N loops/QPs (UFLAGS set by with_uroce)
bulk_uroce() {
  local row=$1 n=$2 r=$3 thr=() out sp d0 d1 g dp cpu gb port=$((18600 + RANDOM % 100))
  # N loops on threads where the machine has a core for each; beyond that one loop
  # drives the N QPs (--qps), since more busy loops than cores starve each other into
  # spurious retransmission timeouts (measured: 0.01x TCP with 8 loops on 2 cores).
  if [ "$n" -gt 1 ] && [ "$n" -le "$(nproc)" ]; then
    thr=(--threads "$n")
  elif [ "$n" -gt 1 ]; then
    thr=(--qps "$n")
  fi
  ip netns exec "$Z" "$GNU_TIME" -f '%U %S' -o "$WORK/ts" \
    timeout -k 2 $((DUR + 40)) "$B" perf write "${UFLAGS[@]}" -m 4096 --port "$port" \
    >"$WORK/server.out" 2>&1 &
  sp=$!
  listening "$Z" "$port" || true
  d0=$(ticks "${DAEMONS[@]}")
  out=$(ip netns exec "$A" "$GNU_TIME" -f '%U %S' -o "$WORK/tc" \
    timeout -k 2 $((DUR + 30)) "$B" perf write 10.96.0.2 "${UFLAGS[@]}" "${thr[@]}" -m 4096 \
    --size 65536 --port "$port" --duration "$DUR" --json 2>"$WORK/client.err") || true
  wait "$sp" || true
  d1=$(ticks "${DAEMONS[@]}")
  g=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['bw_gbps'])" "$out" 2>/dev/null) || {
    echo "  $r bulk $row x$n failed: $(tail -n 2 "$WORK/client.err" | tr '\n' ' ') server: $(tail -n 2 "$WORK/server.out" | tr '\n' ' ')"
    return 0
  }
  dp=$(python3 -c "import json,sys; v=json.loads(sys.argv[1]); print(v['datapath'], '; retransmits', v.get('retransmits'))" "$out")
  if [ -z "${SEEN[perf.$row.$n]:-}" ]; then
    SEEN[perf.$row.$n]=1
    echo "    uroce perf $row x$n: $dp"
  fi
  cpu=$(awk -v c="$(time_cpu "$WORK/tc")" -v s="$(time_cpu "$WORK/ts")" -v d=$((d1 - d0)) -v k="$CLK" \
    'BEGIN { printf "%.3f", c + s + d / k }')
  gb=$(awk -v g="$g" -v t="$DUR" 'BEGIN { printf "%.6f", g * t / 8 }')
  record bulk "$r" "$row" "$n" "$g" "$cpu" "$gb"
  printf '  %-5s %-7s %-6s %10.2f Gb/s     %8.3f cpu-s/GB\n' "$r" "bulk x$n" "$row" "$g" \
    "$(awk -v c="$cpu" -v g="$gb" 'BEGIN { print (g > 0) ? c / g : "inf" }')"
}
bulk_tcp() { # N ROUND
  local n=$1 r=$2 out sp g cpu gb port=$((18700 + RANDOM % 100))
  ip netns exec "$Z" "$GNU_TIME" -f '%U %S' -o "$WORK/ts" \
    timeout -k 2 $((DUR + 40)) iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  sp=$!
  listening "$Z" "$port" || true
  out=$(ip netns exec "$A" "$GNU_TIME" -f '%U %S' -o "$WORK/tc" \
    timeout -k 2 $((DUR + 30)) iperf3 -c 10.96.0.2 -p "$port" -P "$n" -t "$DUR" -J 2>/dev/null) || true
  wait "$sp" || true
  g=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['end']['sum_received']['bits_per_second'] / 1e9)" "$out" 2>/dev/null) || {
    echo "  $r bulk tcp -P $n failed"
    return 0
  }
  cpu=$(awk -v c="$(time_cpu "$WORK/tc")" -v s="$(time_cpu "$WORK/ts")" 'BEGIN { printf "%.3f", c + s }')
  gb=$(awk -v g="$g" -v t="$DUR" 'BEGIN { printf "%.6f", g * t / 8 }')
  record bulk "$r" tcp "$n" "$g" "$cpu" "$gb"
  printf '  %-5s %-7s %-6s %10.2f Gb/s     %8.3f cpu-s/GB   (iperf3 -P %s)\n' "$r" "bulk x$n" tcp "$g" \
    "$(awk -v c="$cpu" -v g="$gb" 'BEGIN { print (g > 0) ? c / g : "inf" }')" "$n"
}
if want bulk; then
  echo "2. bulk: uroce perf write 64 KiB, path MTU 4096, N QPs of one process (--threads N up to the cores, else --qps N) / iperf3 -P N; $DUR s each; CPU: both ends + daemons"
  for r in $(seq "$ROUNDS"); do
    for n in 1 4 8; do
      for row in $(order "$r"); do
        if [ "$row" = tcp ]; then
          bulk_tcp "$n" "$r"
        elif [ "$row" = shards ]; then
          continue # uroce perf does not load the library: UROCE_SHARDS changes nothing there
        else
          with_uroce "$row" bulk_uroce "$row" "$n" "$r" || echo "  $r bulk $row x$n failed"
        fi
      done
    done
  done
fi

# ---- 3. round trip ----
rtt_uroce() { # ROW ROUND
  local row=$1 r=$2 out sp v port=$((18800 + RANDOM % 100))
  ip netns exec "$Z" timeout -k 2 $((DUR + 40)) "$B" perf write --lat "${UFLAGS[@]}" --port "$port" \
    >"$WORK/server.out" 2>&1 &
  sp=$!
  listening "$Z" "$port" || true
  out=$(ip netns exec "$A" timeout -k 2 $((DUR + 30)) "$B" perf write 10.96.0.2 --lat "${UFLAGS[@]}" \
    --port "$port" --duration "$DUR" --json 2>"$WORK/client.err") || true
  wait "$sp" || true
  v=$(python3 -c "import json,sys; v=json.loads(sys.argv[1]); print(v['lat_p50_us'], v['lat_p99_us'])" "$out" 2>/dev/null) || {
    echo "  $r rtt $row failed: $(tail -n 2 "$WORK/client.err" | tr '\n' ' ')"
    return 0
  }
  if [ -z "${SEEN[perf.$row.lat]:-}" ]; then
    SEEN[perf.$row.lat]=1
    echo "    uroce perf --lat $row: $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['datapath'])" "$out")"
  fi
  record rtt "$r" "$row" 0 "${v% *}" 0 0
  printf '  %-5s %-7s %-6s %10.1f us p50  %8.1f us p99\n' "$r" rtt "$row" "${v% *}" "${v#* }"
}
rtt_tcp() { # ROUND
  local r=$1 out sp v port=$((18900 + RANDOM % 100))
  ip netns exec "$Z" timeout -k 2 60 "$TCP_RR" server "$port" >/dev/null 2>&1 &
  sp=$!
  listening "$Z" "$port" || true
  out=$(ip netns exec "$A" timeout -k 2 60 "$TCP_RR" client "10.96.0.2:$port" 10000) || true
  wait "$sp" || true
  v=$(python3 -c "import json,sys; v=json.loads(sys.argv[1]); print(v['lat_p50_us'], v['lat_p99_us'])" "$out" 2>/dev/null) || {
    echo "  $r rtt tcp failed"
    return 0
  }
  record rtt "$r" tcp 0 "${v% *}" 0 0
  printf '  %-5s %-7s %-6s %10.1f us p50  %8.1f us p99   (tcp_rr)\n' "$r" rtt tcp "${v% *}" "${v#* }"
}
if want rtt; then
  echo "3. 8-byte round trip: uroce perf write --lat ($DUR s) / TCP request-response (tcp_rr, 10,000)"
  for r in $(seq "$ROUNDS"); do
    for row in $(order "$r"); do
      if [ "$row" = tcp ]; then
        rtt_tcp "$r"
      elif [ "$row" = shards ]; then
        continue # uroce perf does not load the library: UROCE_SHARDS changes nothing there
      else
        with_uroce "$row" rtt_uroce "$row" "$r" || echo "  $r rtt $row failed"
      fi
    done
  done
fi

# ---- summary ----
python3 - "$RESULTS" "$CORES" "$ROUNDS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
cores, nrounds = int(sys.argv[2]), int(sys.argv[3])
res = {}
for part, rd, row, n, v, cpu, gb in rows:
    res[(part, rd, row, int(n))] = (float(v), float(cpu), float(gb))

def per_gb(x):
    return x[1] / x[2] if x[2] > 0 else float("nan")

def ratios(part, row, n, what):
    """Per-round ratios uroce row / TCP, what: 'v' (the value) or 'cpu' (CPU-s per GB)."""
    out = []
    for rd in sorted({k[1] for k in res}, key=int):
        u, t = res.get((part, rd, row, n)), res.get((part, rd, "tcp", n))
        # A uroce run that moved nothing counts as 0x (its CPU per GB is left out).
        if not u or not t or t[0] <= 0 or (what != "v" and (u[2] <= 0 or t[2] <= 0)):
            continue
        out.append(u[0] / t[0] if what == "v" else per_gb(u) / per_gb(t))
    return out

def med(xs):
    return statistics.median(xs) if xs else None

uroce_rows = list(dict.fromkeys(k[2] for k in res if k[2] != "tcp"))
print()
print(f"medians over rounds of the per-round ratios uroce / TCP ({nrounds} rounds):")
print(f"  {'part':<10} {'row':<7} {'value':>7} {'cpu-s/GB':>9}   rounds (value)")
for part, ns in (("nccl", [0]), ("bulk", [1, 4, 8]), ("rtt", [0])):
    for n in ns:
        for row in uroce_rows:
            v, c = ratios(part, row, n, "v"), ratios(part, row, n, "cpu")
            if not v:
                continue
            label = part if part != "bulk" else f"bulk x{n}"
            cs = f"{med(c):9.2f}" if part != "rtt" and c else f"{'-':>9}"
            print(f"  {label:<10} {row:<7} {med(v):6.2f}x {cs}   {', '.join(f'{x:.2f}' for x in v)}")

def goal(name, part, n, what, op, target, note=""):
    def fmt(row):
        m = med(ratios(part, row, n, what))
        return m
    m = fmt("auto")
    others = [(fmt(r), r) for r in uroce_rows if r != "auto" and fmt(r) is not None]
    if others:
        best = (max if op == ">=" else min)(others)
        extra = f"best other row: {best[1]} {best[0]:.2f}x"
    else:
        extra = ""
    if m is None and what != "v" and ratios(part, "auto", n, "v"):
        verdict, shown = "NOT met", "-"
        extra = "(uroce moved nothing) " + extra
    elif m is None:
        verdict, shown = "not measured", "-"
    else:
        ok = m >= target if op == ">=" else m <= target
        verdict, shown = ("met" if ok else "NOT met"), f"{m:.2f}x"
    print(f"  {name:<58} {op} {target:<4} {shown:>7}  {verdict:<12} {extra}{note}")

print()
print(f"goals (row auto, the default: --backend auto through the uroce daemon); {cores} cores:")
goal("ncclNetIb on uroce / ncclNetSocket, GB/s", "nccl", 0, "v", ">=", 2.0)
goal("one QP / one TCP stream, Gb/s", "bulk", 1, "v", ">=", 1.0)
if cores >= 8:
    goal("8 QPs of one process / iperf3 -P 8, Gb/s", "bulk", 8, "v", ">=", 2.0)
else:
    goal(f"8 QPs / iperf3 -P 8, CPU-s per GB (both ends; {cores} < 8 cores)", "bulk", 8, "cpu", "<=", 0.5)
goal("8-byte round trip p50, uroce / TCP", "rtt", 0, "v", "<=", 0.5)
PY
echo "bench-vs-tcp: $(($(date +%s) - T0)) s"
