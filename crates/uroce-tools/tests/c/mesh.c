/*
 * mesh: many RC QPs between many processes on two sides, every byte checked.
 *
 *   mesh --side A|B --rank R --ranks P --qps Q --dir DIR --iters N
 *        [--size BYTES] [--gid-index I] [--timeout SECS]
 *        [--die-after K] [--tolerate-dead-peer]
 *
 * Side A rank R, QP j is connected to side B rank (R + j) % P, QP j (so side B rank S,
 * QP j talks to side A rank (S - j) mod P, QP j): with Q <= P every process talks to Q
 * different processes of the other side.
 *
 * Out of band, through files in DIR (written to a temporary name, then renamed):
 *   DIR/<side>-<rank>.info   QPN, PSN, GID, rkey and buffer addresses of each QP
 *   DIR/<side>-<rank>.ready  every QP of the process is ready to send (RTS)
 *   DIR/<side>-<rank>.done   the process completed its iterations (its last ACKs are out)
 *
 * Each iteration i of QP j, on both sides at once:
 *   1. RDMA WRITE pattern(me, j, i) into slot i % 2 of the peer's "in" buffer, and
 *      RDMA READ the peer's "own" buffer (pattern(peer, j, OWN)), checked byte for byte;
 *   2. once both completed, SEND a message (header + pattern) telling the peer that the
 *      WRITE is there; the peer checks the message and then the written slot.
 * A slot is written again (iteration i + 2) only after the peer received SEND(i + 1),
 * which this side posts only after it checked slot i: no check races a WRITE.
 *
 * Every wait is bounded (--timeout, default 60 s without progress on a QP). A failure
 * says what failed on stderr and exits 1. --die-after K: SIGKILL itself once QP 0 has
 * completed K iterations. --tolerate-dead-peer: a QP whose peer process is gone (its
 * requests exhausted their retries; the peer's pid no longer runs) is reported dead and
 * the run still succeeds if every other QP completed. Idle QPs then probe their peer with
 * a small RDMA WRITE every second, so that a peer that died while this side was waiting
 * for its SEND is noticed too. The QPs retry 6 times (7 would retry for ever) after a
 * local ACK timeout of 4.096 us x 2^16 (268 ms): a dead peer is noticed in about 2 s.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define MSG_SIZE 256
#define NRECV 4
#define SQ_DEPTH 8
#define PROBE_SIZE 64
#define MAGIC 0x4d455348u /* "MESH" */
#define OWN_ITER 0xffffffffu
#define MSG_SALT 0x5eed5eedu

enum op { OP_WRITE = 1, OP_READ, OP_SEND, OP_PROBE, OP_RECV };

struct remote {
    uint32_t qpn, psn, rkey;
    uint64_t in, own, probe;
};

struct qpst {
    struct ibv_qp *qp;
    int peer_rank;
    uint32_t psn;
    struct remote r;
    char *in, *own, *src, *rd, *probe, *probe_src, *recv, *send;
    uint32_t iter;     /* iteration in progress (== iters when all are done) */
    int write_done, read_done, send_posted, send_done;
    uint32_t received; /* SENDs received and checked */
    int probe_out;
    int peer_done;     /* the peer's done file was seen */
    int dead;          /* the peer process died */
    char dead_why[160];
    double last_progress, last_probe;
};

static struct {
    char side, peer_side;
    int rank, ranks, qps, gid_index, die_after, tolerate;
    uint32_t iters;
    size_t size;
    const char *dir;
    double timeout;
} cfg = {.gid_index = -1, .die_after = -1, .size = 16384, .timeout = 60};

static struct qpst *qs;
static uint64_t bytes_verified;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mesh %c/%d: ", cfg.side, cfg.rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void nap(long us) {
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

