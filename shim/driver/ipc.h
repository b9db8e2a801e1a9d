/* IPC of pool blocks that lie on expandable segments' pages (docs/DESIGN.md, "IPC").
 *
 * Legacy IPC (cuIpcGetMemHandle) cannot share memory mapped through the virtual memory API. For
 * such a block the handle the program gets names this process, a random key and the block; the
 * process that opens it (under the shim too) asks this one over a Unix socket for the block's
 * pages as file descriptors (POSIX handles, SCM_RIGHTS), imports them and maps them at fresh
 * addresses. Handles of other memory are the driver's and pass through untouched. */
#ifndef GC_IPC_H
#define GC_IPC_H

#include <cuda.h>
#include <stdbool.h>

/* cuIpcGetMemHandle of p. Post: true when p lies in a live block on pages (*result says how it
 * went: CUDA_SUCCESS and *handle filled, or the error with one line saying why); false when p
 * is not such a block (the caller goes on as before). */
bool gc_ipc_export(CUipcMemHandle *handle, CUdeviceptr p, CUresult *result);

/* cuIpcOpenMemHandle of a handle gc_ipc_export made (in any process). Post: true with
 * *result set when the handle is ours; false for a driver handle. Opening one handle twice
 * gives the same address and one more reference, as the driver does. */
bool gc_ipc_open(CUdeviceptr *p, const CUipcMemHandle *handle, unsigned int flags,
                 CUresult *result);

/* cuIpcCloseMemHandle of p. Post: true with *result set when p came from gc_ipc_open; false
 * otherwise. The last close waits for the context's work (a mapping is not unmapped under
 * queued work) and unmaps. */
bool gc_ipc_close(CUdeviceptr p, CUresult *result);

#endif
