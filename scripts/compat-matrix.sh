#!/usr/bin/env bash
# The middleware RDMA users run, unmodified on uroce between two network namespaces joined
# by a veth pair: every program under `uroce run` (uroce's libibverbs.so.1 and
# librdmacm.so.1), the distro's packages as they come.
#
#   scripts/compat-matrix.sh [--only "CASE ..."] [--backend auto|xdp|udp] [--bin UROCE]
#                            [--markdown] [--out DIR]
#
# Cases (a package that is missing is a skip that says which; scripts/setup.sh installs
# them):
#   qperf-rc_bw qperf-rc_lat qperf-rc_rdma_write_bw qperf-rc_rdma_read_lat  (qperf -cm1)
#   qperf-uc_bw qperf-ud_lat     qperf addresses these by LID only (no GRH): refused, as on
#                                every RoCE device (rdma_rxe, mlx5); the row checks that the
#                                refusal is the RTR / address-handle one and nothing else
#   ucx_info                     `ucx_info -d` lists the uroce device (rc_verbs, ud_verbs)
#   ucx-tag_bw-rc ucx-tag_lat-rc ucx-tag_bw-ud ucx-tag_lat-ud   ucx_perftest, UCX_TLS
#   ompi-ucx                     Open MPI, pml ucx, a 1 MiB exchange checked both ways
#   fi-msg fi-dgram fi-rdm       libfabric's fi_pingpong over the verbs provider
#   pyverbs                      rdma-core's pyverbs: device, port, GID table, a UD QP
#   rdma-core-tests              rdma-core's own test suite (tests/ of its source, v44 for
#                                Debian 12's pyverbs) on one device talking to itself, as
#                                it runs on rxe: RDMA_CORE_TESTS=DIR names the tests/
#                                directory (no registry this project uses serves the
#                                source, so the row skips without it)
# Each prints one line: CASE RESULT FIGURE DETAIL (tab-separated), RESULT pass / fail /
# skip / refused (a refusal the case expects). With --markdown, a table for README.md
# follows. Exits 1 if a case failed, 2 if the matrix could not run.
#
# Needs root (namespaces, veth, AF_XDP) and iproute2; builds the release binaries unless
# --bin names a uroce binary (its libraries beside it, or in its deps/ as `cargo test`
# leaves them).
set -euo pipefail
cd "$(dirname "$0")/.."

only=""
backend=auto
bin=
markdown=0
out=target/compat-matrix
all="qperf-rc_bw qperf-rc_lat qperf-rc_rdma_write_bw qperf-rc_rdma_read_lat qperf-uc_bw
qperf-ud_lat ucx_info ucx-tag_bw-rc ucx-tag_lat-rc ucx-tag_bw-ud ucx-tag_lat-ud ompi-ucx
fi-msg fi-dgram fi-rdm pyverbs rdma-core-tests"
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only=$2; shift 2 ;;
        --backend) backend=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --markdown) markdown=1; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compat-matrix.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case $backend in auto|xdp|udp) ;; *) echo "compat-matrix.sh: --backend auto, xdp or udp" >&2; exit 2 ;; esac
if [ "$(id -u)" != 0 ]; then
    echo "compat-matrix.sh: needs root (network namespaces, veth, AF_XDP): run it with sudo" >&2
    exit 2
fi
command -v ip >/dev/null || { echo "compat-matrix.sh: ip is missing (scripts/setup.sh)" >&2; exit 2; }
if [ -z "$bin" ]; then
    cargo build --release -q -p uroce-tools -p uroce-verbs -p uroce-rdmacm
    bin=$PWD/target/release/uroce
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
cases=${only:-$all}

# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh # netns_up, netns_down, listening

tag=cm$(($$ % 100000))
ns_a=$tag-a ns_b=$tag-b if_a=${tag}a if_b=${tag}b
net=10.213.77
addr_a=$net.1 addr_b=$net.2
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    # What the servers left in the namespaces (qperf's server outlives the shell that
    # started it; the uroce daemons `uroce run` started would linger a few seconds).
    netns_down "$ns_a" "$ns_b"
}
trap cleanup EXIT INT TERM
# MTU 1500, one queue each way.
netns_up "$ns_a" "$ns_b" "$if_a" "$if_b" "$net" 1500 1
# The IPv6 link-local addresses (the default GIDs, which fi-dgram and fi-rdm name) pass
# duplicate address detection first: over UDP the kernel drops packets to a tentative
# address (AF_XDP takes them before it looks).
for n in a b; do
    eval "ns=\$ns_$n if=\$if_$n"
    for _ in $(seq 50); do
        [ -z "$(ip -n "$ns" -6 addr show dev "$if" tentative)" ] && break
        sleep 0.1
    done
