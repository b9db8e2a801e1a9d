/* Compiler hints shared by cache/, report/ and shim/. */
#ifndef GC_COMPILER_H
#define GC_COMPILER_H

/* The rare half of a function whose common half is a few instructions on every allocation:
 * kept out of line, so that the common half is small enough to inline (the build links with
 * LTO) and its callers need no stack frame for the rare case. */
#define GC_COLD __attribute__((noinline, cold))

#define GC_LIKELY(x) __builtin_expect(!!(x), 1)
#define GC_UNLIKELY(x) __builtin_expect(!!(x), 0)

#endif
