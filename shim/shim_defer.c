/* shim_defer.c - deferred reuse: frees that never wait, reuse that the
 * device orders.
 *
 * cuMemFree synchronizes the device, and programs rely on that: once it
 * returns they allocate again and write on any stream.  fragpool's free
 * makes no driver call.  The block goes straight back to best fit,
 * stamped with the pool's clock (pool/fp_pool.h), so the pool's layout is
 * exactly that of frees that synchronize, and a replay of the trace
 * models it.  The wait moves to the one place where it matters, and onto
 * the device: when an allocation is handed memory freed after the
 * context's last fence, fragpool first makes all later work of the
 * context wait for everything queued so far:
 *
 *     cuCtxRecordEvent(ctx, ev)   one event capturing every stream's work,
 *                                 busy or idle, live or destroyed;
 *     cuCtxWaitEvent(ctx, ev)     all work submitted from now on, on any
 *                                 stream of the context (also streams not
 *                                 created yet), runs after it.
 *
 * Neither call blocks the host (both measured on an H200 with
 * tests/gpu/ctx_fence.cu, also its guarantees), and their cost does not
 * grow with idle streams.  One fence covers every block freed before it
 * was recorded (the pool clock says which), so a run of reuses costs one
 * fence, and so do the reuses of threads that queued behind it.
 * cuMemAllocAsync(s) needs only s ordered (cuStreamWaitEvent), and none
 * at all for a block that cuMemFreeAsync gave back on s itself, or for one
 * freed before a fence s already waited for: stream order already puts the
 * new work last.  Streams are told apart by handle, and the per-thread
 * default stream (one handle, a stream per thread) by thread too; a
 * destroyed stream's handle is forgotten (fp_defer_stream_gone), since the
 * driver may hand it to a new stream while the old one's work still runs.
 *
 * Where the driver has no context events (before CUDA 12.5) or refuses
 * one, a reuse synchronizes the context instead; while a graph is being
 * captured (either call would break the capture) memory freed since the
 * last fence is passed over and the pool grows; when the device is too
 * full for that and the capture lets this thread free memory, the pool's
 * idle segments go back to the driver first.  Every such case is counted
 * for the summary.
 *
 * Invariant: every block of the pool stamped before `covered` was freed
 * before a fence that the whole context waits for (or before a completed
 * synchronization).  `covered` only grows.
 *
 * Unmapping pages (shim_pages.c) needs more than order: the work queued
 * before the pages' last free must have finished.  `done` says up to
 * which clock it has (a synchronization completed, or the fence event
 * was waited for); fp_defer_wait_done makes it cover a stamp, waiting on
 * the host (the fence event if it covers the stamp, else the context),
 * and counts each wait.  Lock order: the pool's lock, then this one.
 */
#include "shim_defer.h"
#include "fp_assert.h"
#include "fp_lock.h"
#include "shim_clock.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_streams.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define FP_RECENT 64 /* async frees remembered for same-stream reuse */
#define FP_WAITED 32 /* streams remembered with the fence they waited for */

/* A stream: its handle, and for CU_STREAM_PER_THREAD the thread's number
 * (0 for every other handle). */
typedef struct fp_stream_id {
    CUstream s;
    uint64_t thread;
} fp_stream_id;

/* A block given back by cuMemFreeAsync(addr, stream). */
typedef struct fp_async_free {
    uint64_t addr, stamp;
    size_t size;
    fp_stream_id stream;
} fp_async_free;

/* Stream `stream` waited for the fence recorded at pool clock `clock`:
 * its later work runs after every block freed before that clock. */
typedef struct fp_stream_wait {
    fp_stream_id stream;
    uint64_t clock;
} fp_stream_wait;

