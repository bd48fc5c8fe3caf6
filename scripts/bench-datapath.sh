#!/bin/bash
# End-to-end datapath figures over a veth pair between two namespaces (as root), each
# measured in the same run so the ratios hold on a noisy shared machine:
#   raw AF_XDP frames (no transport: the ceiling), RC WRITE over AF_XDP, RC WRITE over
#   the UDP backend, at path MTU 2048 and 4096; then 8-byte WRITE latency on both.
#   raw/udp is the most AF_XDP/UDP could be: RC WRITE over AF_XDP cannot beat raw frames.
# Usage: scripts/bench-datapath.sh [ROUNDS] [SECONDS]     (default 2 rounds of 3 s)
#   UROCE_BIN=path/to/uroce runs another build (for before/after comparisons) instead of
#   building this checkout's.
set -euo pipefail
ROUNDS=${1:-2}
DUR=${2:-3}
cd "$(dirname "$0")/.."
if [ -n "${UROCE_BIN:-}" ]; then
  B=$UROCE_BIN
else
  cargo build --release -q
  B=$PWD/target/release/uroce
fi
A=uroce-bench-$$-a
Z=uroce-bench-$$-b
cleanup() { ip netns del "$A" 2>/dev/null || true; ip netns del "$Z" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add "$A"
ip netns add "$Z"
ip link add ub$$a netns "$A" type veth peer name ub$$b netns "$Z"
ip -n "$A" addr add 10.99.0.1/24 dev ub$$a
ip -n "$Z" addr add 10.99.0.2/24 dev ub$$b
for ns in "$A" "$Z"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set ub$$a mtu 9000 up
ip -n "$Z" link set ub$$b mtu 9000 up

# one OP BACKEND MTU [--lat]: prints the client's JSON
one() {
  local op=$1 be=$2 mtu=$3 lat=${4:-}
  ip netns exec "$Z" "$B" perf "$op" $lat --backend "$be" -m "$mtu" --port 18777 >/dev/null 2>&1 &
  local sp=$!
  sleep 0.5
  ip netns exec "$A" "$B" perf "$op" 10.99.0.2 $lat --backend "$be" -m "$mtu" --port 18777 \
    --duration "$DUR" --json 2>/dev/null
  wait $sp || true
}

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

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
echo "8-byte RC WRITE round trip (p50 / p99 / p99.9 us):"
for be in xdp udp; do
  one write "$be" 1024 --lat | python3 -c "
import json,sys; v=json.loads(sys.stdin.read())
print(f\"  $be: {v['lat_p50_us']:.1f} / {v['lat_p99_us']:.1f} / {v['lat_p999_us']:.1f}  ({v['datapath']})\")"
done
