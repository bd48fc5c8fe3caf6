#!/usr/bin/env bash
# uroce against its own peer fuzzer: every uroce peer, over AF_XDP and over the UDP
# backend, several seeds, each for a given time; the fuzzer's verdicts judged by the IBTA
# rules (`uroce fuzz-peer`), a known-good operation as the liveness oracle.
#
#   scripts/fuzz-peers.sh [--duration SECS] [--seeds "1 2 3 4 5"] [--peers "..."]
#                         [--backends "xdp udp"] [--mtu BYTES] [--out DIR] [--bin UROCE]
#
# Peers (in the second of two network namespaces joined by a veth pair):
#   uroce-perf       uroce perf write --keep-serving (the fuzzer reconnects for fresh QPs)
#   ib_write_bw      the distro's perftest servers on uroce's libibverbs.so.1 (uroce run),
#   ib_read_bw       four QPs each (-q 4): the last is the known-good one; restarted by
#   ib_atomic_bw     the fuzzer (--restart-cmd) once their QPs are used up (ib_send_bw
#                    too, by name; not in the default set: it exits at the first receive
#                    flushed by a fuzz QP's error, its known-good QP with it; README)
#   ibv_rc_pingpong  rdma-core's pingpongs on uroce (RC, and UD: the UD peer)
#   ibv_ud_pingpong
# The backend is the peer's own datapath (`uroce run --no-daemon --backend`, `uroce perf
# --no-daemon --backend`: direct mode, so that each row's datapath is the one it names); the
# fuzzer sends whole frames over AF_XDP (IP and UDP header edges too).
#
# Needs root (namespaces, AF_XDP); the distro's perftest and ibverbs-utils
# (scripts/setup.sh installs them); builds the release binaries, or takes the uroce binary
# --bin names (libibverbs.so.1 beside it; the test suite's short run). Prints one line per run
# (frames, peer restarts, QPs used, wrong verdicts, findings) and exits 1 if any run had a
# finding or a wrong verdict, 2 if one could not run. Findings' captures go to --out.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=600
seeds="1 2 3 4 5"
peers="uroce-perf ib_write_bw ib_read_bw ib_atomic_bw ibv_rc_pingpong ibv_ud_pingpong"
backends="xdp udp"
mtu=9000
out=target/fuzz-peers
bin=
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --peers) peers=$2; shift 2 ;;
        --backends) backends=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "fuzz-peers.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "fuzz-peers.sh: needs root (network namespaces, veth, AF_XDP): run it with sudo" >&2
    exit 2
fi
for t in ip python3; do
    command -v "$t" >/dev/null || { echo "fuzz-peers.sh: $t is missing (scripts/setup.sh)" >&2; exit 2; }
done

if [ -z "$bin" ]; then
    cargo build --release -q -p uroce-tools -p uroce-verbs -p uroce-rdmacm
    bin=$PWD/target/release/uroce
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh # netns_up, netns_down

tag=fzp$$
ns_a=$tag-a ns_b=$tag-b if_a=${tag}a if_b=${tag}b
net=10.213.99
addr_b=$net.2
cleanup() {
    if [ -f "$out/peer.pid" ]; then kill "$(cat "$out/peer.pid")" 2>/dev/null || true; fi
    netns_down "$ns_a" "$ns_b"
}
trap cleanup EXIT INT TERM
# One queue each way.
netns_up "$ns_a" "$ns_b" "$if_a" "$if_b" "$net" "$mtu" 1

# The peer's command line and the fuzzer's arguments for it.
peer_cmd() { # PEER BACKEND
    local run="$bin run --no-daemon --backend $2 --iface $if_b --"
    case "$1" in
        uroce-perf) echo "$bin perf write --keep-serving --no-daemon --backend $2 --iface $if_b -p 18515" ;;
        ib_write_bw|ib_read_bw|ib_send_bw) echo "$run $1 -x 1 -F -q 4 -p 18515" ;;
        ib_atomic_bw) echo "$run ib_atomic_bw -x 1 -F -q 4 -p 18515" ;;
        ibv_rc_pingpong) echo "$run ibv_rc_pingpong -g 1 -p 18515 -s 2048 -n 1000000000" ;;
        ibv_ud_pingpong) echo "$run ibv_ud_pingpong -g 1 -p 18515 -s 512 -n 1000000000" ;;
        *) echo "fuzz-peers.sh: unknown peer $1" >&2; return 2 ;;
    esac
}
fuzz_args() { # PEER
    case "$1" in
        uroce-perf) echo "--tool uroce-perf" ;;
        ib_*) echo "--tool $1 --peer-qps 4" ;;
        ibv_rc_pingpong) echo "--tool ibv_rc_pingpong -s 2048" ;;
        ibv_ud_pingpong) echo "--tool ibv_ud_pingpong -s 512" ;;
    esac
}

