/* shim_pools.c - one pool per CUDA context, and the backend that gives
 * each pool its segments from the real driver.
 *
 * A pool is created the first time its context allocates and is found
 * again by the context current at allocation time.  Frees find the pool by
 * address (each pool knows its segments), so a free from another thread or
 * with another context current goes back to the right pool.  When a
 * context is destroyed or reset, the driver frees its memory: the pool is
 * retired (its stats stay for the summary, its segments are forgotten;
 * its virtual-memory pages, which the driver keeps, are released).
 *
 * Slots.  Once all FP_MAX_POOLS slots have been used, a new context takes
 * the slot of a retired one, whose pool is destroyed then (its numbers
 * leave the summary).  Other threads may still be inside that pool (a
 * free walking every pool, a summary reading its stats), so every use of
 * a slot is held: hold() counts the user in (on the thread's own shard of
 * the count) before it reads the slot's state, and a slot is rebuilt only
 * after its state has become REBUILDING with no user counted in on any
 * shard.  Both sides are sequentially consistent, so
 * either the user sees REBUILDING and leaves, or the rebuilder sees the
 * user and gives the slot back to RETIRED.  Nothing waits for a user:
 * when every retired slot is held, the new context is served by the
 * driver until a later allocation finds one free.
 *
 * Invariants: an entry is fully written before npools (a new slot) or
 * state = LIVE (a reused one) publishes it; a pool that is not LIVE is
 * never used for allocation again; a slot is rebuilt only while no user
 * holds it; only RETIRED slots (their segments forgotten) are rebuilt.
 */
#include "shim_pools.h"
#include "fp_assert.h"
#include "shim_clock.h"
#include "shim_framework.h"
#include "shim_real.h"
#include "shim_snaprec.h"
#include "shim_state.h"
#include "shim_streams.h"
#include "shim_trace.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FP_MAX_POOLS 64

static fp_ctx_pool pools[FP_MAX_POOLS];
static atomic_int npools;
/* set_per_process_memory_fraction, by device ordinal: the fraction the
 * program set at run time (over the configuration's), or < 0 for none. */
#define FP_FRACTION_DEVICES 64
static _Atomic(double) fraction_of[FP_FRACTION_DEVICES] = {[0 ... FP_FRACTION_DEVICES - 1] = -1.0};
static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;
static FP_THREAD_LOCAL CUresult last_error;

CUresult fp_pools_last_error(void)
{
    return last_error;
}

/* ---- backend: segments from the real driver --------------------------- */

static size_t be_device_free(void *ud);

/* After the pool took or gave back memory: what the driver says is free
 * now, kept for the summary (it makes no driver call at exit). */
static void see_free(fp_ctx_pool *d)
{
    size_t fr = atomic_load(&fp_shim.exiting) ? SIZE_MAX : be_device_free(d);
    if (fr != SIZE_MAX)
        atomic_store(&d->free_seen, fr);
}

static int be_reserve(void *ud, size_t size, uint64_t *addr)
{
    CUdeviceptr p = 0;
    fp_time_slow();
    CUresult r = fp_real.cuMemAlloc_v2(&p, size);
    if (r == CUDA_SUCCESS) {
        *addr = p;
        fp_tracer_event('s', p, size, NULL);
        fp_snap_segment(((fp_ctx_pool *)ud)->dev, 's', p, size);
        see_free(ud);
        return 0;
    }
    last_error = r;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM : EIO;
}

static int be_release(void *ud, uint64_t addr, size_t size)
{
    fp_tracer_event('r', addr, size, NULL);
    fp_snap_segment(((fp_ctx_pool *)ud)->dev, 'r', addr, size);
    if (atomic_load(&fp_shim.exiting))
        return 0; /* the driver frees everything at teardown */
    fp_time_slow();
    int err = fp_real.cuMemFree_v2(addr) == CUDA_SUCCESS ? 0 : EIO;
    if (!err)
        see_free(ud);
    return err;
}

/* Before cached segments go back: not while a graph is captured, which a
 * synchronization would break.  Nothing needs it then: cuMemFree waits
 * for the device itself, and pages are not unmapped during a capture. */
static int be_synchronize(void *ud)
{
    return fp_streams_capturing() ? 0 : fp_pools_sync(ud);
}

