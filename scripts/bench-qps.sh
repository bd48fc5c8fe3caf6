#!/bin/bash
# Per-message cost against the number of QPs, 4 KiB RDMA WRITEs spread over 1, 100, 1,000
# and 10,000 QPs on one loop, each figure against the 1-QP one of the same run:
#   1. instructions and cache misses per message (callgrind with its cache simulation,
#      deterministic): the marginal cost, i.e. the difference between `many_qps N 20000`
#      and `many_qps N 40000` divided by 20,000, so that setting up N QP pairs cancels
#      out; first-level data misses (D1, 32 KiB) and misses of a 1 MiB second level
#      (`--LL=1048576,16,64`, this machine's L2 per core), which are what costs time;
#   2. the sans-IO message rate of examples/many_qps (wall time, three rounds);
#   3. with --cli (as root): `uroce perf write --size 4096 --qps N` over a veth pair between
#      two namespaces, AF_XDP and the UDP backend (its QPs sharing 4 source ports, the
#      default, and with one port per QP, `--udp-sports 0`), ROUNDS rounds of SECONDS s.
# Usage: scripts/bench-qps.sh [--cli [ROUNDS] [SECONDS]]
set -euo pipefail
cd "$(dirname "$0")/.."
QPS="1 100 1000 10000"
cargo build --release -q -p uroce --example many_qps
EX=$PWD/target/release/examples/many_qps
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "== per 4 KiB WRITE (both ends: post, build, place, ACK, completion), marginal"
base=""
for n in $QPS; do
  for m in 20000 40000; do
    valgrind --tool=callgrind --cache-sim=yes --LL=1048576,16,64 \
      --callgrind-out-file="$TMP/cg.$n.$m" "$EX" "$n" "$m" >/dev/null 2>"$TMP/log.$n.$m"
  done
  # Events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
  a=$(grep -o 'Collected : .*' "$TMP/log.$n.20000" | cut -d: -f2)
  b=$(grep -o 'Collected : .*' "$TMP/log.$n.40000" | cut -d: -f2)
  read -r per d1 l2 < <(awk -v a="$a" -v b="$b" 'BEGIN {
    split(a, x, " "); split(b, y, " ");
    printf "%d %.1f %.1f\n", (y[1] - x[1]) / 20000, (y[5] + y[6] - x[5] - x[6]) / 20000,
      (y[8] + y[9] - x[8] - x[9]) / 20000 }')
  [ -z "$base" ] && base=$per
  awk -v n="$n" -v p="$per" -v b="$base" -v d1="$d1" -v l2="$l2" \
    'BEGIN { printf "%6d QPs  %6d instructions  rate %.3fx of 1 QP  D1 misses %5.1f  L2 (1 MiB) misses %5.1f\n", n, p, b / p, d1, l2 }'
done

echo "== sans-IO message rate (wall time)"
"$EX"

[ "${1:-}" = "--cli" ] || exit 0
ROUNDS=${2:-2}
DUR=${3:-3}
cargo build --release -q -p uroce-tools
B=$PWD/target/release/uroce
# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh # netns_up, netns_down
A=uroce-qps-$$-a
Z=uroce-qps-$$-b
cleanup() {
  netns_down "$A" "$Z"
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
# MTU 9000, one queue each way.
netns_up "$A" "$Z" uq$$a uq$$b 10.98.0 9000 1
echo "== uroce perf write --size 4096 --qps N (veth, MTU 9000): Mmsg/s, ratio to 1 QP, retransmits"
for r in $(seq "$ROUNDS"); do
  for mode in xdp udp udp-perqp; do
    be=${mode%-perqp}
    extra=""
    [ "$mode" = udp-perqp ] && extra="--udp-sports 0"
    base=""
    for n in $QPS; do
      # shellcheck disable=SC2086
      ip netns exec "$Z" "$B" perf write --backend "$be" --port 18790 $extra >/dev/null 2>&1 &
      sleep 0.5
      # shellcheck disable=SC2086
      out=$(ip netns exec "$A" "$B" perf write 10.98.0.2 --backend "$be" --port 18790 \
        --size 4096 --qps "$n" --duration "$DUR" --json $extra 2>/dev/null || echo '{}')
      wait || true
      rate=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("msg_rate_mpps", 0))')
      rtx=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("retransmits", "-"))')
      [ -z "$base" ] && base=$rate
      awk -v r="$r" -v be="$mode" -v n="$n" -v x="$rate" -v b="$base" -v t="$rtx" \
        'BEGIN { printf "round %d  %-9s  %6d QPs  %.3f Mmsg/s  %.2fx  retransmits %s\n", r, be, n, x, (b > 0 ? x / b : 0), t }'
    done
  done
done
