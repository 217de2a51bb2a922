/* shim_core.h - the allocation core under shim_mem.c (shim_core.c): which
 * allocations and frees fragpool serves, and how (the pools, deferred
 * reuse or free_policy:sync, the trace and the snapshot), behind five
 * calls.
 *
 * Invariant: these return 0 or an errno code, never a CUresult; the
 * interposer translates: ENOENT, not fragpool's (forward the call to the
 * driver untouched); ENOMEM, the pool is out of memory; EIO, the driver
 * failed (fp_core_last_error is its CUresult); EINVAL, a free of no live
 * block (said already); EBUSY, a free during a capture that fragpool
 * cannot serve (said already).  The caller has run fp_shim_init, which
 * returned true.
 */
#ifndef FP_SHIM_CORE_H
#define FP_SHIM_CORE_H

#include "fp_cuda.h"
#include "shim_funcs.h"
#include <stdbool.h>
#include <stddef.h>

/* cuMemAlloc and cuMemAllocPitch: size bytes into *dptr; valid: the
 * arguments are ones the driver accepts (else ENOENT after the passthrough
 * count, as before any check). */
int fp_core_alloc(size_t size, bool valid, CUdeviceptr *dptr);
/* cuMemAllocAsync on s (is_capturing: the driver's query, for s). */
int fp_core_alloc_async(size_t size, bool valid, CUstream s,
                        fp_PFN_cuStreamIsCapturing is_capturing, CUdeviceptr *dptr);
/* cuMemFree of p (who: the entry point, for the message of an invalid
 * free). */
int fp_core_free(CUdeviceptr p, const char *who);
/* cuMemFreeAsync of p on s (is_capturing, sync: the driver's calls for s). */
int fp_core_free_async(CUdeviceptr p, CUstream s, fp_PFN_cuStreamIsCapturing is_capturing,
                       fp_PFN_cuStreamSynchronize sync, const char *who);
/* The driver's code behind this thread's last EIO. */
CUresult fp_core_last_error(void);

#endif