int fp_pools_sync(fp_ctx_pool *d)
{
    if (atomic_load(&fp_shim.exiting) || !fp_real.cuCtxSynchronize)
        return 0;
    fp_time_slow();
    CUresult r = fp_real_ctx_sync(d->ctx);
    if (r != CUDA_SUCCESS)
        last_error = r; /* the caller returns the driver's own code */
    return r == CUDA_SUCCESS ? 0 : EIO;
}

/* ---- backend: virtual-memory segments (expandable_segments) ---------- */

static fp_pages *vmm_of(void *ud)
{
    return ((fp_ctx_pool *)ud)->vmm;
}

/* The driver's code of a failed VMM call, for the interposer to return. */
static int vmm_result(int err)
{
    if (err && fp_pages_last_error() != CUDA_SUCCESS)
        last_error = fp_pages_last_error();
    return err;
}

static size_t be_granularity(void *ud)
{
    return fp_pages_granularity(vmm_of(ud));
}

/* A range is a segment in the trace ('s', 'r'); its pages mapped and
 * unmapped are the snapshot's segment_map and segment_unmap. */
static int be_reserve_va(void *ud, size_t size, size_t align, uint64_t *addr)
{
    int err = vmm_result(fp_pages_reserve_va(vmm_of(ud), size, align, addr));
    if (!err)
        fp_tracer_event('s', *addr, size, NULL);
    return err;
}

static int be_free_va(void *ud, uint64_t addr, size_t size)
{
    int err = vmm_result(fp_pages_free_va(vmm_of(ud), addr, size));
    if (!err)
        fp_tracer_event('r', addr, size, NULL);
    return err;
}

static int be_map(void *ud, uint64_t addr, size_t size)
{
    int err = vmm_result(fp_pages_map(vmm_of(ud), addr, size));
    if (!err) {
        fp_snap_segment(((fp_ctx_pool *)ud)->dev, 'm', addr, size);
        see_free(ud);
    }
    return err;
}

static int be_unmap(void *ud, uint64_t addr, size_t size, uint64_t freed_at)
{
    int err = vmm_result(fp_pages_unmap(vmm_of(ud), addr, size, freed_at));
    if (!err) {
        fp_snap_segment(((fp_ctx_pool *)ud)->dev, 'u', addr, size);
        see_free(ud);
    }
    return err;
}

/* vmm_headroom: the device's free memory as the driver counts it (the
 * real cuMemGetInfo, not fragpool's answer), asked only in the pool's own
 * context; SIZE_MAX (unknown) elsewhere. */
static size_t be_device_free(void *ud)
{
    CUcontext cur = NULL;
    size_t fr = 0, total = 0;
    if (!fp_real.cuMemGetInfo_v2 || fp_real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS ||
        cur != ((fp_ctx_pool *)ud)->ctx || fp_real.cuMemGetInfo_v2(&fr, &total) != CUDA_SUCCESS)
        return SIZE_MAX;
    return fr;
}

/* Said once, when expandable_segments:True was asked for by name: the
 * driver cannot map pages here.  The default says nothing (the summary
 * says which segments ran and why). */
static void note_no_vmm(int asked)
{
    static atomic_bool said;
    if (asked == FP_VMM_ON && !atomic_exchange(&said, true))
        fp_say("expandable_segments:True: the driver has no virtual memory "
               "management here; serving from classic segments");
}

/* Said once: vmm_page_mb or vmm_reserve_mb was more than the device
 * allows (fp_vmm_size: the limit is used), or vmm_page_mb was rounded up
 * to the device's granularity. */
static void note_page(fp_ctx_pool *d, const fp_pool_opts *o)
{
    static atomic_bool said, said_clamp;
    fp_pool_stats st;
    fp_pool_get_stats(d->pool, &st);
    size_t g = fp_pages_granularity(d->vmm), asked = o->vmm_page;
    char line[512];
    if (fp_conf_vmm_note(o, g, "the device's", line, sizeof line)) {
        if (!atomic_exchange(&said_clamp, true))
            fp_say("%s", line);
        return;
    }
    if (asked && g && asked % g && !atomic_exchange(&said, true))
        fp_say("vmm_page_mb:%zu is not a multiple of the device's %zu MiB "
               "granularity; using %zu MiB pages",
               asked / FP_MIB, g / FP_MIB, st.page_size / FP_MIB);
}