struct fp_defer {
    pthread_mutex_t lock; /* one fence at a time; guards the rest  */
    CUcontext ctx;
    CUevent ev;            /* the fence, recorded anew each time    */
    bool ctx_events;       /* the driver has cuCtxRecordEvent       */
    atomic_ullong covered; /* pool clock: blocks stamped before it are safe */
    atomic_ullong fencing; /* clock of the context fence being made; 0: none */
    atomic_ullong joins;   /* counts.joins, counted outside the lock        */
    uint64_t fence_at;     /* clock of the fence last recorded; 0: none  */
    uint64_t done;         /* blocks stamped before it: work finished    */
    fp_async_free recent[FP_RECENT];
    size_t nrecent;
    fp_stream_wait waited[FP_WAITED];
    size_t nwaited;
    atomic_bool any_stream; /* nrecent or nwaited > 0, read without the lock */
    fp_defer_counts counts;
};

static atomic_ullong next_thread = 1;
static FP_THREAD_LOCAL uint64_t tl_thread; /* this thread's number, 0 until asked */

static fp_stream_id stream_id(CUstream s)
{
    fp_stream_id id = {s, 0};
    if (s == CU_STREAM_PER_THREAD) {
        if (!tl_thread)
            tl_thread = atomic_fetch_add_explicit(&next_thread, 1, memory_order_relaxed);
        id.thread = tl_thread;
    }
    return id;
}

static bool same_stream(fp_stream_id a, fp_stream_id b)
{
    return a.s == b.s && a.thread == b.thread;
}

/* Context events are in drivers of CUDA 12.5 and later. */
#define FP_CTX_EVENTS_VERSION 12050

bool fp_defer_ctx_events(void)
{
    int v = 0;
    return fp_real.cuCtxRecordEvent && fp_real.cuCtxWaitEvent && fp_real.cuDriverGetVersion &&
           fp_real.cuDriverGetVersion(&v) == CUDA_SUCCESS && v >= FP_CTX_EVENTS_VERSION;
}

/* defer_headroom_mb let the old deferral grow instead of waiting on the
 * host; nothing waits on the host now.  Said once, then ignored. */
static void say_headroom_ignored(void)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (fp_shim.conf.defer_headroom && !atomic_flag_test_and_set(&said))
        fp_say("defer_headroom_mb has no effect: deferred reuse never waits for the GPU "
               "and never grows while freed memory could serve (ignored)");
}

