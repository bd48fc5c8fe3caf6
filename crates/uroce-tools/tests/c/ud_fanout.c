/*
 * ud_fanout: both ends of UD messages to processes on one address
 * (crates/uroce-tools/tests/shared_datapath.rs), every message checked where it lands.
 *
 *   ud_fanout --recv COUNT
 *   ud_fanout --send QPN COUNT
 *
 * Each opens the first device and makes a UD QP with Q_Key 0x11111111.
 *
 * --recv posts COUNT receives, prints "qpn 0x.." (flushed), then waits (30 s at most)
 * for COUNT messages of 256 bytes. Each must be for this QPN (its first 4 bytes,
 * big-endian), with a sequence number (the next 4) not seen before, and the pattern
 * `pattern(qpn, seq, at)` after them. Prints "received N of COUNT" and exits 0 when all
 * came, 1 otherwise.
 *
 * --send makes its address handle (to the port's first IPv4 GID: this host's address),
 * prints "ready" (flushed) and waits for a line on stdin. It then sends COUNT such
 * messages (sequence numbers 0 to COUNT - 1) to QPN, 64 at most outstanding, and leaves
 * with _exit(0) as soon as the last send completes: nothing torn down, nothing flushed,
 * as a program that crashes or returns from main right then.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define QKEY 0x11111111u
#define MSG 256
#define GRH 40
#define MAX_COUNT 4096
#define WINDOW 64

static void die(const char *what)
{
	fprintf(stderr, "ud_fanout: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint8_t pattern(uint32_t qpn, uint32_t seq, size_t at)
{
	return (uint8_t)(qpn * 7 + seq * 13 + at * 31 + (at >> 5));
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static void open_ud(struct dev *d, int recv_wr)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device");
	d->ctx = ibv_open_device(list[0]);
	if (!d->ctx)
		die("ibv_open_device");
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = ibv_create_cq(d->ctx, recv_wr + WINDOW, NULL, NULL, 0);
	if (!d->pd || !d->cq)
		die("ibv_alloc_pd / ibv_create_cq");
	struct ibv_qp_init_attr a = {
		.send_cq = d->cq,
		.recv_cq = d->cq,
		.cap = { .max_send_wr = WINDOW, .max_recv_wr = recv_wr, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	d->qp = ibv_create_qp(d->pd, &a);
	if (!d->qp)
		die("ibv_create_qp");
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	if (ibv_modify_qp(d->qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT");
	m.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(d->qp, &m, IBV_QP_STATE))
		die("RTR");
	m.qp_state = IBV_QPS_RTS;
	m.sq_psn = 0;
	if (ibv_modify_qp(d->qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("RTS");
}

static int receive(int count)
{
	struct dev d;
	open_ud(&d, count);
	size_t slot = GRH + MSG;
	uint8_t *buf = calloc(count, slot);
	uint8_t *seen = calloc(MAX_COUNT, 1);
	struct ibv_mr *mr = ibv_reg_mr(d.pd, buf, count * slot, IBV_ACCESS_LOCAL_WRITE);
	if (!buf || !seen || !mr)
		die("ibv_reg_mr");
	for (int k = 0; k < count; k++) {
		struct ibv_sge sge = { (uintptr_t)(buf + k * slot), (uint32_t)slot, mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)k, .sg_list = &sge, .num_sge = 1 },
				   *bad;
		if (ibv_post_recv(d.qp, &wr, &bad))
			die("ibv_post_recv");
	}
	uint32_t me = d.qp->qp_num;
	printf("qpn %#x\n", me);
	fflush(stdout);
	int got = 0;
	double deadline = now() + 30;
	while (got < count && now() < deadline) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(d.cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 0)
			usleep(100);
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS || wc[k].opcode != IBV_WC_RECV ||
			    wc[k].byte_len != GRH + MSG) {
				fprintf(stderr, "ud_fanout: a bad completion: %s, %u bytes\n",
					ibv_wc_status_str(wc[k].status), wc[k].byte_len);
				return 1;
			}
			uint8_t *m = buf + wc[k].wr_id * slot + GRH;
			uint32_t q, s;
			memcpy(&q, m, 4);
			memcpy(&s, m + 4, 4);
			q = ntohl(q);
			s = ntohl(s);
			if (q != me || s >= MAX_COUNT || seen[s]) {
				fprintf(stderr, "ud_fanout: message for QPN %#x seq %u (we are %#x)\n",
					q, s, me);
				return 1;
			}
			for (size_t b = 8; b < MSG; b++)
				if (m[b] != pattern(q, s, b)) {
					fprintf(stderr, "ud_fanout: seq %u byte %zu is wrong\n", s, b);
					return 1;
				}
			seen[s] = 1;
			got++;
		}
	}
	printf("received %d of %d\n", got, count);
	return got == count ? 0 : 1;
}

/* Sends `count` messages to `dest` on this host's first IPv4 GID; see the top. */
static int send_to(uint32_t dest, int count)
{
	struct dev d;
	open_ud(&d, 1);
	struct ibv_port_attr pa;
	if (ibv_query_port(d.ctx, 1, &pa))
		die("ibv_query_port");
	int index = -1;
	union ibv_gid gid;
	static const uint8_t v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	for (int i = 0; i < pa.gid_tbl_len && index < 0; i++)
		if (!ibv_query_gid(d.ctx, 1, i, &gid) && !memcmp(gid.raw, v4_mapped, 12))
			index = i;
	if (index < 0) {
		fprintf(stderr, "ud_fanout: no IPv4 GID on port 1\n");
		return 1;
	}
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.grh = { .dgid = gid, .sgid_index = (uint8_t)index, .hop_limit = 64 },
		.port_num = 1,
	};
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);
	uint8_t *buf = calloc(count, MSG);
	struct ibv_mr *mr = buf ? ibv_reg_mr(d.pd, buf, (size_t)count * MSG, 0) : NULL;
	if (!ah || !mr)
		die("ibv_create_ah / ibv_reg_mr");
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		die("reading stdin");
	int posted = 0, done = 0;
	double deadline = now() + 30;
	while (done < count && now() < deadline) {
		while (posted < count && posted - done < WINDOW) {
			uint8_t *m = buf + (size_t)posted * MSG;
			uint32_t q = htonl(dest), s = htonl((uint32_t)posted);
			memcpy(m, &q, 4);
			memcpy(m + 4, &s, 4);
			for (size_t b = 8; b < MSG; b++)
				m[b] = pattern(dest, (uint32_t)posted, b);
			struct ibv_sge sge = { (uintptr_t)m, MSG, mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = (uint64_t)posted,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED,
				.wr = { .ud = { .ah = ah, .remote_qpn = dest, .remote_qkey = QKEY } },
			}, *bad;
			if (ibv_post_send(d.qp, &wr, &bad))
				die("ibv_post_send");
			posted++;
		}
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(d.cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (int k = 0; k < n; k++)
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "ud_fanout: a send failed: %s\n",
					ibv_wc_status_str(wc[k].status));
				return 1;
			}
		done += n;
	}
	if (done < count) {
		fprintf(stderr, "ud_fanout: %d of %d sends completed\n", done, count);
		return 1;
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	int count = 0;
	long dest = -1;
	static const struct option opts[] = {
		{ "recv", required_argument, 0, 'r' },
		{ "send", required_argument, 0, 's' },
		{ 0, 0, 0, 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (c == 'r')
			count = atoi(optarg);
		else if (c == 's')
			dest = strtol(optarg, NULL, 0);
		else
			return 2;
	}
	if (dest >= 0 && optind < argc)
		count = atoi(argv[optind]);
	if (count > 0 && count <= MAX_COUNT)
		return dest >= 0 ? send_to((uint32_t)dest, count) : receive(count);
	fprintf(stderr, "usage: ud_fanout --recv COUNT | --send QPN COUNT\n");
	return 2;
}
