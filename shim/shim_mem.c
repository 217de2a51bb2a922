/* shim_mem.c - the driver entry points that fragpool serves or counts.
 *
 * Each function keeps the driver's contract: the same arguments are
 * rejected with the same CUresult, failures return the driver's own code,
 * and whatever the pool does not own goes to the driver untouched.  A
 * freed block is handed out again only after the work queued before the
 * free has finished: deferred (shim_defer.c), or with free_policy:sync by
 * synchronizing in the free, as cuMemFree does.
 *
 * An interposer (docs/design.md): like the other entry points of the shim
 * (shim_capture.c, shim_ipc.c, shim_hooks.c) it returns CUresult, calls
 * fp_shim_init first and the core files below it, and no core file calls
 * it.
 */
#include "fp_assert.h"
#include "shim_advice.h"
#include "shim_clock.h"
#include "shim_defer.h"
#include "shim_ipc.h"
#include "shim_life.h"
#include "shim_mempool.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_sanitizer.h"
#include "shim_snaprec.h"
#include "shim_state.h"
#include "shim_streams.h"
#include "shim_trace.h"
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static void count(int k)
{
    atomic_fetch_add_explicit(&fp_passthrough[k], 1, memory_order_relaxed);
}

/* The pool to serve this thread (held: fp_pools_put), or NULL to forward
 * to the driver. */
static fp_ctx_pool *serving_pool(void)
{
    if (!fp_shim_init() || atomic_load_explicit(&fp_shim.exiting, memory_order_relaxed))
        return NULL;
    if (fp_tools_passthrough()) { /* compute-sanitizer or a profiler: the driver's */
        count(FP_PT_OTHER);
        return NULL;
    }
    if (fp_capture_refuses_unsafe()) { /* a capture forbids it: the driver's answer */
        count(FP_PT_OTHER);
        return NULL;
    }
    fp_ctx_pool *d = fp_pools_current();
    if (!d)
        count(FP_PT_OTHER);
    return d;
}

/* debug_check:1 - verify the pool after every operation, stop at the
 * first broken invariant. */
static void debug_check(fp_ctx_pool *d)
{
    char msg[256];
    if (fp_shim.conf.debug_check && fp_pool_check(d->pool, msg, sizeof msg)) {
        fp_say("debug_check: pool of device %d is corrupt: %s; aborting", d->dev, msg);
        abort();
    }
}

/* trace:PATH and snapshot:PATH - a block of d just allocated (its free is
 * recorded inside the free: record_free). */
static void trace_block(fp_ctx_pool *d, char op, uint64_t addr, CUstream s)
{
    size_t size;
    uint64_t seq;
    if ((fp_tracer_on() || fp_snap_on()) && fp_pool_lookup(d->pool, addr, &size, &seq) == 0) {
        fp_tracer_event(op, fp_pools_trace_id(d, seq), size, s);
        fp_snap_block(d->dev, op, addr, size, fp_pools_trace_id(d, seq), s);
    }
}

static bool deferred(void)
{
    return fp_shim.conf.free_policy == FP_FREE_DEFERRED;
}

