#!/bin/bash
# End-to-end datapath figures over a veth pair between two namespaces (as root), each
# measured in the same run so the ratios hold on a noisy shared machine:
#   raw AF_XDP frames (no transport: the ceiling), RC WRITE over AF_XDP, RC WRITE over
#   the UDP backend, at path MTU 2048 and 4096; then, each round, the 8-byte RC WRITE
#   round trip on both beside kernel TCP's 8-byte request/response on the same veth
#   (examples/tcp_rr), with the median of the p50 ratios; then the instructions per
#   packet (send, parse, parse+verify against crc32fast) as marginal costs under callgrind.
#   raw/udp is the most AF_XDP/UDP could be: RC WRITE over AF_XDP cannot beat raw frames.
# Usage: scripts/bench-datapath.sh [ROUNDS] [SECONDS]     (default 2 rounds of 3 s)
#        scripts/bench-datapath.sh --bulk [ROUNDS] [SECONDS]
#   --bulk: bulk throughput against kernel TCP instead, each round in one go: iperf3 (one
#   TCP stream), then for each of `uroce perf write`, `read` and `send` (BULK_OPS) of
#   64 KiB messages (path MTU 4096, one QP): the UDP backend with GSO/GRO (`udp`), AF_XDP
#   as uroce sets it up (`xdp`) and AF_XDP set otherwise at both ends as BULK_XDP_VARIANTS
#   says (NAME:ENV=VAL[,ENV=VAL] ...; default `xdp-32`, the kernel's TX batch of 32
#   instead of uroce's 256, and `xdp-busy`, busy polling 50 us), plus the UDP
#   backend with GSO/GRO off (`udp-nogso`) when BULK_NOGSO=1 and the UDP backend of
#   UROCE_BIN_BASE when set (a build to compare with, e.g. main's); Gb/s, the ratio to
#   TCP, CPU-seconds of each end (user + system, /usr/bin/time) and per GB moved; then
#   the medians of the ratios and of the CPU-seconds per GB.
#        scripts/bench-datapath.sh --verbs [ROUNDS] [SECONDS]
#   --verbs: what the drop-in libibverbs.so.1 costs: perftest's unmodified ib_write_bw at
#   both ends on uroce's library (target/release/libibverbs.so.1, SECONDS x 15000 64 KiB
#   messages) against `uroce perf write` at both ends (uroce's own loop, SECONDS of 64
#   KiB messages), each end its own datapath (direct mode), path MTU 4096, over the UDP
#   backend and over AF_XDP, each round in one go;
#   Gb/s and CPU-seconds per GB (both ends, /usr/bin/time), the ratios library/native,
#   and the medians of the ratios.
#   UROCE_BIN=path/to/uroce runs another build (for before/after comparisons) instead of
#   building this checkout's.
set -euo pipefail
BULK=0
VERBS=0
if [ "${1:-}" = "--bulk" ]; then
  BULK=1
  shift
elif [ "${1:-}" = "--verbs" ]; then
  VERBS=1
  shift
fi
ROUNDS=${1:-2}
DUR=${2:-3}
cd "$(dirname "$0")/.."
if [ -n "${UROCE_BIN:-}" ]; then
  B=$UROCE_BIN
else
  cargo build --release -q
  B=$PWD/target/release/uroce
fi
# The TCP request/response baseline and the callgrind examples.
cargo build --release -q --examples -p uroce -p uroce-tools
TCP_RR=$PWD/target/release/examples/tcp_rr
# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh # netns_up, netns_down, time_cpu
A=uroce-bench-$$-a
Z=uroce-bench-$$-b
cleanup() { netns_down "$A" "$Z"; }
trap cleanup EXIT INT TERM
# MTU 9000, one queue each way.
netns_up "$A" "$Z" ub$$a ub$$b 10.99.0 9000 1

