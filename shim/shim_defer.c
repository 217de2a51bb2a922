/* shim_defer.c - free without synchronizing: stream-ordered deferred reuse.
 *
 * cuMemFree synchronizes the device, and programs rely on that.  Here a
 * free makes no driver call at all: the block becomes pending (the pool
 * keeps it out of reach) and joins the open batch.  Now and then the
 * open batch is sealed by a fence: one event on the legacy default stream
 * (which orders every blocking stream and every per-thread default stream)
 * and one on each live non-blocking stream of the context.  A pending
 * block is reclaimed only when every event of a fence sealed after its
 * free has completed, that is when all work queued before the free has
 * finished.  Allocations poll fences with cuEventQuery; when one cannot be
 * served from the cache, it waits for the oldest fence, or synchronizes
 * the context when no fence is in flight, before the pool may grow.
 * defer_headroom_mb relaxes that last rule by a bound: the pool may grow
 * while at most that many bytes wait for a fence.
 *
 * cuMemFreeAsync(p, s) also remembers the stream: cuMemAllocAsync on the
 * same stream may take such a block back at once, since stream order puts
 * the new work after the old.
 *
 * Invariants: q holds pending entries in free order; fences form a ring
 * (oldest at fhead); fence(f, i).end is the q position sealed by the i-th
 * oldest fence, increasing; entries before fence(f, 0).end
 * belong to the oldest fence, those from the last fence's end on are open.
 * A reclaim or reuse presents the ticket from the deferral, so an entry
 * made stale by reuse can never release a block that is live again.
 */
#include "shim.h"
#include <stdlib.h>
#include <string.h>

/* A fence costs an event record per stream (~0.2-0.3 us on an H200), so
 * frees are sealed in batches: every FP_SEAL_BLOCKS frees, or once the
 * open bytes pass a quarter of what the pool reserves (at least
 * FP_SEAL_BYTES), which bounds the memory that waits for a fence. */
#define FP_SEAL_BLOCKS 16
#define FP_POLL_EVERY 32   /* allocations between two polls on cache hits */
#define FP_SEAL_BYTES ((size_t)256 << 20)

/* ---- the pending queue -------------------------------------------------- */

static int q_push(fp_defer *f, const fp_pending *e)
{
    if (f->tail - f->head == f->qcap) {
        size_t ncap = f->qcap ? f->qcap * 2 : 1024;
        fp_pending *nq = malloc(ncap * sizeof *nq);
        if (!nq)
            return -1;
        for (uint64_t i = f->head; i < f->tail; i++)
            nq[i & (ncap - 1)] = f->q[i & (f->qcap - 1)];
        free(f->q);
        f->q = nq;
        f->qcap = ncap;
    }
    f->q[f->tail & (f->qcap - 1)] = *e;
    f->tail++;
    f->pending_bytes += e->size;
    return 0;
}

/* Reclaims every entry before q position end, in batches of one pool
 * lock each.  Stale tickets (blocks reused since) are skipped by the pool. */
static void reclaim_until(fp_ctx_pool *d, uint64_t end)
{
    fp_defer *f = &d->defer;
    fp_claim batch[64];
    size_t n = 0;
    for (; f->head < end; f->head++) {
        fp_pending *e = &f->q[f->head & (f->qcap - 1)];
        f->pending_bytes -= e->size;
        batch[n++] = (fp_claim){e->addr, e->ticket};
        if (n == 64) {
            fp_pool_reclaim_n(d->pool, batch, n);
            n = 0;
        }
    }
    if (n)
        fp_pool_reclaim_n(d->pool, batch, n);
}

/* ---- events and fences ---------------------------------------------------- */

/* The i-th oldest fence in flight (i == nfences: the next free slot). */
static fp_fence *fence(fp_defer *f, int i)
{
    return &f->fences[(f->fhead + i) % FP_MAX_FENCES];
}

