/* After fork(2): the child opens the device anew and moves data through the shared
 * datapath (uroce daemon) while the parent moves data of its own at the same time. Written for
 * crates/uroce-tools/tests/shared_datapath.rs; prints OK on success. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "rc_side.h"

static void pair_traffic(struct ibv_device *dev, const char *who) {
    static struct side c, d;
    open_side(dev, &c);
    open_side(dev, &d);
    union ibv_gid gid;
    CHECK(ibv_query_gid(d.ctx, 1, 1, &gid) == 0);
    struct ibv_qp *qc = rc_qp(&c), *qd = rc_qp(&d);
    connect_qp(qc, qd->qp_num, &gid);
    connect_qp(qd, qc->qp_num, &gid);
    for (int i = 0; i < 300; i++) {
        write_to(&c, qc, &d, 'c' + i % 16);
        send_to(&c, qc, &d, qd);
    }
    printf("%s: traffic OK\n", who);
}

int main(void) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    CHECK(list && n >= 1);
    static struct side a, b;
    open_side(list[0], &a);
    open_side(list[0], &b);
    union ibv_gid gid;
    CHECK(ibv_query_gid(b.ctx, 1, 1, &gid) == 0);
    struct ibv_qp *qa = rc_qp(&a), *qb = rc_qp(&b);
    connect_qp(qa, qb->qp_num, &gid);
    connect_qp(qb, qa->qp_num, &gid);
    write_to(&a, qa, &b, 'a');
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* The parent's contexts are the parent's: the child opens its own. */
        pair_traffic(list[0], "child");
        fflush(stdout);
        _exit(0);
    }
    /* At the same time as the child: new QPs of the parent's, and its first ones. */
    pair_traffic(list[0], "parent");
    write_to(&b, qb, &a, 'b');
    send_to(&b, qb, &a, qa);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("OK\n");
    return 0;
}
