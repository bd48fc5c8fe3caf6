#!/bin/bash
# Fetches libnccl.so.2 (NVIDIA's NCCL, from PyPI's nvidia-nccl-cu13 wheel) into a cache that
# git ignores, once; prints the library's path on the last line of stdout.
#   cache: $NCCL_NET_CACHE, default .cache/nccl-net at the repository root
#   a wheel already at hand: $NCCL_WHEEL (a file), else any nvidia_nccl_cu13-*.whl in the
#   cache or in /tmp/ncclwheel; else `python3 -m pip download nvidia-nccl-cu13 --no-deps`
#   (about 300 MB; the wheel is removed once its library is out).
# Exit status 0: the library is there; 2: it cannot be had here (the reason on stderr).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${NCCL_NET_CACHE:-$ROOT/.cache/nccl-net}
LIB=$CACHE/libnccl.so.2
if [ -s "$LIB" ]; then
  echo "$LIB"
  exit 0
fi
mkdir -p "$CACHE"
wheel=${NCCL_WHEEL:-}
downloaded=0
if [ -n "$wheel" ] && [ ! -f "$wheel" ]; then
  echo "fetch.sh: NCCL_WHEEL=$wheel is no file" >&2
  exit 2
fi
if [ -z "$wheel" ]; then
  wheel=$(ls -1 "$CACHE"/nvidia_nccl_cu13-*.whl /tmp/ncclwheel/nvidia_nccl_cu13-*.whl 2>/dev/null | head -n 1 || true)
fi
if [ -z "$wheel" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "fetch.sh: no wheel at hand and no pip (python3 -m pip) to download nvidia-nccl-cu13" >&2
    exit 2
  fi
  echo "fetch.sh: downloading nvidia-nccl-cu13 (about 300 MB) into $CACHE" >&2
  if ! python3 -m pip download -q nvidia-nccl-cu13 --no-deps --only-binary=:all: -d "$CACHE" >&2; then
    echo "fetch.sh: pip could not download nvidia-nccl-cu13 (offline?)" >&2
    exit 2
  fi
  wheel=$(ls -1 "$CACHE"/nvidia_nccl_cu13-*.whl | head -n 1)
  downloaded=1
fi
# A wheel is a zip: take the one library out of it, through a temporary name so that an
# interrupted run leaves no half file behind.
python3 - "$wheel" "$LIB.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.endswith("/lib/libnccl.so.2")]
    if not names:
        sys.exit(f"{sys.argv[1]} holds no lib/libnccl.so.2")
    with z.open(names[0]) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
mv "$LIB.part" "$LIB"
[ "$downloaded" = 1 ] && rm -f "$wheel"
echo "fetch.sh: $LIB from $(basename "$wheel")" >&2
echo "$LIB"
