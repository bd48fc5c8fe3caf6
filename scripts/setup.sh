#!/usr/bin/env bash
# Installs what uroce's demo and tests need beyond the Rust toolchain: iproute2 (`ip`,
# `tc`) for network namespaces and veth pairs. Idempotent; needs root only when something
# is missing.
set -euo pipefail

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)

if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/setup.sh: missing ${need[*]}; run this script as root to install (apt-get)." >&2
    echo "Without it, 'uroce demo' runs both endpoints on loopback and the veth tests skip." >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${need[@]}"
