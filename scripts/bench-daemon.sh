#!/bin/bash
# What the shared datapath (`uroce daemon`) costs against direct mode (the program owns the
# datapath), each figure a ratio measured in the same run, over a veth pair between two
# namespaces (as root), perftest's unmodified programs on uroce's library via `uroce run`:
#   1. bulk, one process per side: ib_write_bw, ITERS messages of 64 KiB (path MTU 4096),
#      through the daemons against --no-daemon, over the UDP backend and over AF_XDP;
#      Gb/s, the ratio daemon/direct, and CPU-seconds per GB moved of both ends, the
#      daemons included (their user + system time from /proc/PID/stat, read just before
#      and just after the transfer, so their start and idle time is left out; the
#      perftest ends' from /usr/bin/time);
#   2. the 8-byte round trip: ib_send_lat -s 8 (LAT_PROG), its t_typical (perftest's
#      median), through the daemons against direct: the difference in us and the ratio.
#      ib_send_lat, not ib_write_lat: ib_write_lat's receiver spins on memory, never on a
#      CQ, and in direct mode gave about 0.585 ms on both backends on a 2-core machine
#      (ib_send_lat: 4-7 us), most likely uroce's progress thread taking over from a
#      program that stopped polling (APP_ACTIVE in crates/uroce-verbs/src/engine.rs),
#      not the datapath;
#   3. N processes at once against one, all through one daemon per side: N concurrent
#      ib_write_bw pairs (N = 1, 2, 4, and 8 with 8 cores or more; each pair on its own
#      TCP port; each client runs AGG_SECONDS seconds, -D, so they overlap), the
#      aggregate Gb/s (the sum of the clients') and the ratio aggregate(N)/aggregate(1).
#      Direct mode has no such figure: it is one process per interface.
# The daemons are started here, in the foreground of a namespace each (`uroce daemon
# --iface IF --backend B`, no linger), before the daemon-mode runs and stopped (SIGTERM,
# waited for, the socket checked gone) before the direct-mode runs; `uroce run` finds them
# and attaches, so none is ever started behind the script's back. Odd rounds measure the
# daemon first, even rounds direct first. At the end, the medians over rounds of the ratios.
# Usage: scripts/bench-daemon.sh [ROUNDS] [ITERS]        (default 2 rounds, 5000 messages)
#   UROCE_BIN=path/to/uroce runs another build (its libibverbs.so.1 next to it, as `uroce
#   run` looks for it) instead of this checkout's target/release/uroce (built if missing).
#   BACKENDS (default "udp xdp"), AGG_SECONDS (default 2), LAT_ITERS (default 2000),
#   LAT_PROG (default ib_send_lat; ib_write_lat measures what is said above).
set -euo pipefail
ROUNDS=${1:-2}
ITERS=${2:-5000}
BACKENDS=${BACKENDS:-udp xdp}
AGG_SECONDS=${AGG_SECONDS:-2}
LAT_ITERS=${LAT_ITERS:-2000}
LAT_PROG=${LAT_PROG:-ib_send_lat}
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "bench-daemon.sh: needs root (network namespaces, veth, AF_XDP); not run" >&2
  exit 1
fi
for p in ib_write_bw "$LAT_PROG"; do
  command -v "$p" >/dev/null || {
    echo "bench-daemon.sh: perftest's $p is missing (scripts/setup.sh); not run" >&2
    exit 1
  }
done
[ -x /usr/bin/time ] || { echo "bench-daemon.sh: /usr/bin/time is missing; not run" >&2; exit 1; }
if [ -n "${UROCE_BIN:-}" ]; then
  B=$UROCE_BIN
else
  B=$PWD/target/release/uroce
  if [ ! -x "$B" ] || [ ! -e target/release/libibverbs.so.1 ]; then
    cargo build --release -q
  fi
