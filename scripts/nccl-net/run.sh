#!/bin/bash
# NCCL's network transports between two namespaces joined by a veth pair (as root), driven
# by harness.c without a GPU: NCCL's ncclNetIb on uroce (each side under `uroce run`, over
# AF_XDP and over the UDP backend) and ncclNetSocket on kernel TCP, both directions at once,
# 512 KiB messages, 8 in flight each way.
# Usage: scripts/nccl-net/run.sh                   one run of each, every byte checked
#        scripts/nccl-net/run.sh --bench [ROUNDS] [COUNT]
#   --bench: ROUNDS rounds (default 3) of COUNT messages each way (default 2000, 1 GiB),
#   the first and last 8 bytes of each checked; GB/s per direction, CPU-seconds (user +
#   system of both processes, every thread) per GB moved (both directions), the ratios
#   uroce/TCP of each round and their medians.
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
H=$WORK/nccl-net-harness
gcc -O2 -Wall -o "$H" scripts/nccl-net/harness.c -ldl
A=uroce-nccl-$$-a
Z=uroce-nccl-$$-b
IA=un$$a
IZ=un$$b
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$Z" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
ip netns add "$A"
ip netns add "$Z"
# Two queues each way, as the tests' veth pairs have (one AF_XDP loop per queue).
ip link add "$IA" numtxqueues 2 numrxqueues 2 netns "$A" type veth peer name "$IZ" \
  numtxqueues 2 numrxqueues 2 netns "$Z"
ip -n "$A" addr add 10.98.0.1/24 dev "$IA"
ip -n "$Z" addr add 10.98.0.2/24 dev "$IZ"
for s in "$A:$IA" "$Z:$IZ"; do
  ip -n "${s%%:*}" link set "${s#*:}" mtu 9000 up
  ip -n "${s%%:*}" link set lo up
done
sleep 1

# pair NET(xdp|udp|tcp) COUNT CHECK: both sides, each report line on stdout (a, then b).
pair() {
  local be=$1 n=$2 check=$3 dir=$WORK/$1.$RANDOM
  mkdir -p "$dir"
  side() { # NS IFACE ROLE
    local pre=() net=socket
    if [ "$be" != tcp ]; then
      pre=("$B" run --iface "$2" --backend "$be" --)
      net=ib
    fi
    ip netns exec "$1" env NCCL_SOCKET_IFNAME="$2" NCCL_IB_HCA="=uroce_$2" \
      "${pre[@]}" "$H" --lib "$LIB" --net "$net" \
      --role "$3" --dir "$dir" --count "$n" --check "$check" --timeout 120 \
      >"$dir/out.$3" 2>"$dir/err.$3"
  }
  side "$Z" "$IZ" b &
  local pid=$! rc=0
  side "$A" "$IA" a || rc=1
  wait $pid || rc=1
  if [ $rc != 0 ]; then
    echo "$be failed:" >&2
    cat "$dir"/err.* >&2
    return 1
  fi
  cat "$dir/out.a" "$dir/out.b"
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
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for be in udp xdp; do
  g=$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$r.$be.rg]}"; done | median)
  c=$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$r.$be.rc]}"; done | median)
  echo "median over $ROUNDS rounds, ncclNetIb on uroce $be / ncclNetSocket on TCP: ${g}x the GB/s, ${c}x the CPU-seconds per GB"
done
