/* Where an allocation came from, for the "possible leaks" table: "libfoo.so!symbol+0x1a". */
#ifndef GC_SITE_H
#define GC_SITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The code address `return_address` (from __builtin_return_address(0) in the interposed
 * function) as "library-basename!symbol+0xoffset", or "library-basename+0xoffset" when the
 * symbol is not exported, or "0x7f..." when no loaded object contains it. Never fails; buf is
 * always terminated (cap > 0). Uses dladdr: call it outside signal handlers. */
void gc_site_of(void *return_address, char *buf, size_t cap);

/* Frames from backtrace(3) (GPUCACHE_BACKTRACE=1), each formatted as gc_site_of does, joined
 * by " <- " (innermost first), cut at a frame boundary to fit cap. Returns the frames shown. */
size_t gc_site_format_frames(void *const *frames, size_t count, char *buf, size_t cap);

/* The same address as two parts, for a memory snapshot's frame: `name` "symbol+0xoffset" (or
 * "+0xoffset" in the object when the symbol is not exported, or "0x7f..." when no object holds
 * it) and `file` the object's path ("" when unknown). Uses dladdr. */
void gc_site_parts(uintptr_t pc, char *name, size_t name_cap, char *file, size_t file_cap);

/* The path of the object holding `pc` (a return address), "(main program)" when the loader
 * names none, "(unknown)" (and false) when no object holds it. Uses dladdr. */
bool gc_site_object(uintptr_t pc, char *path, size_t cap);

#endif
