#!/usr/bin/env bash
# Installs what the rxe interop suite needs on a fresh Debian bookworm machine (as root):
# qemu-system-x86 (from bookworm-backports, as the machine's qemu-utils is) to boot a guest
# with the kernel's soft-RoCE driver, debootstrap and friends to build that guest, tcpdump
# to capture; then builds (or reuses) the cached guest image. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/interop/install.sh: needs root (apt-get, debootstrap); the interop tests skip without it" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "deb $mirror bookworm-backports main" > /etc/apt/sources.list.d/uroce-bpo.list
    apt-get update -q
    apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86
fi
need=()
for c in debootstrap cpio xz zstd modprobe tcpdump socat ip; do
    command -v "$c" >/dev/null 2>&1 || need+=("$c")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends debootstrap cpio xz-utils zstd kmod tcpdump socat iproute2
fi
"$here/build-guest.sh"