/* s and async: the stream of cuMemAllocAsync, for same-stream reuse. */
static CUresult pool_alloc(fp_ctx_pool *d, CUdeviceptr *dptr, size_t size, CUstream s, bool async)
{
    uint64_t t0 = fp_time_begin(), addr = 0;
    int err = deferred() ? fp_defer_alloc(d->defer, d->pool, size, s, async, &addr)
                         : fp_pool_alloc(d->pool, size, &addr);
    fp_time_end(t0);
    if (!atomic_load_explicit(&fp_shim.used, memory_order_relaxed)) /* keep the line shared */
        atomic_store_explicit(&fp_shim.used, true, memory_order_relaxed);
    debug_check(d);
    if (!err) {
        *dptr = addr;
        trace_block(d, 'a', addr, s);
        return CUDA_SUCCESS;
    }
    if (err == ENOMEM) {
        fp_tracer_event('o', 0, size, s); /* the request the run failed on */
        fp_snap_oom(d->dev, size, s);
        fp_advice_oom(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return fp_pools_last_error();
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    fp_ctx_pool *d = serving_pool();
    if (!d || !dptr || bytesize == 0 || fp_ipc_own_segment(bytesize)) {
        fp_pools_put(d);
        return fp_real.cuMemAlloc_v2 ? fp_real.cuMemAlloc_v2(dptr, bytesize)
                                     : CUDA_ERROR_NOT_INITIALIZED;
    }
    CUresult r = pool_alloc(d, dptr, bytesize, NULL, false);
    fp_pools_put(d);
    return r;
}

static void invalid_free(const char *who, CUdeviceptr p)
{
    fp_say("%s(0x%llx): not the start of a live allocation (double free or interior pointer); "
           "nothing was freed, returning CUDA_ERROR_INVALID_VALUE",
           who, (unsigned long long)p);
}

/* free_policy:sync: wait as cuMemFree does (sync is the stream's
 * synchronize for cuMemFreeAsync, NULL for the context's). */
static CUresult sync_before_free(fp_ctx_pool *d, CUstream s, fp_PFN_cuStreamSynchronize sync)
{
    if (atomic_load(&fp_shim.exiting))
        return CUDA_SUCCESS;
    fp_time_slow(); /* the synchronization is this free's wait */
    return sync ? sync(s) : (fp_pools_sync(d) ? fp_pools_last_error() : CUDA_SUCCESS);
}

typedef struct free_req {
    CUdeviceptr p;
    CUstream s;
    fp_ctx_pool *d; /* the pool asked now */
    uint64_t stamp;
    size_t size;
    int err;
    int refused; /* the first error of a pool whose segments hold p */
} free_req;

/* trace:PATH and snapshot:PATH - the free of a block, under its pool's
 * lock (fp_free_seen): its rows come before any reuse of its memory. */
static void record_free(void *ud, const fp_freed *f)
{
    free_req *r = ud;
    fp_tracer_event('f', fp_pools_trace_id(r->d, f->seq), f->requested, r->s);
    fp_snap_freed(r->d->dev, r->p, f->requested, r->s);
}

/* One lock round of d's pool: the free, and its record when recording. */
static bool try_free(fp_ctx_pool *d, void *ud)
{
    free_req *r = ud;
    fp_freed f;
    r->d = d;
    bool rec = fp_tracer_on() || fp_snap_on();
    r->err = fp_pool_free_seen(d->pool, r->p, &f, rec ? record_free : NULL, r);
    if (!r->err) {
        r->stamp = f.freed_at;
        r->size = f.size;
    }
    if (r->err && r->err != ENOENT && !r->refused)
        r->refused = r->err;
    return r->err == 0;
}

static bool holds_live(fp_ctx_pool *d, void *ud)
{
    size_t size;
    uint64_t seq;
    return fp_pool_lookup(d->pool, *(CUdeviceptr *)ud, &size, &seq) == 0;
}

/* The pool that holds p as a live block, else one whose segments hold p
 * (held), or NULL.  Two pools hold the same address only for a moment: a
 * context was destroyed, the driver gave its memory to another context's
 * pool, and the first pool is not retired yet. */
static fp_ctx_pool *owner_of(CUdeviceptr p)
{
    fp_ctx_pool *d = fp_pools_find(holds_live, &p);
    return d ? d : fp_pools_owner(p);
}

/* The pool that held r->p (held: fp_pools_put), which is freed now
 * (r->err says how that went), or NULL when no pool has it.
 *
 * Lock rounds of a pool's lock: deferred (traced or not), the free itself
 * finds the pool and records it in the same locked step: one round of
 * each pool asked (the pool that holds p is asked once).  free_policy:sync
 * takes two rounds of the owner's lock: the synchronization must come
 * after the owner is known (its context, or whether the block is ours at
 * all: a foreign pointer goes to the driver unsynchronized) and before
 * the block is back in best fit, and the owner is known only under its
 * lock (a pool's segment table is covered by that lock); synchronizing
 * under the lock instead would make every allocation of the pool wait for
 * the device, and one a device wait depends on could deadlock. */
static fp_ctx_pool *free_block(free_req *r, fp_PFN_cuStreamSynchronize sync, CUresult *res)
{
    *res = CUDA_SUCCESS;
    if (deferred()) {
        fp_ctx_pool *d = fp_pools_find(try_free, r);
        if (d || !r->refused)
            return d;
        r->err = r->refused; /* no pool freed it, one holds it: refused */
        return fp_pools_owner(r->p);
    }
    fp_ctx_pool *d = owner_of(r->p);
    if (d)
        *res = sync_before_free(d, r->s, sync);
    if (d && *res == CUDA_SUCCESS)
        try_free(d, r);
    return d;
}

/* Gives p back to the pool that holds it, with no driver call unless
 * free_policy:sync.  Returns 1 when p is no block of fragpool's (the
 * caller forwards it), else 0 with *res set. */
static int release(CUdeviceptr p, CUstream s, bool async, fp_PFN_cuStreamSynchronize sync,
                   const char *who, CUresult *res)
{
    uint64_t t0 = fp_time_begin();
    free_req r = {.p = p, .s = s};
    uint64_t so = fp_mempool_take(p); /* a stream-ordered block: out before it is reusable */
    fp_ctx_pool *d = free_block(&r, sync, res);
    fp_time_end(t0);
    if (d && *res != CUDA_SUCCESS)
        fp_mempool_untake(p, so); /* not freed: still live */
    fp_assert(!d || *res != CUDA_SUCCESS || r.err || r.size > 0, "a freed block has a size");
    if (!d)
        return 1;
    if (*res == CUDA_SUCCESS && !r.err && async && deferred())
        fp_defer_freed_async(d->defer, p, r.size, r.stamp, s);
    if (*res == CUDA_SUCCESS)
        debug_check(d);
    fp_pools_put(d);
    if (*res == CUDA_SUCCESS && r.err) {
        invalid_free(who, p);
        *res = CUDA_ERROR_INVALID_VALUE;
    }
    return 0;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult res;
    fp_ipc_block_freed(dptr);
    if (dptr && fp_shim_init() && release(dptr, NULL, false, NULL, "cuMemFree", &res) == 0)
        return res;
    if (dptr)
        count(FP_PT_OTHER);
    return fp_real.cuMemFree_v2 ? fp_real.cuMemFree_v2(dptr) : CUDA_ERROR_NOT_INITIALIZED;
}

/* The driver's pitch rule: rows padded to the pitch alignment. */
#define FP_PITCH_ALIGN 512u

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    fp_ctx_pool *d = serving_pool();
    bool bad = !dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
               (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16);
    size_t pitch = (WidthInBytes + FP_PITCH_ALIGN - 1) & ~(size_t)(FP_PITCH_ALIGN - 1);
    if (!bad && (pitch < WidthInBytes || Height > SIZE_MAX / pitch))
        bad = true;
    if (!d || bad || fp_ipc_own_segment(pitch * Height)) {
        fp_pools_put(d);
        return fp_real.cuMemAllocPitch_v2 ? fp_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes,
                                                                       Height, ElementSizeBytes)
                                          : CUDA_ERROR_NOT_INITIALIZED;
    }
    CUresult r = pool_alloc(d, dptr, pitch * Height, NULL, false);
    fp_pools_put(d);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* ---- stream-ordered allocation ---------------------------------------- */

/* Whether s is capturing, asking the driver: an invalid handle gets the
 * driver's own error, before the pool does anything. */
static CUresult stream_capturing(fp_PFN_cuStreamIsCapturing is_capturing, CUstream s,
                                 bool *capturing)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = is_capturing ? is_capturing(s, &st) : CUDA_SUCCESS;
    *capturing = r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
    return r;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream s, fp_PFN_cuMemAllocAsync real,
                            fp_PFN_cuStreamIsCapturing is_capturing)
{
    fp_ctx_pool *d = serving_pool();
    if (d && fp_mempool_foreign(d->dev)) { /* the program's own current pool: the driver's */
        count(FP_PT_ASYNC_POOL);
        fp_pools_put(d);
        d = NULL;
    }
    bool cap = false;
    CUresult r = d && dptr && size ? stream_capturing(is_capturing, s, &cap) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && d && cap) /* a graph allocation node: the driver's */
        count(FP_PT_OTHER);
    if (r != CUDA_SUCCESS || !d || cap || !dptr || size == 0) {
        fp_pools_put(d);
        return r != CUDA_SUCCESS ? r : real ? real(dptr, size, s) : CUDA_ERROR_NOT_SUPPORTED;
    }
    r = pool_alloc(d, dptr, size, s, true);
    if (r == CUDA_SUCCESS)
        fp_mempool_allocated(d->dev, *dptr, size);
    fp_pools_put(d);
    return r;
}