static CUevent event_get(fp_defer *f)
{
    if (f->nspare)
        return f->spare[--f->nspare];
    CUevent ev = NULL;
    if (fp_real.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    return ev;
}

static void event_put(fp_defer *f, CUevent ev)
{
    if (f->nspare < FP_SPARE_EVENTS)
        f->spare[f->nspare++] = ev;
    else
        fp_real.cuEventDestroy_v2(ev);
}

static void fence_drop_events(fp_defer *f, fp_fence *fc)
{
    for (int i = 0; i < fc->nev; i++)
        event_put(f, fc->ev[i]);
    fc->nev = 0;
}

/* Records one event on s into fc; false when the driver refuses. */
static bool fence_add(fp_defer *f, fp_fence *fc, CUstream s)
{
    CUevent ev = fc->nev < FP_FENCE_EVENTS ? event_get(f) : NULL;
    if (!ev)
        return false;
    if (fp_real.cuEventRecord(ev, s) != CUDA_SUCCESS) {
        event_put(f, ev);
        return false;
    }
    fc->ev[fc->nev++] = ev;
    return true;
}

/* Seals the open entries with a fence (force: even when there are none).
 * False when it could not. */
static bool seal_fence(fp_ctx_pool *d, bool force)
{
    fp_defer *f = &d->defer;
    uint64_t open_from = f->nfences ? fence(f, f->nfences - 1)->end : f->head;
    if ((open_from == f->tail && !force) || f->nfences == FP_MAX_FENCES ||
        fp_streams_capturing())
        return false;
    fp_time_slow();
    fp_fence *fc = fence(f, f->nfences);
    fc->nev = 0;
    CUstream streams[FP_FENCE_EVENTS - 1];
    size_t n = fp_streams_of(d->ctx, streams, FP_FENCE_EVENTS - 1);
    bool ok = fp_streams_count(d->ctx) == n && fence_add(f, fc, CU_STREAM_LEGACY);
    for (size_t i = 0; ok && i < n; i++)
        ok = fence_add(f, fc, streams[i]);
    if (!ok) {
        fence_drop_events(f, fc);
        return false;
    }
    fc->end = f->tail;
    f->nfences++;
    atomic_store_explicit(&f->nfences_any, true, memory_order_relaxed);
    f->open_bytes = 0;
    f->open_count = 0;
    d->counts.fences++;
    return true;
}

static bool seal(fp_ctx_pool *d)
{
    return seal_fence(d, false);
}

static bool fence_done(const fp_fence *fc)
{
    fp_time_slow();
    for (int i = 0; i < fc->nev; i++)
        if (fp_real.cuEventQuery(fc->ev[i]) == CUDA_ERROR_NOT_READY)
            return false;
    return true;
}

static void fence_wait(const fp_fence *fc)
{
    fp_time_slow();
    for (int i = 0; i < fc->nev; i++)
        fp_real.cuEventSynchronize(fc->ev[i]);
}

/* Retires the oldest fence, reclaiming its entries. */
static void pop_fence(fp_ctx_pool *d)
{
    fp_defer *f = &d->defer;
    reclaim_until(d, fence(f, 0)->end);
    fence_drop_events(f, fence(f, 0)); /* leaves the slot empty (nev 0) */
    f->fhead = (f->fhead + 1) % FP_MAX_FENCES;
    f->nfences--;
    if (!f->nfences)
        atomic_store_explicit(&f->nfences_any, false, memory_order_relaxed);
}

/* Reclaims completed fences, oldest first: every one (all), or only the
 * oldest.  True when any was.  Every query is a driver call (0.13-0.31 us
 * on an H200 for a completed event, 0.25 us behind queued host work and
 * 1.3 us behind a running kernel for one that is not), so an allocation
 * that missed stops at the first fence that frees something and retries,
 * rather than also asking about the younger ones. */
static bool poll(fp_ctx_pool *d, bool all)
{
    fp_defer *f = &d->defer;
    bool any = false;
    while (f->nfences && fence_done(fence(f, 0))) {
        pop_fence(d);
        any = true;
        if (!all)
            break;
    }
    return any;
}

/* With defer_headroom_mb, half the headroom replaces the bytes rule: the
 * fence is then in flight well before the headroom runs out, and large
 * blocks are not fenced more often than the headroom needs (each fence
 * records an event per stream, ~0.25-0.5 us each on an H200). */
static bool seal_due(fp_ctx_pool *d)
{
    fp_defer *f = &d->defer;
    size_t limit = fp_shim.conf.defer_headroom / 2;
    if (!limit) {
        size_t quarter = fp_pool_reserved_bytes(d->pool) / 4;
        limit = quarter > FP_SEAL_BYTES ? quarter : FP_SEAL_BYTES;
    }
    return f->open_count >= FP_SEAL_BLOCKS || f->open_bytes >= limit;
}

/* A fence needs the pool's context current: CU_STREAM_LEGACY means the
 * legacy stream of the current context. */
static bool ctx_is_current(const fp_ctx_pool *d)
{
    CUcontext cur = NULL;
    return fp_real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d->ctx;
}

/* ---- the shim's entry points --------------------------------------------- */

int fp_defer_free(fp_ctx_pool *d, uint64_t addr, CUstream s, bool async)
{
    fp_pending e = {.addr = addr, .stream = s, .async = async};
    if (fp_pool_defer(d->pool, addr, &e.size, &e.ticket))
        return EINVAL;
    pthread_mutex_lock(&d->defer.lock);
    if (q_push(&d->defer, &e) == 0) {
        d->defer.open_bytes += e.size;
        d->defer.open_count++;
        if (async) {
            d->defer.recent[d->defer.nrecent % FP_RECENT] = e;
            d->defer.nrecent++;
            atomic_store_explicit(&d->defer.nrecent_any, true, memory_order_relaxed);
        }
        if (!atomic_load(&fp_shim.exiting) && seal_due(d) && ctx_is_current(d))
            seal(d);
    } else {
        /* No room to remember it: make it safe the slow way. */
        fp_pools_sync(d);
        fp_pool_reclaim(d->pool, e.addr, e.ticket);
    }
    pthread_mutex_unlock(&d->defer.lock);
    return 0;
}

/* cuMemAllocAsync on stream s: a block freed on s may serve at once. */
static bool reuse_on_stream(fp_ctx_pool *d, size_t size, CUstream s, uint64_t *addr)
{
    fp_defer *f = &d->defer;
    size_t n = f->nrecent < FP_RECENT ? f->nrecent : FP_RECENT;
    size_t rounded = fp_round_size(fp_pool_get_opts(d->pool), size);
    for (size_t i = 0; i < n; i++) {
        fp_pending *e = &f->recent[(f->nrecent - 1 - i) % FP_RECENT];
        /* Cheap filter first: the pool hands out a whole block only when
         * at most 1 MiB would be left over; it checks the exact rules. */
        bool near = e->size >= rounded && e->size - rounded <= FP_SMALL_SIZE;
        if (e->addr && e->stream == s && near &&
            fp_pool_reuse(d->pool, e->addr, e->ticket, size) == 0) {
            *addr = e->addr;
            e->addr = 0;
            d->counts.stream_reuses++;
            return true;
        }
    }
    return false;
}

/* What an allocation does after the cache missed. */
typedef enum { MISS_RETRY, MISS_GROW, MISS_FULL } miss_step;

/* The cache missed: make pending memory reusable before the pool may
 * grow.  In order: reclaim completed fences (cuEventQuery, no waiting);
 * with defer_headroom_mb, let the pool grow while at most that much waits
 * (headroom false once growing was refused); when no fence is in flight,
 * synchronize the context (as cheap as one event on an idle H200, and
 * what a fence sealed now would wait for anyway) and reclaim everything;
 * else wait for the oldest fence only, so that work queued since goes on.
 * MISS_FULL: nothing is pending, a capture forbids waiting, or the
 * synchronization failed; the pool's own rules take over. */
static miss_step after_miss(fp_ctx_pool *d, bool headroom)
{
    fp_defer *f = &d->defer;
    if (f->head == f->tail || fp_streams_capturing())
        return MISS_FULL;
    if (poll(d, false))
        return MISS_RETRY;
    if (headroom && f->pending_bytes <= fp_shim.conf.defer_headroom)
        return MISS_GROW;
    if (!f->nfences) {
        if (fp_pools_sync(d) != 0)
            return MISS_FULL;
        fp_defer_reclaim_all_locked(d);
        d->counts.syncs++;
        return MISS_RETRY;
    }
    fence_wait(fence(f, 0));
    pop_fence(d);
    d->counts.fence_waits++;
    return MISS_RETRY;
}

int fp_defer_alloc(fp_ctx_pool *d, size_t size, CUstream s, bool async, uint64_t *addr)
{
    fp_defer *f = &d->defer;
    if (async && atomic_load_explicit(&f->nrecent_any, memory_order_relaxed)) {
        pthread_mutex_lock(&f->lock);
        bool hit = reuse_on_stream(d, size, s, addr);
        pthread_mutex_unlock(&f->lock);
        if (hit)
            return 0;
    }
    /* Every FP_POLL_EVERY allocations, return completed fences' blocks to
     * the pool even on a hit, so best fit sees them: left pending longer,
     * they push later requests onto other blocks and fragment the pool. */
    unsigned n = atomic_load_explicit(&f->allocs, memory_order_relaxed);
    atomic_store_explicit(&f->allocs, n + 1, memory_order_relaxed); /* a hint: no locked add */
    if (n % FP_POLL_EVERY == 0 && atomic_load_explicit(&f->nfences_any, memory_order_relaxed)) {
        pthread_mutex_lock(&f->lock);
        poll(d, true);
        pthread_mutex_unlock(&f->lock);
    }
    int err;
    bool headroom = fp_shim.conf.defer_headroom > 0;
    while ((err = fp_pool_alloc_cached(d->pool, size, addr)) == EAGAIN) {
        pthread_mutex_lock(&f->lock);
        miss_step step = after_miss(d, headroom);
        pthread_mutex_unlock(&f->lock);
        if (step == MISS_FULL)
            return fp_pool_alloc(d->pool, size, addr);
        if (step == MISS_GROW) {
            if (fp_pool_alloc_fresh(d->pool, size, addr) == 0) {
                atomic_fetch_add_explicit(&d->headroom_grows, 1, memory_order_relaxed);
                return 0;
            }
            headroom = false; /* cap or driver said no: reclaim first */
        }
    }
    return err;
}

/* Everything queued so far is known complete: reclaim it all. */
void fp_defer_reclaim_all_locked(fp_ctx_pool *d)
{
    fp_defer *f = &d->defer;
    reclaim_until(d, f->tail);
    for (int i = 0; i < f->nfences; i++)
        fence_drop_events(f, fence(f, i));
    f->nfences = 0;
    atomic_store_explicit(&f->nfences_any, false, memory_order_relaxed);
    f->open_bytes = 0;
    f->open_count = 0;
}

/* The context has just been synchronized: everything pending is safe. */
void fp_defer_synchronized(fp_ctx_pool *d)
{
    fp_defer *f = &d->defer;
    pthread_mutex_lock(&f->lock);
    fp_defer_reclaim_all_locked(d);
    pthread_mutex_unlock(&f->lock);
}

void fp_defer_counts_get(fp_ctx_pool *d, fp_defer_counts *out)
{
    pthread_mutex_lock(&d->defer.lock);
    *out = d->counts;
    pthread_mutex_unlock(&d->defer.lock);
    out->headroom_grows = atomic_load_explicit(&d->headroom_grows, memory_order_relaxed);
}

static bool has_ctx(fp_ctx_pool *d, void *ud)
{
    return d->ctx == (CUcontext)ud;
}

/* A non-blocking stream of ctx is about to be destroyed, maybe with work
 * still queued: seal a fence that includes it now.  Fences retire in
 * order, so every block freed later waits for this one too.  When no
 * fence can be made, wait for the stream instead. */
void fp_defer_stream_gone(CUcontext ctx, CUstream s)
{
    fp_ctx_pool *d = fp_pools_find(has_ctx, ctx);
    if (!d || atomic_load(&fp_shim.exiting))
        return;
    CUcontext cur = NULL, popped;
    fp_real.cuCtxGetCurrent(&cur);
    bool pushed = cur != ctx && fp_real.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
    pthread_mutex_lock(&d->defer.lock);
    bool sealed = seal_fence(d, true);
    pthread_mutex_unlock(&d->defer.lock);
    if (!sealed && !fp_streams_capturing())
        fp_real.cuStreamSynchronize(s);
    if (pushed)
        fp_real.cuCtxPopCurrent_v2(&popped);
}

/* The context is gone: forget the queue (its events went with it). */
void fp_defer_forget(fp_ctx_pool *d)
{
    fp_defer *f = &d->defer;
    pthread_mutex_lock(&f->lock);
    f->head = f->tail;
    f->nfences = 0;
    atomic_store_explicit(&f->nfences_any, false, memory_order_relaxed);
    f->nspare = 0;
    f->pending_bytes = f->open_bytes = 0;
    f->open_count = 0;
    f->nrecent = 0;
    pthread_mutex_unlock(&f->lock);
}
