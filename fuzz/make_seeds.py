#!/usr/bin/env python3
"""Regenerates the seed corpus in fuzz/corpus/<target>/ from the rxe captures in
tests/data/*.pcap. Standard library only; deterministic; run from anywhere:

    python3 fuzz/make_seeds.py

Every file it writes is named `seed_...` (the top-level .gitignore ignores corpus files
whose name starts with a hex digit, which is what libFuzzer names the inputs it finds).
Before writing, it deletes the `seed_*` files of each target directory, so renamed seeds
do not linger; any other file there is left alone.

Seeds:
  frame        one Ethernet frame per distinct BTH opcode in the captures (first
               occurrence, files in name order), plus a TCP SYN and a TCP data frame
               (the out-of-band QP exchange on port 18515)
  ip_packet    the same frames without their 14-byte Ethernet header
  pcap         rdma_cm.pcap's first 3 frames (CM REQ, REP, RTU);
               ib_atomic_bw.pcap cut after the first ATOMIC ACKNOWLEDGE (TCP exchange,
               FETCH_ADD and ATOMIC ACKNOWLEDGE frames, under 4 KiB), and a small pcapng
               built here (SHB, IDB, EPB, SPB) holding one frame of each atomic opcode
  mad          the 256-byte MAD of the first UD SEND to QP 1 of each CM message kind in
               rdma_cm.pcap (REQ over IPv4 and over IPv6 counted apart), and a REQ cut
               inside its fixed fields
  cm           scripts for uroce::fuzzing::cm (one-byte operations, see there): a
               connection made, used and torn down; a simultaneous connect; the same with its REQ and REP lost
               and retried; a SIDR exchange; rxe's REQ (IPv4, IPv6, to a port nobody
               listens on) and SIDR_REQ handed to the listening side and answered; a
               MAD cut short
  hdr_*        the header's bytes sliced out of real frames (layout: Ethernet 14,
               IPv4 20, UDP 8, BTH 12 at offset 42, extension headers from 54), without
               the selector byte, which the hdr_* targets prepend. The captures hold no
               IPv6 header, GRH, 802.1Q tag or ImmDt; those seeds are built from a real
               frame's fields and say `built` in their name.
"""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "crates", "uroce", "tests", "data")
# Captures made for the MAD / CM decoder; only the `mad` seeds come from them, so the
# other targets' seeds stay what they were.
CM_CAPTURES = {"rdma_cm.pcap", "rnr_nak.pcap"}
CORPUS = os.path.join(HERE, "corpus")

ETH_LEN, IPV4_LEN, UDP_LEN, BTH_LEN = 14, 20, 8, 12
IP_AT = ETH_LEN
UDP_AT = IP_AT + IPV4_LEN
BTH_AT = UDP_AT + UDP_LEN  # 42
EXT_AT = BTH_AT + BTH_LEN  # 54
ROCE_PORT = 4791
PCAP_LIMIT = 4096

EXT_LEN = {"deth": 8, "reth": 16, "atomic_eth": 28, "aeth": 4, "atomic_ack_eth": 8, "immdt": 4}

# The opcodes the captures hold (and their neighbours), with their extension headers in
# wire order. An opcode missing here still gets a frame seed, named by its number.
OPCODES = {
    0x00: ("rc_send_first", []),
    0x01: ("rc_send_middle", []),
    0x02: ("rc_send_last", []),
    0x03: ("rc_send_last_with_immediate", ["immdt"]),
    0x04: ("rc_send_only", []),
    0x05: ("rc_send_only_with_immediate", ["immdt"]),
    0x06: ("rc_rdma_write_first", ["reth"]),
    0x07: ("rc_rdma_write_middle", []),
    0x08: ("rc_rdma_write_last", []),
    0x0A: ("rc_rdma_write_only", ["reth"]),
    0x0C: ("rc_rdma_read_request", ["reth"]),
    0x0D: ("rc_rdma_read_response_first", ["aeth"]),
    0x0E: ("rc_rdma_read_response_middle", []),
    0x0F: ("rc_rdma_read_response_last", ["aeth"]),
    0x10: ("rc_rdma_read_response_only", ["aeth"]),
    0x11: ("rc_acknowledge", ["aeth"]),
    0x12: ("rc_atomic_acknowledge", ["aeth", "atomic_ack_eth"]),
    0x13: ("rc_compare_swap", ["atomic_eth"]),
    0x14: ("rc_fetch_add", ["atomic_eth"]),
    0x64: ("ud_send_only", ["deth"]),
    0x65: ("ud_send_only_with_immediate", ["deth", "immdt"]),
}

