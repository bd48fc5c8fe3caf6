#!/usr/bin/env bash
# Installs what uroce's demo and tests need beyond the Rust toolchain: iproute2 (`ip`,
# `tc`) for network namespaces and veth pairs, ethtool (the veth test of UDP GSO on the
# wire turns the veth's segmentation offload off); for crates/uroce-verbs (the drop-in
# libibverbs.so.1) the distro's libibverbs-dev (<infiniband/verbs.h>, for the ABI layout
# test), ibverbs-utils (ibv_devinfo, ibv_devices, ibv_*_pingpong), ibverbs-providers
# (libmlx5, libefa) and perftest (ib_write_bw ... ib_atomic_lat), which its tests run
# unmodified against the built library; for crates/uroce-rdmacm (the drop-in
# librdmacm.so.1) librdmacm-dev (<rdma/rdma_cma.h>, for its ABI layout and link tests) and
# rdmacm-utils (rping, udaddy, run unmodified against the built library); for
# scripts/compat-matrix.sh (and tests/rdma_files.rs' ucx_info) qperf, ucx-utils,
# openmpi-bin and libopenmpi-dev, libfabric-bin and python3-pyverbs. With
# --interop, also the rxe interop guest (scripts/interop/install.sh: qemu, debootstrap, a
# cached guest image; a failure there is reported and the interop test then says why it
# skips). With --bench, also iperf3 (scripts/bench-datapath.sh --bulk and
# scripts/bench-vs-tcp.sh measure kernel TCP beside uroce), GNU time (/usr/bin/time: their
# CPU-seconds) and gcc (bench-vs-tcp.sh builds scripts/nccl-net/harness.c; it fetches
# libnccl.so.2 itself, or says why it cannot and skips its NCCL part). With --nccl, also gcc and NVIDIA's libnccl.so.2 (scripts/nccl-net/fetch.sh:
# the nvidia-nccl-cu13 wheel, about 300 MB, into .cache/nccl-net; the NCCL test fetches it
# itself when missing). Idempotent; needs root only when something is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
interop=0
bench=0
nccl=0
for a in "$@"; do
    [ "$a" = "--interop" ] && interop=1
    [ "$a" = "--bench" ] && bench=1
    [ "$a" = "--nccl" ] && nccl=1
done

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || need+=(ethtool)
if [ $bench -eq 1 ]; then
    command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
    [ -x /usr/bin/time ] || need+=(time)
    command -v gcc >/dev/null 2>&1 || need+=(gcc)
fi
if [ $nccl -eq 1 ]; then
    command -v gcc >/dev/null 2>&1 || need+=(gcc)
fi
# Both may ask for gcc: once.
mapfile -t need < <(printf '%s\n' "${need[@]}" | awk 'NF && !seen[$0]++')
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
command -v ibv_devinfo >/dev/null 2>&1 || need+=(ibverbs-utils)
[ -e /usr/lib/x86_64-linux-gnu/libmlx5.so.1 ] || need+=(ibverbs-providers)
command -v ib_write_bw >/dev/null 2>&1 || need+=(perftest)
[ -f /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v rping >/dev/null 2>&1 || need+=(rdmacm-utils)
# The middleware of scripts/compat-matrix.sh (its test runs it): qperf, UCX, Open MPI,
# libfabric, rdma-core's pyverbs (for the distro's python3).
command -v qperf >/dev/null 2>&1 || need+=(qperf)
command -v ucx_perftest >/dev/null 2>&1 || need+=(ucx-utils)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v fi_pingpong >/dev/null 2>&1 || need+=(libfabric-bin)
[ -d /usr/lib/python3/dist-packages/pyverbs ] || need+=(python3-pyverbs)

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
if [ $nccl -eq 1 ]; then
    "$here/nccl-net/fetch.sh" >/dev/null || echo "WARNING: scripts/nccl-net/fetch.sh failed; the NCCL test will skip" >&2
fi
