/*
 * threads: many threads of one process posting and polling at once, every byte checked.
 *
 *   threads --threads T --iters N [--gid-index I] [--size BYTES] [--mw-first]
 *           [--mw-after] [--events] [--share-cq] [--ud]
 *
 * Opens the first device. For each of T threads the main thread makes one CQ and two RC
 * QPs on it, A and B, connected to each other through the device's own GID (so with
 * UROCE_SHARDS=3 every A lands on one engine shard and every B on the other). Then the T
 * threads run together; in each, iteration i:
 *   1. A posts an inline SEND of 48 bytes (pattern 's') and an RDMA WRITE with immediate
 *      i of BYTES (pattern 'w') into B's buffer;
 *   2. B, once both arrived, checks the message, the written bytes and the immediate,
 *      then answers with an inline SEND (pattern 'r');
 *   3. A checks the answer.
 * A thread polls only its own CQ, and handles every completion it takes. --share-cq:
 * threads 2k and 2k+1 share one CQ (T even), both polling it, each handling whatever
 * completion it takes for either thread (posting the other's answer, say) under that
 * thread's lock (it prints "cross-handled N", how many a thread took for the other).
 * --events: a thread arms its CQ before it posts and polls only after
 * the CQ's event (its completion channel, one per CQ, non-blocking), arming it again
 * before it polls the CQ empty; it sleeps up to the iteration's deadline, or 100 ms at
 * a time with --share-cq, where the other thread may have taken the event and the
 * completions. --ud: A and B are UD QPs (Q_Key 0x11111111, each with an address handle
 * for the device's GID), and A's WRITE with immediate is a SEND of BYTES (at most 1024,
 * not 48) that B tells from the inline one by its length; received messages follow a
 * 40-byte GRH. Every wait is bounded (30 s); a failure says what failed on stderr and
 * exits 1. It prints each thread's QPNs ("thread T: QPN A 0x.. B
 * 0x..") and, on success, "threads: T x N ok". --mw-first / --mw-after: allocate (and
 * free) a type 2 memory window before the QPs are made / once they are, printing
 * "ibv_alloc_mw: ok" or its error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define MSG 48
#define NRECV 4
#define MAX_THREADS 64

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static int gid_index = 1;
static int iters = 1000;
static size_t size = 4096;
static int events, share_cq, ud;
/* UD: received messages follow a GRH of this many bytes. */
#define GRH 40
#define QKEY 0x11111111u
/* A thread failed: the others stop. */
static int failed_any;
/* Completions a thread took and handled for the other thread of its CQ (--share-cq). */
static long cross_handled;

struct side {
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf; /* [0, slot_len() * NRECV): receive slots; then the WRITE's bytes */
	/* UD: the address handle and QPN its SENDs go to. */
	struct ibv_ah *ah;
	uint32_t peer_qpn;
};

/* Bytes of one receive slot: a message (UD: after a GRH, and as long as the larger). */
static size_t slot_len(void)
{
	return ud ? GRH + (size > MSG ? size : MSG) : MSG;
}

/* Where the message received into `slot` starts. */
static uint8_t *received(struct side *s, uint64_t slot)
{
	return s->buf + slot * slot_len() + (ud ? GRH : 0);
}

/* A CQ and the threads whose QPs use it (one, or two with --share-cq). */
struct group {
	struct ibv_cq *cq;
	struct ibv_comp_channel *channel; /* --events */
	struct worker *w[2];
	int n;
};

struct worker {
	int id;
	struct group *g;
	struct side a, b;
	pthread_t thread;
	int failed;
	/* Under `lock`: the iteration it is at and what of it has happened. */
	pthread_mutex_t lock;
	int iter, got;
};

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "threads: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static uint8_t pattern(int t, int i, char kind, size_t at)
{
	return (uint8_t)(t * 131 + i * 7 + kind * 3 + at * 13 + (at >> 8));
}