/* Whether a pool of fragpool's holds p. */
static bool owned(CUdeviceptr p)
{
    fp_ctx_pool *d = fp_pools_owner(p);
    fp_pools_put(d);
    return d != NULL;
}

/* The capture check comes first, so that the free itself finds the pool
 * (one lock round): only a failed check or a capture asks whose p is. */
static CUresult free_async(CUdeviceptr p, CUstream s, fp_PFN_cuMemFreeAsync real,
                           fp_PFN_cuStreamIsCapturing is_capturing, fp_PFN_cuStreamSynchronize sync)
{
    bool served = p && fp_shim_init(), cap = false;
    CUresult r = served ? stream_capturing(is_capturing, s, &cap) : CUDA_SUCCESS;
    if ((r != CUDA_SUCCESS || cap) && !owned(p))
        served = false; /* not ours: the driver answers, capture or not */
    else if (r != CUDA_SUCCESS)
        return r; /* the block stays allocated */
    else if (cap) {
        fp_say("cuMemFreeAsync(0x%llx) during stream capture of a block fragpool owns: "
               "unsupported, the block stays allocated; returning "
               "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
               (unsigned long long)p);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    CUresult res;
    fp_ipc_block_freed(p);
    if (served && release(p, s, true, sync, "cuMemFreeAsync", &res) == 0)
        return res;
    if (p)
        count(FP_PT_OTHER);
    return real ? real(p, s) : CUDA_ERROR_NOT_SUPPORTED;
}

/* The stream a _ptsz entry point means: there, 0 is the calling thread's
 * per-thread stream, which fragpool's own calls (and its same-stream
 * matching) must name explicitly. */
static CUstream per_thread(CUstream s)
{
    return s ? s : CU_STREAM_PER_THREAD;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream, fp_real.cuMemAllocAsync,
                       fp_real.cuStreamIsCapturing);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, per_thread(hStream), fp_real.cuMemAllocAsync_ptsz,
                       fp_real.cuStreamIsCapturing_ptsz);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, fp_real.cuMemFreeAsync, fp_real.cuStreamIsCapturing,
                      fp_real.cuStreamSynchronize);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, per_thread(hStream), fp_real.cuMemFreeAsync_ptsz,
                      fp_real.cuStreamIsCapturing_ptsz, fp_real.cuStreamSynchronize_ptsz);
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