# one OP BACKEND MTU [--lat]: prints the client's JSON
one() {
  local op=$1 be=$2 mtu=$3 lat=${4:-}
  ip netns exec "$Z" "$B" perf "$op" $lat --backend "$be" --no-daemon -m "$mtu" --port 18777 >/dev/null 2>&1 &
  local sp=$!
  sleep 0.5
  ip netns exec "$A" "$B" perf "$op" 10.99.0.2 $lat --backend "$be" --no-daemon -m "$mtu" --port 18777 \
    --duration "$DUR" --json 2>/dev/null
  wait $sp || true
}

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

# bulk_uroce BIN OP BACKEND [ENV=VAL ...]: "Gb/s client_cpu server_cpu retransmits" of
# 64 KiB RC OP messages (write, read or send) over BACKEND, ENV at both ends; "0 0 0 -"
# when the run failed
bulk_uroce() {
  local bin=$1 op=$2 be=$3 t1 t2 out
  shift 3
  t1=$(mktemp) t2=$(mktemp)
  ip netns exec "$Z" env UROCE_NOTHING=1 "$@" /usr/bin/time -f '%U %S' -o "$t2" \
    "$bin" perf "$op" --backend "$be" --no-daemon -m 4096 --port 18778 >/dev/null 2>&1 &
  local sp=$!
  sleep 0.5
  out=$(ip netns exec "$A" env UROCE_NOTHING=1 "$@" /usr/bin/time -f '%U %S' -o "$t1" \
    "$bin" perf "$op" 10.99.0.2 --backend "$be" --no-daemon -m 4096 --size 65536 --port 18778 \
    --duration "$DUR" --json 2>/dev/null |
    python3 -c "import json,sys; v=json.loads(sys.stdin.read()); print(v['bw_gbps'], v['retransmits'])" ||
    true)
  wait $sp || true
  if [ -z "$out" ]; then
    echo "0 0 0 -"
  else
    echo "${out% *} $(time_cpu "$t1") $(time_cpu "$t2") ${out#* }"
  fi
  rm -f "$t1" "$t2"
}

# bulk_tcp: "Gb/s client_cpu server_cpu" of one iperf3 TCP stream
bulk_tcp() {
  local t1 t2 out
  t1=$(mktemp) t2=$(mktemp)
  ip netns exec "$Z" /usr/bin/time -f '%U %S' -o "$t2" iperf3 -s -1 -p 18779 >/dev/null 2>&1 &
  local sp=$!
  sleep 0.5
  out=$(ip netns exec "$A" /usr/bin/time -f '%U %S' -o "$t1" \
    iperf3 -c 10.99.0.2 -p 18779 -t "$DUR" -J 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/1e9)")
  wait $sp || true
  echo "$out $(time_cpu "$t1") $(time_cpu "$t2") -"
  rm -f "$t1" "$t2"
}

# verbs_native BACKEND: "Gb/s client_cpu server_cpu" of `uroce perf write` at both ends
# (each its own datapath), DUR seconds of 64 KiB messages, path MTU 4096
verbs_native() {
  local t1 t2 g
  t1=$(mktemp) t2=$(mktemp)
  ip netns exec "$Z" /usr/bin/time -f '%U %S' -o "$t2" \
    "$B" perf write --backend "$1" --no-daemon -m 4096 --port 18780 >/dev/null 2>&1 &
  local sp=$!
  sleep 0.5
  g=$(ip netns exec "$A" /usr/bin/time -f '%U %S' -o "$t1" "$B" perf write 10.99.0.2 \
    --backend "$1" --no-daemon -m 4096 --size 65536 --duration "$DUR" --port 18780 --json 2>/dev/null |
    field bw_gbps)
  wait $sp || true
  echo "$g $(time_cpu "$t1") $(time_cpu "$t2")"
  rm -f "$t1" "$t2"
}

