#!/bin/bash
# Issue 29's measurements on a lent device machine (many cores, a GPU, PyTorch with NCCL;
# no Rust toolchain, no iproute2, no network), in one command that fits one call:
#   here:   scripts/device/pack.sh                   (the kit, .device/, git-ignored)
#   there:  run --carry .device --timeout 600 -- scripts/device/run.sh
# Parts, each on its own (one failing does not stop the next), all of it printed and kept
# in $OUT/device-run.txt ($OUT: the folder that comes back; ./device-out without one):
#   0. the machine: cores, CPU, GPU, PyTorch and its NCCL, the kit's commit.
#   1. scripts/bench-vs-tcp.sh with the kit's binaries and the machine's own libnccl.so.2
#      (PyTorch's): NCCL's net plugins, `uroce perf` with 1, 4 and 8 QPs (--threads N
#      where the cores are there) against iperf3 -P N, the round trip, each against kernel
#      TCP on one veth pair, and the goals judged. DEVICE_BENCH="ROUNDS SECONDS" (default
#      "3 2"), DEVICE_ROWS (default "auto direct shards"), --shards DEVICE_SHARDS (4).
#   2. PyTorch all_reduce between two ranks in two namespaces on the one GPU
#      (scripts/device/allreduce.py; each rank its own NCCL_HOSTID, so NCCL moves the data
#      over its network transport): NCCL_NET=Socket on kernel TCP against NCCL_NET=IB on
#      uroce (`uroce run`, through a daemon per side), and on uroce's sharded engine
#      (`uroce run --shards DEVICE_SHARDS`); DEVICE_SIZES (default 16M,256M), the ratios
#      to Socket at the end. DEVICE_AR_ROWS (default "socket ib shards").
# DEVICE_BUDGET (default 540 s) bounds the whole: part 1 gets 55% of it, part 2 the rest.
# DEVICE_PYTHON (default python3): the Python that has PyTorch.
# Tools the machine lacks (ip, ss, iperf3, GNU time) come from the kit (.device/bin).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
K=$ROOT/.device
OUTDIR=${OUT:-$ROOT/device-out}
BUDGET=${DEVICE_BUDGET:-540}
SHARDS=${DEVICE_SHARDS:-4}
PY=${DEVICE_PYTHON:-python3}
read -r BROUNDS BSECS <<<"${DEVICE_BENCH:-3 2}"
mkdir -p "$OUTDIR"

