/*
 * nccl-net harness: drives one of libnccl.so.2's built-in network plugins (ncclNetIb, the
 * RDMA transport NCCL's collectives use between hosts, or ncclNetSocket, its kernel TCP
 * transport) from outside NCCL, with host memory and no GPU, between two processes.
 *
 * The built-in plugins are not exported: their ncclNet_v12_t tables are local symbols
 * (`ncclNetIb`, `ncclNetSocket`) in the library's .symtab, which the wheel keeps. This
 * program dlopens the library, reads its own copy of the ELF file's .symtab to find the
 * table's offset, and adds the load base (dlinfo RTLD_DI_LINKMAP). It checks the table's
 * size and name before using it.
 *
 * Each side listens, publishes its 128-byte listen handle as a file in a directory both
 * share, reads the peer's, then connects (its send comm) and accepts (its receive comm),
 * so data flows both ways at once: COUNT messages of SIZE bytes each way with up to
 * INFLIGHT requests of each kind outstanding (receives of GROUP buffers each with --group,
 * as NCCL groups point-to-point operations), every byte checked (--check full, default)
 * or the first and last 8 bytes of each message (--check ends, for benchmarks). It prints
 * one line: `nccl-net: ... OK` with GB/s per direction and the process's CPU-seconds
 * (user + system, every thread, the transport's included) per GB moved (sent + received).
 *
 * Usage: nccl-net-harness --lib PATH --net ib|socket --role a|b --dir DIR
 *          [--size BYTES] [--count N] [--inflight K] [--group G] [--check full|ends] [--timeout S]
 * Build: gcc -O2 -o nccl-net-harness harness.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The parts of NCCL's plugin ABI this program uses (ncclNet_v12_t and its types), written
 * from the header's description: 128-byte handles, NCCL_PTR_HOST = 1. */
typedef int ncclResult_t;
#define HANDLE_SIZE 128
#define PTR_HOST 1
typedef void (*logger_t)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);
typedef ncclResult_t (*prof_cb_t)(void **eHandle, int type, void *pHandle, int64_t pluginId, void *extData);
typedef struct {
  int ndevs;
  int devs[8];
} vprops_t;
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport, regIsGlobal, forceFlush, speed, port;
  float latency;
  int maxComms, maxRecvs, netDeviceType, netDeviceVersion;
  vprops_t vProps;
  size_t maxP2pBytes, maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId, planeId;
} props_t;
typedef struct {
  int trafficClass;
} comm_config_t;
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, comm_config_t *config, logger_t log, prof_cb_t prof);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, props_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm, void **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, void **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mh);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                        void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  void *getDeviceMr, *irecvConsumed, *makeVDevice;
  ncclResult_t (*finalize)(void *ctx);
  void *setNetAttr;
} net_v12_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* DIR/failed.ROLE, written when this side fails so that the peer stops at once. */
static char fail_mark[4200], peer_fail_mark[4200];

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "nccl-net: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (fail_mark[0]) {
    FILE *f = fopen(fail_mark, "w");
    if (f) fclose(f);
  }
  exit(1);
}

static void check_peer(void) {
  if (peer_fail_mark[0] && access(peer_fail_mark, F_OK) == 0) {
    peer_fail_mark[0] = 0;
    die("the peer failed (its stderr says why)");
  }
}

#define CHECK(call)                                                                          \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != 0) die("%s returned ncclResult %d (see NCCL_DEBUG=INFO for why)", #call, r_); \
  } while (0)

static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  if (level < 1 || !getenv("NCCL_NET_HARNESS_LOG")) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "nccl log %d %s:%d ", level, file ? file : "?", line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static ncclResult_t profiler(void **eHandle, int type, void *pHandle, int64_t pluginId, void *extData) {
  (void)type, (void)pHandle, (void)pluginId, (void)extData;
  if (eHandle) *eHandle = NULL;
  return 0;
}

