#!/bin/bash
# Issue 29's measurements on a lent device machine (many cores, a GPU, PyTorch with NCCL;
# no Rust toolchain, no iproute2, no network), in one command that fits one call:
#   here:   scripts/device/pack.sh                   (the kit, .device/, git-ignored)
#   there:  run --carry .device --timeout 600 -- scripts/device/run.sh
# Parts, each on its own (one failing does not stop the next), all of it printed and kept
# in $OUT/device-run.txt ($OUT: the folder that comes back; ./device-out without one), with
# each rank's output and NCCL's INIT/NET log in $OUT/allreduce/:
#   0. the machine: cores, CPU, C library, GPU (and its compute mode), PyTorch and the
#      libnccl.so.2 it loads, NCCL_* settings inherited, the kit's commit; stops here when
#      the kit cannot run (not x86_64, a C library older than the kit needs).
#   1. PyTorch all_reduce between two ranks in two namespaces on the one GPU
#      (scripts/device/allreduce.py; each rank its own NCCL_HOSTID, so NCCL takes them for
#      two hosts and moves the data over its network transport): NCCL_NET=Socket on kernel
#      TCP against NCCL_NET=IB on uroce (`uroce run`, through a daemon per side), and on
#      uroce's sharded engine (`uroce run --shards DEVICE_SHARDS`); DEVICE_SIZES (default
#      16M,256M), the ratios to Socket at the end. DEVICE_AR_ROWS (default "socket ib
#      shards"). Two processes share the GPU by turns (no MPS): both transports pay that
#      alike, but the absolute GB/s are below what two GPUs would see. At most 200 s.
#   2. The drop-in library's engine over many cores: perftest's unmodified `ib_write_bw
#      -q 8` (64 KiB, 3 s) under `uroce run`, one process a side through the daemons,
#      with one engine and with `--shards DEVICE_SHARDS`: Gb/s and the ratio. At most
#      90 s.
#   3. scripts/bench-vs-tcp.sh with the kit's binaries and the libnccl.so.2 PyTorch loads:
#      NCCL's net plugins, `uroce perf` with 1, 4 and 8 QPs (--threads N where the cores
#      are there) against iperf3 -P N, the round trip, each against kernel TCP on one veth
#      pair, and the goals judged. DEVICE_BENCH="ROUNDS SECONDS" (default "3 2"),
#      DEVICE_ROWS (default "auto direct shards"), --shards DEVICE_SHARDS (4). What is left
#      of the budget.
# DEVICE_BUDGET (default 540 s) bounds the whole; DEVICE_PYTHON (default python3) is the
# Python that has PyTorch. The kit's ip, ss, iperf3 and GNU time come first on PATH.
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
  local t0 lib gnu_time left need have torch_ok=0 info
  t0=$(date +%s)
  chmod +x "$K/uroce" "$K"/bin/* "$K"/libexec/* "$K"/examples/* "$K/nccl-net-harness" 2>/dev/null
  if [ ! -x "$K/uroce" ] || [ ! -f "$K/libibverbs.so.1" ]; then
    echo "run.sh: no kit at $K: run scripts/device/pack.sh on the machine that builds, and carry .device"
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "run.sh: needs root (network namespaces, veth); not run"
    return 1
  fi
  export PATH="$K/bin:$PATH"
  gnu_time=$K/bin/time

  echo "== 0. the machine"
  echo "  $(nproc) cores, $(uname -m), kernel $(uname -r), CPU $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
  need=$(cat "$K/glibc" 2>/dev/null)
  echo "  C library: glibc ${have:-?} (the kit needs ${need:-?}); kit built from $(cat "$K/commit" 2>/dev/null || echo '?')"
  if [ "$(uname -m)" != x86_64 ]; then
    echo "run.sh: the kit is x86_64; this machine is $(uname -m): not run"
    return 1
  fi
  if [ -n "$have" ] && [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
    echo "run.sh: glibc $have is older than the $need the kit was built against: not run"
    return 1
  fi
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L | sed 's/^/  /'
    nvidia-smi --query-gpu=compute_mode,mig.mode.current --format=csv,noheader | sed 's/^/  compute mode, MIG: /'
  fi
  echo "  nvidia_peermem: $([ -d /sys/module/nvidia_peermem ] && echo loaded || echo absent); /etc/nccl.conf: $([ -f /etc/nccl.conf ] && tr '\n' ' ' </etc/nccl.conf || echo none)"
  echo "  inherited: $(env | grep -E '^(NCCL|TORCH|CUDA)_' | tr '\n' ' ')"
  # One import of PyTorch: its version, whether it has the GPU, and the libnccl.so.2 it
  # loaded (from its own maps, whatever installed it).
  info=$("$PY" - <<'PY' 2>"$OUTDIR/torch-probe.err"
import torch
ok = torch.cuda.is_available()
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:
    nccl = "?"
lib = next((l.split()[-1] for l in open("/proc/self/maps") if "libnccl.so" in l), "")
print(f"{int(ok)}|{lib}|torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}, GPUs {torch.cuda.device_count()}")
PY
  ) || info=""
  if [ -n "$info" ]; then
    IFS='|' read -r torch_ok lib info <<<"$info"
    echo "  $info"
  else
    echo "  torch: $PY could not say: $(tail -n 1 "$OUTDIR/torch-probe.err")"
    lib=
  fi
  echo "  libnccl.so.2 PyTorch loads: ${lib:-none found}"
  if [ "$torch_ok" = 1 ] && nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | grep -qi exclusive; then
    echo "  the GPU is in an exclusive compute mode: a second rank could not use it"
    torch_ok=0
  fi

  left=$((BUDGET - ($(date +%s) - t0)))
  local cap=$((left < 200 ? left : 200))
  echo "== 1. PyTorch all_reduce, two ranks, one GPU, over veth (at most $cap s)"
  if [ "$cap" -lt 30 ]; then
    echo "  skipped: under 30 s left"
  elif [ "$torch_ok" != 1 ]; then
    echo "  skipped: $PY has no PyTorch with a GPU it can use"
  else
    timeout -k 5 "$cap" bash -c "$(declare -f part_up allreduce_part ar_row); K='$K' ROOT='$ROOT' SHARDS='$SHARDS' PY='$PY' OUTDIR='$OUTDIR' allreduce_part" ||
      echo "  all_reduce part: exit $? (124: out of its time; what the ranks wrote is in $OUTDIR/allreduce)"
  fi
  sweep

  left=$((BUDGET - ($(date +%s) - t0)))
  cap=$((left < 90 ? left : 90))
  echo "== 2. ib_write_bw -q 8 on the drop-in library, one engine and $SHARDS shards (at most $cap s)"
  if [ "$cap" -lt 30 ]; then
    echo "  skipped: under 30 s left"
  else
    timeout -k 5 "$cap" bash -c "$(declare -f part_up ibbw_part ibbw_run); K='$K' ROOT='$ROOT' SHARDS='$SHARDS' OUTDIR='$OUTDIR' ibbw_part" ||
      echo "  ib_write_bw part: exit $? (124: out of its time; its output is in $OUTDIR/ib_write_bw)"
  fi
  sweep

  left=$((BUDGET - ($(date +%s) - t0) - 10))
  echo "== 3. scripts/bench-vs-tcp.sh ($BROUNDS round(s) of $BSECS s; rows ${DEVICE_ROWS:-auto direct shards}, --shards $SHARDS; ${left} s left)"
  if [ "$left" -lt 30 ]; then
    echo "  skipped: under 30 s left"
  else
    # The harness drives plugin tables laid out as ncclNet_v12_t (NCCL 2.32's; 2.28's
    # v11 has the same layout where the harness looks): asked once (it finds the plugin,
    # then waits for a peer that never comes); without a library it can drive, the NCCL
    # part says why and is skipped (fetch.sh would try the network, which there is none
    # of).
    local skip=
    if [ -z "$lib" ]; then
      skip="PyTorch loads no libnccl.so.2 this script found"
    else
      local probe
      probe=$(timeout 30 "$K/nccl-net-harness" --lib "$lib" --net socket --role a \
        --dir "$(mktemp -d)" --count 1 --check ends --timeout 1 2>&1)
      grep -q 'plugin Socket at' <<<"$probe" ||
        skip="scripts/nccl-net/harness.c cannot drive $lib: $(tail -n 1 <<<"$probe")"
    fi
    NCCL_SKIP=$skip NCCL_NET_LIB=$lib UROCE_BIN=$K/uroce NCCL_HARNESS=$K/nccl-net-harness \
      GNU_TIME=$gnu_time NCCL_GIN_TYPE=0 NCCL_MNNVL_ENABLE=0 ROWS="${DEVICE_ROWS:-auto direct shards}" \
      timeout -k 5 "$left" scripts/bench-vs-tcp.sh --shards "$SHARDS" "$BROUNDS" "$BSECS" ||
      echo "  bench-vs-tcp.sh: exit $? (124: out of its time)"
    sweep
  fi
  echo "run.sh: $(($(date +%s) - t0)) s"
}

# Namespaces a part left behind when its time ran out (its own cleanup may not have run).
sweep() {
  local ns
  # shellcheck source=scripts/lib/netns.sh
  (. scripts/lib/netns.sh
  for ns in $(ip netns list 2>/dev/null | awk '/^uroce-(vs|ar|bw)-/ { print $1 }'); do
    echo "  removing $ns, left behind"
    netns_down "$ns"
  done)
}

# part_up TAG IFPREFIX SUBNET DIR: what parts 1 and 2 start with, in their own bash: the
# namespaces uroce-TAG-PID-a and -b joined by a veth pair on SUBNET (A, Z, IA, IZ; not
# local: the EXIT trap needs them after this returns), removed on exit with any daemon
# started; $OUTDIR/DIR for the logs (work). Fails, saying why, if the pair does not come up.
part_up() {
  set -uo pipefail
  cd "$ROOT" || return 1
  A=uroce-$1-$$-a Z=uroce-$1-$$-b IA=$2$$a IZ=$2$$b
  work=$OUTDIR/$4
  mkdir -p "$work"
  NETNS_WORK=$work
  # shellcheck source=scripts/lib/netns.sh
  . scripts/lib/netns.sh
  trap 'for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null; done; netns_down "$A" "$Z"' EXIT
  trap 'exit 130' INT TERM
  netns_up "$A" "$Z" "$IA" "$IZ" "$3"
  if ! ip -n "$A" -o link show "$IA" | grep -q 'state UP'; then
    echo "  the veth pair did not come up: $(ip -n "$A" -o link show "$IA")"
    return 1
  fi
}

# Part 2 (in its own bash, under the part's timeout).
ibbw_part() {
  part_up bw ub 10.94.0 ib_write_bw || exit 1
  local one many
  one=$(ibbw_run one 18990)
  many=$(ibbw_run shards 18991 --shards "$SHARDS")
  echo "  ib_write_bw -q 8, 64 KiB: one engine ${one:-failed} Gb/s, $SHARDS shards ${many:-failed} Gb/s$(
    [ -n "$one" ] && [ -n "$many" ] && awk -v a="$many" -v b="$one" 'BEGIN { if (b > 0) printf ": %.2fx", a / b }')"
}

# ibbw_run TAG PORT [uroce run flags]: both ends through the daemons; the client's Gb/s.
ibbw_run() {
  local tag=$1 port=$2 sp g
  shift 2
  daemons_start "$K/uroce" auto "$A:$IA" "$Z:$IZ" >/dev/null || {
    daemons_stop "$K/uroce" "$A:$IA" "$Z:$IZ" >/dev/null
    return
  }
  local flags="-x 1 -F -m 4096 -s 65536 -q 8 -D 3 --report_gbits -p $port"
  # shellcheck disable=SC2086
  ip netns exec "$A" timeout -k 2 40 "$K/uroce" run --iface "$IA" "$@" -- \
    ib_write_bw -d "uroce_$IA" $flags >"$work/$tag.server" 2>&1 &
  sp=$!
  listening "$A" "$port" || true
  # shellcheck disable=SC2086
  ip netns exec "$Z" timeout -k 2 40 "$K/uroce" run --iface "$IZ" "$@" -- \
    ib_write_bw -d "uroce_$IZ" $flags 10.94.0.1 >"$work/$tag.client" 2>&1
  wait "$sp"
  g=$(awk '/#bytes/ { getline; print $4 }' "$work/$tag.client")
  daemons_stop "$K/uroce" "$A:$IA" "$Z:$IZ" >/dev/null
  echo "$g"
}

# Part 1 (in its own bash, under the part's timeout).
allreduce_part() {
  part_up ar ua 10.95.0 allreduce || exit 1
  : >"$work/results"
  local row port=29511
  for row in ${DEVICE_AR_ROWS:-socket ib shards}; do
    ar_row "$row" "$port" || echo "  $row: failed"
    port=$((port + 1))
  done
  "$PY" - "$work/results" <<'PY'
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

# One row: both ranks (rank 1 in the background), each under its own timeout; their JSON
# lines into results and on stdout at once, with the transport NCCL says it took.
ar_row() {
  local row=$1 port=$2 r p pids=() codes=() pre env_net rc=0
  if [ "$row" != socket ]; then
    if ! daemons_start "$K/uroce" auto "$A:$IA" "$Z:$IZ"; then
      daemons_stop "$K/uroce" "$A:$IA" "$Z:$IZ"
      return 1
    fi
  fi
  for r in 1 0; do
    local ns=$A ifc=$IA
    [ $r = 1 ] && ns=$Z && ifc=$IZ
    case "$row" in
    socket) pre=() env_net=(NCCL_NET=Socket) ;;
    ib) pre=("$K/uroce" run --iface "$ifc" --) env_net=(NCCL_NET=IB NCCL_IB_DISABLE=0 "NCCL_IB_HCA==uroce_$ifc") ;;
    shards) pre=("$K/uroce" run --iface "$ifc" --shards "$SHARDS" --) env_net=(NCCL_NET=IB NCCL_IB_DISABLE=0 "NCCL_IB_HCA==uroce_$ifc") ;;
    *)
      echo "  unknown row $row (socket, ib, shards)"
      return 1
      ;;
    esac
    # NCCL_MNNVL_ENABLE=0: both "hosts" are one GPU, whose fabric IDs match; NCCL would
    # try to join them over NVLink. NCCL_NET_GDR_LEVEL=LOC: uroce cannot read GPU memory.
    ip netns exec "$ns" timeout -k 5 100 env NCCL_HOSTID="uroce-ar-$r" NCCL_SOCKET_IFNAME="$ifc" \
      NCCL_GIN_TYPE=0 NCCL_MNNVL_ENABLE=0 NCCL_NET_GDR_LEVEL=LOC \
      NCCL_DEBUG="${NCCL_DEBUG:-INFO}" NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,NET}" \
      "${env_net[@]}" "${pre[@]}" \
      "$PY" scripts/device/allreduce.py --rank "$r" --world 2 --master "10.95.0.1:$port" \
      --sizes "${DEVICE_SIZES:-16M,256M}" --label "$row" --timeout 60 \
      >"$work/$row.$r.out" 2>"$work/$row.$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p"
    codes+=($?)
  done
  [ "${codes[*]}" = "0 0" ] || rc=1
  cat "$work/$row.0.out" "$work/$row.1.out" >>"$work/results"
  echo "  $row: rank 0 $(grep -ho 'via NET/[^ ]*\( [^ ]*\)\{0,3\}' "$work/$row.0.out" "$work/$row.0.err" | sort | uniq -c | head -n 3 | tr -s ' ' | tr '\n' ';')"
  grep -h '^{' "$work/$row.0.out" | sed 's/^/    /'
  if [ $rc != 0 ]; then
    echo "  $row: ranks 1 and 0 exited ${codes[*]} (124: its 100 s ran out); NCCL's warnings and the last words:"
    grep -h 'WARN' "$work/$row.0.err" "$work/$row.1.err" | head -n 5 | sed 's/^/    /'
    tail -n 3 "$work/$row.0.err" "$work/$row.1.err" | sed 's/^/    /'
  fi
  if [ "$row" != socket ]; then
    daemons_stop "$K/uroce" "$A:$IA" "$Z:$IZ" || rc=1
  fi
  return $rc
}

main 2>&1 | tee "$OUTDIR/device-run.txt"
