/* shim_host_api.c - the pinned-host-memory entry points: cuMemHostAlloc,
 * cuMemAllocHost_v2, cuMemFreeHost, and the queries that must answer for
 * pooled blocks (cuMemHostGetFlags, cuMemHostGetDevicePointer_v2; the
 * pointer attributes are shim_ranges.c's).  The pool is shim_host.c;
 * which flags it serves is said there and in docs/shim.md.
 *
 * Each wrapper keeps the driver's contract: what the pool does not own
 * goes to the driver untouched (arguments it refuses too, for its own
 * error), failures return the driver's codes, and a pointer inside a pool
 * segment that is no live block gets CUDA_ERROR_INVALID_VALUE, as the
 * driver answers for memory it never gave.  For a live block,
 * cuMemHostGetDevicePointer goes to the driver, whose answer for a pointer
 * of the segment is the block's (the device pointer of pinned memory is
 * its host pointer); cuMemHostGetFlags gives the flags the block was asked
 * with, not the segment's.
 */
#include "shim_host.h"
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include <errno.h>
#include <stdint.h>

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    fp_shim_init();
    int err = pp ? fp_host_alloc(bytesize, flags, pp) : ENOENT;
    if (!err)
        return CUDA_SUCCESS;
    if (err != ENOENT)
        return fp_host_last_error();
    fp_host_passed();
    return fp_real.cuMemHostAlloc ? fp_real.cuMemHostAlloc(pp, bytesize, flags)
                                  : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return host_alloc(pp, bytesize, Flags);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void *p)
{
    fp_shim_init();
    int err = fp_host_free(p);
    if (err == ENOENT)
        return fp_real.cuMemFreeHost ? fp_real.cuMemFreeHost(p) : CUDA_ERROR_NOT_INITIALIZED;
    if (err == EINVAL)
        return CUDA_ERROR_INVALID_VALUE;
    return err ? fp_pools_last_error() : CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    fp_shim_init();
    fp_host_found b;
    int err = fp_host_lookup((uint64_t)(uintptr_t)p, &b);
    if (err == EINVAL || (!err && !pFlags))
        return CUDA_ERROR_INVALID_VALUE;
    if (!err) {
        /* as the driver answers (measured on an H200): with unified
         * addressing every pinned block is mapped, so DEVICEMAP is set */
        *pFlags = b.flags | CU_MEMHOSTALLOC_DEVICEMAP;
        return CUDA_SUCCESS;
    }
    return fp_real.cuMemHostGetFlags ? fp_real.cuMemHostGetFlags(pFlags, p)
                                     : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    fp_shim_init();
    fp_host_found b;
    if (fp_host_lookup((uint64_t)(uintptr_t)p, &b) == EINVAL)
        return CUDA_ERROR_INVALID_VALUE;
    return fp_real.cuMemHostGetDevicePointer_v2
               ? fp_real.cuMemHostGetDevicePointer_v2(pdptr, p, Flags)
               : CUDA_ERROR_NOT_SUPPORTED;
}
