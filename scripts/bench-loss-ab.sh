#!/bin/bash
# Two builds of uroce, taking turns, on RC WRITE bandwidth over a lossy path: `uroce perf
# write` (64 KiB messages, UDP backend, direct mode) between two namespaces joined by a
# veth pair (as root), the server dropping DROP of what it receives (`--drop`), so the
# client's recovery (NAKs, its probe timers some round trips away) sets the pace. Each
# round runs build A, then build B, SECONDS each; each run prints Gb/s, the client's
# CPU-seconds and CPU-seconds per GB, and its retransmits; at the end, the median over
# rounds of B's Gb/s over A's (a ratio measured in the same round, so the machine's mood
# cancels out). This is how the event loop's busy wait below a millisecond
# (`SPIN_BELOW`, crates/uroce/src/datapath/event_loop.rs) was chosen.
# Usage: scripts/bench-loss-ab.sh BIN_A BIN_B [ROUNDS] [DROP] [SECONDS]
#   (default 3 rounds, 0.01, 4 s)
set -euo pipefail
A=${1:?usage: bench-loss-ab.sh BIN_A BIN_B [ROUNDS] [DROP] [SECONDS]}
B=${2:?usage: bench-loss-ab.sh BIN_A BIN_B [ROUNDS] [DROP] [SECONDS]}
ROUNDS=${3:-3}
DROP=${4:-0.01}
SECONDS_EACH=${5:-4}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/netns.sh
source scripts/lib/netns.sh
NETNS_WORK=$(mktemp -d)
netns_up ula ulz vula vulz 10.78.0 1500
trap 'netns_down ula ulz; rm -rf "$NETNS_WORK"' EXIT
echo "# $(machine); server drops $DROP; $SECONDS_EACH s a run"

# One run of BIN; prints "GBPS CPU_S" on stdout, a line for people on stderr.
run() {
  local bin=$1 s out cpu gbps
  ip netns exec ula "$bin" perf write --backend udp --no-daemon --drop "$DROP" \
    >/dev/null 2>&1 &
  s=$!
  listening ula 18515
  out=$(ip netns exec ulz /usr/bin/time -f '%U %S' -o "$NETNS_WORK/time" "$bin" perf write \
    10.78.0.1 --backend udp --no-daemon --duration "$SECONDS_EACH" --json)
  kill "$s" 2>/dev/null || true
  wait "$s" 2>/dev/null || true
  cpu=$(time_cpu "$NETNS_WORK/time")
  gbps=$(grep -o '"bw_gbps":[0-9.]*' <<<"$out" | cut -d: -f2)
  echo "  $bin: $gbps Gb/s, client $cpu CPU-s, $(awk -v c="$cpu" -v g="$gbps" -v s="$SECONDS_EACH" \
    'BEGIN { printf "%.3f", c / (g * s / 8) }') CPU-s/GB, $(grep -o '"retransmits":[0-9]*' <<<"$out" | cut -d: -f2) retransmits" >&2
  echo "$gbps $cpu"
}

ratios=()
for r in $(seq "$ROUNDS"); do
  echo "round $r" >&2
  read -r ga _ < <(run "$A")
  read -r gb _ < <(run "$B")
  ratios+=("$(awk -v a="$ga" -v b="$gb" 'BEGIN { printf "%.3f", b / a }')")
done
echo "B/A Gb/s by round: ${ratios[*]}; median $(printf '%s\n' "${ratios[@]}" | median)"
