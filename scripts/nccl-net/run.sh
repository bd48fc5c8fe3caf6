#!/bin/bash
# NCCL's network transports between two namespaces joined by a veth pair (as root), driven
# by harness.c without a GPU: NCCL's ncclNetIb on uroce (each side under `uroce run`, over
# AF_XDP and over the UDP backend, through a `uroce daemon` per side that this script starts
# with that backend and stops after each run) and ncclNetSocket on kernel TCP, both
# directions at once, 512 KiB messages, 8 in flight each way. The pair machinery is
# scripts/nccl-net/lib.sh (scripts/bench-vs-tcp.sh uses it too).
# Usage: scripts/nccl-net/run.sh                   one run of each, every byte checked
#        scripts/nccl-net/run.sh --bench [ROUNDS] [COUNT]
#   --bench: ROUNDS rounds (default 3) of COUNT messages each way (default 2000, 1 GiB),
#   the first and last 8 bytes of each checked; GB/s per direction, CPU-seconds (user +
#   system of both processes, every thread) per GB moved (both directions), the ratios
#   uroce/TCP of each round and their medians.
# NCCL_NET_DROP='NFT MATCH' drops the RoCE packets (UDP port 4791) that match in both
#   namespaces' input (needs nft: apt-get install nftables), e.g. 'numgen random mod 1000 < 10'
#   (1% each way) or 'meta length < 200 numgen random mod 1000 < 2' (0.2% of the small ones:
#   ACKs, NAKs, NCCL's FIFO writes); the TCP runs lose nothing. NCCL_HARNESS_ARGS adds to the
#   harness's arguments (e.g. "--inflight 1 --size 65536").
# UROCE_BIN=path/to/uroce takes another build instead of building this checkout's (release);
# NCCL_NET_LIB=path/to/libnccl.so.2 another library instead of fetch.sh's; extra NCCL
# settings pass through the environment (e.g. NCCL_IB_GID_INDEX=1, NCCL_DEBUG=INFO).
set -euo pipefail
BENCH=0
if [ "${1:-}" = "--bench" ]; then
  BENCH=1
  shift
fi
ROUNDS=${1:-3}
COUNT=${2:-2000}
cd "$(dirname "$0")/../.."
if [ -n "${UROCE_BIN:-}" ]; then
  B=$UROCE_BIN
else
  cargo build --release -q -p uroce-tools -p uroce-verbs
  B=$PWD/target/release/uroce
fi
LIB=${NCCL_NET_LIB:-$(scripts/nccl-net/fetch.sh | tail -n 1)}
WORK=$(mktemp -d /tmp/uroce-nccl-net.XXXXXX)
NETNS_WORK=$WORK
# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh
# shellcheck source=scripts/nccl-net/lib.sh
. scripts/nccl-net/lib.sh
nccl_harness
A=uroce-nccl-$$-a
Z=uroce-nccl-$$-b
IA=un$$a
IZ=un$$b
cleanup() {
  for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_down "$A" "$Z"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_up "$A" "$Z" "$IA" "$IZ" 10.98.0
if [ -n "${NCCL_NET_DROP:-}" ]; then
  if ! command -v nft >/dev/null; then
    echo "run.sh: NCCL_NET_DROP needs nft (apt-get install nftables)" >&2
    exit 1
  fi
  for ns in "$A" "$Z"; do
    ip netns exec "$ns" nft add table inet uroce_drop
    ip netns exec "$ns" nft add chain inet uroce_drop input '{ type filter hook input priority 0; }'
    # shellcheck disable=SC2086
    ip netns exec "$ns" nft add rule inet uroce_drop input udp dport 4791 $NCCL_NET_DROP counter drop
  done
fi
sleep 1

# pair NET(xdp|udp|tcp) COUNT CHECK: both sides, each report line on stdout (a, then b);
# uroce through a daemon per side with NET as its datapath, started here and stopped after
# (one left by `uroce run` lingers for 5 s and would serve the next run whatever it asks).
pair() {
  if [ "$1" = tcp ]; then
    nccl_pair "$@"
    return
  fi
  daemons_start "$B" "$1" "$A:$IA" "$Z:$IZ"
  local rc=0
  nccl_pair "$@" || rc=1
  daemons_stop "$B" "$A:$IA" "$Z:$IZ"
  return $rc
}

# field NAME LINES: the number before NAME in each line.
field() { grep -o "[0-9.]* $1" <<<"$2" | awk '{print $1}'; }

if [ $BENCH = 0 ]; then
  for be in xdp udp tcp; do
    pair $be 256 full
  done
  exit 0
fi

echo "NCCL net transports over veth (MTU 9000), $COUNT x 512 KiB each way per run, 8 in flight"
printf '%-6s %-4s %10s %12s %14s\n' round net "GB/s/dir" "cpu-s/GB" "cpu a+b (s)"
declare -A R
for r in $(seq 1 "$ROUNDS"); do
  for be in tcp udp xdp; do
    out=$(pair $be "$COUNT" ends)
    gbs=$(field "GB/s" "$out" | awk '{s+=$1} END {printf "%.3f", s/NR}')
    cpu=$(grep -o 'cpu [0-9.]* s' <<<"$out" | awk '{s+=$2} END {printf "%.3f", s}')
    per=$(awk -v c="$cpu" -v n="$COUNT" 'BEGIN {printf "%.3f", c / (2 * n * 524288 / 1e9)}')
    printf '%-6s %-4s %10s %12s %14s\n' "$r" "$be" "$gbs" "$per" "$cpu"
    R[$r.$be.gbs]=$gbs
    R[$r.$be.cpu]=$per
  done
  for be in udp xdp; do
    R[$r.$be.rg]=$(awk -v a="${R[$r.$be.gbs]}" -v b="${R[$r.tcp.gbs]}" 'BEGIN {printf "%.2f", a / b}')
    R[$r.$be.rc]=$(awk -v a="${R[$r.$be.cpu]}" -v b="${R[$r.tcp.cpu]}" 'BEGIN {printf "%.2f", a / b}')
    echo "       round $r: ncclNetIb on uroce $be / ncclNetSocket on TCP: ${R[$r.$be.rg]}x the GB/s, ${R[$r.$be.rc]}x the cpu-s/GB"
  done
done
for be in udp xdp; do
  g=$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$r.$be.rg]}"; done | median)
  c=$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$r.$be.rc]}"; done | median)
  echo "median over $ROUNDS rounds, ncclNetIb on uroce $be / ncclNetSocket on TCP: ${g}x the GB/s, ${c}x the CPU-seconds per GB"
done