main() {
  local t0 lib gnu_time left
  t0=$(date +%s)
  if [ ! -x "$K/uroce" ] || [ ! -f "$K/libibverbs.so.1" ]; then
    echo "run.sh: no kit at $K: run scripts/device/pack.sh on the machine that builds, and carry .device"
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "run.sh: needs root (network namespaces, veth); not run"
    return 1
  fi
  # The machine's own tools first; the kit's where it has none.
  export PATH="$PATH:$K/bin"
  gnu_time=/usr/bin/time
  [ -x "$gnu_time" ] || gnu_time=$K/bin/time

  echo "== 0. the machine"
  echo "  $(nproc) cores, kernel $(uname -r), CPU $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L | sed 's/^/  /'
  echo "  kit: $(cat "$K/commit" 2>/dev/null || echo '?'); tools from the kit: $(for t in ip ss iperf3; do
    case "$(command -v "$t")" in "$K"/*) printf '%s ' "$t" ;; esac
  done)$([ "$gnu_time" = "$K/bin/time" ] && echo time)"
  "$PY" -c 'import torch; print("  torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "GPUs", torch.cuda.device_count())' 2>/dev/null ||
    echo "  torch: $PY cannot import it"
  lib=$(nccl_lib)
  echo "  libnccl.so.2: ${lib:-not found}"

  echo "== 1. scripts/bench-vs-tcp.sh ($BROUNDS round(s) of $BSECS s; rows ${DEVICE_ROWS:-auto direct shards}, --shards $SHARDS)"
  if [ -n "$lib" ]; then
    export NCCL_NET_LIB=$lib
  fi
  UROCE_BIN=$K/uroce NCCL_HARNESS=$K/nccl-net-harness GNU_TIME=$gnu_time NCCL_GIN_TYPE=0 \
    ROWS="${DEVICE_ROWS:-auto direct shards}" \
    timeout -k 5 $((BUDGET * 55 / 100)) scripts/bench-vs-tcp.sh --shards "$SHARDS" "$BROUNDS" "$BSECS" ||
    echo "  bench-vs-tcp.sh: exit $? (124: out of its share of the budget)"

  left=$((BUDGET - ($(date +%s) - t0)))
  echo "== 2. PyTorch all_reduce, two ranks, one GPU, over veth (${left} s left)"
  if [ "$left" -lt 60 ]; then
    echo "  skipped: under 60 s left"
  elif ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "  skipped: $PY has no PyTorch with a GPU it can use"
  else
    timeout -k 5 "$left" bash -c "$(declare -f allreduce_part ar_row); K='$K' ROOT='$ROOT' SHARDS='$SHARDS' PY='$PY' allreduce_part" ||
      echo "  all_reduce part: exit $?"
  fi
  echo "run.sh: $(($(date +%s) - t0)) s"
}

# The libnccl.so.2 PyTorch loads (the nvidia-nccl wheel's), else one on the usual paths.
nccl_lib() {
  local l
  l=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  if [ -n "$l" ] && [ -f "$l" ]; then
    echo "$l"
    return
  fi
  find /usr /opt /lib -name 'libnccl.so.2*' -type f 2>/dev/null | head -n 1
}

# Part 2 (runs in its own bash under the part's timeout).
allreduce_part() {
  set -uo pipefail
  cd "$ROOT"
  # Not local: the EXIT trap needs them after this function returns.
  A=uroce-ar-$$-a Z=uroce-ar-$$-b IA=ua$$a IZ=ua$$b
  work=$(mktemp -d /tmp/uroce-ar.XXXXXX)
  NETNS_WORK=$work
  # shellcheck source=scripts/lib/netns.sh
  . scripts/lib/netns.sh
  trap 'for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null; done; netns_down "$A" "$Z"; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
  netns_up "$A" "$Z" "$IA" "$IZ" 10.95.0
  : >"$work/results"
  local row
  for row in ${DEVICE_AR_ROWS:-socket ib shards}; do
    ar_row "$row" || echo "  $row: failed"
  done
  python3 - "$work/results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
by = {}
for r in rows:
    if r["rank"] == 0:
        by[(r["label"], r["bytes"])] = r
print("  all_reduce, rank 0's median, algbw (GB/s) and the ratio to NCCL_NET=Socket:")
for (label, size), r in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    base = by.get(("socket", size))
    ratio = f"{r['algbw_gbs'] / base['algbw_gbs']:.2f}x" if base else "-"
    ok = "correct" if r["correct"] else "WRONG"
    print(f"  {size >> 20:>5} MiB {label:<8} {r['algbw_gbs']:7.2f} GB/s  {ratio:>6}  {ok}")
print("  goal: NCCL over uroce >= 2.0x NCCL_NET=Socket")
PY
}

# One row: both ranks, rank 1 in the background; their JSON lines into results.
ar_row() {
  local row=$1 r pids=() pre env_net rc=0
  if [ "$row" != socket ]; then
    daemons_start "$K/uroce" auto "$A:$IA" "$Z:$IZ" || return 1
  fi
  for r in 1 0; do
    local ns=$A ifc=$IA
    [ $r = 1 ] && ns=$Z && ifc=$IZ
    case "$row" in
    socket) pre=() env_net=(NCCL_NET=Socket) ;;
    ib) pre=("$K/uroce" run --iface "$ifc" --) env_net=(NCCL_NET=IB "NCCL_IB_HCA==uroce_$ifc") ;;
    shards) pre=("$K/uroce" run --iface "$ifc" --shards "$SHARDS" --) env_net=(NCCL_NET=IB "NCCL_IB_HCA==uroce_$ifc") ;;
    *)
      echo "  unknown row $row (socket, ib, shards)"
      return 1
      ;;
    esac
    ip netns exec "$ns" env NCCL_HOSTID="uroce-ar-$r" NCCL_SOCKET_IFNAME="$ifc" NCCL_GIN_TYPE=0 \
      NCCL_DEBUG="${NCCL_DEBUG:-WARN}" "${env_net[@]}" "${pre[@]}" \
      "$PY" scripts/device/allreduce.py --rank "$r" --world 2 --master 10.95.0.1:29511 \
      --sizes "${DEVICE_SIZES:-16M,256M}" --label "$row" >"$work/$row.$r.out" 2>"$work/$row.$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$work/$row.0.out" "$work/$row.1.out" >>"$work/results"
  if [ $rc != 0 ]; then
    echo "  $row: a rank failed; its last words:"
    tail -n 5 "$work/$row.0.err" "$work/$row.1.err" | sed 's/^/    /'
  fi
  if [ "$row" != socket ]; then
    daemons_stop "$K/uroce" "$A:$IA" "$Z:$IZ" || rc=1
  fi
  return $rc
}

main 2>&1 | tee "$OUTDIR/device-run.txt"
