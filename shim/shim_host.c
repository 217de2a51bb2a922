/* shim_host.c - pinned host memory from a pool, the core under
 * cuMemHostAlloc, cuMemAllocHost_v2 and cuMemFreeHost (so cudaHostAlloc,
 * cudaMallocHost and cudaFreeHost too) and the queries that must answer
 * for the blocks; the wrappers are in shim_host_api.c.
 *
 * One process-wide pool (pool/, PyTorch's split rules, exact best fit, no
 * power-of-two rounding) whose segments are the driver's pinned
 * allocations, made with PORTABLE|DEVICEMAP so that any pooled request can
 * be carved from any segment.  Pooled: flags 0, PORTABLE, DEVICEMAP and
 * both; WRITECOMBINED (another kind of memory) and unknown flags go to the
 * driver, as do requests of more than host_max_cached_mb, requests past
 * host_max_reserved_mb, everything with host_pool:0, with no current
 * context, and at exit.
 *
 * Stream safety.  cuMemFreeHost waits for the device; a pooled free does
 * not (free_policy:deferred).  The device touches pinned memory only
 * through work queued on the streams of a context, and every context the
 * shim knows has a device pool (shim_pools.c; a pinned request makes it).
 * A pooled free records a fence in each live context, with
 * cuCtxRecordEvent as deferred reuse does (shim_defer.c), and a reuse of
 * freed memory first waits for the fences still running ("ordering
 * reuse" below): the host writes the block at once, so the old work must
 * be over, not merely ordered.  Fences and waits are made inside the
 * capture gate (shim_streams.c), as deferred reuse makes its own; while a
 * capture is under way the block goes back and the request goes to the
 * driver.  free_policy:sync
 * synchronizes every live context in the free instead, as cuMemFreeHost
 * does.
 *
 * Idle segments.  When the pool grows past twice the most it ever had
 * handed out plus 32 MiB, its idle segments go back to the driver, the
 * one freed longest ago first ("giving idle segments back" below), after
 * the same wait as a reuse, so a program whose buffers keep changing size
 * does not pin a new segment for each size for good.
 *
 * Queries.  fp_host_lookup tells a pointer inside a live block (with the
 * flags it was asked with) from one inside a segment but in no live block
 * (which the wrappers refuse as the driver refuses memory it never gave);
 * a free there (a double free, an interior pointer) is refused with one
 * line, and the driver never sees it (it would free the whole segment).
 *
 * Invariants: every live pooled block is in `blocks` (base/'s fp_ranges:
 * sorted by address, disjoint) with its requested size and flags, and
 * nothing else is; every pooled free made while `pending` is false has
 * been waited for; `ctxs` holds the contexts the last fence pass found
 * live (a stale event of a reused handle is replaced when its record is
 * refused); a segment goes back to the driver only wholly free, with
 * host_lock held and `pending` false (so no work queued before its blocks'
 * frees is still running), inside the capture gate, and never at exit.
 * Locks: host_lock (ctxs, fences) is taken before the pool's own lock (a
 * free and its fence, a trim) and never the other way; blocks_lock (the
 * `blocks` table, which has no lock of its own) is a leaf.
 */
#include "shim_host.h"
#include "fp_pool.h"
#include "fp_ranges.h"
#include "fp_report.h"
#include "shim_clock.h"
#include "shim_defer.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_streams.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FP_HOST_POOLED_FLAGS (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)
#define FP_HOST_MAX_CTXS     64
#define FP_HOST_PAGE         ((size_t)4096)
#define FP_HOST_SLACK        ((size_t)32 << 20) /* idle bytes kept beyond twice the peak */

typedef struct host_ctx {
    CUcontext ctx;
    CUevent ev;    /* recorded after each pooled free */
    uint64_t pass; /* the last fence pass that found ctx live */
} host_ctx;

static struct {
    fp_pool *pool;             /* NULL until the first pooled request */
    pthread_mutex_t pool_lock; /* makes the pool once                 */
    pthread_mutex_t host_lock; /* ctxs and the fence pass             */
    host_ctx ctxs[FP_HOST_MAX_CTXS];
    size_t nctxs;
    bool unfenced;                 /* a free recorded no fence somewhere  */
    atomic_bool pending;           /* fences not yet seen complete        */
    uint64_t fences, waits, syncs; /* under host_lock, for the summary    */
    uint64_t pass;                 /* fence passes made                   */
    pthread_mutex_t blocks_lock;
    fp_ranges blocks;        /* live blocks; payload: their flags   */
    atomic_ullong ticks;     /* time in the host allocator          */
    atomic_ullong to_driver; /* requests passed to the driver       */
    atomic_ullong fallbacks; /* of which: reuse could not be ordered */
} H = {.pool_lock = PTHREAD_MUTEX_INITIALIZER,
       .host_lock = PTHREAD_MUTEX_INITIALIZER,
       .blocks_lock = PTHREAD_MUTEX_INITIALIZER,
       .blocks = {.elem = sizeof(unsigned)}};

