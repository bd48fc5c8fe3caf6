#!/bin/bash
# Threads of one process posting and polling at once on the drop-in library:
# crates/uroce-tools/tests/c/threads.c (each thread its own CQ and two RC QPs connected to
# each other through the device's own address; an inline SEND, a 4 KiB RDMA WRITE with
# immediate and an inline answer per iteration, every byte checked) under
# `uroce run --no-daemon --backend udp` in one namespace, with one engine and with
# UROCE_SHARDS=SHARDS (each thread's two QPs then on two shards). Rounds alternate the
# builds and engine counts; each run prints iterations per second (all threads), and the
# end the medians of the per-round ratios. One engine delivers a process's datagrams to
# itself without the kernel (its loopback); shards send them through the kernel to the
# owning shard's socket, so shards / one engine here is not what shards give two hosts:
# the figure to watch is a build against another with the same engine count.
#
#   scripts/bench-threads.sh [ROUNDS] [THREADS] [ITERS] [SHARDS]
#
# Defaults: 3 rounds, 2 threads, 20,000 iterations each, 3 shards. UROCE_BIN=path/to/uroce
# runs another build of this checkout's (its libraries next to it, as `uroce run` takes
# them); UROCE_BIN_BASE=path/to/uroce adds a base build's runs to every round, and the
# ratios this build / base.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/netns.sh
ROUNDS=${1:-3}
T=${2:-2}
N=${3:-20000}
SHARDS=${4:-3}
if [ -n "${UROCE_BIN:-}" ]; then
  B=$UROCE_BIN
else
  cargo build --release -q -p uroce-tools -p uroce-verbs -p uroce-rdmacm
  B=$PWD/target/release/uroce
fi
[ -e /usr/include/infiniband/verbs.h ] || { echo "<infiniband/verbs.h> is missing (scripts/setup.sh)" >&2; exit 1; }
WORK=$(mktemp -d)
EXE=$WORK/threads
cc -O2 -Wall -Werror -o "$EXE" crates/uroce-tools/tests/c/threads.c -libverbs -lpthread
NS=uthr$$
cleanup() { netns_down "$NS" "${NS}z"; rm -rf "$WORK"; }
trap cleanup EXIT
netns_up "$NS" "${NS}z" ut$$a ut$$b 10.97.0 9000 1

# one BIN SHARDS: iterations per second of T threads x N iterations (0 when it failed)
one() {
  local s e
  s=$(date +%s.%N)
  if ! UROCE_SHARDS=$2 ip netns exec "$NS" "$1" run --iface ut$$a --backend udp --no-daemon -- \
    "$EXE" --threads "$T" --iters "$N" >"$WORK/out" 2>&1; then
    echo "threads failed ($1, UROCE_SHARDS=$2):" >&2
    tail -3 "$WORK/out" >&2
    echo 0
    return
  fi
  e=$(date +%s.%N)
  awk -v t="$T" -v n="$N" -v s="$s" -v e="$e" 'BEGIN { printf "%.0f\n", t * n / (e - s) }'
}

echo "$(machine); $T threads x $N iterations; UROCE_SHARDS 1 and $SHARDS"
rows=$WORK/rows
for r in $(seq "$ROUNDS"); do
  builds=("this:$B")
  [ -n "${UROCE_BIN_BASE:-}" ] && builds+=("base:$UROCE_BIN_BASE")
  for b in "${builds[@]}"; do
    one1=$(one "${b#*:}" 1)
    oneS=$(one "${b#*:}" "$SHARDS")
    echo "$r ${b%%:*} $one1 $oneS" >>"$rows"
    printf '%5s  %-4s  1 engine %8s it/s   %s shards %8s it/s\n' "$r" "${b%%:*}" "$one1" "$SHARDS" "$oneS"
  done
done
ratio() { awk -v k="$1" -v col="$2" -v den="$3" -v dcol="$4" '
  $2 == k { a[$1] = $col } $2 == den { b[$1] = $dcol }
  END { for (r in a) if (b[r] > 0) print a[r] / b[r] }' "$rows" | median | awk '{ printf "%.2f\n", $1 }'; }
echo "median shards / 1 engine (this build): $(ratio this 4 this 3)"
if [ -n "${UROCE_BIN_BASE:-}" ]; then
  echo "median this / base, 1 engine: $(ratio this 3 base 3); $SHARDS shards: $(ratio this 4 base 4)"
fi
