/* The one way gpucache writes a file (reports now; snapshots, traces and whatever comes later
 * too), safe in shared directories such as /tmp (docs/REPORT.md, "Files in shared
 * directories"). */
#ifndef GC_SAFE_FILE_H
#define GC_SAFE_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Created files get this mode unless asked otherwise (GPUCACHE_REPORT_MODE): reports name
 * libraries, paths and sizes. */
#define GC_FILE_MODE_DEFAULT 0600

/* Writes len bytes of data as the whole content of path.
 * - A new file, or an existing regular file, is written to a temporary file created in the
 *   same directory (O_EXCL|O_NOFOLLOW, mode exactly `mode & 0777`) and renamed over path:
 *   it appears whole or not at all.
 * - An existing character device or FIFO (/dev/null, a FIFO a pipeline reads) is written in
 *   place; /dev/stdout and /dev/stderr reaching a regular file write to that stream.
 * - Links, in the directories of the path and at its end, are judged before they are
 *   followed, by the kernel's protected_symlinks rule whatever the sysctl says: in a sticky
 *   world-writable directory only links owned by the effective uid or by the directory's
 *   owner are followed. A regular file is never written (nor created) through a link owned
 *   by another uid.
 * Returns 0, or -1 after one line on stderr: "gpucache: cannot write WHAT to PATH: REASON".
 * Never aborts. Not for signal handlers (it allocates nothing, but blocks on FIFOs). */
int gc_safe_write_file(const char *what, const char *path, const void *data, size_t len,
                       mode_t mode);

#endif