static FP_THREAD_LOCAL CUresult host_last_error;

/* ---- backend: segments are the driver's pinned allocations ------------ */

static int hb_reserve(void *ud, size_t size, uint64_t *addr)
{
    (void)ud;
    void *p = NULL;
    CUresult r = fp_real.cuMemHostAlloc(&p, size, FP_HOST_POOLED_FLAGS);
    if (r == CUDA_SUCCESS) {
        *addr = (uint64_t)(uintptr_t)p;
        return 0;
    }
    host_last_error = r;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM : EIO;
}

static int hb_release(void *ud, uint64_t addr, size_t size)
{
    (void)ud;
    (void)size;
    if (atomic_load(&fp_shim.exiting))
        return 0; /* no CUDA call at exit: the process ends anyway */
    return fp_real.cuMemFreeHost((void *)(uintptr_t)addr) == CUDA_SUCCESS ? 0 : EIO;
}

static fp_pool *host_pool(void)
{
    fp_pool *p = __atomic_load_n(&H.pool, __ATOMIC_ACQUIRE);
    if (p)
        return p;
    pthread_mutex_lock(&H.pool_lock);
    if (!H.pool) {
        fp_pool_opts o;
        fp_pool_opts_default(&o);
        o.max_reserved = fp_shim.conf.host_max_reserved;
        o.exact_segment_round = FP_HOST_PAGE; /* a large request pins no more than it asks */
        fp_backend be = {.reserve = hb_reserve, .release = hb_release};
        if (fp_pool_create(&o, &be, &p) == 0)
            __atomic_store_n(&H.pool, p, __ATOMIC_RELEASE);
    }
    p = H.pool;
    pthread_mutex_unlock(&H.pool_lock);
    return p;
}

/* The pool when it exists, without making it. */
static fp_pool *host_pool_existing(void)
{
    return __atomic_load_n(&H.pool, __ATOMIC_ACQUIRE);
}

/* ---- the live blocks ------------------------------------------------------
 * base/'s range table, each block as [addr, addr+requested size) with the
 * flags asked as its payload; blocks_lock held around each use. */

static int blocks_add(uint64_t addr, size_t size, unsigned flags)
{
    pthread_mutex_lock(&H.blocks_lock);
    int err = fp_ranges_insert(&H.blocks, addr, size, &flags);
    pthread_mutex_unlock(&H.blocks_lock);
    return err;
}

static void blocks_remove(uint64_t addr)
{
    pthread_mutex_lock(&H.blocks_lock);
    fp_ranges_remove(&H.blocks, addr);
    pthread_mutex_unlock(&H.blocks_lock);
}

/* The live block holding p: true and *out, or false. */
static bool blocks_find(uint64_t p, fp_host_found *out)
{
    pthread_mutex_lock(&H.blocks_lock);
    size_t i = fp_ranges_find(&H.blocks, p);
    bool hit = i != FP_RANGES_NONE;
    if (hit)
        *out = (fp_host_found){.addr = H.blocks.r[i].start,
                               .size = (size_t)H.blocks.r[i].size,
                               .flags = *(const unsigned *)fp_ranges_val(&H.blocks, i)};
    pthread_mutex_unlock(&H.blocks_lock);
    return hit;
}

/* ---- ordering reuse ---------------------------------------------------------
 * The program writes a pinned block from the host the moment it has it,
 * so ordering the device's new work (as deferred reuse does for device
 * memory) is not enough: the work queued before the free must be over
 * before the block is handed out.  Each pooled free records a context
 * event (cuCtxRecordEvent, all streams' work so far, no wait) in every
 * live context; a reuse of freed memory while a recorded fence may still
 * be running waits for it (cuEventSynchronize), which waits only for work
 * queued before the free.  Where no fence could be recorded (no context
 * events, a capture under way, a refusal), the reuse synchronizes every
 * live context instead, as cuMemFreeHost would have at the free. */

/* A new event in ctx (host_lock held): 0, or the driver refused. */
static int make_event(CUcontext ctx, CUevent *ev)
{
    CUcontext cur = NULL, popped;
    fp_real.cuCtxGetCurrent(&cur);
    bool push = cur != ctx; /* an event belongs to the current context */
    if (push && fp_real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
        return EIO;
    CUresult r = fp_real.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);
    if (push)
        fp_real.cuCtxPopCurrent_v2(&popped);
    return r == CUDA_SUCCESS ? 0 : EIO;
}

