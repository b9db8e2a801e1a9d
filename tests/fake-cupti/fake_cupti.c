/* A fake libcupti.so.13 for CPU tests of shim/probe/cupti_source.c. FAKE_CUPTI picks its behaviour:
 *   held  cuptiSubscribe_v2 fails as when Nsight or a profiler holds CUPTI
 *   v12   cuptiGetVersion answers a CUPTI 12 API version (another record layout)
 *   ok    (default) the first cuptiActivityFlushAll delivers a fixed set of memory records
 * It implements cuptiActivityGetNextRecord itself, over the buffers it fills. */
#include <cupti.h>
#include <stdlib.h>
#include <string.h>

#define MiB(x) ((uint64_t)(x) << 20)

static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static int delivered;

static const char *mode(void) {
  const char *m = getenv("FAKE_CUPTI");
  return m && *m ? m : "ok";
}

CUptiResult cuptiGetVersion(uint32_t *version) {
  *version = strcmp(mode(), "v12") ? CUPTI_API_VERSION : 24;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
  *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (fake)";
  return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *user) {
  (void)cb;
  (void)user;
  if (!strcmp(mode(), "held")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  *sub = (CUpti_SubscriberHandle)(void *)&delivered;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *user,
                              CUpti_SubscriberParams *p) {
  if (!strcmp(mode(), "held") && p && p->oldSubscriberName && p->oldSubscriberSize > 0) {
    strncpy(p->oldSubscriberName, "Nsight Systems (fake)", p->oldSubscriberSize - 1);
    p->oldSubscriberName[p->oldSubscriberSize - 1] = '\0';
  }
  return cuptiSubscribe(sub, cb, user);
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle sub) {
  (void)sub;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                           CUpti_BuffersCallbackCompleteFunc done) {
  requested = req;
  completed = done;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableAllocationSource(uint8_t enable) {
  (void)enable;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  return kind == CUPTI_ACTIVITY_KIND_MEMORY2 || kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL
             ? CUPTI_SUCCESS
             : CUPTI_ERROR_INVALID_KIND;
}

static size_t record_size(const CUpti_Activity *r) {
  return r->kind == CUPTI_ACTIVITY_KIND_MEMORY2 ? sizeof(CUpti_ActivityMemory4)
                                                : sizeof(CUpti_ActivityMemoryPool3);
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record) {
  uint8_t *next = *record ? (uint8_t *)*record + record_size(*record) : buffer;
  if (next >= buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = (CUpti_Activity *)(void *)next;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *dropped) {
  (void)ctx;
  (void)stream;
  *dropped = 0;
  return CUPTI_SUCCESS;
}

static uint8_t *put_memory(uint8_t *at, int op, int kind, uint64_t addr, uint64_t bytes,
                           const char *source, uint64_t pool, uint64_t ts) {
  CUpti_ActivityMemory4 m;
  memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = (CUpti_ActivityMemoryOperationType)op;
  m.memoryKind = (CUpti_ActivityMemoryKind)kind;
  m.address = addr;
  m.bytes = bytes;
  m.timestamp = ts;
  m.deviceId = 0;
  m.source = source;
  if (pool) {
    m.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
    m.memoryPoolConfig.address = pool;
    m.memoryPoolConfig.pool.size = MiB(32);
    m.memoryPoolConfig.utilizedSize = bytes;
  }
  memcpy(at, &m, sizeof m);
  return at + sizeof m;
}

/* Device 0, outside the pool: 8 MiB from cuBLASLt, 1 MiB of __device__ variables, 2 MiB of
 * pinned host memory, 16 MiB from NCCL allocated and released, a release of an allocation
 * never seen; a 32 MiB cudaMallocAsync pool with 4 MiB allocated from it. */
CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  if (!requested || !completed || delivered) return CUPTI_SUCCESS;
  delivered = 1;
  uint8_t *buf = NULL;
  size_t size = 0, max = 0;
  requested(&buf, &size, &max);
  if (!buf || size < 16 * sizeof(CUpti_ActivityMemory4)) return CUPTI_ERROR_UNKNOWN;
  enum { A = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION };
  enum { R = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE };
  enum { DEV = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE };
  uint8_t *p = buf;
  p = put_memory(p, A, DEV, 0xA000000000, MiB(8), "/usr/lib/x86_64/libcublasLt.so.13", 0, 1);
  p = put_memory(p, A, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC, 0xA100000000, MiB(1), "/w/app", 0,
                 2);
  p = put_memory(p, A, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0x7f0000000000, MiB(2), "/w/app", 0, 3);
  p = put_memory(p, A, DEV, 0xA200000000, MiB(16), "/opt/nccl/libnccl.so.2", 0, 4);
  p = put_memory(p, R, DEV, 0xA200000000, MiB(16), NULL, 0, 5);
  p = put_memory(p, R, DEV, 0xA300000000, MiB(1), NULL, 0, 6);
  CUpti_ActivityMemoryPool3 pool;
  memset(&pool, 0, sizeof pool);
  pool.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
  pool.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED;
  pool.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  pool.address = 0xB000000000;
  pool.size = MiB(32);
  pool.timestamp = 7;
  memcpy(p, &pool, sizeof pool);
  p += sizeof pool;
  p = put_memory(p, A, DEV, 0xB000000000, MiB(4), "/w/app", 0xB000000000, 8);
  completed(NULL, 0, buf, size, (size_t)(p - buf));
  return CUPTI_SUCCESS;
}