/* The value of local or global symbol `name` of type `type` (STT_OBJECT, STT_FUNC) in the
 * ELF file `path` (its .symtab), with its size; 0 when there is none. */
static uint64_t symtab_lookup(const char *path, const char *name, int type, uint64_t *size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open %s: %s", path, strerror(errno));
  struct stat st;
  fstat(fd, &st);
  const uint8_t *f = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (f == MAP_FAILED) die("mmap %s: %s", path, strerror(errno));
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64)
    die("%s is not a 64-bit ELF file", path);
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
  uint64_t value = 0;
  for (int i = 0; i < eh->e_shnum && !value; i++) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const Elf64_Sym *sym = (const Elf64_Sym *)(f + sh[i].sh_offset);
    const char *str = (const char *)(f + sh[sh[i].sh_link].sh_offset);
    size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; k++) {
      if (ELF64_ST_TYPE(sym[k].st_info) == type && !strcmp(str + sym[k].st_name, name)) {
        value = sym[k].st_value;
        *size = sym[k].st_size;
        break;
      }
    }
  }
  munmap((void *)f, st.st_size);
  return value;
}

static net_v12_t *find_plugin(const char *lib, const char *which) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die("dlopen %s: %s", lib, dlerror());
  int (*version)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
  int v = 0;
  if (!version || version(&v)) die("%s has no working ncclGetVersion", lib);
  struct link_map *map = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &map) || !map) die("dlinfo: %s", dlerror());
  const char *sym = !strcmp(which, "ib") ? "ncclNetIb" : "ncclNetSocket";
  const char *want = !strcmp(which, "ib") ? "IB" : "Socket";
  uint64_t size = 0, off = symtab_lookup(lib, sym, STT_OBJECT, &size);
  if (!off) die("%s (NCCL %d) has no symbol %s in its .symtab (stripped?)", lib, v, sym);
  if (size != sizeof(net_v12_t))
    die("%s in NCCL %d is %lu bytes, not ncclNet_v12_t's %zu: another plugin ABI", sym, v,
        (unsigned long)size, sizeof(net_v12_t));
  net_v12_t *net = (net_v12_t *)(map->l_addr + off);
  if (!net->name || strcmp(net->name, want) || !net->init || !net->isend)
    die("%s in NCCL %d does not look like the %s plugin", sym, v, want);
  fprintf(stderr, "nccl-net: NCCL %d, plugin %s at %s+0x%lx\n", v, net->name, lib, (unsigned long)off);
  /* No GPU here: ncclNetSocket's connect and accept ask the CUDA runtime (linked into the
   * library, so not interposable) for the current device, only to label their threads,
   * and fail with "CUDA driver version is insufficient" when there is no driver. The
   * runtime's cudaGetDevice is replaced in memory by `*device = 0; return cudaSuccess`.
   * ncclNetIb's point-to-point path makes no CUDA call. */
  uint64_t fsize = 0, foff = symtab_lookup(lib, "cudaGetDevice", STT_FUNC, &fsize);
  if (!strcmp(which, "socket") && foff && fsize >= 9 && !getenv("NCCL_NET_HARNESS_REAL_CUDA")) {
    static const uint8_t stub[9] = {0xc7, 0x07, 0, 0, 0, 0, /* movl $0, (%rdi) */
                                    0x31, 0xc0,             /* xorl %eax, %eax */
                                    0xc3};                  /* ret */
    uint8_t *code = (uint8_t *)(map->l_addr + foff);
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *page = (uint8_t *)((uintptr_t)code & ~(uintptr_t)(pg - 1));
    size_t span = (size_t)(code + sizeof stub - page);
    if (mprotect(page, span, PROT_READ | PROT_WRITE | PROT_EXEC)) die("mprotect: %s", strerror(errno));
    memcpy(code, stub, sizeof stub);
    if (mprotect(page, span, PROT_READ | PROT_EXEC)) die("mprotect: %s", strerror(errno));
    fprintf(stderr, "nccl-net: no GPU: the library's cudaGetDevice now answers device 0\n");
  }
  return net;
}

