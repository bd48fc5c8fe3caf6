#!/usr/bin/env bash
# Installs what uroce's demo and tests need beyond the Rust toolchain: iproute2 (`ip`,
# `tc`) for network namespaces and veth pairs, ethtool (the veth test of UDP GSO on the
# wire turns the veth's segmentation offload off); for crates/uroce-verbs (the drop-in
# libibverbs.so.1) the distro's libibverbs-dev (<infiniband/verbs.h>, for the ABI layout
# test), ibverbs-utils (ibv_devinfo, ibv_devices, ibv_*_pingpong), ibverbs-providers
# (libmlx5, libefa) and perftest (ib_write_bw ... ib_atomic_lat), which its tests run
# unmodified against the built library; for crates/uroce-rdmacm (the drop-in
# librdmacm.so.1) librdmacm-dev (<rdma/rdma_cma.h>, for its ABI layout and link tests) and
# rdmacm-utils (rping, udaddy, run unmodified against the built library); ucx-utils
# (ucx_info: uroce-tools' tests/rdma_files.rs checks UCX finds the device under `uroce
# run`). With
# --interop, also the rxe interop guest (scripts/interop/install.sh: qemu, debootstrap, a
# cached guest image; a failure there is reported and the interop test then says why it
# skips). With --bench, also iperf3 (scripts/bench-datapath.sh --bulk measures kernel TCP
# beside uroce). Idempotent; needs root only when something is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
interop=0
bench=0
for a in "$@"; do
    [ "$a" = "--interop" ] && interop=1
    [ "$a" = "--bench" ] && bench=1
done

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || need+=(ethtool)
if [ $bench -eq 1 ]; then
    command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
fi
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
command -v ibv_devinfo >/dev/null 2>&1 || need+=(ibverbs-utils)
[ -e /usr/lib/x86_64-linux-gnu/libmlx5.so.1 ] || need+=(ibverbs-providers)
command -v ib_write_bw >/dev/null 2>&1 || need+=(perftest)
[ -f /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v rping >/dev/null 2>&1 || need+=(rdmacm-utils)
command -v ucx_info >/dev/null 2>&1 || need+=(ucx-utils)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/setup.sh: missing ${need[*]}; run this script as root to install (apt-get)." >&2
        echo "Without it, 'uroce demo' runs both endpoints on loopback and the veth tests skip;" >&2
        echo "uroce-verbs' ABI, ibv_devinfo and provider tests skip without the ibverbs packages," >&2
        echo "uroce-rdmacm's ABI and link tests without the rdmacm ones, the UCX check of" >&2
        echo "uroce-tools' rdma_files test without ucx-utils." >&2
    else
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q "${need[@]}"
    fi
fi
if [ $interop -eq 1 ]; then
    "$here/interop/install.sh" || echo "WARNING: scripts/interop/install.sh failed; the rxe interop test will skip" >&2
fi
