//! Signals and the library's threads, as qperf meets them (it ends a test with SIGALRM
//! while blocked in `ibv_get_cq_event`): a C program against the distro's
//! `<infiniband/verbs.h>` with a QP open (so the progress thread runs), in a network
//! namespace over the UDP backend:
//! - a SIGALRM handler installed without SA_RESTART interrupts `ibv_get_cq_event` and
//!   `ibv_get_async_event`: -1 with errno EINTR (libibverbs' single `read(2)`), the
//!   handler having run on the main thread;
//! - `kill()` to the process while the main thread blocks the signal: no library thread
//!   takes it (they block every signal), so it waits until the main thread unblocks it and
//!   is handled there, every time.
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static volatile pid_t handled_on;
static volatile int handled;

static void on_signal(int s) {
    (void)s;
    handled_on = (pid_t)syscall(SYS_gettid);
    handled++;
}

static int threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

int main(void) {
    pid_t main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: a blocking call is interrupted */
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0 && sigaction(SIGUSR1, &sa, NULL) == 0);

    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    CHECK(pd && ch);
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
    CHECK(cq && ibv_req_notify_cq(cq, 0) == 0);
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 1; ia.cap.max_recv_wr = 1; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    CHECK(qp);
    /* The datapath is open: the progress thread runs beside this one. */
    printf("threads %d\n", threads());
    CHECK(threads() >= 2);

    /* SIGALRM while blocked in ibv_get_cq_event: -1 / EINTR. */
    alarm(1);
    struct ibv_cq *got = NULL;
    void *cq_ctx = NULL;
    errno = 0;
    int r = ibv_get_cq_event(ch, &got, &cq_ctx);
    CHECK(r == -1 && errno == EINTR);
    CHECK(handled == 1 && handled_on == main_tid);
    printf("get_cq_event EINTR\n");

    /* The same for ibv_get_async_event. */
    alarm(1);
    struct ibv_async_event ev;
    errno = 0;
    r = ibv_get_async_event(ctx, &ev);
    CHECK(r == -1 && errno == EINTR);
    CHECK(handled == 2 && handled_on == main_tid);
    printf("get_async_event EINTR\n");

    /* kill() while this thread blocks SIGUSR1: a thread that did not block it would take
       it at once; the library's block everything, so it waits for this one. */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    for (int i = 0; i < 20; i++) {
        CHECK(pthread_sigmask(SIG_BLOCK, &usr1, NULL) == 0);
        handled = 0;
        handled_on = 0;
        CHECK(kill(getpid(), SIGUSR1) == 0);
        usleep(10000);
        if (handled != 0) {
            printf("FAIL: SIGUSR1 handled on thread %d, not main %d\n", (int)handled_on, (int)main_tid);
            exit(1);
        }
        CHECK(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL) == 0);
        CHECK(handled == 1 && handled_on == main_tid);
    }
    printf("kill handled on main\n");

    CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0);
    CHECK(ibv_destroy_comp_channel(ch) == 0 && ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
"#;

/// `ibv_get_cq_event` and `ibv_get_async_event` end with -1 / EINTR when a signal
/// interrupts them, and a signal sent to the process is never handled by the library's
/// progress thread.
#[test]
fn signals_interrupt_waits_and_land_on_the_programs_threads() {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("signals");
    let Some(exe) = common::compile_c(&lib, "signals", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("sig", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    // A wait that is retried on EINTR never ends: `timeout` makes that a failure.
    let out = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", "udp")],
        &["timeout", "20", &exe],
    )
    .output()
    .expect("ip netns exec");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for line in [
        "get_cq_event EINTR",
        "get_async_event EINTR",
        "kill handled on main",
        "ok",
    ] {
        assert!(t.lines().any(|l| l == line), "no {line:?} in:\n{t}");
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