static void say_line(void *ud, const char *line)
{
    (void)ud;
    fp_say("%s", line + strlen("fragpool: ")); /* fp_conf's lines start so */
}

/* Said once per process, for the first pool: each key given that has no
 * effect with the segments this pool runs (fp_conf_inert), and what
 * would make it act. */
static void note_inert(const fp_pool_opts *o, bool vmm)
{
    static atomic_bool said;
    if (atomic_exchange(&said, true))
        return;
    fp_segs segs = vmm                      ? fp_conf_segs(&fp_shim.conf)
                   : o->expandable_segments ? FP_SEGS_CLASSIC_NO_VMM
                                            : FP_SEGS_CLASSIC;
    fp_conf_inert(&fp_shim.conf, fp_shim.conf.set_mask, segs, fp_fw_conf_source(), say_line, NULL);
}

/* ---- finding pools ---------------------------------------------------- */

/* The calling thread's shard of a pool's user count, fixed for its
 * lifetime (a fork's child keeps its parent thread's). */
static atomic_int *my_shard(fp_ctx_pool *d)
{
    static atomic_uint next;
    static FP_THREAD_LOCAL int shard = -1;
    if (shard < 0)
        shard = (int)(atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % FP_USER_SHARDS);
    return &d->users[shard].n;
}

static bool no_users(fp_ctx_pool *d)
{
    for (int i = 0; i < FP_USER_SHARDS; i++)
        if (atomic_load(&d->users[i].n) != 0)
            return false;
    return true;
}

/* Counts the caller in as a user of d when d is LIVE (or, with
 * any_state, retired but whole); false when it is not to be read. */
static bool hold(fp_ctx_pool *d, bool any_state)
{
    atomic_int *n = my_shard(d);
    atomic_fetch_add(n, 1);
    int st = atomic_load(&d->state);
    if (st == FP_SLOT_LIVE || (any_state && (st == FP_SLOT_RETIRING || st == FP_SLOT_RETIRED)))
        return true;
    atomic_fetch_sub(n, 1);
    return false;
}

void fp_pools_put(fp_ctx_pool *d)
{
    if (!d)
        return;
    int was = atomic_fetch_sub_explicit(my_shard(d), 1, memory_order_release);
    fp_assert(was > 0, "a pool given back by a thread that did not hold it");
}

static fp_ctx_pool *find_ctx(CUcontext ctx)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!hold(&pools[i], false))
            continue;
        if (pools[i].ctx == ctx)
            return &pools[i];
        fp_pools_put(&pools[i]);
    }
    return NULL;
}