printf '%-16s %-4s %8s %9s %8s %6s %7s %8s  %s\n' peer dp seed frames restarts qps wrong finding ended
bad=0
for backend in $backends; do
    for peer in $peers; do
        cmd=$(peer_cmd "$peer" "$backend")
        restart=$out/restart-$peer-$backend.sh
        cat >"$restart" <<EOF
#!/bin/sh
# Stops the last $peer and starts a fresh one; returns once it listens.
if [ -f $out/peer.pid ]; then old=\$(cat $out/peer.pid); kill \$old 2>/dev/null
  # Gone, or a zombie no one has reaped yet (its sockets are closed either way).
  for i in \$(seq 100); do case \$(cut -d' ' -f3 /proc/\$old/stat 2>/dev/null) in ''|Z) break;; esac; sleep 0.05; done; fi
ip netns exec $ns_b $cmd >>$out/peer-$peer-$backend.log 2>&1 &
echo \$! > $out/peer.pid
for i in \$(seq 100); do ip netns exec $ns_b ss -ltn 2>/dev/null | grep -q ':18515 ' && exit 0; sleep 0.05; done
exit 0
EOF
        chmod +x "$restart"
        for seed in $seeds; do
            "$restart"
            json=$out/$peer-$backend-$seed.json
            # A uroce perf server keeps serving: the fuzzer reconnects for fresh QPs
            # (no restart; a finding is not shrunk). The others serve one client.
            again=(--restart-cmd "$restart")
            if [ "$peer" = uroce-perf ]; then again=(); fi
            set +e
            # shellcheck disable=SC2046
            ip netns exec "$ns_a" timeout $((duration + 300)) "$bin" fuzz-peer "$addr_b" \
                $(fuzz_args "$peer") --backend xdp --iface "$if_a" -p 18515 \
                --seed "$seed" --duration "$duration" "${again[@]}" \
                --pcap "$out/finding-$peer-$backend-$seed.pcap" --json \
                >"$json" 2>"$out/$peer-$backend-$seed.log"
            code=$?
            set -e
            line=$(python3 - "$json" "$code" <<'EOF'
import json, sys
code = int(sys.argv[2])
try:
    s = json.load(open(sys.argv[1]))
except Exception:
    print(f"- - - - - ERROR(exit {code}) see the .log")
    sys.exit(0)
wrong = sum(m["count"] for m in s["mismatches"]) - len(s["unconfirmed"])
print(s["frames_sent"], s["peer_restarts"], s["qps_used"], wrong, len(s["findings"]),
      s["ended"].replace(" ", "_")[:60])
EOF
)
            read -r frames restarts qps wrong finding ended <<<"$line"
            printf '%-16s %-4s %8s %9s %8s %6s %7s %8s  %s\n' "$peer" "$backend" "$seed" \
                "$frames" "$restarts" "$qps" "$wrong" "$finding" "$ended"
            if [ "$code" = 2 ] || [ "$frames" = - ]; then
                bad=$((bad > 2 ? bad : 2))
            elif [ "$code" != 0 ] || [ "$wrong" != 0 ] || [ "$finding" != 0 ]; then
                bad=$((bad > 1 ? bad : 1))
            fi
        done
        if [ -f "$out/peer.pid" ]; then kill "$(cat "$out/peer.pid")" 2>/dev/null || true; rm -f "$out/peer.pid"; fi
        sleep 0.5
    done
done
if [ "$bad" = 0 ]; then
    echo "fuzz-peers: clean (every run: no finding, no wrong verdict)"
fi
exit "$bad"