# verbs_library BACKEND: the same for perftest's ib_write_bw at both ends on uroce's
# library (the server's CPU includes its wait for the client: both start together)
verbs_library() {
  local lib=$PWD/target/release flags t1 t2 g
  t1=$(mktemp) t2=$(mktemp)
  flags="-x 1 -F -m 4096 -s 65536 -n $VERBS_N --report_gbits -p 18781"
  ip netns exec "$Z" env LD_LIBRARY_PATH="$lib" UROCE_BACKEND="$1" \
    /usr/bin/time -f '%U %S' -o "$t2" ib_write_bw -d uroce_ub$$b $flags >/dev/null 2>&1 &
  local sp=$!
  sleep 0.7
  g=$(ip netns exec "$A" env LD_LIBRARY_PATH="$lib" UROCE_BACKEND="$1" \
    /usr/bin/time -f '%U %S' -o "$t1" ib_write_bw -d uroce_ub$$a $flags 10.99.0.2 2>/dev/null |
    awk '/#bytes/ { getline; print $4 }')
  wait $sp || true
  echo "$g $(time_cpu "$t1") $(time_cpu "$t2")"
  rm -f "$t1" "$t2"
}

if [ $VERBS -eq 1 ]; then
  command -v ib_write_bw >/dev/null || { echo "perftest is missing (scripts/setup.sh)" >&2; exit 1; }
  [ -e target/release/libibverbs.so.1 ] || { echo "target/release/libibverbs.so.1 is missing (cargo build --release)" >&2; exit 1; }
  # As many messages as DUR seconds at about 8 Gb/s.
  VERBS_N=$((DUR * 15000))
  rows=$(mktemp)
  echo "round  backend  native Gb/s  library Gb/s  library/native  CPU-s per GB native (client+server)  library  library/native"
  for r in $(seq "$ROUNDS"); do
    for be in udp xdp; do
      n=$(verbs_native "$be")
      l=$(verbs_library "$be")
      echo "$be $n $l" >>"$rows"
      python3 - "$r" "$be" "$VERBS_N" "$DUR" $n $l <<'PY'
import sys
r, be, n_msgs, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ng, nc, ns, lg, lc, ls = map(float, sys.argv[5:11])
# The native run lasts DUR seconds at its own rate; the library's is VERBS_N messages.
nat = (nc + ns) / (ng * secs / 8)
lib = (lc + ls) / (n_msgs * 65536 / 1e9)
print(f"{r:>5}  {be:<7}  {ng:11.2f}  {lg:12.2f}  {lg / ng:14.2f}  {nat:36.3f}  {lib:7.3f}  {lib / nat:14.2f}")
PY
    done
  done
  python3 - "$rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for be in ("udp", "xdp"):
    rs = [(float(r[4]) / float(r[1]), (float(r[5]) + float(r[6])) / (float(r[2]) + float(r[3])))
          for r in rows if r[0] == be]
    bw = [x for x, _ in rs]
    cpu = [y for _, y in rs]
    print(f"median {be}: library/native Gb/s {statistics.median(bw):.2f}  (rounds: {', '.join(f'{x:.2f}' for x in bw)});"
          f" CPU per GB {statistics.median(cpu):.2f}  (rounds: {', '.join(f'{x:.2f}' for x in cpu)})")
PY
  rm -f "$rows"
  exit 0
fi