static void fill(uint8_t *p, size_t n, int t, int i, char kind)
{
	for (size_t k = 0; k < n; k++)
		p[k] = pattern(t, i, kind, k);
}

static int check(const uint8_t *p, size_t n, int t, int i, char kind)
{
	for (size_t k = 0; k < n; k++)
		if (p[k] != pattern(t, i, kind, k)) {
			fprintf(stderr,
				"threads: thread %d iteration %d: %c byte %zu is %u, not %u\n",
				t, i, kind, k, p[k], pattern(t, i, kind, k));
			return -1;
		}
	return 0;
}

static void make_side(struct worker *w, struct side *s)
{
	size_t len = slot_len() * NRECV + size;
	s->buf = calloc(1, len);
	s->mr = ibv_reg_mr(pd, s->buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->buf || !s->mr)
		die("ibv_reg_mr: %s", strerror(errno));
	struct ibv_qp_init_attr a = {
		.send_cq = w->g->cq,
		.recv_cq = w->g->cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = NRECV, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = MSG },
		.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC,
	};
	s->qp = ibv_create_qp(pd, &a);
	if (!s->qp)
		die("ibv_create_qp: %s", strerror(errno));
}

static void connect_to(struct side *s, uint32_t dest_qpn, const union ibv_gid *gid)
{
	if (ud) {
		struct ibv_qp_attr u = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
		if (ibv_modify_qp(s->qp, &u,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
			die("UD INIT: %s", strerror(errno));
		u.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(s->qp, &u, IBV_QP_STATE))
			die("UD RTR: %s", strerror(errno));
		u.qp_state = IBV_QPS_RTS;
		u.sq_psn = 0x1234;
		if (ibv_modify_qp(s->qp, &u, IBV_QP_STATE | IBV_QP_SQ_PSN))
			die("UD RTS: %s", strerror(errno));
		struct ibv_ah_attr aa = {
			.is_global = 1,
			.port_num = 1,
			.grh = { .dgid = *gid, .sgid_index = (uint8_t)gid_index, .hop_limit = 64 },
		};
		s->ah = ibv_create_ah(pd, &aa);
		if (!s->ah)
			die("ibv_create_ah: %s", strerror(errno));
		s->peer_qpn = dest_qpn;
		return;
	}
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	if (ibv_modify_qp(s->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0x1234;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		die("RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x1234;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS: %s", strerror(errno));
}

static int post_recv(struct side *s, int slot)
{
	struct ibv_sge sge = { (uintptr_t)(s->buf + slot * slot_len()), (uint32_t)slot_len(),
			       s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(s->qp, &wr, &bad);
}

/* An inline SEND of MSG bytes of pattern `kind` (built on the stack: the post copies). */
static int send_inline(struct side *s, int t, int i, char kind)
{
	uint8_t msg[MSG];
	fill(msg, MSG, t, i, kind);
	struct ibv_sge sge = { (uintptr_t)msg, MSG, 0 };
	struct ibv_send_wr wr = { .wr_id = 's', .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
			   *bad;
	if (ud) {
		wr.wr.ud.ah = s->ah;
		wr.wr.ud.remote_qpn = s->peer_qpn;
		wr.wr.ud.remote_qkey = QKEY;
	}
	int r = ibv_post_send(s->qp, &wr, &bad);
	memset(msg, 0xee, MSG); /* the post must have taken its copy */
	return r;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What an iteration waits for; ANSWERED: B posted its answer. */
enum { A_SENT = 1, A_WROTE = 2, B_GOT_SEND = 4, B_GOT_WRITE = 8, B_SENT = 16, A_GOT = 32,
       ANSWERED = 64 };
#define ALL (A_SENT | A_WROTE | B_GOT_SEND | B_GOT_WRITE | B_SENT | A_GOT)

/* Handles completion `c` of one of w's QPs, at w's iteration (w's lock held): checks
 * what arrived, posts the receive again, and B's answer once B has both. */
static int handle(struct worker *w, const struct ibv_wc *c)
{
	int t = w->id, i = w->iter;
	int on_a = c->qp_num == w->a.qp->qp_num;
	if (c->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "threads: %d/%d: %s on QP %c\n", t, i,
			ibv_wc_status_str(c->status), on_a ? 'A' : 'B');
		return -1;
	}
	/* UD: A's SEND of BYTES stands for the WRITE, and B's receive of it for the WRITE's. */
	int ud_write = ud && c->opcode == IBV_WC_RECV && !on_a && c->byte_len == GRH + size;
	if (ud && c->opcode == IBV_WC_SEND && on_a && c->wr_id == 'w')
		w->got |= A_WROTE;
	else if (ud_write) {
		if (check(received(&w->b, c->wr_id), size, t, i, 'w'))
			return fprintf(stderr, "threads: %d/%d: bad UD SEND of %zu\n", t, i, size),
			       -1;
		w->got |= B_GOT_WRITE;
		if (post_recv(&w->b, (int)c->wr_id))
			return -1;
	} else if (c->opcode == IBV_WC_SEND && on_a)
		w->got |= A_SENT;
	else if (c->opcode == IBV_WC_SEND)
		w->got |= B_SENT;
	else if (c->opcode == IBV_WC_RDMA_WRITE)
		w->got |= A_WROTE;
	else if (c->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		if (on_a || be32toh(c->imm_data) != (uint32_t)i ||
		    check(w->b.buf + slot_len() * NRECV, size, t, i, 'w'))
			return fprintf(stderr, "threads: %d/%d: bad WRITE\n", t, i), -1;
		w->got |= B_GOT_WRITE;
		if (post_recv(&w->b, (int)c->wr_id))
			return -1;
	} else if (c->opcode == IBV_WC_RECV) {
		/* B's is A's SEND ('s'), A's is B's answer ('r'). */
		struct side *s = on_a ? &w->a : &w->b;
		char kind = on_a ? 'r' : 's';
		if (c->byte_len != (ud ? GRH : 0) + MSG ||
		    check(received(s, c->wr_id), MSG, t, i, kind))
			return fprintf(stderr, "threads: %d/%d: bad %c\n", t, i, kind), -1;
		w->got |= on_a ? A_GOT : B_GOT_SEND;
		if (post_recv(s, (int)c->wr_id))
			return -1;
	}
	/* The answer, once B has both. */
	if ((w->got & (B_GOT_SEND | B_GOT_WRITE)) == (B_GOT_SEND | B_GOT_WRITE) &&
	    !(w->got & ANSWERED)) {
		if (send_inline(&w->b, t, i, 'r'))
			return fprintf(stderr, "threads: %d: answer failed\n", t), -1;
		w->got |= ANSWERED;
	}
	return 0;
}

/* The thread of group g whose QP completion c is for. */
static struct worker *owner(struct group *g, const struct ibv_wc *c)
{
	for (int k = 0; k < g->n; k++)
		if (c->qp_num == g->w[k]->a.qp->qp_num || c->qp_num == g->w[k]->b.qp->qp_num)
			return g->w[k];
	return NULL;
}

/* --events: sleeps on g's channel until the CQ's event (or `until`, 100 ms at most with
 * --share-cq), takes it, and arms the CQ again, so that the polls that follow find every
 * completion before the next sleep (one that comes after the arm raises the next event).
 * Returns 0, or -1 on a failed verb. */
static int wait_event(struct group *g, double until)
{
	double left = until - now();
	if (share_cq && left > 0.1)
		left = 0.1;
	struct pollfd p = { .fd = g->channel->fd, .events = POLLIN };
	if (left > 0 && poll(&p, 1, (int)(left * 1000) + 1) == 1) {
		struct ibv_cq *cq;
		void *cq_ctx;
		/* Non-blocking: with --share-cq the other thread may have taken it. */
		if (ibv_get_cq_event(g->channel, &cq, &cq_ctx) == 0) {
			if (cq != g->cq)
				return fprintf(stderr, "threads: an event of another CQ\n"), -1;
			ibv_ack_cq_events(cq, 1);
		} else if (errno != EAGAIN) {
			return fprintf(stderr, "threads: ibv_get_cq_event: %s\n", strerror(errno)), -1;
		}
	}
	if (ibv_req_notify_cq(g->cq, 0))
		return fprintf(stderr, "threads: ibv_req_notify_cq failed\n"), -1;
	return 0;
}

static int run(struct worker *w)
{
	int t = w->id;
	struct group *g = w->g;
	for (int k = 0; k < NRECV; k++)
		if (post_recv(&w->a, k) || post_recv(&w->b, k)) {
			fprintf(stderr, "threads: thread %d: ibv_post_recv failed\n", t);
			return -1;
		}
	uint8_t *src = calloc(1, size);
	struct ibv_mr *src_mr = ibv_reg_mr(pd, src, size, IBV_ACCESS_LOCAL_WRITE);
	if (!src_mr)
		return -1;
	for (int i = 0; i < iters; i++) {
		pthread_mutex_lock(&w->lock);
		w->iter = i;
		w->got = 0;
		pthread_mutex_unlock(&w->lock);
		/* Armed before the posts: their completions raise the event slept on. */
		if (events && ibv_req_notify_cq(g->cq, 0))
			return fprintf(stderr, "threads: ibv_req_notify_cq failed\n"), -1;
		fill(src, size, t, i, 'w');
		if (send_inline(&w->a, t, i, 's'))
			return fprintf(stderr, "threads: %d: SEND post failed\n", t), -1;
		struct ibv_sge sge = { (uintptr_t)src, (uint32_t)size, src_mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 'w', .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED,
					  .imm_data = htobe32((uint32_t)i) },
				   *bad;
		if (ud) {
			wr.opcode = IBV_WR_SEND;
			wr.wr.ud.ah = w->a.ah;
			wr.wr.ud.remote_qpn = w->a.peer_qpn;
			wr.wr.ud.remote_qkey = QKEY;
		} else {
			wr.wr.rdma.remote_addr = (uintptr_t)(w->b.buf + slot_len() * NRECV);
			wr.wr.rdma.rkey = w->b.mr->rkey;
		}
		if (ibv_post_send(w->a.qp, &wr, &bad))
			return fprintf(stderr, "threads: %d: WRITE post failed\n", t), -1;
		double deadline = now() + 30;
		for (;;) {
			pthread_mutex_lock(&w->lock);
			int got = w->got;
			pthread_mutex_unlock(&w->lock);
			if ((got & ALL) == ALL)
				break;
			if (__atomic_load_n(&failed_any, __ATOMIC_RELAXED))
				return -1;
			if (now() > deadline) {
				fprintf(stderr, "threads: thread %d iteration %d: stuck (have %#x)\n",
					t, i, got);
				return -1;
			}
			/* With --events, nothing is polled before an event (or a timeout with
			 * --share-cq): a completion whose event is lost leaves the thread stuck. */
			if (events && wait_event(g, deadline))
				return -1;
			struct ibv_wc wc[4];
			int n;
			while ((n = ibv_poll_cq(g->cq, 4, wc)) > 0) {
				for (int k = 0; k < n; k++) {
					struct worker *o = owner(g, &wc[k]);
					if (!o)
						return fprintf(stderr, "threads: %d: a completion of "
							       "no QP of ours\n", t), -1;
					if (o != w)
						__atomic_add_fetch(&cross_handled, 1,
								   __ATOMIC_RELAXED);
					pthread_mutex_lock(&o->lock);
					int r = handle(o, &wc[k]);
					pthread_mutex_unlock(&o->lock);
					if (r)
						return -1;
				}
			}
			if (n < 0)
				return fprintf(stderr, "threads: %d: ibv_poll_cq failed\n", t), -1;
		}
	}
	ibv_dereg_mr(src_mr);
	free(src);
	return 0;
}

/* Allocates a type 2 memory window and frees it again, saying how that went. */
static void try_mw(void)
{
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	printf("ibv_alloc_mw: %s\n", mw ? "ok" : strerror(errno));
	if (mw && ibv_dealloc_mw(mw))
		die("ibv_dealloc_mw: %s", strerror(errno));
}

static void *thread_main(void *p)
{
	struct worker *w = p;
	w->failed = run(w) != 0;
	if (w->failed)
		__atomic_store_n(&failed_any, 1, __ATOMIC_RELAXED);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 4, mw_first = 0, mw_after = 0;
	static const struct option opts[] = {
		{ "threads", required_argument, 0, 't' },
		{ "iters", required_argument, 0, 'n' },
		{ "gid-index", required_argument, 0, 'g' },
		{ "size", required_argument, 0, 's' },
		{ "mw-first", no_argument, 0, 'f' },
		{ "mw-after", no_argument, 0, 'a' },
		{ "events", no_argument, 0, 'e' },
		{ "share-cq", no_argument, 0, 'c' },
		{ "ud", no_argument, 0, 'u' },
		{ 0, 0, 0, 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (c) {
		case 't': threads = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 'g': gid_index = atoi(optarg); break;
		case 's': size = (size_t)atol(optarg); break;
		case 'f': mw_first = 1; break;
		case 'a': mw_after = 1; break;
		case 'e': events = 1; break;
		case 'c': share_cq = 1; break;
		case 'u': ud = 1; break;
		default: die("usage: threads --threads T --iters N [--gid-index I] [--size B]");
		}
	}
	if (threads < 1 || threads > MAX_THREADS || iters < 1 || size < 1 ||
	    (share_cq && threads % 2) || (ud && (size > 1024 || size == MSG)))
		die("bad arguments");
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device: %s", strerror(errno));
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_gid: %s", strerror(errno));
	if (mw_first)
		try_mw();
	struct worker *w = calloc(threads, sizeof(*w));
	struct group *groups = calloc(threads, sizeof(*groups));
	for (int t = 0; t < threads; t++) {
		w[t].id = t;
		pthread_mutex_init(&w[t].lock, NULL);
		struct group *g = &groups[share_cq ? t / 2 : t];
		if (!g->cq) {
			if (events) {
				g->channel = ibv_create_comp_channel(ctx);
				if (!g->channel)
					die("ibv_create_comp_channel: %s", strerror(errno));
				int fl = fcntl(g->channel->fd, F_GETFL);
				if (fcntl(g->channel->fd, F_SETFL, fl | O_NONBLOCK))
					die("O_NONBLOCK: %s", strerror(errno));
			}
			g->cq = ibv_create_cq(ctx, 128, NULL, g->channel, 0);
			if (!g->cq)
				die("ibv_create_cq: %s", strerror(errno));
		}
		g->w[g->n++] = &w[t];
		w[t].g = g;
		make_side(&w[t], &w[t].a);
		make_side(&w[t], &w[t].b);
	}
	if (mw_after)
		try_mw();
	for (int t = 0; t < threads; t++) {
		printf("thread %d: QPN A %#x B %#x\n", t, w[t].a.qp->qp_num, w[t].b.qp->qp_num);
		connect_to(&w[t].a, w[t].b.qp->qp_num, &gid);
		connect_to(&w[t].b, w[t].a.qp->qp_num, &gid);
	}
	for (int t = 0; t < threads; t++)
		if (pthread_create(&w[t].thread, NULL, thread_main, &w[t]))
			die("pthread_create");
	int failed = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(w[t].thread, NULL);
		failed |= w[t].failed;
	}
	if (failed)
		die("a thread failed");
	if (share_cq)
		printf("cross-handled %ld\n", cross_handled);
	printf("threads: %d x %d ok\n", threads, iters);
	return 0;
}