static int make_pool(fp_ctx_pool *d, CUcontext ctx)
{
    CUdevice dev = 0;
    if (fp_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return EIO;
    size_t total = 0;
    fp_real.cuDeviceTotalMem_v2(&total, dev);
    if (!fp_real.cuDeviceGetName || fp_real.cuDeviceGetName(d->name, sizeof d->name, dev))
        d->name[0] = '\0';
    fp_pool_opts o = fp_shim.conf.pool;
    o.device_total = total;
    double f = dev >= 0 && dev < FP_FRACTION_DEVICES ? atomic_load(&fraction_of[dev]) : -1.0;
    if (f >= 0)
        o.memory_fraction = f;
    fp_backend be = {
        .ctx = d, .reserve = be_reserve, .release = be_release, .synchronize = be_synchronize};
    d->segments_asked = o.expandable_segments;
    if (o.expandable_segments && fp_pages_supported(dev)) {
        be.granularity = be_granularity;
        be.reserve_va = be_reserve_va;
        be.free_va = be_free_va;
        be.map = be_map;
        be.unmap = be_unmap;
        be.device_free = be_device_free;
    }
    d->ctx = ctx;
    d->dev = dev;
    d->total = total;
    atomic_store(&d->free_seen, SIZE_MAX);
    see_free(d);
    d->forked = false;
    atomic_store(&d->threads, 0); /* no thread has allocated from it */
    /* the deferral and the VMM state first: the pool may call them */
    if (!(d->defer = fp_defer_new(ctx)))
        return ENOMEM;
    if (!(d->vmm = fp_pages_new(ctx, dev, d->defer))) {
        fp_defer_free(d->defer);
        d->defer = NULL;
        return ENOMEM;
    }
    int err = fp_pool_create(&o, &be, &d->pool);
    if (!err && !fp_pool_is_vmm(d->pool))
        note_no_vmm(o.expandable_segments);
    if (!err && fp_pool_is_vmm(d->pool))
        note_page(d, &o);
    if (!err)
        note_inert(&o, fp_pool_is_vmm(d->pool));
    if (err) {
        fp_pages_free(d->vmm);
        fp_defer_free(d->defer);
        d->vmm = NULL;
        d->defer = NULL;
    }
    atomic_store(&d->state, err ? FP_SLOT_EMPTY : FP_SLOT_LIVE);
    return err;
}

/* Takes d for rebuilding when it is retired (or empty) and nobody holds
 * it; see "Slots" above. */
static bool take_for_rebuild(fp_ctx_pool *d)
{
    int st = atomic_load(&d->state);
    if ((st != FP_SLOT_RETIRED && st != FP_SLOT_EMPTY) ||
        !atomic_compare_exchange_strong(&d->state, &st, FP_SLOT_REBUILDING))
        return false;
    if (no_users(d))
        return true;
    atomic_store(&d->state, st);
    return false;
}

/* A retired slot to make a new pool in, its old pool dropped (its
 * numbers leave the summary), or NULL when none is free of users. */
static fp_ctx_pool *reuse_retired(void)
{
    for (int i = 0; i < FP_MAX_POOLS; i++) {
        fp_ctx_pool *d = &pools[i];
        if (take_for_rebuild(d)) {
            fp_pool_destroy(d->pool, 1);
            fp_defer_free(d->defer);
            fp_pages_free(d->vmm);
            d->pool = NULL;
            d->defer = NULL;
            d->vmm = NULL;
            return d;
        }
    }
    return NULL;
}

static void say_full_once(void)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&said))
        fp_say("%d CUDA contexts live at once (or every retired one still in use); "
               "allocations of further contexts go to the driver uncached until one is "
               "free",
               FP_MAX_POOLS);
}

static fp_ctx_pool *add_pool(CUcontext ctx)
{
    pthread_mutex_lock(&grow_lock);
    fp_ctx_pool *d = find_ctx(ctx);
    if (d) { /* another thread made it meanwhile; held by find_ctx */
        pthread_mutex_unlock(&grow_lock);
        return d;
    }
    int n = atomic_load(&npools);
    if (n < FP_MAX_POOLS && make_pool(&pools[n], ctx) == 0) {
        d = &pools[n];
        atomic_store_explicit(&npools, n + 1, memory_order_release);
    } else if (n == FP_MAX_POOLS) {
        fp_ctx_pool *slot = reuse_retired();
        if (slot && make_pool(slot, ctx) == 0) /* published when whole */
            d = slot;
        else if (!slot)
            say_full_once();
    }
    if (d && !hold(d, false))
        d = NULL; /* retired as soon as made: the caller forwards */
    pthread_mutex_unlock(&grow_lock);
    return d;
}