if [ $BULK -eq 1 ]; then
  command -v iperf3 >/dev/null || { echo "iperf3 is missing (scripts/setup.sh --bench)" >&2; exit 1; }
  OPS=${BULK_OPS:-write read send}
  read -r -a VARIANTS <<<"${BULK_XDP_VARIANTS:-xdp-32:UROCE_XDP_TX_BATCH=32 xdp-busy:UROCE_XDP_BUSY_POLL=50}"
  rows=$(mktemp)
  echo "AF_XDP variants: ${VARIANTS[*]}"
  echo "round  op     what         Gb/s  x TCP  CPU-s client/server  CPU-s per GB client/server  retransmits"
  for r in $(seq "$ROUNDS"); do
    echo "$r - tcp $(bulk_tcp)" >>"$rows"
    for op in $OPS; do
      runs=("udp:$(bulk_uroce "$B" "$op" udp)" "xdp:$(bulk_uroce "$B" "$op" xdp)")
      for v in "${VARIANTS[@]}"; do
        IFS=, read -r -a envs <<<"${v#*:}"
        runs+=("${v%%:*}:$(bulk_uroce "$B" "$op" xdp "${envs[@]}")")
      done
      if [ "${BULK_NOGSO:-0}" = 1 ]; then
        runs+=("udp-nogso:$(bulk_uroce "$B" "$op" udp UROCE_UDP_GSO=0)")
      fi
      if [ -n "${UROCE_BIN_BASE:-}" ]; then
        runs+=("udp-base:$(bulk_uroce "$UROCE_BIN_BASE" "$op" udp)")
      fi
      for run in "${runs[@]}"; do echo "$r $op ${run%%:*} ${run#*:}" >>"$rows"; done
    done
    python3 - "$rows" "$r" "$DUR" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.split()[0] == sys.argv[2]]
dur = float(sys.argv[3])
tcp = float(rows[0][3])
for r, op, what, g, c, s, rx in rows:
    g, c, s = float(g), float(c), float(s)
    gb = max(g * dur / 8, 1e-9)
    print(f"{r:>5}  {op:<5}  {what:<10} {g:6.2f}  {g / tcp:5.2f}  {c:6.2f} / {s:6.2f}       {c / gb:6.3f} / {s / gb:6.3f}  {rx:>11}")
PY
  done
  python3 - "$rows" "$DUR" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
dur = float(sys.argv[2])
rounds = sorted({r[0] for r in rows})
med = lambda xs: statistics.median(xs) if xs else float("nan")
def per_gb(r):
    gb = max(float(r[3]) * dur / 8, 1e-9)
    return float(r[4]) / gb, float(r[5]) / gb
tcp = [r for r in rows if r[2] == "tcp"]
c, s = zip(*map(per_gb, tcp))
print(f"median tcp                 CPU-s per GB client / server {med(c):.3f} / {med(s):.3f}")
for op, what in dict.fromkeys((r[1], r[2]) for r in rows if r[2] != "tcp"):
    ratios, cs, ss = [], [], []
    for rd in rounds:
        t = [float(r[3]) for r in rows if r[0] == rd and r[2] == "tcp"]
        u = [r for r in rows if r[0] == rd and r[1] == op and r[2] == what]
        if t and u and float(u[0][3]) > 0:
            ratios.append(float(u[0][3]) / t[0])
            c1, s1 = per_gb(u[0])
            cs.append(c1)
            ss.append(s1)
    print(f"median {op:<5} {what:<10} x TCP {med(ratios):.2f}  (rounds: {', '.join(f'{x:.2f}' for x in ratios)});"
          f"  CPU-s per GB client / server {med(cs):.3f} / {med(ss):.3f}")
PY
  rm -f "$rows"
  exit 0
fi

echo "round mtu  raw_xdp_gbps write_xdp_gbps write_udp_gbps  xdp/raw  xdp/udp  raw/udp"
rows=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for mtu in 2048 4096; do
    raw=$(one raw xdp "$mtu" | field bw_gbps)
    wx=$(one write xdp "$mtu" | field bw_gbps)
    wu=$(one write udp "$mtu" | field bw_gbps)
    echo "$mtu $raw $wx $wu" >>"$rows"
    python3 -c "r,x,u=$raw,$wx,$wu; print(f'{$r:5d} {$mtu:4d}  {r:12.2f} {x:14.2f} {u:14.2f}  {x/r:7.2f}  {x/u:7.2f}  {r/u:7.2f}')"
  done