/* Writes the handle to DIR/handle.ROLE (through a rename, so the peer never reads half). */
static void publish(const char *dir, const char *role, const char *tag, const void *data, size_t len) {
  char tmp[4200], path[4096];
  snprintf(path, sizeof path, "%s/%s.%s", dir, tag, role);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f)) die("writing %s: %s", tmp, strerror(errno));
  if (rename(tmp, path)) die("rename %s: %s", path, strerror(errno));
}

static void await(const char *dir, const char *role, const char *tag, void *data, size_t len, double deadline) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%s", dir, tag, role);
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(data, 1, len, f);
      fclose(f);
      if (got == len) return;
    }
    if (now() > deadline) die("timed out waiting for %s", path);
    check_peer();
    usleep(2000);
  }
}

/* The 8-byte word at index w of message m going from side `from` (0 or 1). */
static inline uint64_t word(int from, uint64_t m, uint64_t w) {
  uint64_t x = ((uint64_t)from << 63) ^ (m * 0x9e3779b97f4a7c15ull) ^ (w * 0xbf58476d1ce4e5b9ull);
  return x ^ (x >> 29);
}

static void fill(uint64_t *p, size_t words, int from, uint64_t m, int full) {
  if (full) {
    for (size_t w = 0; w < words; w++) p[w] = word(from, m, w);
  } else {
    p[0] = word(from, m, 0);
    p[words - 1] = word(from, m, words - 1);
  }
}

static void verify_word(const uint64_t *p, size_t w, int from, uint64_t m) {
  if (p[w] != word(from, m, w))
    die("message %lu byte %zu: got %016lx, expected %016lx", (unsigned long)m, w * 8,
        (unsigned long)p[w], (unsigned long)word(from, m, w));
}

/* --check ends reads two words and nothing else: a loop over every word that skips the
 * rest cost a tenth of both CPUs in the benchmark, for either transport. */
static void verify(const uint64_t *p, size_t words, int from, uint64_t m, int full) {
  if (!full) {
    verify_word(p, 0, from, m);
    verify_word(p, words - 1, from, m);
    return;
  }
  for (size_t w = 0; w < words; w++) verify_word(p, w, from, m);
}