/* Called with ctx current (the pool is made on its first allocation). */
fp_defer *fp_defer_new(CUcontext ctx)
{
    say_headroom_ignored();
    fp_defer *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    fp_mutex_init_brief(&f->lock);
    f->ctx = ctx;
    atomic_init(&f->covered, 1); /* nothing is freed before clock 1 */
    f->ctx_events = fp_defer_ctx_events() &&
                    fp_real.cuEventCreate(&f->ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
    return f;
}

/* ---- making a grant safe ---------------------------------------------- */

/* Records the fence and makes the context (or, for cuMemAllocAsync, only
 * stream s) wait for it.  False when the driver refused. */
static bool fence(fp_defer *f, CUstream s, bool async)
{
    if (!f->ctx_events)
        return false;
    fp_time_slow();
    if (fp_real.cuCtxRecordEvent(f->ctx, f->ev) != CUDA_SUCCESS) {
        f->counts.failed++;
        return false;
    }
    f->counts.fences++;
    CUresult r =
        async ? fp_real.cuStreamWaitEvent(s, f->ev, 0) : fp_real.cuCtxWaitEvent(f->ctx, f->ev);
    if (r != CUDA_SUCCESS) {
        f->counts.failed++;
        return false;
    }
    if (async)
        f->counts.stream_waits++;
    else
        f->counts.ctx_waits++;
    return true;
}

/* Stream id waited for the fence at clock: its entry, else the oldest. */
static void remember_wait(fp_defer *f, fp_stream_id id, uint64_t clock)
{
    size_t n = f->nwaited < FP_WAITED ? f->nwaited : FP_WAITED;
    for (size_t i = 0; i < n; i++) {
        if (same_stream(f->waited[i].stream, id)) {
            f->waited[i].clock = clock;
            return;
        }
    }
    f->waited[f->nwaited++ % FP_WAITED] = (fp_stream_wait){id, clock};
    atomic_store_explicit(&f->any_stream, true, memory_order_relaxed);
}

static void cover(fp_defer *f, uint64_t clock)
{
    if (atomic_load_explicit(&f->covered, memory_order_relaxed) < clock)
        atomic_store_explicit(&f->covered, clock, memory_order_release);
}

/* A fence, or else a synchronization, at pool clock `clock`. */
static bool order_at(fp_defer *f, uint64_t clock, CUstream s, bool async)
{
    if (fence(f, s, async)) {
        f->fence_at = clock; /* the event follows every free before it */
        if (async)
            remember_wait(f, stream_id(s), clock);
        else
            cover(f, clock);
        return true;
    }
    fp_time_slow();
    if (fp_real_ctx_sync(f->ctx) != CUDA_SUCCESS)
        return false;
    f->counts.syncs++;
    cover(f, clock);
    if (f->done < clock)
        f->done = clock;
    return true;
}

/* Orders new work after the work queued so far: a fence, or else a
 * synchronization.  Either covers every block freed before the pool's
 * clock read just ahead of it (at least the grant's own clock, and more
 * where other threads freed memory meanwhile: they then need no fence of
 * their own).  A context-wide one is published while it is made
 * (`fencing`), so that threads it will cover wait for it on the CPU
 * instead of queueing for the lock.  False when neither could be had. */
static bool order(fp_defer *f, const fp_pool *pool, CUstream s, bool async)
{
    uint64_t clock = fp_pool_clock(pool); /* frees before it are queued */
    if (!async)
        atomic_store_explicit(&f->fencing, clock, memory_order_relaxed);
    bool ok = order_at(f, clock, s, async);
    atomic_store_explicit(&f->fencing, 0, memory_order_release);
    return ok;
}

/* Waits, spinning, while another thread makes a context fence that will
 * cover `stamp`: true once `covered` passes it, false when no such fence
 * is in flight (or it failed, or took too long).  A fence holds the lock
 * for 0.6 to 6.5 us of driver time (tests/gpu/ctx_fence.cu on an H200,
 * no busy stream and 64); a thread queued behind it would sleep and be
 * woken, which can cost more than the fence. */
#define FP_FENCE_SPINS 4096

static bool covered_by_fence_in_flight(fp_defer *f, uint64_t stamp)
{
    for (int i = 0; i < FP_FENCE_SPINS; i++) {
        if (stamp < atomic_load_explicit(&f->covered, memory_order_acquire))
            return true;
        if (atomic_load_explicit(&f->fencing, memory_order_relaxed) <= stamp)
            return false;
        fp_cpu_relax();
    }
    return false;
}

/* The grant's memory may still be in use by work queued before its free:
 * order new work after that work.  False when nothing could (a capture
 * began, or the driver refused both ways). */
static bool make_safe(fp_defer *f, const fp_pool *pool, const fp_grant *g, CUstream s, bool async)
{
    if (!fp_capture_gate_enter())
        return false;
    bool joined = covered_by_fence_in_flight(f, g->freed_at), ok = joined;
    if (!ok) {
        pthread_mutex_lock(&f->lock);
        joined = g->freed_at < atomic_load_explicit(&f->covered, memory_order_acquire);
        ok = joined || order(f, pool, s, async);
        pthread_mutex_unlock(&f->lock);
    }
    if (joined) /* not covered when the caller looked: another thread's fence */
        atomic_fetch_add_explicit(&f->joins, 1, memory_order_relaxed);
    fp_assert(!ok || async || g->freed_at < atomic_load(&f->covered),
              "a grant made safe for the context is covered");
    fp_capture_gate_leave();
    return ok;
}

/* cuMemAllocAsync on s, handed a block that stream order already makes
 * safe: cuMemFreeAsync gave it back on s and nothing has touched it since
 * (the grant lies inside that block and carries its stamp), or it was
 * freed before a fence that s waited for. */
static bool ordered_on_stream(fp_defer *f, const fp_grant *g, CUstream s)
{
    if (!atomic_load_explicit(&f->any_stream, memory_order_relaxed))
        return false;
    fp_stream_id id = stream_id(s);
    bool hit = false, waited = false;
    pthread_mutex_lock(&f->lock);
    size_t n = f->nrecent < FP_RECENT ? f->nrecent : FP_RECENT;
    for (size_t i = 0; i < n && !hit; i++) {
        const fp_async_free *e = &f->recent[i];
        hit = same_stream(e->stream, id) && e->stamp == g->freed_at && g->addr >= e->addr &&
              g->addr + g->size <= e->addr + e->size;
    }
    n = f->nwaited < FP_WAITED ? f->nwaited : FP_WAITED;
    for (size_t i = 0; i < n && !hit && !waited; i++)
        waited = same_stream(f->waited[i].stream, id) && g->freed_at < f->waited[i].clock;
    if (hit)
        f->counts.stream_reuses++;
    if (waited)
        f->counts.stream_ordered++;
    pthread_mutex_unlock(&f->lock);
    return hit || waited;
}

/* The pool refused a grant (EAGAIN): it passed over memory freed since
 * the last fence and could not grow without giving its cache back.
 * During a capture whose rules let this thread free memory, the idle
 * segments go back to the driver (cuMemFree waits for the device itself;
 * the driver may hand that memory out again, as it would without
 * fragpool, but the pool never hands out a block freed after the fence)
 * and the pool tries once more.  A final refusal is the pool's OOM, noted
 * so that the message reports it. */
static int refused(fp_pool *pool, size_t size, uint64_t unsafe_from, fp_grant *g)
{
    int err = EAGAIN;
    if (fp_streams_capturing() && !fp_capture_refuses_unsafe()) {
        fp_pool_empty_cache(pool);
        err = fp_pool_alloc_grant(pool, size, unsafe_from, g);
    }
    if (err == EAGAIN) {
        fp_pool_note_oom(pool, size);
        err = ENOMEM;
    }
    return err;
}

int fp_defer_alloc(fp_defer *f, fp_pool *pool, fp_tcache *t, size_t size, CUstream s, bool async,
                   uint64_t *addr)
{
    /* While a graph is captured no fence may be made: pass over memory
     * freed since the last one. */
    uint64_t unsafe_from = fp_streams_capturing()
                               ? atomic_load_explicit(&f->covered, memory_order_acquire)
                               : UINT64_MAX;
    fp_grant g;
    int same = 0; /* a block of t's cache freed on s itself: stream order */
    int err = t ? fp_pool_front_alloc(pool, t, size, unsafe_from,
                                      async ? (uint64_t)(uintptr_t)s : 0, &g, &same)
                : fp_pool_alloc_grant(pool, size, unsafe_from, &g);
    if (err == EAGAIN)
        err = refused(pool, size, unsafe_from, &g);
    if (err)
        return err;
    bool safe = g.freed_at < atomic_load_explicit(&f->covered, memory_order_acquire) ||
                (async && (same || ordered_on_stream(f, &g, s))) ||
                make_safe(f, pool, &g, s, async);
    if (safe) {
        *addr = g.addr;
        return 0;
    }
    /* Nothing can order the device now: give the block back and take
     * memory nobody has used since the last fence. */
    fp_pool_free_at(pool, g.addr, NULL, NULL);
    unsafe_from = atomic_load_explicit(&f->covered, memory_order_acquire);
    err = fp_pool_alloc_grant(pool, size, unsafe_from, &g);
    if (err == EAGAIN)
        err = refused(pool, size, unsafe_from, &g);
    if (!err)
        *addr = g.addr;
    return err;
}

/* ---- frees and synchronizations ------------------------------------- */

void fp_defer_freed_async(fp_defer *f, uint64_t addr, size_t size, uint64_t stamp, CUstream s)
{
    fp_stream_id id = stream_id(s);
    pthread_mutex_lock(&f->lock);
    f->recent[f->nrecent++ % FP_RECENT] = (fp_async_free){addr, stamp, size, id};
    atomic_store_explicit(&f->any_stream, true, memory_order_relaxed);
    pthread_mutex_unlock(&f->lock);
}

/* s is destroyed: a new stream may get its handle while its work still
 * runs, so nothing known of s may order the new one.  The entries are
 * blanked in place (a handle no stream has). */
void fp_defer_stream_gone(fp_defer *f, CUstream s)
{
    if (!atomic_load_explicit(&f->any_stream, memory_order_relaxed))
        return;
    const fp_stream_id none = {CU_STREAM_LEGACY, UINT64_MAX};
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < FP_RECENT; i++)
        if (f->recent[i].stream.s == s)
            f->recent[i].stream = none;
    for (size_t i = 0; i < FP_WAITED; i++)
        if (f->waited[i].stream.s == s)
            f->waited[i].stream = none;
    pthread_mutex_unlock(&f->lock);
}