/* ---- patterns ---- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t seed_of(char side, int rank, int qp, uint32_t iter) {
    return mix(((uint64_t)(uint8_t)side << 56) ^ ((uint64_t)rank << 40) ^ ((uint64_t)qp << 32) ^
               iter);
}

static void fill(char *buf, size_t len, uint64_t seed) {
    for (size_t k = 0; k < len; k += 8) {
        uint64_t w = mix(seed ^ (k / 8));
        size_t n = len - k < 8 ? len - k : 8;
        memcpy(buf + k, &w, n);
    }
}

/* Checks `buf` against the pattern of `seed`; on a mismatch says where and fails. */
static void check(const char *what, int q, uint32_t iter, const char *buf, size_t len,
                  uint64_t seed) {
    char want[64];
    for (size_t k = 0; k < len; k += 8) {
        uint64_t w = mix(seed ^ (k / 8));
        size_t n = len - k < 8 ? len - k : 8;
        if (memcmp(buf + k, &w, n) == 0)
            continue;
        memcpy(want, &w, n);
        size_t off = k;
        while (buf[off] == want[off - k])
            off++;
        size_t bad = 0;
        for (size_t m = 0; m < len; m++) {
            uint64_t wm = mix(seed ^ (m / 8));
            if ((uint8_t)buf[m] != (uint8_t)(wm >> ((m % 8) * 8)))
                bad++;
        }
        fail("%s on QP %d (peer %c/%d, iteration %" PRIu32 "): byte %zu of %zu is 0x%02x, "
             "expected 0x%02x (%zu bytes differ)",
             what, q, cfg.peer_side, qs[q].peer_rank, iter, off, len,
             (uint8_t)buf[off], (uint8_t)want[off - k], bad);
    }
    bytes_verified += len;
}

/* ---- out-of-band files ---- */

static void path_of(char *out, size_t n, char side, int rank, const char *kind) {
    snprintf(out, n, "%s/%c-%d.%s", cfg.dir, side, rank, kind);
}

static void publish(const char *kind, const char *text) {
    char tmp[4160], fin[4096];
    path_of(fin, sizeof fin, cfg.side, cfg.rank, kind);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", fin, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        fail("creating %s: %s", tmp, strerror(errno));
    if (fputs(text, f) < 0 || fclose(f) != 0)
        fail("writing %s: %s", tmp, strerror(errno));
    if (rename(tmp, fin) != 0)
        fail("renaming %s to %s: %s", tmp, fin, strerror(errno));
}

static int exists(char side, int rank, const char *kind) {
    char p[4096];
    struct stat st;
    path_of(p, sizeof p, side, rank, kind);
    return stat(p, &st) == 0;
}

/* Waits for the `kind` file of every peer process (at most cfg.timeout seconds). */
static void wait_peers(const char *kind) {
    double deadline = now() + cfg.timeout;
    for (int q = 0; q < cfg.qps; q++) {
        while (!exists(cfg.peer_side, qs[q].peer_rank, kind)) {
            if (now() > deadline)
                fail("timed out after %.0f s waiting for %s/%c-%d.%s (the peer of QP %d)",
                     cfg.timeout, cfg.dir, cfg.peer_side, qs[q].peer_rank, kind, q);
            nap(5000);
        }
    }
}

/* The pid a peer wrote in its info file, or -1. */
static long peer_pid(int rank) {
    char p[4096];
    long pid = -1;
    path_of(p, sizeof p, cfg.peer_side, rank, "info");
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "pid %ld", &pid) == 1)
            break;
    fclose(f);
    return pid;
}

/* Whether process `pid` has ended (gone, or a zombie not yet reaped). */
static int pid_ended(long pid) {
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close_paren = strrchr(buf, ')');
    return !close_paren || close_paren[1] != ' ' || close_paren[2] == 'Z' ||
           close_paren[2] == 'X';
}

/* ---- verbs ---- */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static union ibv_gid my_gid;
static enum ibv_mtu my_mtu;