fi
case "$B" in
  */debug/*) BUILD=debug ;;
  */release/*) BUILD=release ;;
  *) BUILD="unknown (UROCE_BIN)" ;;
esac

A=uroce-bd-$$-a
Z=uroce-bd-$$-b
IA=ud$$a
IZ=ud$$b
WORK=$(mktemp -d)
NETNS_WORK=$WORK
# The namespaces and veth, the daemons' start and stop, CPU time, the machine's line.
# shellcheck source=scripts/lib/netns.sh
source scripts/lib/netns.sh # (the working directory is the repository root)
SIDES=("$A:$IA" "$Z:$IZ")

cleanup() {
  local p
  for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; done
  # Every process left in the namespaces, a daemon some `uroce run` started included.
  netns_down "$A" "$Z"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# MTU 9000, one queue each way (the figures so far were measured on one).
netns_up "$A" "$Z" "$IA" "$IZ" 10.98.0 9000 1

CLK=$(getconf CLK_TCK)
CORES=$(nproc)
NS_LIST="1 2 4"
[ "$CORES" -ge 8 ] && NS_LIST="1 2 4 8"
echo "bench-daemon: $(machine)"
echo "  uroce: $B ($BUILD build); perftest $(ib_write_bw --version 2>&1 | awk '/Version/ { print $2 }')"
echo "  $ROUNDS rounds; bulk: $ITERS x 64 KiB per run; latency: $LAT_PROG, $LAT_ITERS x 8 B;" \
  "N processes: $AGG_SECONDS s each, N in $NS_LIST; backends: $BACKENDS"

# thread_ticks TAG PID: "TAG name=ticks" for each of the process's threads
thread_ticks() {
  local t s name
  for t in /proc/"$2"/task/*; do
    s=$(cat "$t/stat" 2>/dev/null) || continue
    name=$(cat "$t/comm")
    s=${s##*) }
    echo "$1 $name=$(echo "$s" | awk '{ print $12 + $13 }')"
  done
}

# urun NS IFACE MODE BACKEND: the command line prefix running a program on uroce (killed
# after RUN_LIMIT seconds: a server whose client failed waits for ever)
RUN_LIMIT=${RUN_LIMIT:-60}
urun() {
  local t="timeout -k 2 $RUN_LIMIT ip netns exec $1 $B run --iface $2 --backend $4"
  if [ "$3" = daemon ]; then echo "$t --"; else echo "$t --no-daemon --"; fi
}

# bw MODE BACKEND: "Gb/s client_cpu server_cpu daemon_cpu" of ITERS 64 KiB RDMA WRITEs
# (daemon_cpu: both daemons during the transfer, 0 in direct mode); "0 0 0 0" on failure
bw() {
  local mode=$1 be=$2 flags g d0 d1 sp p
  flags="-x 1 -F -m 4096 -s 65536 -n $ITERS --report_gbits -p 18900"
  # shellcheck disable=SC2046,SC2086
  /usr/bin/time -f '%U %S' -o "$WORK/ts" $(urun "$A" "$IA" "$mode" "$be") \
    ib_write_bw -d "uroce_$IA" $flags >"$WORK/server.out" 2>&1 &
  sp=$!
  listening "$A" 18900 || true
  d0=$(ticks "${DAEMONS[@]}")
  for p in "${DAEMONS[@]}"; do thread_ticks 0 "$p"; done >"$WORK/threads"
  # shellcheck disable=SC2046,SC2086
  g=$(/usr/bin/time -f '%U %S' -o "$WORK/tc" $(urun "$Z" "$IZ" "$mode" "$be") \
    ib_write_bw -d "uroce_$IZ" $flags 10.98.0.1 2>"$WORK/client.err" |
    awk '/#bytes/ { getline; print $4 }') || true
  wait "$sp" || true
  d1=$(ticks "${DAEMONS[@]}")
  for p in "${DAEMONS[@]}"; do thread_ticks 1 "$p"; done >>"$WORK/threads"
  if [ -z "$g" ]; then
    echo "  (ib_write_bw $mode $be failed: $(tail -n 3 "$WORK/client.err" | tr '\n' ' ')" \
      "server: $(tail -n 3 "$WORK/server.out" | tr '\n' ' '))" >&2
    [ "$mode" = direct ] || tail -n 3 "$WORK"/daemon-*.log >&2
    echo "0 0 0 0"
    return
  fi
  echo "$g $(time_cpu "$WORK/tc") $(time_cpu "$WORK/ts") $(awk -v t=$((d1 - d0)) -v c="$CLK" 'BEGIN { print t / c }')"
}

# lat MODE BACKEND: t_typical (us) of LAT_ITERS 8-byte round trips (LAT_PROG); 0 on failure
lat() {
  local mode=$1 be=$2 flags v sp
  flags="-x 1 -F -m 4096 -s 8 -n $LAT_ITERS -p 18901"
  # shellcheck disable=SC2046,SC2086
  $(urun "$A" "$IA" "$mode" "$be") "$LAT_PROG" -d "uroce_$IA" $flags >/dev/null 2>&1 &
  sp=$!
  listening "$A" 18901 || true
  # shellcheck disable=SC2046,SC2086
  v=$($(urun "$Z" "$IZ" "$mode" "$be") "$LAT_PROG" -d "uroce_$IZ" $flags 10.98.0.1 \
    2>"$WORK/client.err" | awk '/#bytes/ { getline; print $5 }') || true
  wait "$sp" || true
  if [ -z "$v" ]; then
    echo "  ($LAT_PROG $mode $be failed: $(tail -n 2 "$WORK/client.err" | tr '\n' ' '))" >&2
    v=0
  fi
  echo "$v"
}

# agg N BACKEND: the sum of N concurrent ib_write_bw pairs' Gb/s through the daemons
# (AGG_SECONDS each), and how many pairs reported
agg() {
  local n=$1 be=$2 i flags sps=() cps=() sum ok
  for i in $(seq "$n"); do
    flags="-x 1 -F -m 4096 -s 65536 -D $AGG_SECONDS --report_gbits -p $((18910 + i))"
    # shellcheck disable=SC2046,SC2086
    $(urun "$A" "$IA" daemon "$be") ib_write_bw -d "uroce_$IA" $flags >/dev/null 2>&1 &
    sps+=($!)
  done
  for i in $(seq "$n"); do listening "$A" $((18910 + i)) || true; done
  for i in $(seq "$n"); do
    flags="-x 1 -F -m 4096 -s 65536 -D $AGG_SECONDS --report_gbits -p $((18910 + i))"
    # shellcheck disable=SC2046,SC2086
    $(urun "$Z" "$IZ" daemon "$be") ib_write_bw -d "uroce_$IZ" $flags 10.98.0.1 \
      >"$WORK/agg-$i.out" 2>&1 &
    cps+=($!)
  done
  for i in "${cps[@]}" "${sps[@]}"; do wait "$i" || true; done
  sum=0 ok=0
  for i in $(seq "$n"); do
    g=$(awk '/#bytes/ { getline; print $4 }' "$WORK/agg-$i.out")
    if [ -n "$g" ]; then
      sum=$(awk -v a="$sum" -v b="$g" 'BEGIN { print a + b }')
      ok=$((ok + 1))
    else
      echo "  (ib_write_bw pair $i of $n, $be, failed: $(tail -n 3 "$WORK/agg-$i.out" | tr '\n' ' '))" >&2
    fi
  done
  echo "$sum $ok"
}

ROWS=$WORK/rows
: >"$ROWS"
gb=$(awk -v n="$ITERS" 'BEGIN { print n * 65536 / 1e9 }')
for r in $(seq "$ROUNDS"); do
  for be in $BACKENDS; do
    if [ $((r % 2)) = 1 ]; then order="daemon direct"; else order="direct daemon"; fi
    for mode in $order; do
      if [ "$mode" = daemon ]; then
        daemons_start "$B" "$be" "${SIDES[@]}" || exit 1
        {
          echo "$r $be bw daemon $(bw daemon "$be")"
          # The daemons' threads during the bulk transfer (both sides summed by name).
          echo "$r $be threads $(awk -v c="$CLK" '
            { split($2, kv, "="); if ($1 == 0) b[kv[1]] += kv[2]; else a[kv[1]] += kv[2] }
            END { for (k in a) printf "%s=%.2f ", k, (a[k] - b[k]) / c }' "$WORK/threads")"
          echo "$r $be lat daemon $(lat daemon "$be")"
          for n in $NS_LIST; do
            echo "$r $be agg $n $(agg "$n" "$be")"
          done
        } >>"$ROWS"
        daemons_stop "$B" "${SIDES[@]}" || exit 1
      else
        {
          echo "$r $be bw direct $(bw direct "$be")"
          echo "$r $be lat direct $(lat direct "$be")"
        } >>"$ROWS"
      fi
    done
  done
  python3 - "$ROWS" "$r" "$gb" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.split()[0] == sys.argv[2]]
r, gb = sys.argv[2], float(sys.argv[3])
def get(be, kind, mode):
    return next((x[4:] for x in rows if x[1:4] == [be, kind, mode]), None)
for be in dict.fromkeys(x[1] for x in rows):
    d, o = get(be, "bw", "daemon"), get(be, "bw", "direct")
    if d and o:
        dg, dc, ds, dd = map(float, d)
        og, oc, os_, _ = map(float, o)
        dpg, opg = (dc + ds + dd) / gb, (oc + os_) / gb
        ratio = dg / og if og else float("nan")
        print(f"round {r} {be:<3} bulk   Gb/s daemon {dg:6.2f}  direct {og:6.2f}  daemon/direct {ratio:5.2f};"
              f"  CPU-s per GB daemon {dpg:6.3f} (ends {(dc + ds) / gb:.3f} + daemons {dd / gb:.3f})"
              f"  direct {opg:6.3f}  daemon/direct {dpg / opg if opg else float('nan'):5.2f}")
    th = next((x[3:] for x in rows if x[1:3] == [be, "threads"]), None)
    if th:
        print(f"round {r} {be:<3} bulk   daemons' CPU-s by thread (both sides): {' '.join(sorted(th))}")
    d, o = get(be, "lat", "daemon"), get(be, "lat", "direct")
    if d and o:
        dl, ol = float(d[0]), float(o[0])
        print(f"round {r} {be:<3} 8 B    t_typical us daemon {dl:6.2f}  direct {ol:6.2f}  "
              f"daemon-direct {dl - ol:+6.2f} us  daemon/direct {dl / ol if ol else float('nan'):5.2f}")
    aggs = [(int(x[3]), float(x[4]), int(x[5])) for x in rows if x[1:3] == [be, "agg"]]
    one = next((g for n, g, _ in aggs if n == 1), 0)
    if aggs:
        print(f"round {r} {be:<3} N procs aggregate Gb/s (x one): " + "  ".join(
            f"N={n} {g:6.2f} ({g / one if one else float('nan'):.2f})" + ("" if ok == n else f" [{ok}/{n} reported]")
            for n, g, ok in aggs))
PY
done

python3 - "$ROWS" "$gb" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
gb = float(sys.argv[2])
rounds = list(dict.fromkeys(x[0] for x in rows))
med = lambda xs: statistics.median(xs) if xs else float("nan")
fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
def get(r, be, kind, mode):
    return next((x[4:] for x in rows if x[0] == r and x[1:4] == [be, kind, mode]), None)
print("medians over rounds:")
for be in dict.fromkeys(x[1] for x in rows):
    bw, cpu, dlat, rlat, dabs, oabs = [], [], [], [], [], []
    agg = {}
    for r in rounds:
        d, o = get(r, be, "bw", "daemon"), get(r, be, "bw", "direct")
        if d and o and float(d[0]) > 0 and float(o[0]) > 0:
            bw.append(float(d[0]) / float(o[0]))
            cpu.append(sum(map(float, d[1:4])) / sum(map(float, o[1:3])))
        d, o = get(r, be, "lat", "daemon"), get(r, be, "lat", "direct")
        if d and o and float(d[0]) > 0 and float(o[0]) > 0:
            dlat.append(float(d[0]) - float(o[0]))
            rlat.append(float(d[0]) / float(o[0]))
        a = {int(x[3]): float(x[4]) for x in rows if x[0] == r and x[1:3] == [be, "agg"]}
        for n, g in a.items():
            if a.get(1):
                agg.setdefault(n, []).append(g / a[1])
    print(f"  {be:<3} bulk daemon/direct Gb/s {med(bw):.2f} (rounds: {fmt(bw)}; goal >= 0.9);"
          f" CPU-s per GB daemon/direct {med(cpu):.2f} (rounds: {fmt(cpu)})")
    print(f"  {be:<3} 8-byte round trip daemon - direct {med(dlat):+.2f} us (rounds: {fmt(dlat)}; goal <= 3 us);"
          f" daemon/direct {med(rlat):.2f} (rounds: {fmt(rlat)})")
    print(f"  {be:<3} N processes through one daemon per side, aggregate / one: " + "  ".join(
        f"N={n} {med(v):.2f} (rounds: {fmt(v)})" for n, v in sorted(agg.items())))
print("  (N processes in direct mode: not measurable, direct mode is one uroce process per interface)")
PY