fp_ctx_pool *fp_pools_current(void)
{
    CUcontext ctx = NULL;
    if (fp_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return NULL;
    fp_ctx_pool *d = find_ctx(ctx);
    return d ? d : add_pool(ctx);
}

/* ---- each thread's caches (pool/'s front end) ------------------------- *
 * A thread keeps, per pool it allocated from, the cache it joined with and
 * the pool's serial then: a slot rebuilt since has another serial (and its
 * old pool freed the cache).  At the thread's exit (a key's destructor)
 * every cache whose pool is still the one it joined goes back.  A thread
 * joins only once d->threads says a second thread allocates from d
 * (fp_pools_tcache, shim_pools.h): a single-threaded program never does. */
#define FP_THREAD_POOLS 4
typedef struct thread_cache {
    fp_ctx_pool *d;
    uint64_t serial;
    fp_tcache *t;
} thread_cache;
static FP_THREAD_LOCAL thread_cache my_caches[FP_THREAD_POOLS];
static pthread_key_t leave_key;
static pthread_once_t leave_once = PTHREAD_ONCE_INIT;

static void leave_all(void *arg)
{
    thread_cache *c = arg;
    for (int i = 0; i < FP_THREAD_POOLS; i++) {
        if (!c[i].t || !hold(c[i].d, true))
            continue;
        bool held = fp_tracer_order_begin(); /* the leave and its row */
        if (fp_pool_serial(c[i].d->pool) == c[i].serial) {
            fp_pool_front_leave(c[i].d->pool, c[i].t);
            fp_tracer_event('l', fp_pools_trace_id(c[i].d, 0), 0, NULL);
        }
        fp_tracer_order_end(held);
        fp_pools_put(c[i].d);
        c[i].t = NULL;
    }
}

static void make_leave_key(void)
{
    if (pthread_key_create(&leave_key, leave_all) != 0)
        leave_key = (pthread_key_t)-1;
}

/* Not while a snapshot records (its ring is written outside the trace's
 * order); a trace records the caches' joins and leaves (shim_trace.c). */
static bool tcache_wanted(void)
{
    return fp_shim.conf.free_policy == FP_FREE_DEFERRED && fp_shim.conf.pool.thread_cache &&
           !fp_snap_on();
}

FP_THREAD_LOCAL char fp_pools_me;
atomic_bool fp_pools_threads;

/* The calling thread's slot for d's pool, joined now if it has none. */
static fp_tcache *my_cache(fp_ctx_pool *d)
{
    if (!tcache_wanted())
        return NULL;
    uint64_t serial = fp_pool_serial(d->pool);
    thread_cache *free_slot = NULL;
    for (int i = 0; i < FP_THREAD_POOLS; i++) {
        thread_cache *c = &my_caches[i];
        if (c->t && c->d == d && c->serial == serial)
            return c->t;
        if (!free_slot && (!c->t || c->d == d)) /* empty, or d's old pool's */
            free_slot = c;
    }
    pthread_once(&leave_once, make_leave_key);
    if (!free_slot || leave_key == (pthread_key_t)-1 ||
        pthread_setspecific(leave_key, my_caches) != 0 ||
        fp_pool_front_join(d->pool, &free_slot->t) != 0)
        return NULL;
    fp_tracer_event('j', fp_pools_trace_id(d, 0), fp_shim.conf.pool.thread_cache, NULL);
    free_slot->d = d;
    free_slot->serial = serial;
    return free_slot->t;
}

fp_tcache *fp_pools_tcache_slow(fp_ctx_pool *d, uintptr_t seen)
{
    uintptr_t me = (uintptr_t)&fp_pools_me;
    if (seen == 0 && atomic_compare_exchange_strong(&d->threads, &seen, me))
        return NULL; /* the first thread: the pool alone */
    if (seen == me)
        return NULL;
    if (seen != FP_POOL_THREADS) { /* a second thread: for good */
        atomic_store(&d->threads, FP_POOL_THREADS);
        atomic_store(&fp_pools_threads, true);
    }
    return my_cache(d);
}

fp_ctx_pool *fp_pools_free_cached_slow(uint64_t addr, CUstream s, size_t *size, uint64_t *stamp)
{
    for (int i = 0; i < FP_THREAD_POOLS; i++) {
        thread_cache *c = &my_caches[i];
        if (!c->t || !hold(c->d, false))
            continue;
        if (fp_pool_serial(c->d->pool) == c->serial &&
            fp_pool_front_free(c->d->pool, c->t, addr, (uint64_t)(uintptr_t)s, size, stamp) == 0)
            return c->d;
        fp_pools_put(c->d);
    }
    return NULL;
}

uint64_t fp_pools_trace_id(const fp_ctx_pool *d, uint64_t seq)
{
    return ((uint64_t)(d - pools) << 40) | (seq & ((1ull << 40) - 1));
}

fp_ctx_pool *fp_pools_current_existing(void)
{
    CUcontext ctx = NULL;
    if (fp_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return NULL;
    return find_ctx(ctx);
}

fp_ctx_pool *fp_pools_find(bool (*fn)(fp_ctx_pool *d, void *ud), void *ud)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!hold(&pools[i], false))
            continue;
        if (fn(&pools[i], ud))
            return &pools[i];
        fp_pools_put(&pools[i]);
    }
    return NULL;
}

