# shellcheck shell=bash
# NCCL's net plugins between two namespaces, driven by harness.c: what scripts/nccl-net/run.sh
# and scripts/bench-vs-tcp.sh share (sourced, not run). The caller sets B (the uroce
# binary), LIB (libnccl.so.2), WORK (a scratch directory), A, Z (the namespaces), IA, IZ
# (the veth ends, scripts/lib/netns.sh's netns_up), and calls nccl_harness once.
#
#   nccl_harness               builds harness.c into $WORK (sets H); needs gcc, unless
#                              NCCL_HARNESS names one built already (scripts/device/pack.sh)
#   nccl_pair NET COUNT CHECK [UROCE RUN FLAGS...]
#     both sides at once, COUNT messages each way (the harness's defaults: 512 KiB, 8 in
#     flight; NCCL_HARNESS_ARGS adds to the harness's arguments, e.g. "--size 131072"):
#     NET tcp is ncclNetSocket on kernel TCP; NET auto, udp or xdp is ncclNetIb on uroce,
#     each side under `uroce run --iface IF --backend NET FLAGS --` (which attaches to the
#     daemon serving the interface, or starts one: start your own first to control which
#     backend serves, and to count its CPU). Prints each side's report line (a, then b);
#     on failure both sides' stderr on stderr, and status 1.

nccl_harness() {
  if [ -n "${NCCL_HARNESS:-}" ]; then
    H=$NCCL_HARNESS
    return
  fi
  H=$WORK/nccl-net-harness
  gcc -O2 -Wall -o "$H" "$(dirname "${BASH_SOURCE[0]}")/harness.c" -ldl
}

nccl_pair() {
  local be=$1 n=$2 check=$3 dir
  shift 3
  local flags=("$@")
  dir=$(mktemp -d "$WORK/$be.XXXXXX")
  # shellcheck disable=SC2086
  _nccl_side() { # NS IFACE ROLE
    local pre=() net=socket
    if [ "$be" != tcp ]; then
      pre=("$B" run --iface "$2" --backend "$be" "${flags[@]}" --)
      net=ib
    fi
    ip netns exec "$1" env NCCL_SOCKET_IFNAME="$2" NCCL_IB_HCA="=uroce_$2" \
      "${pre[@]}" "$H" --lib "$LIB" --net "$net" \
      --role "$3" --dir "$dir" --count "$n" --check "$check" --timeout 120 \
      ${NCCL_HARNESS_ARGS:-} >"$dir/out.$3" 2>"$dir/err.$3"
  }
  _nccl_side "$Z" "$IZ" b &
  local pid=$! rc=0
  _nccl_side "$A" "$IA" a || rc=1
  wait $pid || rc=1
  if [ $rc != 0 ]; then
    echo "$be ${flags[*]} failed:" >&2
    cat "$dir"/err.* >&2
    return 1
  fi
  cat "$dir/out.a" "$dir/out.b"
}
