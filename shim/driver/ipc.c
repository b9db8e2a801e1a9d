/* IPC of blocks on pages (ipc.h). The exporting side keeps a record per shared block (its
 * pages' handles, a random key) and answers requests on an abstract Unix socket named after its
 * pid, from a thread of its own started at the first export; the pages go out as POSIX file
 * descriptors exported at each request and closed once sent, so nothing is held open between
 * requests. The opening side imports them, maps them at a fresh range and releases its
 * handles (the mapping keeps the memory). Only a process of the same user, holding the key,
 * gets an answer. */
#include "ipc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctx_guard.h"
#include "driver_real.h"
#include "log.h"
#include "pools.h"

#define GC_IPC_BATCH 64 /* descriptors a message carries (the kernel's limit is 253) */

/* The handle's bytes. version 1. */
typedef struct gc_ipc_wire {
  char magic[8];
  uint32_t version;
  int32_t pid;
  uint64_t key;
  uint64_t offset; /* of the block from the first page */
  uint64_t size;   /* the block's bytes */
  uint64_t page;
  uint32_t n; /* pages */
  int32_t device;
} gc_ipc_wire;
_Static_assert(sizeof(gc_ipc_wire) <= CU_IPC_HANDLE_SIZE, "fits a CUipcMemHandle");
static const char gc_ipc_magic[8] = "gpucache";

typedef struct gc_ipc_request {
  char magic[8];
  uint64_t key;
} gc_ipc_request;

typedef struct gc_ipc_reply {
  int32_t status; /* 0 ok; else the CUresult the opener returns */
  uint32_t n;
} gc_ipc_reply;

/* ---- the exporting side ---------------------------------------------------------------- */

typedef struct gc_export {
  uint64_t key;
  int device;
  gc_block_pages view; /* view.addr: the block */
  uint64_t *pages;
} gc_export;

static pthread_mutex_t gc_ipc_mu = PTHREAD_MUTEX_INITIALIZER;
static gc_export *gc_exports;
static size_t gc_nexports, gc_capexports;
static _Atomic pid_t gc_server_pid; /* the process whose server runs (a forked child has none) */
static int gc_server_fd = -1;
/* Every shared block starts in [gc_shared_lo, gc_shared_hi]: a free elsewhere takes no lock.
 * Only widened (under the lock), so a free never misses a block shared before it. */
static _Atomic uint64_t gc_shared_lo = UINT64_MAX, gc_shared_hi;

static void socket_name(pid_t pid, struct sockaddr_un *a, socklen_t *len) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  /* Abstract (leading NUL): no file to clean up; gone with the process. */
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "gpucache-ipc-%d", (int)pid);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static gc_export *export_find(uint64_t key, uint64_t addr) {
  for (size_t i = 0; i < gc_nexports; i++)
    if (key ? gc_exports[i].key == key : gc_exports[i].view.addr == addr) return &gc_exports[i];
  return NULL;
}

/* A free of a shared block ends its sharing (the driver refuses to open a freed allocation). */
static void forget(uint64_t addr) {
  if (addr < atomic_load_explicit(&gc_shared_lo, memory_order_acquire) ||
      addr > atomic_load_explicit(&gc_shared_hi, memory_order_acquire) ||
      atomic_load_explicit(&gc_server_pid, memory_order_relaxed) != getpid())
    return;
  pthread_mutex_lock(&gc_ipc_mu);
  gc_export *e = export_find(0, addr);
  if (e) {
    free(e->pages);
    *e = gc_exports[--gc_nexports];
  }
  pthread_mutex_unlock(&gc_ipc_mu);
}

static bool send_fds(int conn, const int *fds, uint32_t n) {
  char ctl[CMSG_SPACE(sizeof(int) * GC_IPC_BATCH)];
  memset(ctl, 0, sizeof ctl);
  struct iovec io = {.iov_base = &n, .iov_len = sizeof n};
  struct msghdr m = {.msg_iov = &io,
                     .msg_iovlen = 1,
                     .msg_control = ctl,
                     .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * n);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  return sendmsg(conn, &m, MSG_NOSIGNAL) == (ssize_t)sizeof n;
}

/* One request: the pages of the block named by its key, exported now and closed once sent.
 * Under the lock, so a free of the block (forget) cannot run between the look-up and the
 * export. */
