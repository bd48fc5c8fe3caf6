//! Signals and the libraries' threads under librdmacm, as `qperf -cm1` meets them: a C
//! program on the distro's `<rdma/rdma_cma.h>` over both drop-in libraries, in a network
//! namespace over the UDP backend, with a listener open (so the CM thread and the
//! device's progress thread run):
//! - a SIGALRM handler installed without SA_RESTART interrupts `rdma_get_cm_event`: -1
//!   with errno EINTR (librdmacm's single `read(2)` of the channel's fd), and so does
//!   `rdma_get_request` on a synchronous listener, which waits through it;
//! - `kill()` to the process while the main thread blocks the signal: no library thread
//!   takes it (they block every signal), so it waits for the main thread, every time.
//!
//! Needs root, iproute2, gcc and librdmacm-dev; skips (saying which is missing) otherwise.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <arpa/inet.h>

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

static struct sockaddr_in addr(const char *ip, int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
    return a;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    pid_t main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: a blocking call is interrupted */
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0 && sigaction(SIGUSR1, &sa, NULL) == 0);

    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK(ch);
    struct rdma_cm_id *id;
    CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
    struct sockaddr_in a = addr(argv[1], 7471);
    CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0 && rdma_listen(id, 4) == 0);
    printf("threads %d\n", threads());
    CHECK(threads() >= 3);

    /* SIGALRM while blocked in rdma_get_cm_event: -1 / EINTR. */
    alarm(1);
    struct rdma_cm_event *e = NULL;
    errno = 0;
    int r = rdma_get_cm_event(ch, &e);
    CHECK(r == -1 && errno == EINTR);
    CHECK(handled == 1 && handled_on == main_tid);
    printf("get_cm_event EINTR\n");

    /* A synchronous listener's rdma_get_request waits the same way. */
    struct rdma_cm_id *sync_id, *req = NULL;
    CHECK(rdma_create_id(NULL, &sync_id, NULL, RDMA_PS_TCP) == 0);
    struct sockaddr_in b = addr(argv[1], 7472);
    CHECK(rdma_bind_addr(sync_id, (struct sockaddr *)&b) == 0 && rdma_listen(sync_id, 4) == 0);
    alarm(1);
    errno = 0;
    r = rdma_get_request(sync_id, &req);
    CHECK(r == -1 && errno == EINTR);
    CHECK(handled == 2 && handled_on == main_tid);
    printf("get_request EINTR\n");

    /* kill() while this thread blocks SIGUSR1: only this thread may take it. */
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

    CHECK(rdma_destroy_id(sync_id) == 0 && rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
    printf("ok\n");
    return 0;
}
"#;

/// `rdma_get_cm_event` and `rdma_get_request` end with -1 / EINTR when a signal
/// interrupts them, and a signal sent to the process is never handled by the CM thread
/// or the device's progress thread.
#[test]
fn signals_interrupt_cm_waits_and_land_on_the_programs_threads() {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return;
    }
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIP: <rdma/rdma_cma.h> is missing (apt-get install librdmacm-dev)");
        return;
    }
    let lib = common::both_libraries_dir("signals");
    let Some(exe) = common::compile_c(&lib, "signals", PROGRAM, &["-lrdmacm", "-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("rsig", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let ip = pair.addrs[0].to_string();
    // A wait that is retried on EINTR never ends: `timeout` makes that a failure.
    let out = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", "udp")],
        &["timeout", "20", &exe, &ip],
    )
    .output()
    .expect("ip netns exec");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for line in [
        "get_cm_event EINTR",
        "get_request EINTR",
        "kill handled on main",
        "ok",
    ] {
        assert!(t.lines().any(|l| l == line), "no {line:?} in:\n{t}");
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