done
# Medians of the per-round ratios: one slow neighbour in one round moves them least.
python3 - "$rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for mtu in ("2048", "4096"):
    rs = [tuple(map(float, r[1:])) for r in rows if r[0] == mtu]
    med = lambda f: statistics.median(f(r, x, u) for r, x, u in rs)
    print(f"median {mtu:4s}  xdp/raw {med(lambda r, x, u: x / r):.2f}  "
          f"xdp/udp {med(lambda r, x, u: x / u):.2f}  raw/udp {med(lambda r, x, u: r / u):.2f}")
PY
rm -f "$rows"
# tcp_rr: kernel TCP's 8-byte request/response round trip over the same veth (JSON)
tcp_rr() {
  ip netns exec "$Z" "$TCP_RR" server 18782 >/dev/null 2>&1 &
  local sp=$!
  sleep 0.3
  ip netns exec "$A" "$TCP_RR" client 10.99.0.2:18782 10000
  wait $sp || true
}

echo "8-byte round trips (p50 / p99 / p99.9 us), each round: RC WRITE over AF_XDP and UDP, TCP request/response:"
lat_rows=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for be in xdp udp; do
    one write "$be" 1024 --lat | python3 -c "
import json,sys; v=json.loads(sys.stdin.read())
print('$r', '$be', v['lat_p50_us'], v['lat_p99_us'], v['lat_p999_us'])" >>"$lat_rows"
  done
  tcp_rr | python3 -c "
import json,sys; v=json.loads(sys.stdin.read())
print('$r', 'tcp', v['lat_p50_us'], v['lat_p99_us'], v['lat_p999_us'])" >>"$lat_rows"
done
python3 - "$lat_rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for r, what, p50, p99, p999 in rows:
    print(f"  round {r} {what:<4} {float(p50):7.1f} / {float(p99):7.1f} / {float(p999):7.1f}")
for be in ("xdp", "udp"):
    ratios = []
    for rd in sorted({r[0] for r in rows}):
        u = [float(r[2]) for r in rows if r[0] == rd and r[1] == be]
        t = [float(r[2]) for r in rows if r[0] == rd and r[1] == "tcp"]
        if u and t:
            ratios.append(u[0] / t[0])
    print(f"median p50 {be} RC WRITE / TCP request-response {statistics.median(ratios):.2f}  (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
PY
rm -f "$lat_rows"

# Instructions per packet, the marginal cost: the difference between two runs of different
# length under callgrind, so set-up cancels out (deterministic on a shared machine).
if command -v valgrind >/dev/null; then
  # 1100 and 2000 messages: both runs grow the QP's queues past 1024 requests once (they
  # grow on demand), so that reallocation cancels out as set-up does.
  echo "instructions per packet (callgrind, marginal: N=2000 minus N=1100, parse and verify 20000 minus 10000):"
  ex=$PWD/target/release/examples
  ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | awk '/Collected/ {print $4}'; }
  for mode in off on; do
    a=$(ir "$ex/send_path" "$mode" 1100)
    b=$(ir "$ex/send_path" "$mode" 2000)
    echo "  build and send one 64-byte RC SEND, DCQCN $mode: $(( (b - a) / 900 ))"
  done
  a=$(ir "$ex/parse_loop" 10000)
  b=$(ir "$ex/parse_loop" 20000)
  echo "  parse one received frame's headers: $(( (b - a) / 10000 ))"
  # Parse+verify of a 4 KiB RDMA WRITE against plain crc32fast over the same frame,
  # each alone (verify_ratio count WHAT N), and their ratio in instructions.
  for what in crc verify; do
    a=$(ir "$ex/verify_ratio" count "$what" 10000 4096)
    b=$(ir "$ex/verify_ratio" count "$what" 20000 4096)
    eval "vr_$what=$(( (b - a) / 10000 ))"
  done
  echo "  crc32fast over a 4 KiB WRITE frame: $vr_crc; parse+verify of it: $vr_verify;" \
    "ratio $(awk -v c="$vr_crc" -v v="$vr_verify" 'BEGIN { printf "%.3f", c / v }')"
else
  echo "(valgrind is missing: no instruction counts)"
fi
