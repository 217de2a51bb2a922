/* shim_ctx_api.c - the driver's memory and context entry points beside
 * allocation: cuMemGetInfo (idle cache counted as free with
 * meminfo_counts_cache), the pass-throughs the summary counts (managed
 * memory, the driver's own pools, virtual memory), peer access (VMM pages
 * grant it themselves), cuCtxSynchronize (it covers every block freed
 * before it), and the calls that end a context (its pools retire).
 *
 * An interposer (docs/design.md): each function keeps the driver's
 * contract, calls fp_shim_init first and the core files below it, and no
 * core file calls it.  Allocation and free are shim_mem.c's.
 */
#include "shim_defer.h"
#include "shim_life.h"
#include "shim_mempool.h"
#include "shim_pages.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_streams.h"

static void count(int k)
{
    atomic_fetch_add_explicit(&fp_passthrough[k], 1, memory_order_relaxed);
}

/* ---- memory info -------------------------------------------------------- */

CUresult cuMemGetInfo_v2(size_t *free_out, size_t *total_out)
{
    if (!fp_shim_init() || !fp_real.cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    size_t fr = 0, tot = 0;
    CUresult r = fp_real.cuMemGetInfo_v2(&fr, &tot);
    if (r != CUDA_SUCCESS)
        return r;
    CUdevice dev;
    if (fp_shim.conf.meminfo_counts_cache && fp_real.cuCtxGetDevice(&dev) == CUDA_SUCCESS) {
        size_t idle = fp_pools_idle(dev);
        fr = idle > tot - (fr < tot ? fr : tot) ? tot : fr + idle;
    }
    if (free_out)
        *free_out = fr;
    if (total_out)
        *total_out = tot;
    return CUDA_SUCCESS;
}

/* ---- passed through, counted --------------------------------------------- */

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    count(FP_PT_MANAGED);
    fp_shim_init();
    return fp_real.cuMemAllocManaged ? fp_real.cuMemAllocManaged(dptr, bytesize, flags)
                                     : CUDA_ERROR_NOT_SUPPORTED;
}

/* cuMemAllocHost_v2, cuMemHostAlloc, cuMemFreeHost: shim_host_api.c. */

/* The driver's own stream-ordered pools and the virtual-memory calls are
 * the program's business: passed through, counted for the summary. */
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream)
{
    count(FP_PT_ASYNC_POOL);
    fp_shim_init();
    return fp_real.cuMemAllocFromPoolAsync
               ? fp_real.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream)
               : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    count(FP_PT_ASYNC_POOL);
    fp_shim_init();
    return fp_real.cuMemAllocFromPoolAsync_ptsz
               ? fp_real.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream)
               : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    count(FP_PT_VMM);
    fp_shim_init();
    return fp_real.cuMemCreate ? fp_real.cuMemCreate(handle, size, prop, flags)
                               : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    count(FP_PT_VMM);
    fp_shim_init();
    return fp_real.cuMemAddressReserve
               ? fp_real.cuMemAddressReserve(ptr, size, alignment, addr, flags)
               : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    count(FP_PT_VMM);
    fp_shim_init();
    return fp_real.cuMemMap ? fp_real.cuMemMap(ptr, size, offset, handle, flags)
                            : CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- peer access: VMM pages grant it themselves ------------------------- */

/* The pool of context c (made now if it has none; held), or NULL. */
static fp_ctx_pool *pool_of(CUcontext c)
{
    if (fp_real.cuCtxPushCurrent_v2(c) != CUDA_SUCCESS)
        return NULL;
    fp_ctx_pool *d = fp_pools_current();
    CUcontext popped;
    fp_real.cuCtxPopCurrent_v2(&popped);
    return d;
}

/* The current context gains access to the memory of peerContext.  Memory
 * of cuMemAlloc is visible to it then; VMM pages are not unless
 * cuMemSetAccess grants it: peerContext's pool grants the current
 * context's device access on every page it has mapped and maps later. */
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    fp_shim_init();
    if (!fp_real.cuCtxEnablePeerAccess)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = fp_real.cuCtxEnablePeerAccess(peerContext, Flags);
    bool on = r == CUDA_SUCCESS || r == FP_CUDA_PEER_ALREADY_ENABLED;
    CUdevice me = 0;
    if (!on || !fp_shim.conf.pool.expandable_segments || atomic_load(&fp_shim.exiting) ||
        fp_real.cuCtxGetDevice(&me) != CUDA_SUCCESS)
        return r;
    fp_ctx_pool *d = pool_of(peerContext);
    if (d && fp_pages_add_peer(d->vmm, me))
        fp_say("cuCtxEnablePeerAccess: granting device %d access to fragpool's mapped "
               "pages of device %d failed (CUresult %d); kernels of device %d cannot "
               "reach them",
               (int)me, (int)d->dev, (int)fp_pages_last_error(), (int)me);
    fp_pools_put(d);
    return r;
}

/* ---- a program's synchronization covers every block freed before it --- */

CUresult cuCtxSynchronize(void)
{
    if (!fp_shim_init() || !fp_real.cuCtxSynchronize)
        return CUDA_ERROR_NOT_INITIALIZED;
    fp_ctx_pool *d = atomic_load(&fp_shim.exiting) ? NULL : fp_pools_current_existing();
    uint64_t clock = d ? fp_pool_clock(d->pool) : 0;
    CUresult r = fp_real.cuCtxSynchronize();
    if (r == CUDA_SUCCESS && d)
        fp_defer_synchronized(d->defer, clock);
    fp_pools_put(d);
    if (r == CUDA_SUCCESS)
        fp_mempool_synchronized(); /* a release threshold: idle memory above it goes */
    return r;
}

/* ---- contexts going away take their memory with them ----------------------- */

/* Each under both names: the plain ones are what dlsym and ctypes find by
 * name and what cuGetProcAddress gives for old cudaVersion values. */
static CUresult ctx_destroy(fp_PFN_cuCtxDestroy_v2 real, CUcontext ctx)
{
    fp_shim_init();
    if (!real)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(ctx);
    if (r == CUDA_SUCCESS) {
        fp_pools_retire(ctx, 0, false);
        fp_mempool_ctx_gone();
        fp_capture_ctx_gone(ctx); /* its captures ended with it */
    }
    return r;
}

static CUresult primary_reset(fp_PFN_cuDevicePrimaryCtxReset_v2 real, CUdevice dev)
{
    fp_shim_init();
    if (!real)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS) {
        fp_pools_retire(NULL, dev, true);
        fp_mempool_ctx_gone();
        fp_capture_primary_gone(dev);
    }
    return r;
}

/* The primary context ends with its last release. */
static CUresult primary_release(fp_PFN_cuDevicePrimaryCtxRelease_v2 real, CUdevice dev)
{
    fp_shim_init();
    if (!real)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(dev);
    unsigned flags = 0;
    int active = 1;
    if (r == CUDA_SUCCESS && fp_real.cuDevicePrimaryCtxGetState &&
        fp_real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
        fp_pools_retire(NULL, dev, true);
        fp_mempool_ctx_gone();
        fp_capture_primary_gone(dev);
    }
    return r;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx_destroy(fp_real.cuCtxDestroy_v2, ctx);
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    return ctx_destroy(fp_real.cuCtxDestroy, ctx);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_reset(fp_real.cuDevicePrimaryCtxReset_v2, dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_reset(fp_real.cuDevicePrimaryCtxReset, dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_release(fp_real.cuDevicePrimaryCtxRelease_v2, dev);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_release(fp_real.cuDevicePrimaryCtxRelease, dev);
}