static void serve(int conn) {
  gc_ipc_request q;
  struct ucred cred;
  socklen_t clen = sizeof cred;
  if (recv(conn, &q, sizeof q, MSG_WAITALL) != (ssize_t)sizeof q ||
      memcmp(q.magic, gc_ipc_magic, sizeof q.magic) != 0 ||
      getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != getuid())
    return;
  pthread_mutex_lock(&gc_ipc_mu);
  gc_export *e = export_find(q.key, 0);
  gc_ipc_reply r = {.status = e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, .n = 0};
  int fds[GC_IPC_BATCH];
  gc_ctx_guard g;
  bool entered = e && gc_ctx_enter(e->device, &g);
  if (e && !entered) r.status = CUDA_ERROR_INVALID_CONTEXT;
  if (entered) {
    r.n = (uint32_t)e->view.n;
    if (send(conn, &r, sizeof r, MSG_NOSIGNAL) != (ssize_t)sizeof r) r.n = 0;
    for (uint32_t i = 0; i < r.n;) {
      uint32_t k = 0;
      for (; k < GC_IPC_BATCH && i + k < r.n; k++) {
        CUresult x = GC_DRV_CALL(cuMemExportToShareableHandle, &fds[k],
                                 (CUmemGenericAllocationHandle)e->pages[i + k],
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (x != CUDA_SUCCESS) break;
      }
      bool sent = k && send_fds(conn, fds, k);
      for (uint32_t j = 0; j < k; j++)
        close(fds[j]);
      if (!sent) break; /* the opener sees fewer pages than promised and fails */
      i += k;
    }
    gc_ctx_leave(&g);
  } else {
    (void)!send(conn, &r, sizeof r, MSG_NOSIGNAL);
  }
  pthread_mutex_unlock(&gc_ipc_mu);
}

static void *server(void *arg) {
  int fd = (int)(intptr_t)arg;
  for (;;) {
    int conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      gc_log("IPC: the socket that shares blocks stopped accepting (%s)", strerror(errno));
      return NULL;
    }
    /* A peer that stops reading must not hold the lock (and frees of shared blocks) for long. */
    struct timeval limit = {.tv_sec = 5};
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    serve(conn);
    close(conn);
  }
}

/* Under gc_ipc_mu. A forked child starts over: its parent's records and socket are not its. */
static bool server_up(void) {
  pid_t me = getpid();
  if (atomic_load_explicit(&gc_server_pid, memory_order_relaxed) == me) return true;
  if (gc_server_fd >= 0) close(gc_server_fd);
  gc_server_fd = -1;
  for (size_t i = 0; i < gc_nexports; i++)
    free(gc_exports[i].pages);
  gc_nexports = 0;
  struct sockaddr_un a;
  socklen_t len;
  socket_name(me, &a, &len);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 64) != 0) {
    gc_log("IPC: cannot open the socket that shares blocks on pages (%s)", strerror(errno));
    if (fd >= 0) close(fd);
    return false;
  }
  /* The program's signals go to its own threads, never to ours. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int err = pthread_create(&t, &at, server, (void *)(intptr_t)fd);
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    gc_log("IPC: cannot start the thread that shares blocks on pages (%s)", strerror(err));
    close(fd);
    return false;
  }
  gc_server_fd = fd;
  atomic_store_explicit(&gc_server_pid, me, memory_order_relaxed);
  gc_pools_watch_frees(forget);
  return true;
}

/* The records v (exports or imports, `size` bytes each) with room for more, *cap grown; under
 * gc_ipc_mu. NULL: out of host memory, v and *cap unchanged. */
static void *grow(void *v, size_t *cap, size_t size) {
  size_t n = *cap * 2 + 8;
  void *w = realloc(v, n * size);
  if (w) *cap = n;
  return w;
}

static uint64_t new_key(void) {
  uint64_t k = 0;
  while (!k)
    if (getrandom(&k, sizeof k, 0) != (ssize_t)sizeof k) k = 0;
  return k;
}

