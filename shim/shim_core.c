/* shim_core.c - the allocation core: which allocations and frees
 * fragpool serves and how, under the allocation interposer (shim_mem.c),
 * which only translates driver calls and CUresults.
 *
 * An allocation is served by the pool of the calling thread's current
 * context unless the driver must answer: no context, the process exiting,
 * a CUDA tool injected (shim_sanitizer.h), a capture that forbids it
 * (shim_streams.h), invalid arguments, own_segment_mb (a block of its
 * own, for IPC), a pool the program made current for cuMemAllocAsync, or
 * a stream being captured (a graph allocation node).  Each such call is
 * counted (fp_passthrough).  A freed block is handed out again only after
 * the work queued before the free has finished: deferred (shim_defer.c),
 * or with free_policy:sync by synchronizing in the free, as cuMemFree does.
 *
 * Lock rounds of a pool's lock per free: deferred (traced or not), the
 * free finds its pool and records itself in one locked step of each pool
 * asked (fp_pool_free_seen; the pool that holds the block is asked once),
 * and traced once threads have caches, one round first to name the block
 * for the row of a free that a cache takes (note_id);
 * free_policy:sync, one round for a block of the current context's pool,
 * and two more for another context's: see free_block.
 *
 * The default path of cuMemAlloc and cuMemFree (deferred, untraced) runs
 * code of this file, shim_pools.c and shim_defer.c only (and pool/); the
 * other files' checks it makes are static inline loads of their headers
 * (docs/design.md, "The allocation path"; scripts/check_layers.py rule f).
 *
 * Invariants: internal codes only (shim_core.h); a block of a
 * stream-ordered allocation leaves shim_mempool.c's table before the pool
 * has it back, and returns to it when the free does not happen.
 */
#include "shim_core.h"
#include "fp_assert.h"
#include "shim_advice.h"
#include "shim_clock.h"
#include "shim_defer.h"
#include "shim_ipc.h"
#include "shim_lend.h"
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

static FP_THREAD_LOCAL CUresult last_error;

CUresult fp_core_last_error(void)
{
    return last_error;
}

/* EIO with the driver's code r. */
static int driver_error(CUresult r)
{
    last_error = r;
    return EIO;
}

static void count(int k)
{
    atomic_fetch_add_explicit(&fp_passthrough[k], 1, memory_order_relaxed);
}

static bool deferred(void)
{
    return fp_shim.conf.free_policy == FP_FREE_DEFERRED;
}

/* The pool to serve this thread (held: fp_pools_put), or NULL to forward
 * to the driver. */