/* The context was synchronized, the synchronization having started at
 * pool clock `clock`: every block freed before it is safe. */
void fp_defer_synchronized(fp_defer *f, uint64_t clock)
{
    pthread_mutex_lock(&f->lock);
    cover(f, clock);
    if (f->done < clock)
        f->done = clock;
    pthread_mutex_unlock(&f->lock);
}

/* ---- before pages are unmapped ----------------------------------------- */

/* Waits on the host until the work queued before the fence event (or all
 * the context's work) has finished.  0, EBUSY while a graph is captured
 * (no wait may break it), or EIO. */
static int wait_done(fp_defer *f, uint64_t stamp)
{
    if (fp_streams_capturing())
        return EBUSY;
    fp_time_slow();
    if (f->ctx_events && f->fence_at > stamp && fp_real.cuEventSynchronize &&
        fp_real.cuEventSynchronize(f->ev) == CUDA_SUCCESS) {
        f->counts.unmap_waits++;
        f->done = f->fence_at; /* a newer recording covers at least as much */
        return 0;
    }
    if (fp_real_ctx_sync(f->ctx) != CUDA_SUCCESS)
        return EIO;
    f->counts.unmap_waits++;
    f->done = stamp + 1;
    cover(f, stamp + 1);
    return 0;
}