/* The entry of ctx, made on first use (host_lock held), or NULL. */
static host_ctx *ctx_entry(CUcontext ctx)
{
    for (size_t i = 0; i < H.nctxs; i++)
        if (H.ctxs[i].ctx == ctx)
            return &H.ctxs[i];
    CUevent ev = NULL;
    if (H.nctxs == FP_HOST_MAX_CTXS || make_event(ctx, &ev) != 0)
        return NULL;
    H.ctxs[H.nctxs] = (host_ctx){ctx, ev, 0};
    return &H.ctxs[H.nctxs++];
}

/* Records e's fence; an event left from a destroyed context of the same
 * handle is refused: then once more with a new event. */
static bool record(host_ctx *e)
{
    if (fp_real.cuCtxRecordEvent(e->ctx, e->ev) == CUDA_SUCCESS)
        return true;
    return make_event(e->ctx, &e->ev) == 0 &&
           fp_real.cuCtxRecordEvent(e->ctx, e->ev) == CUDA_SUCCESS;
}

static void record_in(fp_ctx_pool *d, void *ud)
{
    (void)ud;
    if (fp_pools_retired(d))
        return;
    host_ctx *e = ctx_entry(d->ctx);
    if (e)
        e->pass = H.pass;
    if (!e || !record(e))
        H.unfenced = true;
    else
        H.fences++;
}

/* Entries of contexts no pool lists any more: gone, with their work. */
static void drop_unseen(void)
{
    for (size_t i = 0; i < H.nctxs;)
        if (H.ctxs[i].pass != H.pass)
            H.ctxs[i] = H.ctxs[--H.nctxs];
        else
            i++;
}

/* After a pooled free: a fence in every live context (host_lock held). */
static void fence_free(void)
{
    if (!fp_defer_ctx_events() || !fp_capture_gate_enter()) {
        H.unfenced = true; /* no fence now: the reuse synchronizes */
        return;
    }
    H.pass++;
    fp_pools_each(record_in, NULL);
    drop_unseen();
    fp_capture_gate_leave();
}

static void sync_in(fp_ctx_pool *d, void *ud)
{
    bool *failed = ud;
    if (!fp_pools_retired(d) && fp_pools_sync(d) != 0)
        *failed = true;
}

/* Every live context synchronized (host_lock held); false on failure. */
static bool sync_all_locked(void)
{
    bool failed = false;
    H.syncs++;
    fp_pools_each(sync_in, &failed);
    return !failed;
}

/* Waits for the fences still running (host_lock held).  A query that
 * fails otherwise (the context is gone, with its work) counts as done. */
static void wait_fences(void)
{
    for (size_t i = 0; i < H.nctxs; i++) {
        if (fp_real.cuEventQuery(H.ctxs[i].ev) != CUDA_ERROR_NOT_READY)
            continue;
        H.waits++;
        fp_real.cuEventSynchronize(H.ctxs[i].ev);
    }
}

/* Every pooled free so far waited for (host_lock held, inside the capture
 * gate): its fences, or every live context where one is missing.  False
 * when a synchronize failed (then nothing is marked done). */
static bool settle_locked(void)
{
    if (!atomic_load(&H.pending))
        return true;
    bool ok = true;
    if (H.unfenced)
        ok = sync_all_locked();
    else
        wait_fences();
    if (ok) {
        H.unfenced = false;
        atomic_store(&H.pending, false);
    }
    return ok;
}

/* True when no work queued before g's memory was freed can still touch
 * it; false when that cannot be had now (a capture is under way). */
static bool order_reuse(const fp_grant *g)
{
    if (g->freed_at == FP_NEVER_FREED || !atomic_load(&H.pending))
        return true; /* never used, or every fence seen complete */
    pthread_mutex_lock(&H.host_lock);
    if (!fp_capture_gate_enter()) { /* waiting could break the capture */
        pthread_mutex_unlock(&H.host_lock);
        return false;
    }
    bool ok = settle_locked();
    fp_capture_gate_leave();
    pthread_mutex_unlock(&H.host_lock);
    return ok;
}