static fp_ctx_pool *serving_pool(void)
{
    if (atomic_load_explicit(&fp_shim.exiting, memory_order_relaxed))
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

/* own_segment_mb: true (and counted) when an allocation of bytes goes to
 * the driver whole, a segment of its own that IPC can export. */
static bool own_segment(size_t bytes)
{
    size_t n = fp_shim.conf.own_segment;
    if (!n || bytes < n)
        return false;
    atomic_fetch_add_explicit(&fp_state_ipc_tallies.own, 1, memory_order_relaxed);
    return true;
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

/* trace:PATH and snapshot:PATH - a block of d just allocated for a
 * request of asked bytes (its free is recorded inside the free:
 * record_free).  The trace's size is the request's: a block a thread's
 * cache gave back keeps its earlier request in the pool. */
static void trace_alloc(fp_ctx_pool *d, uint64_t addr, size_t asked, CUstream s)
{
    size_t size;
    uint64_t seq;
    if ((fp_tracer_on() || fp_snap_on()) && fp_pool_lookup(d->pool, addr, &size, &seq) == 0) {
        fp_tracer_event('a', fp_pools_trace_id(d, seq), asked, s);
        fp_snap_block(d->dev, 'a', addr, size, fp_pools_trace_id(d, seq), s);
    }
}

/* One try.  While a trace records, the try holds the trace's order lock
 * (the join of a thread's cache included), so that its rows come in the
 * order the calls changed the pool (shim_trace.c). */
static int serve(fp_ctx_pool *d, size_t size, CUstream s, bool async, CUdeviceptr *dptr)
{
    bool held = fp_tracer_order_begin();
    uint64_t t0 = fp_time_begin(), addr = 0;
    int err = deferred()
                  ? fp_defer_alloc(d->defer, d->pool, fp_pools_tcache(d), size, s, async, &addr)
                  : fp_pool_alloc(d->pool, size, &addr);
    fp_time_end(t0);
    if (!atomic_load_explicit(&fp_shim.used, memory_order_relaxed)) /* keep the line shared */
        atomic_store_explicit(&fp_shim.used, true, memory_order_relaxed);
    debug_check(d);
    if (!err) {
        *dptr = addr;
        trace_alloc(d, addr, size, s);
    }
    fp_tracer_order_end(held);
    return err;
}

/* s and async: the stream of cuMemAllocAsync, for same-stream reuse.  When
 * the device ran out, the other fragpool processes on it are asked for
 * their idle memory (shim_lend.h, no lock held) and the allocation is
 * tried once more.  The OOM's record and search come after that, holding
 * no lock either: no other thread waits for them. */
static int pool_alloc(fp_ctx_pool *d, CUdeviceptr *dptr, size_t size, CUstream s, bool async)
{
    fp_lend_note(d);
    int err = serve(d, size, s, async, dptr);
    if (err == ENOMEM && fp_lend_ask(d, size) && (err = serve(d, size, s, async, dptr)) == 0)
        fp_lend_served(d);
    if (err == ENOMEM) {
        bool held = fp_tracer_order_begin();
        fp_tracer_event('o', 0, size, s); /* the request the run failed on */
        fp_snap_oom(d->dev, size, s);
        fp_tracer_order_end(held);
        fp_advice_oom(d);
    }
    return !err || err == ENOMEM ? err : driver_error(fp_pools_last_error());
}

int fp_core_alloc(size_t size, bool valid, CUdeviceptr *dptr)
{
    fp_ctx_pool *d = serving_pool();
    int err = !d || !valid || own_segment(size) ? ENOENT : pool_alloc(d, dptr, size, NULL, false);
    fp_pools_put(d);
    return err;
}

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

int fp_core_alloc_async(size_t size, bool valid, CUstream s,
                        fp_PFN_cuStreamIsCapturing is_capturing, CUdeviceptr *dptr)
{
    fp_ctx_pool *d = serving_pool();
    if (d && fp_mempool_foreign(d->dev)) { /* the program's own current pool: the driver's */
        count(FP_PT_ASYNC_POOL);
        fp_pools_put(d);
        d = NULL;
    }
    bool cap = false;
    CUresult r = d && valid ? stream_capturing(is_capturing, s, &cap) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && d && cap) /* a graph allocation node: the driver's */
        count(FP_PT_OTHER);
    if (r != CUDA_SUCCESS || !d || cap || !valid) {
        fp_pools_put(d);
        return r != CUDA_SUCCESS ? driver_error(r) : ENOENT;
    }
    int err = pool_alloc(d, dptr, size, s, true);
    if (!err)
        fp_mempool_allocated(d->dev, *dptr, size);
    fp_pools_put(d);
    return err;
}

/* ---- frees ------------------------------------------------------------ */

static void invalid_free(const char *who, CUdeviceptr p)
{
    fp_say("%s(0x%llx): not the start of a live allocation (double free or interior pointer); "
           "nothing was freed, returning CUDA_ERROR_INVALID_VALUE",
           who, (unsigned long long)p);
}

/* free_policy:sync: wait as cuMemFree does (sync is the stream's
 * synchronize for cuMemFreeAsync, NULL for the context's). */
static int sync_before_free(fp_ctx_pool *d, CUstream s, fp_PFN_cuStreamSynchronize sync)
{
    if (atomic_load(&fp_shim.exiting))
        return 0;
    fp_time_slow(); /* the synchronization is this free's wait */
    if (sync) {
        CUresult r = sync(s);
        return r == CUDA_SUCCESS ? 0 : driver_error(r);
    }
    return fp_pools_sync(d) ? driver_error(fp_pools_last_error()) : 0;
}

typedef struct free_req {
    CUdeviceptr p;
    CUstream s;
    fp_ctx_pool *d; /* the pool asked now */
    uint64_t stamp;
    size_t size;
    int err;
    int refused;      /* the first error of a pool whose segments hold p */
    bool cached;      /* the calling thread's cache took it (no pool lock)   */
    uint64_t id;      /* while tracing: the block's trace id (0: not live)   */
    size_t requested; /* and its request, for the row                   */
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

/* While tracing: the trace id of the live block r->p, for the row of a
 * free that a thread's cache takes (the pool then answers it as freed). */
static bool note_id(fp_ctx_pool *d, void *ud)
{
    free_req *r = ud;
    uint64_t seq;
    if (fp_pool_lookup(d->pool, r->p, &r->requested, &seq))
        return false;
    r->id = fp_pools_trace_id(d, seq);
    return true;
}

static void trace_cached_free(const free_req *r)
{
    if (r->id)
        fp_tracer_event('f', r->id, r->requested, r->s);
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

/* free_policy:sync, the common case in one round of a pool's lock: the
 * block is one of the current context's pool.  That context is
 * synchronized first, then the pool frees the block (or says it is not
 * its).  NULL when it is not that pool's, or there is none, or the
 * synchronization failed and that pool does not hold p (the caller then
 * finds the owner: a foreign pointer still goes to the driver, whatever
 * this context's state); a synchronization before a foreign pointer's
 * free costs nothing that the driver's cuMemFree would not. */
static fp_ctx_pool *sync_free_current(free_req *r, fp_PFN_cuStreamSynchronize sync, int *res)
{
    fp_ctx_pool *d = fp_pools_current_existing();
    if (!d)
        return NULL;
    *res = sync_before_free(d, r->s, sync);
    if (*res ? holds_live(d, &r->p) : try_free(d, r) || r->err != ENOENT)
        return d;
    *res = 0;
    r->err = 0;
    r->refused = 0;
    fp_pools_put(d);
    return NULL;
}

/* The pool that held r->p (held: fp_pools_put), which is freed now
 * (r->err says how that went), or NULL when no pool has it; *res: 0, or
 * the code of a failed synchronization (nothing freed).
 *
 * Deferred (traced or not), the free itself finds the pool and records
 * itself: one round of each pool asked.  free_policy:sync synchronizes
 * before the block is back in best fit, never under a pool's lock (every
 * allocation of the pool would wait for the device, and one that a
 * device wait depends on could deadlock): a block of the current
 * context's pool takes one round (sync_free_current); a block of another
 * context's pool, whose owner is known only under its lock, two more. */
static fp_ctx_pool *free_block(free_req *r, fp_PFN_cuStreamSynchronize sync, int *res)
{
    *res = 0;
    if (deferred()) {
        if (fp_tracer_on() && atomic_load_explicit(&fp_pools_threads, memory_order_relaxed))
            fp_pools_put(fp_pools_find(note_id, r));
        fp_ctx_pool *d = fp_pools_free_cached(r->p, r->s, &r->size, &r->stamp);
        r->cached = d != NULL;
        if (d) {
            trace_cached_free(r);
            return d;
        }
        d = fp_pools_find(try_free, r);
        if (d || !r->refused)
            return d;
        r->err = r->refused; /* no pool freed it, one holds it: refused */
        return fp_pools_owner(r->p);
    }
    fp_ctx_pool *d = sync_free_current(r, sync, res);
    if (d)
        return d;
    d = owner_of(r->p);
    if (d)
        *res = sync_before_free(d, r->s, sync);
    if (d && !*res)
        try_free(d, r);
    return d;
}

/* Gives p back to the pool that holds it, with no driver call unless
 * free_policy:sync.  ENOENT when p is no block of fragpool's (the caller
 * forwards it). */
static int release(CUdeviceptr p, CUstream s, bool async, fp_PFN_cuStreamSynchronize sync,
                   const char *who)
{
    uint64_t t0 = fp_time_begin();
    free_req r = {.p = p, .s = s};
    int res;
    uint64_t so = fp_mempool_take(p);    /* a stream-ordered block: out before it is reusable */
    bool held = fp_tracer_order_begin(); /* the free and its row, in order (pool_alloc) */
    fp_ctx_pool *d = free_block(&r, sync, &res);
    fp_tracer_order_end(held);
    fp_time_end(t0);
    if (d && res)
        fp_mempool_untake(p, so); /* not freed: still live */
    fp_assert(!d || res || r.err || r.size > 0, "a freed block has a size");
    if (!d)
        return ENOENT;
    if (!res && !r.err && async && deferred() && !r.cached) /* a cache keeps its stream */
        fp_defer_freed_async(d->defer, p, r.size, r.stamp, s);
    if (!res)
        debug_check(d);
    fp_pools_put(d);
    if (!res && r.err) {
        invalid_free(who, p);
        return EINVAL;
    }
    return res;
}

int fp_core_free(CUdeviceptr p, const char *who)
{
    fp_ipc_block_freed(p);
    return release(p, NULL, false, NULL, who);
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
int fp_core_free_async(CUdeviceptr p, CUstream s, fp_PFN_cuStreamIsCapturing is_capturing,
                       fp_PFN_cuStreamSynchronize sync, const char *who)
{
    bool cap = false;
    CUresult r = stream_capturing(is_capturing, s, &cap);
    if ((r != CUDA_SUCCESS || cap) && !owned(p)) {
        fp_ipc_block_freed(p);
        return ENOENT; /* not ours: the driver answers, capture or not */
    }
    if (r != CUDA_SUCCESS)
        return driver_error(r); /* the block stays allocated */
    if (cap) {
        fp_say("cuMemFreeAsync(0x%llx) during stream capture of a block fragpool owns: "
               "unsupported, the block stays allocated; returning "
               "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
               (unsigned long long)p);
        return EBUSY;
    }
    fp_ipc_block_freed(p);
    return release(p, s, true, sync, who);
}