done
dev_a=uroce_$if_a dev_b=uroce_$if_b

# Runs CMD... in namespace a (client) or b (server) on uroce.
on_a() { ip netns exec "$ns_a" "$bin" run --backend "$backend" --iface "$if_a" -- "$@"; }
on_b() { ip netns exec "$ns_b" "$bin" run --backend "$backend" --iface "$if_b" -- "$@"; }

# Starts the server CMD... in namespace b, its output in $out/CASE.server.
server() { # CASE CMD...
    local c=$1; shift
    on_b "$@" >"$out/$c.server" 2>&1 &
    pids+=($!)
}
# Stops every server started.
stop_servers() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
row() { # CASE RESULT FIGURE DETAIL
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" | tee -a "$out/rows.tsv"
}
need() { # CASE COMMAND PACKAGE: a skip row and return 1 when COMMAND is missing
    command -v "$2" >/dev/null && return 0
    row "$1" skip - "$2 is missing (Debian package $3; scripts/setup.sh installs it)"
    return 1
}

case_qperf() { # CASE TEST
    need "$1" qperf qperf || return 0
    server "$1" qperf
    listening "$ns_b" 19765 || true
    local o
    if [[ $2 == rc_* ]]; then
        o=$(on_a timeout 30 qperf "$addr_b" -to 30 -cm1 -t 2 "$2" 2>&1) || true
    else
        o=$(on_a timeout 30 qperf "$addr_b" -to 30 -t 2 "$2" 2>&1) || true
    fi
    stop_servers
    echo "$o" >"$out/$1.client"
    local fig
    fig=$(echo "$o" | awk '/(bw|latency) +=/ {print $3, $4; exit}')
    if [[ $2 == rc_* ]]; then
        if [ -n "$fig" ]; then row "$1" pass "$fig" "qperf -cm1 -t 2 $2"
        else row "$1" fail - "$(echo "$o" | tail -1)"; fi
    elif echo "$o" | grep -qE "failed to (modify QP to RTR|create address handle)"; then
        row "$1" refused - "qperf sets no GRH outside -cm1: RoCE needs one (EINVAL, as rxe and mlx5)"
    else
        row "$1" fail "${fig:--}" "expected the RTR / AH refusal: $(echo "$o" | tail -1)"
    fi
}

case_ucx_info() {
    need ucx_info ucx_info ucx-utils || return 0
    local o
    o=$(on_a timeout 30 ucx_info -d 2>&1) || true
    echo "$o" >"$out/ucx_info.client"
    local tls
    tls=$(echo "$o" | awk -v d="$dev_a:1" '/Transport:/ {t=$3} /Device:/ && $3==d {print t}' | sort -u | tr '\n' ' ')
    if [[ $tls == *rc_verbs* && $tls == *ud_verbs* ]]; then
        row ucx_info pass "$tls" "ucx_info -d lists $dev_a:1"
    else
        row ucx_info fail "${tls:--}" "ucx_info -d lists no rc_verbs and ud_verbs on $dev_a:1"
    fi
}

case_ucx() { # CASE TEST TLS
    need "$1" ucx_perftest ucx-utils || return 0
    local env=(env "UCX_TLS=$3" "UCX_NET_DEVICES=$dev_b:1")
    server "$1" "${env[@]}" ucx_perftest -p 13337
    listening "$ns_b" 13337 || true
    local o size=65536 n=2000
    [[ $2 == *lat ]] && size=8 && n=5000
    [[ $3 == ud* ]] && [[ $2 == *bw ]] && size=4096
    o=$(on_a timeout 60 env "UCX_TLS=$3" "UCX_NET_DEVICES=$dev_a:1" \
        ucx_perftest "$addr_b" -p 13337 -t "$2" -s "$size" -n "$n" 2>&1) || true
    stop_servers
    echo "$o" >"$out/$1.client"
    # The final line: "Final: N lat.typical lat.avg lat.overall bw.avg MB/s bw.overall msgrate..."
    local fin
    fin=$(echo "$o" | awk '/Final:/ {print; exit}')
    if [ -z "$fin" ]; then
        row "$1" fail - "$(echo "$o" | grep -v '^ *$' | tail -1)"
    elif [[ $2 == *lat ]]; then
        row "$1" pass "$(echo "$fin" | awk '{print $3}') us" "ucx_perftest -t $2 -s $size, UCX_TLS=$3"
    else
        row "$1" pass "$(echo "$fin" | awk '{print $6}') MB/s" "ucx_perftest -t $2 -s $size, UCX_TLS=$3"
    fi
}

