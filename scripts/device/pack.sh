#!/bin/bash
# Packs into .device/ (git-ignored) what scripts/device/run.sh needs on a machine that has
# no Rust toolchain, no iproute2, no iperf3, no GNU time and no gcc, as the device machines
# lent to some tasks (16 cores, a GPU, PyTorch with NCCL; `run`'s `carry` takes .device,
# 64 MiB at most):
#   .device/uroce, libibverbs.so.1, librdmacm.so.1    this checkout's release build (`uroce
#                                                     run` finds the libraries next to it)
#   .device/examples/tcp_rr                           TCP's request/response baseline
#   .device/nccl-net-harness                          scripts/nccl-net/harness.c, built
#   .device/bin/{ip,ss,iperf3,time,ib_write_bw}       this machine's tools, each a wrapper
#                                                     that runs the copy in .device/libexec
#                                                     through the other machine's dynamic
#                                                     loader with .device/lib (the libraries
#                                                     they need but the C library itself;
#                                                     perftest's ib_write_bw takes uroce's
#                                                     libibverbs.so.1 and librdmacm.so.1
#                                                     from .device first)
# The wrappers give their libraries to the tool alone (`ld.so --library-path`), not, as
# LD_LIBRARY_PATH would, to what `ip netns exec` runs: Python and PyTorch there keep their
# own. Every binary here needs at most the C library of this machine's build (GLIBC_2.34;
# checked below), which the other machine's must match or pass.
# Usage: scripts/device/pack.sh        (then: run --carry .device -- scripts/device/run.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
K=.device
for t in ip ss iperf3 gcc ib_write_bw; do
  command -v "$t" >/dev/null || {
    echo "pack.sh: $t is missing here (scripts/setup.sh --bench installs what the kit copies)" >&2
    exit 1
  }
done
[ -x /usr/bin/time ] || {
  echo "pack.sh: GNU time (/usr/bin/time) is missing here (scripts/setup.sh --bench)" >&2
  exit 1
}
cargo build --release -q -p uroce-tools -p uroce-verbs -p uroce-rdmacm
cargo build --release -q -p uroce-tools --example tcp_rr
rm -rf "$K"
mkdir -p "$K/bin" "$K/libexec" "$K/lib" "$K/examples"
cp target/release/uroce "$K/"
# Real files, not links: what `carry` moves is plain files.
cp -L target/release/libibverbs.so.1 "$K/libibverbs.so.1"
cp -L target/release/librdmacm.so.1 "$K/librdmacm.so.1"
cp target/release/examples/tcp_rr "$K/examples/"
gcc -O2 -Wall -o "$K/nccl-net-harness" scripts/nccl-net/harness.c -ldl

# The C library's own parts stay the other machine's.
own_libc() {
  case "$(basename "$1")" in
  libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libresolv.so.* | \
    libutil.so.* | libanl.so.* | libnss_* | libmvec.so.* | libBrokenLocale.so.* | \
    libc_malloc_debug.so.* | libthread_db.so.* | ld-linux*) return 0 ;;
  esac
  return 1
}
for t in ip ss iperf3 /usr/bin/time ib_write_bw; do
  path=$(command -v "$t")
  name=$(basename "$path")
  cp -L "$path" "$K/libexec/$name"
  ldd "$path" | awk '/=> \// { print $3 }' | while read -r lib; do
    case "${lib##*/}" in libibverbs.so.* | librdmacm.so.*) continue ;; esac
    own_libc "$lib" || [ -e "$K/lib/${lib##*/}" ] || cp -L "$lib" "$K/lib/"
  done
  # uroce's libibverbs.so.1 and librdmacm.so.1 (in .device itself) before the rest.
  cat >"$K/bin/$name" <<WRAP
#!/bin/sh
# $name from the machine that packed this kit (scripts/device/pack.sh), its libraries its own.
k=\$(cd "\$(dirname "\$0")/.." && pwd)
exec /lib64/ld-linux-x86-64.so.2 --library-path "\$k:\$k/lib" "\$k/libexec/$name" "\$@"
WRAP
  chmod +x "$K/bin/$name"
done

# Nothing here may need a newer C library than the kit says.
newest=$(for f in "$K/uroce" "$K"/*.so.1 "$K/examples/tcp_rr" "$K/nccl-net-harness" "$K"/libexec/* "$K"/lib/*; do
  objdump -T "$f" | grep -o 'GLIBC_2\.[0-9]*' || true
done | sort -t. -k2 -n -u | tail -n 1)
# run.sh compares it with the other machine's.
echo "${newest#GLIBC_}" >"$K/glibc"
private=$(for f in "$K/uroce" "$K"/*.so.1 "$K/examples/tcp_rr" "$K/nccl-net-harness" "$K"/libexec/* "$K"/lib/*; do
  objdump -T "$f" | grep -q GLIBC_PRIVATE && echo "$f"
done || true)
if [ -n "$private" ]; then
  echo "pack.sh: these need this machine's own C library (GLIBC_PRIVATE): $private" >&2
  exit 1
fi
size=$(du -sm "$K" | cut -f1)
echo "pack.sh: $K: $size MiB, needs $newest or newer; $(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified')"
git rev-parse HEAD >"$K/commit"
# The wrappers run here, as they will there.
"$K/bin/ip" -V >/dev/null && "$K/bin/ss" -V >/dev/null && "$K/bin/iperf3" -v >/dev/null &&
  "$K/bin/time" -f '' true && { "$K/bin/ib_write_bw" --version || true; } | grep -q Version || {
  echo "pack.sh: a wrapper in $K/bin does not run here" >&2
  exit 1
}
if [ "$size" -ge 64 ]; then
  echo "pack.sh: $K is $size MiB, more than \`carry\` takes (64 MiB)" >&2
  exit 1
fi
