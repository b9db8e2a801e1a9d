/* Status codes shared by cache/ and its callers. */
#ifndef GC_STATUS_H
#define GC_STATUS_H

typedef enum gc_status {
  GC_OK = 0,
  GC_ENOMEM = 1,   /* the device (or max_reserved_mb) has no room, even after releasing the cache */
  GC_EBACKEND = 2, /* the backend failed for another reason; the caller should pass through */
  GC_ENOTOWNED = 3, /* the address is not a live block of this pool */
  GC_EINVAL = 4,    /* bad argument */
  GC_EBUSY = 5,     /* cache/ only: an arena's lock was held (GC_ALLOC_TRY) */
  GC_ENOFIT = 6,    /* cache/ only: no ready block fits in the arena (GC_ALLOC_NO_GROW) */
  GC_ELENT = 7,     /* cache/ only: the block is a thread cache's (tcache.h): free it there */
} gc_status;

#endif