TARGETS = [
    "frame",
    "ip_packet",
    "pcap",
    "hdr_ethernet",
    "hdr_ipv4",
    "hdr_ipv6",
    "hdr_udp",
    "hdr_bth",
    "hdr_reth",
    "hdr_aeth",
    "hdr_deth",
    "hdr_atomic_eth",
    "hdr_atomic_ack_eth",
    "hdr_grh",
    "hdr_immdt",
    "mad",
    "cm",
]


def read_pcap(path):
    """Returns (file header bytes, [(record header bytes, frame bytes)]) of a classic
    little-endian pcap file."""
    with open(path, "rb") as f:
        d = f.read()
    magic = struct.unpack_from("<I", d, 0)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit(f"{path}: expected a little-endian pcap file, magic {magic:#010x}")
    linktype = struct.unpack_from("<I", d, 20)[0]
    if linktype != 1:
        sys.exit(f"{path}: expected Ethernet link type, got {linktype}")
    records, pos = [], 24
    while pos < len(d):
        incl = struct.unpack_from("<I", d, pos + 8)[0]
        records.append((d[pos : pos + 16], d[pos + 16 : pos + 16 + incl]))
        pos += 16 + incl
    return d[:24], records


def is_roce(f):
    return (
        len(f) >= EXT_AT
        and f[12:14] == b"\x08\x00"
        and f[IP_AT] == 0x45
        and f[IP_AT + 9] == 17
        and struct.unpack_from(">H", f, UDP_AT + 2)[0] == ROCE_PORT
    )


def is_tcp(f):
    return len(f) >= 54 and f[12:14] == b"\x08\x00" and f[IP_AT + 9] == 6


def tcp_payload_len(f):
    ihl = (f[IP_AT] & 0x0F) * 4
    total = struct.unpack_from(">H", f, IP_AT + 2)[0]
    doff = (f[IP_AT + ihl + 12] >> 4) * 4
    return total - ihl - doff


def ext_headers(f):
    """{header name: bytes} for the extension headers of a RoCE frame."""
    _, hdrs = OPCODES.get(f[BTH_AT], (None, []))
    out, at = {}, EXT_AT
    for h in hdrs:
        out[h] = f[at : at + EXT_LEN[h]]
        at += EXT_LEN[h]
    return out


def op_name(op):
    return OPCODES[op][0] if op in OPCODES else f"opcode_{op:#04x}"


def ipv4_mapped(addr4):
    return b"\x00" * 10 + b"\xff\xff" + addr4


def ipv6_like_header(f, next_header):
    """A 40-byte IPv6 header (or GRH, same layout) carrying a real IPv4 frame's fields:
    traffic class = TOS, payload length = UDP length, hop limit = TTL, IPv4-mapped
    source and destination (the RoCEv2 GIDs of IPv4 peers)."""
    ip = f[IP_AT : IP_AT + IPV4_LEN]
    tos, ttl = ip[1], ip[8]
    udp_len = struct.unpack_from(">H", f, UDP_AT + 4)[0]
    w0 = (6 << 28) | (tos << 20)
    return (
        struct.pack(">IHBB", w0, udp_len, next_header, ttl)
        + ipv4_mapped(ip[12:16])
        + ipv4_mapped(ip[16:20])
    )


def pcapng(frames):
    """A little-endian pcapng file: section header, one Ethernet interface, the first
    frame as an enhanced packet block, the others as simple packet blocks."""

    def block(btype, body):
        body += b"\x00" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 262144))
    for i, (rec, f) in enumerate(frames):
        if i == 0:
            sec, usec = struct.unpack_from("<II", rec, 0)
            ts = sec * 1_000_000 + usec
            body = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(f), len(f)) + f
            out += block(6, body)
        else:
            out += block(3, struct.pack("<I", len(f)) + f)
    return out