int fp_defer_wait_done(fp_defer *f, uint64_t stamp)
{
    pthread_mutex_lock(&f->lock);
    int err = stamp < f->done ? 0 : wait_done(f, stamp);
    pthread_mutex_unlock(&f->lock);
    return err;
}

void fp_defer_counts_get(fp_defer *f, fp_defer_counts *out)
{
    pthread_mutex_lock(&f->lock);
    *out = f->counts;
    out->joins = atomic_load_explicit(&f->joins, memory_order_relaxed);
    out->ctx_events = f->ctx_events;
    pthread_mutex_unlock(&f->lock);
}

bool fp_defer_lock_free(fp_defer *f)
{
    if (pthread_mutex_trylock(&f->lock) != 0)
        return false;
    pthread_mutex_unlock(&f->lock);
    return true;
}

/* The context is gone, and its event with it: no more fences. */
void fp_defer_forget(fp_defer *f)
{
    pthread_mutex_lock(&f->lock);
    f->ctx_events = false;
    f->done = UINT64_MAX; /* the driver freed everything with the context */
    f->nrecent = 0;
    f->nwaited = 0;
    atomic_store_explicit(&f->any_stream, false, memory_order_relaxed);
    pthread_mutex_unlock(&f->lock);
}

void fp_defer_fork_prepare(fp_defer *f)
{
    pthread_mutex_lock(&f->lock);
}

void fp_defer_fork_after(fp_defer *f, bool child)
{
    if (child)
        fp_mutex_init_brief(&f->lock);
    else
        pthread_mutex_unlock(&f->lock);
}

/* The deferral of a pool that is dropped (its context is long gone). */
void fp_defer_free(fp_defer *f)
{
    if (!f)
        return;
    pthread_mutex_destroy(&f->lock);
    free(f);
}