static bool owns(fp_ctx_pool *d, void *addr)
{
    return fp_pool_owns(d->pool, *(uint64_t *)addr, NULL);
}

fp_ctx_pool *fp_pools_owner(uint64_t addr)
{
    return fp_pools_find(owns, &addr);
}

bool fp_pools_retired(fp_ctx_pool *d)
{
    return atomic_load(&d->state) != FP_SLOT_LIVE;
}

/* The slot's segments are forgotten while it is RETIRING: not LIVE (no
 * allocation finds it) and not RETIRED (not rebuilt under the forgetting
 * thread). */
static void retire_one(fp_ctx_pool *d)
{
    int live = FP_SLOT_LIVE;
    if (!atomic_compare_exchange_strong(&d->state, &live, FP_SLOT_RETIRING))
        return;
    fp_defer_forget(d->defer);
    fp_pool_forget_segments(d->pool);
    fp_pages_release_all(d->vmm);
    atomic_store(&d->state, FP_SLOT_RETIRED);
}

void fp_pools_retire(CUcontext ctx, CUdevice dev, bool by_device)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        fp_ctx_pool *d = &pools[i];
        if (!hold(d, false))
            continue;
        if (by_device ? d->dev == dev : d->ctx == ctx)
            retire_one(d);
        fp_pools_put(d);
    }
}

size_t fp_pools_idle(CUdevice dev)
{
    size_t idle = 0;
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!hold(&pools[i], false))
            continue;
        if (pools[i].dev == dev)
            idle += fp_pool_idle_bytes(pools[i].pool);
        fp_pools_put(&pools[i]);
    }
    return idle;
}

int fp_pools_set_fraction(CUdevice dev, double fraction)
{
    if (dev < 0 || dev >= FP_FRACTION_DEVICES)
        return ENODEV;
    if (!(fraction >= 0 && fraction <= 1))
        return EINVAL;
    atomic_store(&fraction_of[dev], fraction); /* for pools made from now on */
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!hold(&pools[i], false))
            continue;
        if (pools[i].dev == dev)
            fp_pool_set_fraction(pools[i].pool, fraction);
        fp_pools_put(&pools[i]);
    }
    return 0;
}

double fp_pools_fraction(CUdevice dev)
{
    double f = dev >= 0 && dev < FP_FRACTION_DEVICES ? atomic_load(&fraction_of[dev]) : -1.0;
    return f >= 0 ? f : fp_shim.conf.pool.memory_fraction;
}

void fp_pools_each(void (*fn)(fp_ctx_pool *d, void *ud), void *ud)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!hold(&pools[i], true)) /* being rebuilt, or empty */
            continue;
        fn(&pools[i], ud);
        fp_pools_put(&pools[i]);
    }
}

void fp_pools_all(void (*fn)(fp_ctx_pool **ds, size_t n, void *ud), void *ud)
{
    fp_ctx_pool *held[FP_MAX_POOLS];
    size_t k = 0;
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (hold(&pools[i], true))
            held[k++] = &pools[i];
    fn(held, k, ud);
    for (size_t i = 0; i < k; i++)
        fp_pools_put(held[i]);
}

void fp_pools_fork_prepare(void)
{
    pthread_mutex_lock(&grow_lock);
    fp_capture_gate_fork_prepare();
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!pools[i].pool)
            continue;
        fp_pool_fork_prepare(pools[i].pool); /* the pool's lock nests outside */
        fp_defer_fork_prepare(pools[i].defer);
        fp_pages_fork_prepare(pools[i].vmm);
    }
}

void fp_pools_fork_after(bool child)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = n - 1; i >= 0; i--) {
        if (!pools[i].pool)
            continue;
        fp_pages_fork_after(pools[i].vmm, child);
        fp_defer_fork_after(pools[i].defer, child);
        fp_pool_fork_after(pools[i].pool, child);
        if (child) { /* the child's summary counts from here */
            pools[i].forked = true;
            fp_pool_get_stats(pools[i].pool, &pools[i].at_fork);
        }
    }
    fp_capture_gate_fork_after(child);
    if (child)
        pthread_mutex_init(&grow_lock, NULL);
    else
        pthread_mutex_unlock(&grow_lock);
}