/* ---- giving idle segments back ----------------------------------------------
 * Best fit serves a request from any larger cached block (split when the
 * rest is more than 1 MiB), but a request larger than every cached block
 * pins a new segment, and the old ones stay: a program whose buffers keep
 * growing would pin a new segment for every new size.  So when memory
 * fresh from the driver is handed out and the pool holds more than twice
 * the most it ever had handed out, plus FP_HOST_SLACK, the idle segments
 * freed longest ago go back (cuMemFreeHost) until it holds no more than
 * that.  Their blocks were freed, so first the work queued before those
 * frees must be over: the fences are waited for, inside the capture gate
 * (no release while a capture is under way; the next miss tries again).
 * Never at exit. */

/* What the pool may hold: twice its peak handed out, plus the slack. */
static size_t keep_bytes(const fp_pool_stats *st)
{
    size_t peak = (size_t)st->allocated_bytes[FP_ALL].peak;
    if (peak > (SIZE_MAX - FP_HOST_SLACK) / 2)
        return SIZE_MAX;
    return 2 * peak + FP_HOST_SLACK;
}

static void trim_idle(fp_pool *p)
{
    if (fp_pool_reserved_bytes(p) <= FP_HOST_SLACK || atomic_load(&fp_shim.exiting))
        return;
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    size_t keep = keep_bytes(&st);
    if ((size_t)st.reserved_bytes[FP_ALL].current <= keep)
        return;
    pthread_mutex_lock(&H.host_lock);
    if (fp_capture_gate_enter()) {
        if (settle_locked())
            fp_pool_trim(p, keep);
        fp_capture_gate_leave();
    }
    pthread_mutex_unlock(&H.host_lock);
}

/* ---- allocation ------------------------------------------------------------ */

static void add_ticks(uint64_t t0)
{
    atomic_fetch_add_explicit(&H.ticks, fp_ticks() - t0, memory_order_relaxed);
}

void fp_host_passed(void)
{
    atomic_fetch_add_explicit(&H.to_driver, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&fp_passthrough[FP_PT_HOST], 1, memory_order_relaxed);
}

CUresult fp_host_last_error(void)
{
    return host_last_error ? host_last_error : CUDA_ERROR_UNKNOWN;
}

/* Whether this request is the pool's to serve. */
static bool pooled(size_t bytesize, unsigned flags)
{
    if (bytesize == 0 || (flags & ~(unsigned)FP_HOST_POOLED_FLAGS) != 0)
        return false;
    if (!fp_shim.ready || !fp_shim.conf.host_pool || !fp_real.cuMemHostAlloc ||
        !fp_real.cuMemFreeHost || atomic_load(&fp_shim.exiting))
        return false;
    if (bytesize > fp_shim.conf.host_max_cached)
        return false;
    /* A current context, with its device pool: its fences cover reuse. */
    fp_ctx_pool *d = fp_pools_current();
    fp_pools_put(d);
    return d != NULL;
}

static void say_host_oom(fp_pool *p, size_t bytesize)
{
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    char want[32], held[32], idle[32];
    fp_format_size(bytesize, want);
    fp_format_size((size_t)st.reserved_bytes[FP_ALL].current, held);
    fp_format_size((size_t)(st.reserved_bytes[FP_ALL].current - st.allocated_bytes[FP_ALL].current),
                   idle);
    fp_say("cuMemHostAlloc: pinning %s more failed: the driver is out of memory; fragpool's "
           "host pool holds %s pinned (%s of it idle, already given back once to retry); "
           "returning the driver's error",
           want, held, idle);
}

/* 0 and *addr from the pool; ENOENT: the caller goes to the driver
 * instead; else an errno (fp_host_last_error has the driver's code). */
static int serve(fp_pool *p, size_t bytesize, unsigned flags, uint64_t *addr)
{
    fp_grant g;
    host_last_error = CUDA_SUCCESS;
    int err = fp_pool_alloc_grant(p, bytesize, UINT64_MAX, &g);
    if (err == ENOMEM) {
        fp_oom_info o;
        fp_pool_last_oom(p, &o);
        if (o.over_cap)
            return ENOENT; /* host_max_reserved_mb: the cache is full, not the program */
        say_host_oom(p, bytesize);
        if (!host_last_error)
            host_last_error = CUDA_ERROR_OUT_OF_MEMORY;
        return ENOMEM;
    }
    if (err)
        return err;
    if (!order_reuse(&g) || blocks_add(g.addr, bytesize, flags) != 0) {
        fp_pool_free_at(p, g.addr, NULL, NULL);
        atomic_fetch_add_explicit(&H.fallbacks, 1, memory_order_relaxed);
        return ENOENT;
    }
    *addr = g.addr;
    if (g.freed_at == FP_NEVER_FREED) /* memory fresh from the driver: the pool grew */
        trim_idle(p);
    return 0;
}