static int is_ipv4_mapped(const union ibv_gid *g) {
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g->raw, prefix, 12) == 0;
}

/* The GID index holding the interface's IPv4 address as a RoCE v2 GID (::ffff:a.b.c.d). */
static int find_gid(int tbl_len) {
    int fallback = -1;
    for (int i = 0; i < tbl_len; i++) {
        union ibv_gid g;
        if (ibv_query_gid(ctx, 1, i, &g) != 0 || !is_ipv4_mapped(&g))
            continue;
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, 1, i, &e, 0) == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2)
            return i;
        if (fallback < 0)
            fallback = i;
    }
    return fallback;
}

static void gid_text(const union ibv_gid *g, char *out) {
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static const char *mtu_text(enum ibv_mtu m) {
    static char b[16];
    snprintf(b, sizeof b, "%d", 128 << m);
    return b;
}

static void post_recv(int q, int slot) {
    struct ibv_sge sge = {(uintptr_t)(qs[q].recv + slot * MSG_SIZE), MSG_SIZE, mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = ((uint64_t)q << 16) | (slot << 8) | OP_RECV,
                             .sg_list = &sge,
                             .num_sge = 1},
                       *bad;
    int e = ibv_post_recv(qs[q].qp, &wr, &bad);
    if (e)
        fail("ibv_post_recv on QP %d: %s", q, strerror(e));
}

static void post_send(int q, enum ibv_wr_opcode opc, enum op what, char *local, size_t len,
                      uint64_t raddr) {
    struct ibv_sge sge = {(uintptr_t)local, (uint32_t)len, mr->lkey};
    struct ibv_send_wr wr = {.wr_id = ((uint64_t)q << 16) | what,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = opc,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (opc != IBV_WR_SEND) {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = qs[q].r.rkey;
    }
    int e = ibv_post_send(qs[q].qp, &wr, &bad);
    if (e)
        fail("ibv_post_send (%s) on QP %d (peer %c/%d): %s",
             what == OP_WRITE ? "WRITE" : what == OP_READ ? "READ" : what == OP_SEND ? "SEND"
                                                                                     : "probe",
             q, cfg.peer_side, qs[q].peer_rank, strerror(e));
}

static void start_iteration(int q) {
    struct qpst *s = &qs[q];
    s->write_done = s->read_done = s->send_posted = s->send_done = 0;
    fill(s->src, cfg.size, seed_of(cfg.side, cfg.rank, q, s->iter));
    memset(s->rd, 0, cfg.size);
    post_send(q, IBV_WR_RDMA_WRITE, OP_WRITE, s->src, cfg.size,
              s->r.in + (s->iter % 2) * cfg.size);
    post_send(q, IBV_WR_RDMA_READ, OP_READ, s->rd, cfg.size, s->r.own);
}

struct msg_head {
    uint32_t magic, iter;
    uint16_t rank, qp;
    uint8_t side, pad[3];
};

static void maybe_send(int q) {
    struct qpst *s = &qs[q];
    if (s->send_posted || !s->write_done || !s->read_done)
        return;
    struct msg_head h = {.magic = MAGIC, .iter = s->iter, .rank = cfg.rank, .qp = q,
                         .side = cfg.side};
    memcpy(s->send, &h, sizeof h);
    fill(s->send + sizeof h, MSG_SIZE - sizeof h,
         seed_of(cfg.side, cfg.rank, q, s->iter) ^ MSG_SALT);
    post_send(q, IBV_WR_SEND, OP_SEND, s->send, MSG_SIZE, 0);
    s->send_posted = 1;
}

static void on_recv(int q, int slot, uint32_t len) {
    struct qpst *s = &qs[q];
    char *m = s->recv + slot * MSG_SIZE;
    struct msg_head h;
    uint32_t want = s->received;
    if (len != MSG_SIZE)
        fail("QP %d (peer %c/%d): received %u bytes, expected %d", q, cfg.peer_side,
             s->peer_rank, len, MSG_SIZE);
    memcpy(&h, m, sizeof h);
    if (h.magic != MAGIC || h.side != (uint8_t)cfg.peer_side || h.rank != s->peer_rank ||
        h.qp != q || h.iter != want)
        fail("QP %d: received a message from %c/%d QP %u iteration %u (magic 0x%08x), expected "
             "one from %c/%d QP %d iteration %u",
             q, h.side, h.rank, h.qp, h.iter, h.magic, cfg.peer_side, s->peer_rank, q, want);
    check("SEND payload", q, want, m + sizeof h, MSG_SIZE - sizeof h,
          seed_of(cfg.peer_side, s->peer_rank, q, want) ^ MSG_SALT);
    /* The peer's WRITE of this iteration completed before it sent this. */
    char *in = s->in + (want % 2) * cfg.size;
    check("RDMA WRITE data", q, want, in, cfg.size, seed_of(cfg.peer_side, s->peer_rank, q, want));
    memset(in, 0, cfg.size);
    s->received++;
    post_recv(q, slot);
}

static const char *op_name(int op) {
    switch (op) {
    case OP_WRITE: return "RDMA WRITE";
    case OP_READ: return "RDMA READ";
    case OP_SEND: return "SEND";
    case OP_PROBE: return "probe WRITE";
    case OP_RECV: return "receive";
    }
    return "?";
}

static int finished(const struct qpst *s) {
    return s->dead || (s->iter == cfg.iters && s->peer_done);
}

static void on_error(int q, const struct ibv_wc *wc, int op) {
    struct qpst *s = &qs[q];
    if (s->dead)
        return; /* the flush of what was posted once the peer was found dead */
    if (s->peer_done)
        return; /* the peer finished and exited: a probe it left unanswered, its flush */
    const char *st = ibv_wc_status_str(wc->status);
    if (cfg.tolerate && (wc->status == IBV_WC_RETRY_EXC_ERR ||
                         wc->status == IBV_WC_RNR_RETRY_EXC_ERR ||
                         wc->status == IBV_WC_WR_FLUSH_ERR)) {
        long pid = peer_pid(s->peer_rank);
        /* The peer was killed moments ago: give it a moment to be seen as ended. */
        for (int i = 0; i < 200 && pid > 0 && !pid_ended(pid); i++)
            nap(10000);
        if (pid > 0 && pid_ended(pid)) {
            s->dead = 1;
            snprintf(s->dead_why, sizeof s->dead_why, "%c/%d (pid %ld) on QP %d: %s of %s",
                     cfg.peer_side, s->peer_rank, pid, q, st, op_name(op));
            fprintf(stderr, "mesh %c/%d: peer %s: dead, carrying on\n", cfg.side, cfg.rank,
                    s->dead_why);
            return;
        }
        fail("%s on QP %d (peer %c/%d, pid %ld, still running; iteration %u): %s", op_name(op),
             q, cfg.peer_side, s->peer_rank, pid, s->iter, st);
    }
    fail("%s on QP %d (peer %c/%d, qpn %u; iteration %u of %u): completion status %d, %s",
         op_name(op), q, cfg.peer_side, s->peer_rank, s->r.qpn, s->iter, cfg.iters,
         wc->status, st);
}

static void on_wc(const struct ibv_wc *wc) {
    int q = (int)(wc->wr_id >> 16), slot = (wc->wr_id >> 8) & 0xff, op = wc->wr_id & 0xff;
    if (q < 0 || q >= cfg.qps)
        fail("a completion with an unknown wr_id 0x%" PRIx64, wc->wr_id);
    struct qpst *s = &qs[q];
    if (wc->status != IBV_WC_SUCCESS) {
        on_error(q, wc, op);
        return;
    }
    if (s->dead)
        return;
    double t = now();
    switch (op) {
    case OP_WRITE:
        s->write_done = 1;
        break;
    case OP_READ:
        check("RDMA READ data", q, s->iter, s->rd, cfg.size,
              seed_of(cfg.peer_side, s->peer_rank, q, OWN_ITER));
        s->read_done = 1;
        break;
    case OP_SEND:
        s->send_done = 1;
        break;
    case OP_PROBE:
        s->probe_out = 0;
        return; /* not progress: a live but stuck peer still times out */
    case OP_RECV:
        on_recv(q, slot, wc->byte_len);
        break;
    default:
        fail("a completion with an unknown wr_id 0x%" PRIx64, wc->wr_id);
    }
    s->last_progress = t;
    maybe_send(q);
    if (s->iter < cfg.iters && s->send_done && s->received > s->iter) {
        s->iter++;
        if (q == 0 && cfg.die_after >= 0 && s->iter >= (uint32_t)cfg.die_after) {
            fprintf(stderr, "mesh %c/%d: --die-after %d: SIGKILL\n", cfg.side, cfg.rank,
                    cfg.die_after);
            raise(SIGKILL);
        }
        if (s->iter < cfg.iters)
            start_iteration(q);
    }
}

static void usage(void) {
    fprintf(stderr,
            "usage: mesh --side A|B --rank R --ranks P --qps Q --dir DIR --iters N\n"
            "            [--size BYTES] [--gid-index I] [--timeout SECS]\n"
            "            [--die-after K] [--tolerate-dead-peer]\n");
    exit(2);
}

static void parse(int argc, char **argv) {
    static const struct option opts[] = {
        {"side", 1, 0, 's'},      {"rank", 1, 0, 'r'},     {"ranks", 1, 0, 'p'},
        {"qps", 1, 0, 'q'},       {"dir", 1, 0, 'd'},      {"iters", 1, 0, 'n'},
        {"size", 1, 0, 'z'},      {"gid-index", 1, 0, 'g'}, {"timeout", 1, 0, 't'},
        {"die-after", 1, 0, 'k'}, {"tolerate-dead-peer", 0, 0, 'T'}, {0, 0, 0, 0}};
    int c;
    cfg.rank = cfg.ranks = cfg.qps = -1;
    long iters = -1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': cfg.side = optarg[0]; if (optarg[1]) usage(); break;
        case 'r': cfg.rank = atoi(optarg); break;
        case 'p': cfg.ranks = atoi(optarg); break;
        case 'q': cfg.qps = atoi(optarg); break;
        case 'd': cfg.dir = optarg; break;
        case 'n': iters = atol(optarg); break;
        case 'z': cfg.size = strtoul(optarg, NULL, 0); break;
        case 'g': cfg.gid_index = atoi(optarg); break;
        case 't': cfg.timeout = atof(optarg); break;
        case 'k': cfg.die_after = atoi(optarg); break;
        case 'T': cfg.tolerate = 1; break;
        default: usage();
        }
    }
    if (optind != argc || (cfg.side != 'A' && cfg.side != 'B') || cfg.ranks < 1 ||
        cfg.rank < 0 || cfg.rank >= cfg.ranks || cfg.qps < 1 || cfg.qps > 255 || !cfg.dir ||
        iters < 1 || iters > 0x7fffffff || cfg.size < 8 || cfg.size > (1u << 30) ||
        cfg.timeout <= 0)
        usage();
    cfg.iters = (uint32_t)iters;
    cfg.peer_side = cfg.side == 'A' ? 'B' : 'A';
}

