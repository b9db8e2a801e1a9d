/* Allocation site tags: what the pool keeps with a block (its caller, or a backtrace). */
#ifndef GC_SITE_TAG_H
#define GC_SITE_TAG_H

#include <stddef.h>
#include <stdint.h>

/* Allocation sites. A block's tag is the caller's return address, or with GPUCACHE_BACKTRACE=1
 * a recorded backtrace. */
uintptr_t gc_site_tag(void *return_address);
void gc_site_tag_release(uintptr_t tag);
/* The innermost code address of a tag (the caller of the allocation function); and up to max
 * of its frames, innermost first (returns the count). Neither resolves anything: safe under a
 * pool lock, while the tag's block is live. */
uintptr_t gc_site_tag_pc(uintptr_t tag);
size_t gc_site_tag_frames(uintptr_t tag, uintptr_t *out, size_t max);

#endif