int main(int argc, char **argv) {
  const char *lib = NULL, *which = "ib", *role = NULL, *dir = NULL, *check = "full";
  size_t size = 512 * 1024;
  long count = 64, inflight = 8, group = 1;
  double timeout = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--lib")) lib = v;
    else if (!strcmp(k, "--net")) which = v;
    else if (!strcmp(k, "--role")) role = v;
    else if (!strcmp(k, "--dir")) dir = v;
    else if (!strcmp(k, "--size")) size = strtoull(v, NULL, 0);
    else if (!strcmp(k, "--count")) count = strtol(v, NULL, 0);
    else if (!strcmp(k, "--inflight")) inflight = strtol(v, NULL, 0);
    else if (!strcmp(k, "--group")) group = strtol(v, NULL, 0);
    else if (!strcmp(k, "--check")) check = v;
    else if (!strcmp(k, "--timeout")) timeout = strtod(v, NULL);
    else die("unknown option %s", k);
  }
  if (!lib || !role || !dir || (strcmp(role, "a") && strcmp(role, "b")) ||
      (strcmp(which, "ib") && strcmp(which, "socket")) || size < 16 || size % 8 || count < 1 ||
      inflight < 1 || inflight > 64 || group < 1 || group > 8 || count % group)
    die("usage: %s --lib PATH --net ib|socket --role a|b --dir DIR [--size BYTES (multiple of 8)] "
        "[--count N] [--inflight K<=64] [--group G<=8, dividing N] [--check full|ends] [--timeout S]",
        argv[0]);
  int me = !strcmp(role, "b"), full = strcmp(check, "ends") != 0;
  const char *peer = me ? "a" : "b";
  snprintf(fail_mark, sizeof fail_mark, "%s/failed.%s", dir, role);
  snprintf(peer_fail_mark, sizeof peer_fail_mark, "%s/failed.%s", dir, peer);
  /* For the test that the checks catch damage: this side flips one byte of message N. */
  const char *corrupt_env = getenv("NCCL_NET_HARNESS_CORRUPT");
  long corrupt = corrupt_env ? strtol(corrupt_env, NULL, 0) : -1;
  double deadline = now() + timeout;

  net_v12_t *net = find_plugin(lib, which);
  void *ctx = NULL;
  comm_config_t config = {-1};
  CHECK(net->init(&ctx, 0x75726f6365ull, &config, logger, profiler));
  int ndev = 0;
  CHECK(net->devices(&ndev));
  if (ndev < 1) die("plugin %s found no device (NCCL_DEBUG=INFO says why)", net->name);
  props_t props;
  memset(&props, 0, sizeof props);
  CHECK(net->getProperties(0, &props));
  fprintf(stderr, "nccl-net: %s device 0 of %d: %s, port %d, %d Mb/s, ptrSupport 0x%x\n", net->name, ndev,
          props.name ? props.name : "?", props.port, props.speed, props.ptrSupport);

  /* Connection set-up: listen, swap handles, then connect and accept until both are done
   * (neither blocks; each is called again until it hands back a comm). */
  char handle[HANDLE_SIZE] = {0}, peer_handle[HANDLE_SIZE];
  void *lcomm = NULL, *scomm = NULL, *rcomm = NULL, *sdev = NULL, *rdev = NULL;
  CHECK(net->listen(ctx, 0, handle, &lcomm));
  publish(dir, role, "handle", handle, sizeof handle);
  await(dir, peer, "handle", peer_handle, sizeof peer_handle, deadline);
  double t_conn = now();
  while (!scomm || !rcomm) {
    if (!scomm) CHECK(net->connect(ctx, 0, peer_handle, &scomm, (void **)&sdev));
    if (!rcomm) CHECK(net->accept(lcomm, &rcomm, (void **)&rdev));
    if (now() > deadline) die("timed out connecting (send comm %p, receive comm %p)", scomm, rcomm);
  }
  t_conn = now() - t_conn;

  /* Receives in groups of `group` messages (one irecv of `group` buffers, as NCCL groups
   * point-to-point operations; the sender's isends carry tags 0..group-1 and go out
   * together once all of a group's are posted). */
  if (group > props.maxRecvs)
    die("%s takes at most %d buffers in one receive, not %ld", net->name, props.maxRecvs, group);
  size_t words = size / 8, slots = (size_t)inflight * group;
  uint8_t *sbuf = aligned_alloc(4096, size * slots), *rbuf = aligned_alloc(4096, size * slots);
  if (!sbuf || !rbuf) die("out of memory for %zu x %zu bytes", slots, size);
  memset(sbuf, 0, size * slots);
  memset(rbuf, 0, size * slots);
  void *smr = NULL, *rmr = NULL;
  CHECK(net->regMr(scomm, sbuf, size * slots, PTR_HOST, &smr));
  CHECK(net->regMr(rcomm, rbuf, size * slots, PTR_HOST, &rmr));

  /* Group g uses slots (g % inflight) * group + 0..group-1 of each buffer; a slot is
   * reused only once its request completed. */
  void *sreq[64 * 8] = {0}, *rreq[64] = {0};
  long groups = count / group;
  long sent = 0, sposted = 0, gdone = 0, gposted = 0, filled = -1, turns = 0;
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  double t0 = now();
  while (sent < count || gdone < groups) {
    /* Post what the window allows: NCCL's IB isend returns no request until the peer's
     * matching irecv has reached it, so it is tried again on the next turn. */
    while (gposted < groups && gposted - gdone < inflight) {
      size_t base = (size_t)(gposted % inflight) * group;
      void *data[8], *mh[8], *ph[8] = {0};
      size_t sz[8];
      int tags[8];
      for (int j = 0; j < group; j++) {
        data[j] = rbuf + (base + j) * size;
        sz[j] = size;
        tags[j] = j;
        mh[j] = rmr;
      }
      CHECK(net->irecv(rcomm, (int)group, data, sz, tags, mh, ph, &rreq[gposted % inflight]));
      if (!rreq[gposted % inflight]) break;
      gposted++;
    }
    while (sposted < count && sposted - sent < (long)slots) {
      size_t k = (size_t)((sposted / group) % inflight) * group + sposted % group;
      uint64_t *data = (uint64_t *)(sbuf + k * size);
      if (filled != sposted) {
        fill(data, words, me, sposted, full);
        if (sposted == corrupt) ((uint8_t *)data)[size - 1] ^= 0x40;
      }
      filled = sposted;
      CHECK(net->isend(scomm, data, size, (int)(sposted % group), smr, NULL, &sreq[k]));
      if (!sreq[k]) break;
      sposted++;
    }
    /* Complete in order: NCCL's requests on one comm complete in posting order. */
    while (sent < sposted) {
      size_t k = (size_t)((sent / group) % inflight) * group + sent % group;
      int done = 0, n = 0;
      CHECK(net->test(sreq[k], &done, &n));
      if (!done) break;
      if ((size_t)n != size) die("send %ld completed with %d bytes, not %zu", sent, n, size);
      sreq[k] = NULL;
      sent++;
    }
    while (gdone < gposted) {
      size_t base = (size_t)(gdone % inflight) * group;
      int done = 0, n[8] = {0};
      CHECK(net->test(rreq[gdone % inflight], &done, n));
      if (!done) break;
      for (int j = 0; j < group; j++) {
        long m = gdone * group + j;
        if ((size_t)n[j] != size) die("receive %ld completed with %d bytes, not %zu", m, n[j], size);
        uint64_t *data = (uint64_t *)(rbuf + (base + j) * size);
        verify(data, words, !me, m, full);
        data[0] = 0;
        data[words - 1] = 0;
      }
      rreq[gdone % inflight] = NULL;
      gdone++;
    }
    if ((++turns & 1023) == 0) check_peer();
    if (now() > deadline)
      die("timed out: sent %ld/%ld (posted %ld), received %ld/%ld (posted %ld)", sent, count, sposted,
          gdone * group, count, gposted * group);
  }
  double secs = now() - t0;
  getrusage(RUSAGE_SELF, &ru1);
  double cpu = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) * 1e-6 +
               (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6;

  /* Both sides are done before either closes: a comm closed early would fail the peer's
   * last requests. */
  char done_mark = 1;
  publish(dir, role, "done", &done_mark, 1);
  await(dir, peer, "done", &done_mark, 1, deadline + 10);
  CHECK(net->deregMr(scomm, smr));
  CHECK(net->deregMr(rcomm, rmr));
  CHECK(net->closeSend(scomm));
  CHECK(net->closeRecv(rcomm));
  CHECK(net->closeListen(lcomm));
  if (net->finalize) CHECK(net->finalize(ctx));
  double bytes = (double)size * count;
  printf("nccl-net: net=%s dev=%s role=%s sent %ld x %zu B, received %ld x %zu B, %s checked, "
         "inflight %ld, group %ld, connect %.3f s, %.3f s, %.3f GB/s per direction, cpu %.3f s, %.3f cpu-s/GB: OK\n",
         net->name, props.name ? props.name : "?", role, count, size, count, size,
         full ? "every byte" : "first and last 8 bytes", inflight, group, t_conn, secs, bytes / secs / 1e9, cpu,
         cpu / (2 * bytes / 1e9));
  return 0;
}