int main(int argc, char **argv) {
    parse(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    qs = calloc(cfg.qps, sizeof *qs);

    int ndev = 0;
    struct ibv_device **devs = ibv_get_device_list(&ndev);
    if (!devs || ndev < 1)
        fail("no RDMA device (ibv_get_device_list: %d devices, %s)", ndev, strerror(errno));
    const char *devname = ibv_get_device_name(devs[0]);
    ctx = ibv_open_device(devs[0]);
    if (!ctx)
        fail("ibv_open_device(%s): %s", devname, strerror(errno));
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, 1, &pa))
        fail("ibv_query_port(%s, 1): %s", devname, strerror(errno));
    my_mtu = pa.active_mtu;
    if (cfg.gid_index < 0)
        cfg.gid_index = find_gid(pa.gid_tbl_len);
    if (cfg.gid_index < 0)
        fail("%s port 1 has no IPv4-mapped (RoCE v2) GID among its %d", devname,
             pa.gid_tbl_len);
    if (ibv_query_gid(ctx, 1, cfg.gid_index, &my_gid))
        fail("ibv_query_gid(%s, 1, %d): %s", devname, cfg.gid_index, strerror(errno));

    pd = ibv_alloc_pd(ctx);
    if (!pd)
        fail("ibv_alloc_pd: %s", strerror(errno));
    cq = ibv_create_cq(ctx, cfg.qps * (SQ_DEPTH + NRECV) + 16, NULL, NULL, 0);
    if (!cq)
        fail("ibv_create_cq: %s", strerror(errno));

    /* Per QP: in[2], own, src, rd (cfg.size each), probe, probe source, receives, send. */
    size_t block = 6 * cfg.size + 2 * PROBE_SIZE + (NRECV + 1) * MSG_SIZE;
    block = (block + 4095) & ~(size_t)4095;
    char *mem;
    if (posix_memalign((void **)&mem, 4096, block * cfg.qps))
        fail("allocating %zu bytes", block * cfg.qps);
    memset(mem, 0, block * cfg.qps);
    mr = ibv_reg_mr(pd, mem, block * cfg.qps,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!mr)
        fail("ibv_reg_mr(%zu bytes): %s", block * cfg.qps, strerror(errno));

    char *info = malloc(512 + 160 * cfg.qps), gtxt[33];
    gid_text(&my_gid, gtxt);
    int at = sprintf(info, "mesh 1\nside %c\nrank %d\nranks %d\nqps %d\nsize %zu\npid %d\n"
                           "mtu %d\ngid %s\nrkey %u\n",
                     cfg.side, cfg.rank, cfg.ranks, cfg.qps, cfg.size, (int)getpid(),
                     (int)my_mtu, gtxt, mr->rkey);
    for (int q = 0; q < cfg.qps; q++) {
        struct qpst *s = &qs[q];
        char *b = mem + q * block;
        s->in = b;
        s->own = b + 2 * cfg.size;
        s->src = b + 3 * cfg.size;
        s->rd = b + 4 * cfg.size;
        s->probe = b + 6 * cfg.size;
        s->probe_src = s->probe + PROBE_SIZE;
        s->recv = s->probe_src + PROBE_SIZE;
        s->send = s->recv + NRECV * MSG_SIZE;
        fill(s->own, cfg.size, seed_of(cfg.side, cfg.rank, q, OWN_ITER));
        s->peer_rank = cfg.side == 'A' ? (cfg.rank + q) % cfg.ranks
                                       : ((cfg.rank - q) % cfg.ranks + cfg.ranks) % cfg.ranks;
        s->psn = (uint32_t)mix(((uint64_t)getpid() << 8) ^ q) & 0xffffff;
        struct ibv_qp_init_attr ia = {
            .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
            .cap = {.max_send_wr = SQ_DEPTH, .max_recv_wr = NRECV, .max_send_sge = 1,
                    .max_recv_sge = 1}};
        s->qp = ibv_create_qp(pd, &ia);
        if (!s->qp)
            fail("ibv_create_qp %d: %s", q, strerror(errno));
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                                .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                                                   IBV_ACCESS_REMOTE_READ};
        int e = ibv_modify_qp(s->qp, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS);
        if (e)
            fail("QP %d to INIT: %s", q, strerror(e));
        for (int k = 0; k < NRECV; k++)
            post_recv(q, k);
        at += sprintf(info + at, "qp %d qpn %u psn %u in %" PRIu64 " own %" PRIu64
                                 " probe %" PRIu64 "\n",
                      q, s->qp->qp_num, s->psn, (uint64_t)(uintptr_t)s->in,
                      (uint64_t)(uintptr_t)s->own, (uint64_t)(uintptr_t)s->probe);
    }
    publish("info", info);
    wait_peers("info");

    /* Read each peer's info and bring the QP up. */
    for (int q = 0; q < cfg.qps; q++) {
        struct qpst *s = &qs[q];
        char p[4096], line[512], pg[64] = "";
        int pmtu = -1, pranks = -1, pqps = -1, found = 0;
        uint32_t prkey = 0;
        size_t psize = 0;
        path_of(p, sizeof p, cfg.peer_side, s->peer_rank, "info");
        FILE *f = fopen(p, "r");
        if (!f)
            fail("opening %s: %s", p, strerror(errno));
        while (fgets(line, sizeof line, f)) {
            int j;
            struct remote r;
            sscanf(line, "mtu %d", &pmtu);
            sscanf(line, "ranks %d", &pranks);
            sscanf(line, "qps %d", &pqps);
            sscanf(line, "size %zu", &psize);
            sscanf(line, "gid %32s", pg);
            sscanf(line, "rkey %u", &prkey);
            if (sscanf(line, "qp %d qpn %u psn %u in %" SCNu64 " own %" SCNu64
                             " probe %" SCNu64,
                       &j, &r.qpn, &r.psn, &r.in, &r.own, &r.probe) == 6 &&
                j == q) {
                s->r = r;
                found = 1;
            }
        }
        fclose(f);
        s->r.rkey = prkey;
        if (pranks != cfg.ranks || pqps != cfg.qps || psize != cfg.size)
            fail("%s was written for --ranks %d --qps %d --size %zu, this is --ranks %d --qps "
                 "%d --size %zu",
                 p, pranks, pqps, psize, cfg.ranks, cfg.qps, cfg.size);
        if (!found || strlen(pg) != 32 || pmtu < 1)
            fail("%s has no QP %d, GID or MTU line", p, q);
        union ibv_gid dgid;
        for (int i = 0; i < 16; i++) {
            unsigned v;
            sscanf(pg + 2 * i, "%2x", &v);
            dgid.raw[i] = (uint8_t)v;
        }
        struct ibv_qp_attr a = {
            .qp_state = IBV_QPS_RTR,
            .path_mtu = pmtu < (int)my_mtu ? (enum ibv_mtu)pmtu : my_mtu,
            .dest_qp_num = s->r.qpn,
            .rq_psn = s->r.psn,
            .max_dest_rd_atomic = 4,
            .min_rnr_timer = 12,
            .ah_attr = {.is_global = 1,
                        .grh = {.dgid = dgid, .sgid_index = cfg.gid_index, .hop_limit = 64},
                        .port_num = 1}};
        int e = ibv_modify_qp(s->qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER);
        if (e)
            fail("QP %d to RTR (peer %c/%d qpn %u, MTU %s): %s", q, cfg.peer_side,
                 s->peer_rank, s->r.qpn, mtu_text(a.path_mtu), strerror(e));
        struct ibv_qp_attr b = {.qp_state = IBV_QPS_RTS, .sq_psn = s->psn, .timeout = 16,
                                .retry_cnt = 6, .rnr_retry = 7, .max_rd_atomic = 4};
        e = ibv_modify_qp(s->qp, &b,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
        if (e)
            fail("QP %d to RTS: %s", q, strerror(e));
    }
    /* Nobody sends before every peer's QPs can receive. */
    publish("ready", "ready\n");
    wait_peers("ready");

    if (cfg.die_after == 0) {
        fprintf(stderr, "mesh %c/%d: --die-after 0: SIGKILL\n", cfg.side, cfg.rank);
        raise(SIGKILL);
    }
    double t0 = now();
    for (int q = 0; q < cfg.qps; q++) {
        qs[q].last_progress = qs[q].last_probe = t0;
        start_iteration(q);
    }

    struct ibv_wc wc[32];
    int idle = 0, wrote_done = 0;
    double next_look = 0;
    for (;;) {
        int n = ibv_poll_cq(cq, 32, wc);
        if (n < 0)
            fail("ibv_poll_cq: %d", n);
        for (int i = 0; i < n; i++)
            on_wc(&wc[i]);
        if (n > 0) {
            idle = 0;
            continue;
        }
        double t = now();
        if (t >= next_look) {
            next_look = t + 0.005;
            int all_iterated = 1, all_finished = 1;
            for (int q = 0; q < cfg.qps; q++) {
                struct qpst *s = &qs[q];
                if (!s->dead && s->iter < cfg.iters)
                    all_iterated = 0;
                if (s->iter == cfg.iters && !s->dead && !s->peer_done &&
                    exists(cfg.peer_side, s->peer_rank, "done")) {
                    s->peer_done = 1;
                    s->last_progress = t;
                }
                if (finished(s))
                    continue;
                all_finished = 0;
                if (t - s->last_progress > cfg.timeout)
                    fail("QP %d (peer %c/%d, qpn %u): no progress for %.0f s in iteration %u "
                         "of %u (WRITE %s, READ %s, SEND %s, %u SENDs received%s)",
                         q, cfg.peer_side, s->peer_rank, s->r.qpn, cfg.timeout, s->iter,
                         cfg.iters, s->write_done ? "done" : "pending",
                         s->read_done ? "done" : "pending",
                         s->send_done ? "done" : s->send_posted ? "pending" : "not posted",
                         s->received,
                         s->iter == cfg.iters ? "; waiting for the peer's done file" : "");
                /* A QP waiting on its peer probes it, to notice a peer that died. */
                if (cfg.tolerate && !s->probe_out && t - s->last_progress > 1 &&
                    t - s->last_probe > 1) {
                    fill(s->probe_src, PROBE_SIZE, seed_of(cfg.side, cfg.rank, q, s->iter));
                    post_send(q, IBV_WR_RDMA_WRITE, OP_PROBE, s->probe_src, PROBE_SIZE,
                              s->r.probe);
                    s->probe_out = 1;
                    s->last_probe = t;
                }
            }
            if (all_iterated && !wrote_done) {
                publish("done", "done\n");
                wrote_done = 1;
            }
            if (all_finished && wrote_done)
                break;
        }
        if (++idle > 64)
            nap(idle > 1024 ? 500 : 50);
        else
            sched_yield();
    }

    int dead = 0;
    char deads[2048] = "";
    for (int q = 0; q < cfg.qps; q++)
        if (qs[q].dead) {
            dead++;
            size_t l = strlen(deads);
            snprintf(deads + l, sizeof deads - l, "%s%s", l ? "; " : "", qs[q].dead_why);
        }
    double secs = now() - t0;
    if (dead)
        printf("mesh %c/%d: %d qps x %u iters ok, %d dead peer QP%s (%s), %" PRIu64
               " bytes verified in %.2f s\n",
               cfg.side, cfg.rank, cfg.qps - dead, cfg.iters, dead, dead > 1 ? "s" : "", deads,
               bytes_verified, secs);
    else
        printf("mesh %c/%d: %d qps x %u iters ok, %" PRIu64 " bytes verified in %.2f s\n",
               cfg.side, cfg.rank, cfg.qps, cfg.iters, bytes_verified, secs);

    for (int q = 0; q < cfg.qps; q++)
        ibv_destroy_qp(qs[q].qp);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    free(mem);
    free(info);
    free(qs);
    return 0;
}