bool gc_ipc_export(CUipcMemHandle *handle, CUdeviceptr p, CUresult *result) {
  uint64_t start;
  size_t size;
  if (!gc_pools_in_pages(p) || !gc_pools_block_range(p, &start, &size)) return false;
  gc_block_pages view;
  int device;
  uint64_t one;
  if (!gc_pools_block_pages(start, &device, &view, &one, 1)) return false;
  uint64_t *pages = malloc(view.n * sizeof *pages);
  gc_block_pages again;
  if (!pages || !gc_pools_block_pages(start, &device, &again, pages, view.n) || again.n != view.n ||
      again.first != view.first) {
    free(pages); /* out of host memory, or freed meanwhile (a race of the program's) */
    *result = pages ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    return true;
  }
  if (!handle) {
    free(pages);
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  /* The pages must export as file descriptors: fail here, not in the other process. Once per
   * device (an export cost 1.1 ms on an H100): every page is made the same way. */
  static atomic_bool exports_work[GC_MAX_DEVICES];
  bool checked = device >= 0 && device < GC_MAX_DEVICES &&
                 atomic_load_explicit(&exports_work[device], memory_order_relaxed);
  int probe = -1;
  gc_ctx_guard g;
  CUresult x = checked ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  if (!checked && gc_ctx_enter(device, &g)) {
    x = GC_DRV_CALL(cuMemExportToShareableHandle, &probe, (CUmemGenericAllocationHandle)pages[0],
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    gc_ctx_leave(&g);
  }
  if (x != CUDA_SUCCESS) {
    free(pages);
    static atomic_bool said;
    if (!atomic_exchange(&said, true))
      gc_log("cuIpcGetMemHandle(%#llx) refused: the block lies on pages mapped through CUDA's "
             "virtual memory API, and the driver would not export them as file descriptors "
             "(%d). Run with GPUCACHE_CONF=expandable_segments:False to share memory over IPC.",
             (unsigned long long)p, (int)x);
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  if (!checked) {
    close(probe);
    if (device >= 0 && device < GC_MAX_DEVICES)
      atomic_store_explicit(&exports_work[device], true, memory_order_relaxed);
  }
  pthread_mutex_lock(&gc_ipc_mu);
  gc_export *e = NULL;
  if (server_up()) {
    e = export_find(0, start);
    if (!e && gc_nexports == gc_capexports) {
      gc_export *v = grow(gc_exports, &gc_capexports, sizeof *v);
      if (v) gc_exports = v;
    }
    if (e) {
      free(pages);
    } else if (gc_nexports == gc_capexports) {
      free(pages); /* out of host memory: the records already made stay */
    } else {
      e = &gc_exports[gc_nexports++];
      *e = (gc_export){.key = new_key(), .device = device, .view = view, .pages = pages};
      if (start < atomic_load_explicit(&gc_shared_lo, memory_order_relaxed))
        atomic_store_explicit(&gc_shared_lo, start, memory_order_release);
      if (start > atomic_load_explicit(&gc_shared_hi, memory_order_relaxed))
        atomic_store_explicit(&gc_shared_hi, start, memory_order_release);
    }
  } else {
    free(pages);
  }
  gc_ipc_wire w = {0};
  if (e) {
    w = (gc_ipc_wire){.version = 1,
                      .pid = (int32_t)getpid(),
                      .key = e->key,
                      .offset = e->view.addr - e->view.first,
                      .size = e->view.size,
                      .page = e->view.page,
                      .n = (uint32_t)e->view.n,
                      .device = e->device};
    memcpy(w.magic, gc_ipc_magic, sizeof w.magic);
  }
  pthread_mutex_unlock(&gc_ipc_mu);
  if (!e) {
    *result = CUDA_ERROR_OPERATING_SYSTEM;
    return true;
  }
  memset(handle, 0, sizeof *handle);
  memcpy(handle->reserved, &w, sizeof w);
  gc_debug(1, "IPC: shared the block at %#llx (%llu bytes, %u pages)", (unsigned long long)start,
           (unsigned long long)w.size, w.n);
  *result = CUDA_SUCCESS;
  return true;
}

/* ---- the opening side ------------------------------------------------------------------ */

typedef struct gc_import {
  int32_t pid;
  uint64_t key;
  CUdeviceptr va;
  uint64_t page, offset;
  uint32_t n;
  unsigned refs;
} gc_import;

static gc_import *gc_imports;
static size_t gc_nimports, gc_capimports;

/* Receive up to want descriptors into fds; returns how many came (stops at the first short or
 * failed message). */
static uint32_t recv_fds(int conn, int *fds, uint32_t want) {
  uint32_t got = 0;
  while (got < want) {
    uint32_t k = 0;
    char ctl[CMSG_SPACE(sizeof(int) * GC_IPC_BATCH)];
    struct iovec io = {.iov_base = &k, .iov_len = sizeof k};
    struct msghdr m = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    if (recvmsg(conn, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC) != (ssize_t)sizeof k) break;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) break;
    uint32_t n = (uint32_t)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (uint32_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (got < want && i < k)
        fds[got++] = fd;
      else
        close(fd);
    }
    if (n != k || (m.msg_flags & MSG_CTRUNC)) break;
  }
  return got;
}

/* Ask the exporter for the pages: a connected socket with the reply read, or -1 with *err. */
static int ask(const gc_ipc_wire *w, gc_ipc_reply *r, CUresult *err) {
  struct sockaddr_un a;
  socklen_t len;
  socket_name(w->pid, &a, &len);
  int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  gc_ipc_request q = {.key = w->key};
  memcpy(q.magic, gc_ipc_magic, sizeof q.magic);
  if (conn < 0 || connect(conn, (struct sockaddr *)&a, len) != 0) {
    gc_log("IPC: cannot reach process %d, which made the handle (%s): it must be alive and in "
           "this network namespace",
           (int)w->pid, strerror(errno));
    if (conn >= 0) close(conn);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return -1;
  }
  if (send(conn, &q, sizeof q, MSG_NOSIGNAL) != (ssize_t)sizeof q ||
      recv(conn, r, sizeof *r, MSG_WAITALL) != (ssize_t)sizeof *r) {
    close(conn);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return -1;
  }
  if (r->status != CUDA_SUCCESS || r->n != w->n) {
    close(conn);
    *err = r->status != CUDA_SUCCESS ? (CUresult)r->status : CUDA_ERROR_INVALID_HANDLE;
    gc_debug(1, "IPC: process %d refused the handle (%d): the block was freed, or not shared",
             (int)w->pid, (int)*err);
    return -1;
  }
  return conn;
}

/* Unmap n pages from va (one call each: a call covers one mapping) and free the range. Returns
 * the first unmap's error, if any. */
static CUresult unmap_all(CUdeviceptr va, uint64_t page, uint32_t n) {
  const gc_real_drv *r = gc_real_cuda();
  CUresult e = CUDA_SUCCESS;
  for (uint32_t i = 0; i < n; i++) {
    CUresult x = r->cuMemUnmap(va + i * page, (size_t)page);
    if (e == CUDA_SUCCESS) e = x;
  }
  r->cuMemAddressFree(va, (size_t)page * n);
  return e;
}

/* Import and map n pages at a fresh range of the current context's device. */
static CUresult map_pages(const gc_ipc_wire *w, const int *fds, CUdeviceptr *va_out) {
  const gc_real_drv *r = gc_real_cuda();
  CUdevice dev;
  CUresult e = GC_DRV_CALL(cuCtxGetDevice, &dev);
  if (e != CUDA_SUCCESS) return e;
  if (!r->cuMemAddressReserve || !r->cuMemMap || !r->cuMemSetAccess ||
      !r->cuMemImportFromShareableHandle || !r->cuMemUnmap || !r->cuMemAddressFree)
    return CUDA_ERROR_NOT_SUPPORTED;
  size_t len = (size_t)w->page * w->n;
  CUdeviceptr va = 0;
  if ((e = r->cuMemAddressReserve(&va, len, (size_t)w->page, 0, 0)) != CUDA_SUCCESS) return e;
  uint32_t mapped = 0;
  for (; mapped < w->n; mapped++) {
    CUmemGenericAllocationHandle h;
    e = r->cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fds[mapped],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (e != CUDA_SUCCESS) break;
    e = r->cuMemMap(va + mapped * w->page, (size_t)w->page, 0, h, 0);
    r->cuMemRelease(h); /* the mapping holds the memory now */
    if (e != CUDA_SUCCESS) break;
  }
  if (e == CUDA_SUCCESS) {
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    e = r->cuMemSetAccess(va, len, &d, 1);
  }
  if (e != CUDA_SUCCESS) {
    unmap_all(va, w->page, mapped);
    return e;
  }
  *va_out = va;
  return CUDA_SUCCESS;
}

/* Opens one at a time, so that two threads opening one handle map it once (a second open
 * finds the first's import); not gc_ipc_mu, which the server takes: a process may open its
 * own handle. */
static pthread_mutex_t gc_ipc_open_mu = PTHREAD_MUTEX_INITIALIZER;

/* Under gc_ipc_open_mu: the import of handle w, mapped now or found. */
static void open_one(CUdeviceptr *p, const gc_ipc_wire *w, CUresult *result) {
  pthread_mutex_lock(&gc_ipc_mu);
  for (size_t i = 0; i < gc_nimports; i++)
    if (gc_imports[i].pid == w->pid && gc_imports[i].key == w->key) {
      gc_imports[i].refs++;
      *p = gc_imports[i].va + gc_imports[i].offset;
      pthread_mutex_unlock(&gc_ipc_mu);
      *result = CUDA_SUCCESS;
      return;
    }
  pthread_mutex_unlock(&gc_ipc_mu);
  gc_ipc_reply r;
  int conn = ask(w, &r, result);
  if (conn < 0) return;
  int *fds = malloc(w->n * sizeof *fds);
  uint32_t got = fds ? recv_fds(conn, fds, w->n) : 0;
  close(conn);
  CUdeviceptr va = 0;
  *result = !fds          ? CUDA_ERROR_OUT_OF_MEMORY
            : got == w->n ? map_pages(w, fds, &va)
                          : CUDA_ERROR_INVALID_HANDLE;
  if (fds && got != w->n)
    gc_log("IPC: process %d sent %u of the block's %u pages (the driver would not export the "
           "rest as file descriptors)",
           (int)w->pid, got, w->n);
  for (uint32_t i = 0; i < got; i++)
    close(fds[i]);
  free(fds);
  if (*result != CUDA_SUCCESS) return;
  pthread_mutex_lock(&gc_ipc_mu);
  if (gc_nimports == gc_capimports) {
    gc_import *v = grow(gc_imports, &gc_capimports, sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&gc_ipc_mu);
      unmap_all(va, w->page, w->n);
      *result = CUDA_ERROR_OUT_OF_MEMORY;
      return;
    }
    gc_imports = v;
  }
  gc_imports[gc_nimports++] = (gc_import){.pid = w->pid,
                                          .key = w->key,
                                          .va = va,
                                          .page = w->page,
                                          .offset = w->offset,
                                          .n = w->n,
                                          .refs = 1};
  pthread_mutex_unlock(&gc_ipc_mu);
  *p = va + w->offset;
}

bool gc_ipc_open(CUdeviceptr *p, const CUipcMemHandle *handle, unsigned int flags,
                 CUresult *result) {
  gc_ipc_wire w;
  memcpy(&w, handle->reserved, sizeof w);
  if (memcmp(w.magic, gc_ipc_magic, sizeof w.magic) != 0) return false;
  (void)flags; /* access is granted to the opening device; peers follow the driver's rule */
  if (!p || w.version != 1 || !w.n || !w.page || w.offset + w.size > w.page * (uint64_t)w.n) {
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  pthread_mutex_lock(&gc_ipc_open_mu);
  open_one(p, &w, result);
  pthread_mutex_unlock(&gc_ipc_open_mu);
  return true;
}

bool gc_ipc_close(CUdeviceptr p, CUresult *result) {
  pthread_mutex_lock(&gc_ipc_mu);
  size_t i = 0;
  while (i < gc_nimports && gc_imports[i].va + gc_imports[i].offset != p)
    i++;
  if (i == gc_nimports) {
    pthread_mutex_unlock(&gc_ipc_mu);
    return false;
  }
  gc_import m = gc_imports[i];
  if (--gc_imports[i].refs == 0) gc_imports[i] = gc_imports[--gc_nimports];
  pthread_mutex_unlock(&gc_ipc_mu);
  *result = CUDA_SUCCESS;
  if (m.refs > 1) return true;
  /* cuMemUnmap does not wait for queued work as the driver's close does. */
  CUresult e = GC_DRV_CALL(cuCtxSynchronize);
  CUresult u = unmap_all(m.va, m.page, m.n);
  *result = e != CUDA_SUCCESS ? e : u;
  return true;
}