case_ompi() {
    need ompi-ucx mpirun openmpi-bin || return 0
    need ompi-ucx mpicc libopenmpi-dev || return 0
    cat >"$out/mpi_xchg.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
#include <string.h>
/* Rank 0 sends 1 MiB of one pattern, rank 1 checks it and sends another back: 100 times. */
static unsigned char buf[1 << 20];
int main(int argc, char **argv) {
    int rank, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double t = MPI_Wtime();
    for (int it = 0; it < 100; it++) {
        if (rank == 0) {
            for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + it);
            MPI_Send(buf, sizeof buf, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, sizeof buf, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < sizeof buf; i++) bad += buf[i] != (unsigned char)(i * 3 + it);
        } else {
            MPI_Recv(buf, sizeof buf, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < sizeof buf; i++) bad += buf[i] != (unsigned char)(i * 7 + it);
            for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 3 + it);
            MPI_Send(buf, sizeof buf, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    t = MPI_Wtime() - t;
    printf("rank %d bad %d MBps %.1f\n", rank, bad, 2.0 * 100 * sizeof buf / t / 1e6);
    MPI_Finalize();
    return bad != 0;
}
EOF
    mpicc -O2 -o "$out/mpi_xchg" "$out/mpi_xchg.c"
    # mpirun's launcher: `AGENT HOST CMD` runs CMD in the namespace that holds HOST, on uroce.
    cat >"$out/ns-agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in $addr_a) ns=$ns_a if=$if_a;; *) ns=$ns_b if=$if_b;; esac
exec ip netns exec \$ns $bin run --backend $backend --iface \$if -- sh -c "\$*"
EOF
    chmod +x "$out/ns-agent.sh"
    local o
    o=$(on_a timeout 120 mpirun --allow-run-as-root -np 2 --host "$addr_a,$addr_b" \
        --mca plm_rsh_agent "$out/ns-agent.sh" --mca oob_tcp_if_include "$addr_a/24" \
        --mca pml ucx --mca btl ^tcp,openib,uct -x UCX_TLS=rc_verbs,ud_verbs,self \
        -x UCX_NET_DEVICES=all "$out/mpi_xchg" 2>&1) || true
    echo "$o" >"$out/ompi-ucx.client"
    if echo "$o" | grep -q "rank 0 bad 0 " && echo "$o" | grep -q "rank 1 bad 0 "; then
        row ompi-ucx pass "$(echo "$o" | awk '/rank 0 bad 0/ {print $6; exit}') MB/s" \
            "mpirun -np 2 --mca pml ucx, UCX_TLS=rc_verbs,ud_verbs,self, 1 MiB x 100 checked"
    else
        row ompi-ucx fail - "$(echo "$o" | grep -v '^ *$' | tail -1)"
    fi
}

case_fi() { # CASE ENDPOINT
    need "$1" fi_pingpong libfabric-bin || return 0
    local prov=verbs size=4096
    [ "$2" = rdm ] && prov="verbs;ofi_rxm"
    # A datagram is one packet: the verbs provider offers FI_EP_DGRAM messages up to the
    # port's active MTU, 1024 over an Ethernet MTU of 1500 on any RoCE device (and
    # fi_pingpong -e dgram asks max_msg_size = -S).
    [ "$2" = dgram ] && size=1024
    server "$1" fi_pingpong -p "$prov" -e "$2" -I 1000 -S $size -P 47592
    listening "$ns_b" 47592 || true
    local o
    o=$(on_a timeout 60 fi_pingpong -p "$prov" -e "$2" -I 1000 -S $size -P 47592 "$addr_b" 2>&1) || true
    stop_servers
    echo "$o" >"$out/$1.client"
    # fi_pingpong's result line: "bytes iters total time MB/sec usec/xfer Mxfers/sec"
    local res
    res=$(echo "$o" | awk '$2 == "1k" || $2 == "1000" {print; exit}')
    if [ -n "$res" ]; then
        row "$1" pass "$(echo "$res" | awk '{print $7}') us/xfer" "fi_pingpong -p \"$prov\" -e $2 -S $size -I 1000"
    else
        row "$1" fail - "$(echo "$o" | grep -v '^ *$' | tail -1)"
    fi
}

case_pyverbs() {
    # Debian's python3-pyverbs is for the distro's interpreter, whatever else is on PATH.
    local py=python3
    [ -x /usr/bin/python3 ] && py=/usr/bin/python3
    if ! $py -c 'import pyverbs' 2>/dev/null; then
        row pyverbs skip - "python3 cannot import pyverbs (Debian package python3-pyverbs; scripts/setup.sh)"
        return 0
    fi
    cat >"$out/pyverbs_smoke.py" <<'EOF'
import sys
import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QPCap, QPInitAttr, QP
devs = d.get_device_list()
name = sys.argv[1]
dev = [x for x in devs if x.name.decode() == name]
assert dev, f"no {name} among {[x.name for x in devs]}"
with d.Context(name=name) as ctx:
    attr = ctx.query_device()
    assert attr.vendor_id != 0, "vendor_id is 0"
    port = ctx.query_port(1)
    assert port.state == e.IBV_PORT_ACTIVE
    gids = ctx.query_gid_table(16)
    assert len(gids) >= 1, "empty GID table"
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    print(f"gids {len(gids)} qpn {qp.qp_num:#x} vendor {attr.vendor_id:#x}")
EOF
    local o
    o=$(on_a timeout 30 $py "$out/pyverbs_smoke.py" "$dev_a" 2>&1) || true
    echo "$o" >"$out/pyverbs.client"
    if echo "$o" | grep -q '^gids '; then
        row pyverbs pass "$(echo "$o" | grep '^gids ')" "device, port, ibv_query_gid_table, PD, CQ, UD QP"
    else
        row pyverbs fail - "$(echo "$o" | grep -v '^ *$' | tail -1)"
    fi
}

case_rdma_core_tests() {
    local dir=${RDMA_CORE_TESTS:-}
    if [ -z "$dir" ] || [ ! -f "$dir/run_tests.py" ]; then
        row rdma-core-tests skip - "RDMA_CORE_TESTS names no rdma-core tests/ directory (its source is in no registry here)"
        return 0
    fi
    local py=python3
    [ -x /usr/bin/python3 ] && py=/usr/bin/python3
    local o
    o=$(cd "$dir" && on_a timeout 900 $py run_tests.py --dev "$dev_a" -v 2>&1) || true
    echo "$o" >"$out/rdma-core-tests.client"
    # unittest's summary: "Ran N tests" and "OK (skipped=S)" or "FAILED (failures=F,
    # errors=E, skipped=S)"; what is neither failed nor skipped passed.
    local ran skipped failed ok
    ran=$(echo "$o" | awk '/^Ran [0-9]+ tests/ {print $2}')
    skipped=$(echo "$o" | { grep -oE 'skipped=[0-9]+' || true; } | tail -1 | cut -d= -f2)
    failed=$(echo "$o" | { grep -oE '(failures|errors)=[0-9]+' || true; } | cut -d= -f2 | awk '{s+=$1} END {print s+0}')
    skipped=${skipped:-0}
    ok=$(( ${ran:-0} - failed - skipped ))
    if [ -z "$ran" ]; then
        row rdma-core-tests fail - "the suite did not finish: $(echo "$o" | grep -v '^ *$' | tail -1)"
    elif [ "$failed" -eq 0 ]; then
        row rdma-core-tests pass "$ok pass, $skipped skip of $ran" "run_tests.py --dev $dev_a"
    else
        row rdma-core-tests fail "$ok pass, $failed fail, $skipped skip of $ran" \
            "$(echo "$o" | grep -E '^(FAIL|ERROR):' | head -3 | tr '\n' ' ')"
    fi
}

: >"$out/rows.tsv"
for c in $cases; do
    case $c in
        qperf-*) case_qperf "$c" "${c#qperf-}" ;;
        ucx_info) case_ucx_info ;;
        ucx-tag_bw-rc) case_ucx "$c" tag_bw rc_verbs,ud_verbs ;;
        ucx-tag_lat-rc) case_ucx "$c" tag_lat rc_verbs,ud_verbs ;;
        ucx-tag_bw-ud) case_ucx "$c" tag_bw ud_verbs ;;
        ucx-tag_lat-ud) case_ucx "$c" tag_lat ud_verbs ;;
        ompi-ucx) case_ompi ;;
        fi-msg) case_fi "$c" msg ;;
        fi-dgram) case_fi "$c" dgram ;;
        fi-rdm) case_fi "$c" rdm ;;
        pyverbs) case_pyverbs ;;
        rdma-core-tests) case_rdma_core_tests ;;
        *) echo "compat-matrix.sh: unknown case $c" >&2; exit 2 ;;
    esac
    stop_servers
done

if [ $markdown -eq 1 ]; then
    echo
    echo "| case | result | figure | what ran |"
    echo "|---|---|---|---|"
    awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}' "$out/rows.tsv"
fi
if grep -qP '\tfail\t' "$out/rows.tsv"; then exit 1; fi
exit 0
