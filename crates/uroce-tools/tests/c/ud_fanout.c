/*
 * ud_fanout: one UD QP sending to the UD QPs of several processes on one peer address,
 * every message checked where it lands.
 *
 *   ud_fanout --recv COUNT
 *   ud_fanout --send ADDR --to QPN[,QPN...] --count N [--batch B] [--gid-index I]
 *
 * Opens the first device; its UD QP takes Q_Key 0x11111111.
 * --recv: posts COUNT receives, prints "qpn 0x.." (flushed), then waits (30 s at most)
 * for COUNT messages, each of which must be for this QPN with a sequence number not seen
 * before and the bytes the sender wrote for them; prints "received N of COUNT" and exits
 * 0 when all came, 1 otherwise.
 * --send: sends N messages of 256 bytes to IPv4 address ADDR (its IPv4-mapped GID),
 * message k to the QPN at k modulo their number, in rounds of B (default 32) posted at
 * once, each round's completions waited for, 5 ms between rounds. Posted at once, the
 * messages of a round leave from one source port to one address and port: the sender
 * sends them as one GSO batch, which the receiving kernel steers whole by its first
 * packet (to the socket of that packet's QPN), so the others of the round land on the
 * wrong process's socket unless it passes them on. Prints "sent N" on success.
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
#define MAX_DEST 8
#define MAX_COUNT 4096

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

/* A message: the destination QPN and the sequence number (big-endian), then pattern. */
static void fill(uint8_t *m, uint32_t qpn, uint32_t seq)
{
	uint32_t q = htonl(qpn), s = htonl(seq);
	memcpy(m, &q, 4);
	memcpy(m + 4, &s, 4);
	for (size_t k = 8; k < MSG; k++)
		m[k] = pattern(qpn, seq, k);
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static void open_ud(struct dev *d, int send_wr, int recv_wr)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device");
	d->ctx = ibv_open_device(list[0]);
	if (!d->ctx)
		die("ibv_open_device");
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = ibv_create_cq(d->ctx, send_wr + recv_wr, NULL, NULL, 0);
	if (!d->pd || !d->cq)
		die("ibv_alloc_pd / ibv_create_cq");
	struct ibv_qp_init_attr a = {
		.send_cq = d->cq,
		.recv_cq = d->cq,
		.cap = { .max_send_wr = send_wr, .max_recv_wr = recv_wr, .max_send_sge = 1,
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
	open_ud(&d, 1, count);
	size_t slot = GRH + MSG;
	uint8_t *buf = calloc(count, slot);
	uint8_t *seen = calloc(MAX_COUNT * MAX_DEST, 1);
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
			if (q != me || s >= MAX_COUNT * MAX_DEST || seen[s]) {
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

static int send_all(const char *addr, uint32_t *dest, int ndest, int count, int batch,
		    int gid_index)
{
	struct dev d;
	open_ud(&d, batch, 1);
	union ibv_gid gid;
	memset(&gid, 0, sizeof(gid));
	gid.raw[10] = gid.raw[11] = 0xff;
	if (inet_pton(AF_INET, addr, &gid.raw[12]) != 1) {
		fprintf(stderr, "ud_fanout: not an IPv4 address: %s\n", addr);
		return 2;
	}
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = gid, .sgid_index = (uint8_t)gid_index, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);
	if (!ah)
		die("ibv_create_ah");
	uint8_t *buf = calloc(batch, MSG);
	struct ibv_mr *mr = ibv_reg_mr(d.pd, buf, batch * MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!buf || !mr)
		die("ibv_reg_mr");
	for (int sent = 0; sent < count;) {
		int n = count - sent < batch ? count - sent : batch;
		struct ibv_sge sge[n];
		struct ibv_send_wr wr[n], *bad;
		for (int k = 0; k < n; k++) {
			int i = sent + k;
			/* Each destination numbers its own messages. */
			fill(buf + k * MSG, dest[i % ndest], (uint32_t)(i / ndest));
			sge[k] = (struct ibv_sge){ (uintptr_t)(buf + k * MSG), MSG, mr->lkey };
			wr[k] = (struct ibv_send_wr){ .wr_id = (uint64_t)i, .sg_list = &sge[k],
						      .num_sge = 1, .opcode = IBV_WR_SEND,
						      .send_flags = IBV_SEND_SIGNALED,
						      .next = k + 1 < n ? &wr[k + 1] : NULL };
			wr[k].wr.ud.ah = ah;
			wr[k].wr.ud.remote_qpn = dest[i % ndest];
			wr[k].wr.ud.remote_qkey = QKEY;
		}
		if (ibv_post_send(d.qp, wr, &bad))
			die("ibv_post_send");
		for (int done = 0; done < n;) {
			struct ibv_wc wc[16];
			int m = ibv_poll_cq(d.cq, 16, wc);
			if (m < 0)
				die("ibv_poll_cq");
			for (int k = 0; k < m; k++)
				if (wc[k].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "ud_fanout: send: %s\n",
						ibv_wc_status_str(wc[k].status));
					return 1;
				}
			done += m;
		}
		sent += n;
		usleep(5000);
	}
	printf("sent %d\n", count);
	return 0;
}

int main(int argc, char **argv)
{
	int recv_count = 0, count = 0, batch = 32, gid_index = 1, ndest = 0;
	const char *addr = NULL;
	uint32_t dest[MAX_DEST];
	static const struct option opts[] = {
		{ "recv", required_argument, 0, 'r' },  { "send", required_argument, 0, 's' },
		{ "to", required_argument, 0, 't' },    { "count", required_argument, 0, 'n' },
		{ "batch", required_argument, 0, 'b' }, { "gid-index", required_argument, 0, 'g' },
		{ 0, 0, 0, 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (c) {
		case 'r': recv_count = atoi(optarg); break;
		case 's': addr = optarg; break;
		case 't':
			for (char *p = strtok(optarg, ","); p && ndest < MAX_DEST; p = strtok(NULL, ","))
				dest[ndest++] = (uint32_t)strtoul(p, NULL, 0);
			break;
		case 'n': count = atoi(optarg); break;
		case 'b': batch = atoi(optarg); break;
		case 'g': gid_index = atoi(optarg); break;
		default: return 2;
		}
	}
	if (recv_count > 0 && recv_count <= MAX_COUNT)
		return receive(recv_count);
	if (addr && ndest > 0 && count > 0 && count <= MAX_COUNT * ndest && batch > 0 &&
	    batch <= 128)
		return send_all(addr, dest, ndest, count, batch, gid_index);
	fprintf(stderr, "usage: ud_fanout --recv COUNT | --send ADDR --to QPN[,QPN] --count N "
			"[--batch B] [--gid-index I]\n");
	return 2;
}