def main():
    captures = sorted(
        n for n in os.listdir(DATA) if n.endswith(".pcap") and n not in CM_CAPTURES
    )
    seeds = {t: {} for t in TARGETS}

    def add(target, name, data):
        name = "seed_" + name
        if name in seeds[target] and seeds[target][name] != data:
            sys.exit(f"two different seeds named {target}/{name}")
        seeds[target][name] = bytes(data)

    by_opcode = {}  # opcode -> (capture, record, frame), first occurrence
    tcp = {}
    for cap in captures:
        _, records = read_pcap(os.path.join(DATA, cap))
        for rec, f in records:
            if is_roce(f):
                by_opcode.setdefault(f[BTH_AT], (cap, rec, f))
            elif is_tcp(f):
                flags = f[IP_AT + (f[IP_AT] & 0x0F) * 4 + 13]
                if flags & 0x02 and not flags & 0x10:
                    tcp.setdefault("tcp_syn", f)
                elif tcp_payload_len(f) > 0:
                    tcp.setdefault("tcp_data", f)

    for op in sorted(by_opcode):
        _, _, f = by_opcode[op]
        name = op_name(op)
        add("frame", name, f)
        add("ip_packet", name, f[IP_AT:])
        add("hdr_bth", name, f[BTH_AT : BTH_AT + BTH_LEN])
        for h, b in ext_headers(f).items():
            add("hdr_" + h, f"{h}_from_{name}", b)
    for name, f in sorted(tcp.items()):
        add("frame", name, f)
        add("ip_packet", name, f[IP_AT:])
        add("hdr_ipv4", f"ipv4_from_{name}", f[IP_AT : IP_AT + IPV4_LEN])

    # Plain headers from one RC SEND ONLY frame (or whatever RoCE frame comes first).
    ref_op = 0x04 if 0x04 in by_opcode else min(by_opcode)
    ref = by_opcode[ref_op][2]
    ref_name = op_name(ref_op)
    add("hdr_ethernet", f"ethernet_from_{ref_name}", ref[:ETH_LEN])
    add(
        "hdr_ethernet",
        f"ethernet_vlan_built_from_{ref_name}",
        ref[:12] + b"\x81\x00\x60\x05" + ref[12:ETH_LEN],  # PCP 3, VID 5
    )
    add("hdr_ipv4", f"ipv4_from_{ref_name}", ref[IP_AT : IP_AT + IPV4_LEN])
    add("hdr_udp", f"udp_from_{ref_name}", ref[UDP_AT : UDP_AT + UDP_LEN])
    add("hdr_ipv6", f"ipv6_built_from_{ref_name}", ipv6_like_header(ref, 17))
    add("hdr_grh", f"grh_built_from_{ref_name}", ipv6_like_header(ref, 0x1B))
    # No capture has immediate data; the 4 bytes where SEND ONLY WITH IMMEDIATE would
    # carry its ImmDt stand in.
    add("hdr_immdt", f"immdt_built_from_{ref_name}", ref[EXT_AT : EXT_AT + 4])

    # The smallest capture, cut after its first ATOMIC ACKNOWLEDGE.
    head, records = read_pcap(os.path.join(DATA, "ib_atomic_bw.pcap"))
    cut = next(i for i, (_, f) in enumerate(records) if is_roce(f) and f[BTH_AT] == 0x12)
    kept = records[: cut + 1]
    small = head + b"".join(r + f for r, f in kept)
    if len(small) > PCAP_LIMIT:
        sys.exit(f"truncated ib_atomic_bw.pcap is {len(small)} bytes")
    add("pcap", f"ib_atomic_bw_first_{len(kept)}_frames", small)
    atomics = [next((r, f) for r, f in records if is_roce(f) and f[BTH_AT] == op) for op in (0x14, 0x12)]
    add("pcap", "pcapng_epb_spb_fetch_add_atomic_ack", pcapng(atomics))

    # MADs: UD SEND ONLY (0x64) to QP 1, payload after BTH + DETH.
    cm_names = {0x10: "req", 0x11: "mra", 0x12: "rej", 0x13: "rep", 0x14: "rtu", 0x15: "dreq",
                0x16: "drep", 0x17: "sidr_req", 0x18: "sidr_rep", 0x19: "lap", 0x1A: "apr"}
    _, records = read_pcap(os.path.join(DATA, "rdma_cm.pcap"))
    for _, f in records:
        ethertype = f[12:14]
        if ethertype == b"\x08\x00":
            bth = IP_AT + (f[IP_AT] & 0x0F) * 4 + UDP_LEN
            ipv = "ipv4"
        elif ethertype == b"\x86\xdd":
            bth = IP_AT + 40 + UDP_LEN
            ipv = "ipv6"
        else:
            continue
        if f[bth] != 0x64 or f[bth + 5 : bth + 8] != b"\x00\x00\x01":
            continue
        m = f[bth + BTH_LEN + 8 : bth + BTH_LEN + 8 + 256]
        attr = struct.unpack_from(">H", m, 16)[0]
        name = "cm_" + cm_names.get(attr, f"attr_{attr:04x}")
        if attr in (0x10, 0x17):
            name += "_" + ipv
        if "seed_" + name not in seeds["mad"]:
            add("mad", name, m)
    add("mad", "cm_req_cut_in_fixed_fields", seeds["mad"]["seed_cm_req_ipv4"][: 24 + 100])
    # The connection manager's scripts (see uroce::fuzzing::cm for the operations:
    # 0/1 a MAD to B/A, 2 time, 3 A connects (bit 7: SIDR), 4 A acts, 5 B acts,
    # 7 deliver with a drop mask; acts: 0 accept 1 reject 2 MRA 3 RTU 4 disconnect
    # 5 SIDR reply 6 QP attributes 7 destroy).
    add("cm", "connect_rtu_disconnect",
        [3, 0x00, 7, 0, 5, 6, 0, 5, 0, 0, 7, 0, 4, 6, 0, 4, 3, 0, 7, 0, 4, 4, 0, 7, 0, 2, 0xFF])
    add("cm", "req_and_rep_lost",
        [3, 0x19, 7, 0xFF, 2, 0x40, 7, 0, 5, 0, 0, 7, 0x01, 2, 0x40, 7, 0, 4, 3, 0, 7, 0,
         5, 4, 0, 7, 0x01, 2, 0x40, 7, 0, 2, 0xFF])
    add("cm", "sidr", [3, 0x80, 7, 0, 5, 5, 0, 7, 0, 3, 0x81, 7, 0, 3, 0x93, 7, 0xFF, 2, 0xFF, 2, 0xFF])
    add("cm", "simultaneous_connect", [3, 0x04, 3, 0x40, 7, 0, 5, 0, 0, 4, 0, 0, 7, 0, 4, 3, 0, 5, 3, 0, 7, 0])
    add("cm", "reject_and_mra", [3, 0x00, 7, 0, 5, 2, 0, 7, 0, 5, 1 | (10 << 3), 0, 7, 0])
    for name in ("req_ipv4", "req_ipv6", "sidr_req_ipv4"):
        add("cm", "rxe_" + name, b"\x00" + seeds["mad"]["seed_cm_" + name] + bytes([5, 0, 0, 5, 5, 0, 7, 0]))
    add("cm", "rxe_rep_rtu_dreq_to_known_ids",
        b"\x00" + seeds["mad"]["seed_cm_req_ipv4"] + bytes([5, 0, 0])
        + b"\x80" + seeds["mad"]["seed_cm_rtu"] + b"\x80" + seeds["mad"]["seed_cm_dreq"] + bytes([7, 0]))
    add("cm", "short_mad", b"\x40" + seeds["mad"]["seed_cm_rej"][:30])
    # The decoder over a CM exchange: rdma_cm.pcap's REQ, REP and RTU.
    head, records = read_pcap(os.path.join(DATA, "rdma_cm.pcap"))
    add("pcap", "rdma_cm_req_rep_rtu", head + b"".join(r + f for r, f in records[:3]))

    total = 0
    for target, files in seeds.items():
        if not files:
            sys.exit(f"no seed for {target}")
        d = os.path.join(CORPUS, target)
        os.makedirs(d, exist_ok=True)
        for old in os.listdir(d):
            if old.startswith("seed_"):
                os.remove(os.path.join(d, old))
        for name, data in sorted(files.items()):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            total += len(data)
        print(f"{target:20} {len(files):3} seeds")
    print(f"{sum(map(len, seeds.values()))} seeds, {total} bytes")


if __name__ == "__main__":
    main()