int fp_host_alloc(size_t bytesize, unsigned flags, void **out)
{
    fp_pool *p = pooled(bytesize, flags) ? host_pool() : NULL;
    if (!p)
        return ENOENT;
    uint64_t t0 = fp_ticks(), addr = 0;
    int err = serve(p, bytesize, flags, &addr);
    add_ticks(t0);
    if (!atomic_load_explicit(&fp_shim.used, memory_order_relaxed))
        atomic_store_explicit(&fp_shim.used, true, memory_order_relaxed);
    if (!err)
        *out = (void *)(uintptr_t)addr;
    return err;
}

/* ---- free -------------------------------------------------------------------- */

/* free_policy:sync: wait for every live context, as cuMemFreeHost does. */
static int sync_all(void)
{
    if (atomic_load(&fp_shim.exiting))
        return 0;
    pthread_mutex_lock(&H.host_lock);
    bool ok = sync_all_locked();
    pthread_mutex_unlock(&H.host_lock);
    return ok ? 0 : EIO;
}

/* The pool's free; deferred, the fence comes after it, and `pending` is
 * set before the block is free, so no reuse slips past the fence. */
static int give_back(fp_pool *pool, uint64_t a)
{
    if (fp_shim.conf.free_policy == FP_FREE_SYNC)
        return fp_pool_free_at(pool, a, NULL, NULL);
    pthread_mutex_lock(&H.host_lock);
    atomic_store(&H.pending, true);
    int err = fp_pool_free_at(pool, a, NULL, NULL);
    if (!err && !atomic_load(&fp_shim.exiting))
        fence_free();
    pthread_mutex_unlock(&H.host_lock);
    return err;
}

int fp_host_free(void *p)
{
    fp_pool *pool = p ? host_pool_existing() : NULL;
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (!pool || !fp_pool_owns(pool, a, NULL))
        return ENOENT;
    uint64_t t0 = fp_ticks();
    int err = fp_shim.conf.free_policy == FP_FREE_SYNC ? sync_all() : 0;
    if (!err) {
        blocks_remove(a);
        err = give_back(pool, a);
    }
    add_ticks(t0);
    if (err == EINVAL)
        fp_say("cuMemFreeHost(%p): not the start of a live pinned allocation (double free or "
               "interior pointer); nothing was freed, returning CUDA_ERROR_INVALID_VALUE",
               p);
    return err;
}

/* ---- queries ------------------------------------------------------------------ */

int fp_host_lookup(uint64_t p, fp_host_found *out)
{
    fp_pool *pool = host_pool_existing();
    if (!pool || !fp_pool_owns(pool, p, NULL))
        return ENOENT;
    return blocks_find(p, out) ? 0 : EINVAL;
}

/* ---- summary, fork -------------------------------------------------------------- */

bool fp_host_report_get(fp_host_report *out)
{
    fp_pool *p = host_pool_existing();
    memset(out, 0, sizeof *out);
    out->to_driver = atomic_load(&H.to_driver);
    out->fallbacks = atomic_load(&H.fallbacks);
    out->alloc_ns = fp_ticks_to_ns(atomic_load(&H.ticks));
    out->pooling = fp_shim.conf.host_pool;
    out->max_reserved = fp_shim.conf.host_max_reserved;
    pthread_mutex_lock(&H.host_lock);
    out->fences = H.fences;
    out->waits = H.waits;
    out->syncs = H.syncs;
    pthread_mutex_unlock(&H.host_lock);
    if (p)
        fp_pool_get_stats(p, &out->stats);
    return p || out->to_driver;
}

bool fp_host_locks_free(void)
{
    fp_pool *p = host_pool_existing();
    if (pthread_mutex_trylock(&H.host_lock) != 0)
        return false;
    pthread_mutex_unlock(&H.host_lock);
    return !p || fp_pool_lock_free(p);
}

void fp_host_fork_prepare(void)
{
    pthread_mutex_lock(&H.pool_lock);
    pthread_mutex_lock(&H.host_lock);
    pthread_mutex_lock(&H.blocks_lock);
    if (H.pool)
        fp_pool_fork_prepare(H.pool);
}

void fp_host_fork_after(bool child)
{
    if (H.pool)
        fp_pool_fork_after(H.pool, child);
    if (child) {
        pthread_mutex_init(&H.blocks_lock, NULL);
        pthread_mutex_init(&H.host_lock, NULL);
        pthread_mutex_init(&H.pool_lock, NULL);
        return;
    }
    pthread_mutex_unlock(&H.blocks_lock);
    pthread_mutex_unlock(&H.host_lock);
    pthread_mutex_unlock(&H.pool_lock);
}
