#!/bin/bash
# Per-message cost against the number of QPs, 4 KiB RDMA WRITEs spread over 1, 100, 1,000
# and 10,000 QPs on one loop, each figure against the 1-QP one of the same run:
#   1. instructions per message (callgrind, deterministic): the marginal cost, i.e. the
#      difference between `many_qps N 20000` and `many_qps N 40000` divided by 20,000, so
#      that setting up N QP pairs cancels out;
#   2. the sans-IO message rate of examples/many_qps (wall time, three rounds);
#   3. with --cli (as root): `uroce perf write --size 4096 --qps N` over a veth pair between
#      two namespaces, AF_XDP and the UDP backend, ROUNDS rounds of SECONDS s.
# Usage: scripts/bench-qps.sh [--cli [ROUNDS] [SECONDS]]
set -euo pipefail
cd "$(dirname "$0")/.."
QPS="1 100 1000 10000"
cargo build --release -q -p uroce --example many_qps
EX=$PWD/target/release/examples/many_qps
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "== instructions per 4 KiB WRITE (both ends: post, build, place, ACK, completion)"
base=""
for n in $QPS; do
  for m in 20000 40000; do
    valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.$n.$m" "$EX" "$n" "$m" \
      >/dev/null 2>"$TMP/log.$n.$m"
  done
  a=$(grep -o 'Collected : [0-9]*' "$TMP/log.$n.20000" | grep -o '[0-9]*$')
  b=$(grep -o 'Collected : [0-9]*' "$TMP/log.$n.40000" | grep -o '[0-9]*$')
  per=$(( (b - a) / 20000 ))
  [ -z "$base" ] && base=$per
  awk -v n="$n" -v p="$per" -v b="$base" \
    'BEGIN { printf "%6d QPs  %6d instructions per message  rate %.3fx of 1 QP\n", n, p, b / p }'
done

echo "== sans-IO message rate (wall time)"
"$EX"

[ "${1:-}" = "--cli" ] || exit 0
ROUNDS=${2:-2}
DUR=${3:-3}
cargo build --release -q -p uroce-tools
B=$PWD/target/release/uroce
A=uroce-qps-$$-a
Z=uroce-qps-$$-b
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$Z" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
ip netns add "$A"
ip netns add "$Z"
ip link add uq$$a netns "$A" type veth peer name uq$$b netns "$Z"
ip -n "$A" addr add 10.98.0.1/24 dev uq$$a
ip -n "$Z" addr add 10.98.0.2/24 dev uq$$b
for ns in "$A" "$Z"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set uq$$a mtu 9000 up
ip -n "$Z" link set uq$$b mtu 9000 up
echo "== uroce perf write --size 4096 --qps N (veth, MTU 9000): Mmsg/s, ratio to 1 QP, retransmits"
for r in $(seq "$ROUNDS"); do
  for be in xdp udp; do
    base=""
    for n in $QPS; do
      ip netns exec "$Z" "$B" perf write --backend "$be" --port 18790 >/dev/null 2>&1 &
      sleep 0.5
      out=$(ip netns exec "$A" "$B" perf write 10.98.0.2 --backend "$be" --port 18790 \
        --size 4096 --qps "$n" --duration "$DUR" --json 2>/dev/null || echo '{}')
      wait || true
      rate=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("msg_rate_mpps", 0))')
      rtx=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("retransmits", "-"))')
      [ -z "$base" ] && base=$rate
      awk -v r="$r" -v be="$be" -v n="$n" -v x="$rate" -v b="$base" -v t="$rtx" \
        'BEGIN { printf "round %d  %-3s  %6d QPs  %.3f Mmsg/s  %.2fx  retransmits %s\n", r, be, n, x, (b > 0 ? x / b : 0), t }'
    done
  done
done
