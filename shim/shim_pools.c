/* shim_pools.c - one pool per CUDA context, and the backend that gives
 * each pool its segments from the real driver.
 *
 * A pool is created the first time its context allocates and is found
 * again by the context current at allocation time.  Frees find the pool by
 * address (each pool knows its segments), so a free from another thread or
 * with another context current goes back to the right pool.  When a
 * context is destroyed or reset, the driver frees its memory: the pool is
 * retired (its stats stay for the summary, its segments are forgotten).
 *
 * Invariants: an entry is fully written before npools (a new slot) or
 * retired = false (a reused one) publishes it; a retired pool is never
 * used for allocation again.  Once all FP_MAX_POOLS slots have been used,
 * a new context takes the slot of a retired one, whose numbers then leave
 * the summary.
 */
#include "shim_pools.h"
#include "shim_clock.h"
#include "shim_real.h"
#include "shim_snaprec.h"
#include "shim_state.h"
#include "shim_streams.h"
#include "shim_trace.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define FP_MAX_POOLS 64

static fp_ctx_pool pools[FP_MAX_POOLS];
static atomic_int npools;
static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;
static FP_THREAD_LOCAL CUresult last_error;

CUresult fp_pools_last_error(void)
{
    return last_error;
}

/* ---- backend: segments from the real driver --------------------------- */

static int be_reserve(void *ud, size_t size, uint64_t *addr)
{
    CUdeviceptr p = 0;
    fp_time_slow();
    CUresult r = fp_real.cuMemAlloc_v2(&p, size);
    if (r == CUDA_SUCCESS) {
        *addr = p;
        fp_trace_event('s', p, size, NULL);
        fp_snap_segment(((fp_ctx_pool *)ud)->dev, 's', p, size);
        return 0;
    }
    last_error = r;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM : EIO;
}

static int be_release(void *ud, uint64_t addr, size_t size)
{
    fp_trace_event('r', addr, size, NULL);
    fp_snap_segment(((fp_ctx_pool *)ud)->dev, 'r', addr, size);
    if (atomic_load(&fp_shim.exiting))
        return 0; /* the driver frees everything at teardown */
    fp_time_slow();
    return fp_real.cuMemFree_v2(addr) == CUDA_SUCCESS ? 0 : EIO;
}

static int be_synchronize(void *ud)
{
    return fp_pools_sync(ud);
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

static fp_vmm *vmm_of(void *ud)
{
    return ((fp_ctx_pool *)ud)->vmm;
}

/* The driver's code of a failed VMM call, for the interposer to return. */
static int vmm_result(int err)
{
    if (err && fp_vmm_last_error() != CUDA_SUCCESS)
        last_error = fp_vmm_last_error();
    return err;
}

static size_t be_granularity(void *ud)
{
    return fp_vmm_granularity(vmm_of(ud));
}

static int be_reserve_va(void *ud, size_t size, size_t align, uint64_t *addr)
{
    return vmm_result(fp_vmm_reserve_va(vmm_of(ud), size, align, addr));
}

static int be_free_va(void *ud, uint64_t addr, size_t size)
{
    return vmm_result(fp_vmm_free_va(vmm_of(ud), addr, size));
}

static int be_map(void *ud, uint64_t addr, size_t size)
{
    return vmm_result(fp_vmm_map(vmm_of(ud), addr, size));
}

static int be_unmap(void *ud, uint64_t addr, size_t size, uint64_t freed_at)
{
    return vmm_result(fp_vmm_unmap(vmm_of(ud), addr, size, freed_at));
}

/* Said once: the driver cannot map pages (no VMM calls). */
static void note_no_vmm(void)
{
    static atomic_bool said;
    if (!atomic_exchange(&said, true))
        fp_say("expandable_segments:True: the driver has no virtual memory "
               "management here (cuMemGetAllocationGranularity failed); serving from "
               "classic segments");
}

/* Said once: vmm_page_mb was rounded up to the device's granularity. */
static void note_page(fp_ctx_pool *d, size_t asked)
{
    static atomic_bool said;
    fp_pool_stats st;
    fp_pool_get_stats(d->pool, &st);
    size_t g = fp_vmm_granularity(d->vmm);
    if (asked && g && asked % g && !atomic_exchange(&said, true))
        fp_say("vmm_page_mb:%zu is not a multiple of the device's %zu MiB "
               "granularity; using %zu MiB pages", asked / FP_MIB, g / FP_MIB,
               st.page_size / FP_MIB);
}

/* ---- finding pools ---------------------------------------------------- */

static fp_ctx_pool *find_ctx(CUcontext ctx)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (pools[i].ctx == ctx && !atomic_load(&pools[i].retired))
            return &pools[i];
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
    fp_backend be = {.ctx = d, .reserve = be_reserve, .release = be_release,
                     .synchronize = be_synchronize};
    if (o.expandable_segments) {
        be.granularity = be_granularity;
        be.reserve_va = be_reserve_va;
        be.free_va = be_free_va;
        be.map = be_map;
        be.unmap = be_unmap;
    }
    d->ctx = ctx;
    d->dev = dev;
    d->total = total;
    /* the deferral and the VMM state first: the pool may call them */
    if (!(d->defer = fp_defer_new(ctx)))
        return ENOMEM;
    if (!(d->vmm = fp_vmm_new(ctx, dev, d->defer))) {
        fp_defer_free(d->defer);
        d->defer = NULL;
        return ENOMEM;
    }
    int err = fp_pool_create(&o, &be, &d->pool);
    if (!err && o.expandable_segments && !fp_pool_is_vmm(d->pool))
        note_no_vmm();
    if (!err && fp_pool_is_vmm(d->pool))
        note_page(d, o.vmm_page);
    if (err) {
        fp_vmm_free(d->vmm);
        fp_defer_free(d->defer);
        d->vmm = NULL;
        d->defer = NULL;
    }
    if (!err)
        atomic_store_explicit(&d->retired, false, memory_order_release);
    return err;
}


/* A retired slot to make a new pool in, its old pool dropped (its
 * numbers leave the summary), or NULL.  Readers skip a slot while it is
 * retired, so it is rewritten before it is published again. */
static fp_ctx_pool *reuse_retired(void)
{
    for (int i = 0; i < FP_MAX_POOLS; i++) {
        fp_ctx_pool *d = &pools[i];
        if (atomic_load(&d->retired)) {
            fp_pool_destroy(d->pool, 1);
            fp_defer_free(d->defer);
            fp_vmm_free(d->vmm);
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
        fp_say("%d CUDA contexts live at once; allocations of further contexts go to the "
               "driver uncached", FP_MAX_POOLS);
}

static fp_ctx_pool *add_pool(CUcontext ctx)
{
    pthread_mutex_lock(&grow_lock);
    fp_ctx_pool *d = find_ctx(ctx);
    int n = atomic_load(&npools);
    if (!d && n < FP_MAX_POOLS && make_pool(&pools[n], ctx) == 0) {
        d = &pools[n];
        atomic_store_explicit(&npools, n + 1, memory_order_release);
    } else if (!d && n == FP_MAX_POOLS) {
        fp_ctx_pool *slot = reuse_retired();
        if (slot && make_pool(slot, ctx) == 0) /* published when whole */
            d = slot;
        else if (!slot)
            say_full_once();
    }
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
    for (int i = 0; i < n; i++)
        if (!atomic_load(&pools[i].retired) && fn(&pools[i], ud))
            return &pools[i];
    return NULL;
}

fp_ctx_pool *fp_pools_owner(uint64_t addr)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (!atomic_load(&pools[i].retired) && fp_pool_owns(pools[i].pool, addr, NULL))
            return &pools[i];
    return NULL;
}

void fp_pools_retire(CUcontext ctx, CUdevice dev, bool by_device)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        fp_ctx_pool *d = &pools[i];
        bool hit = by_device ? d->dev == dev : d->ctx == ctx;
        if (hit && !atomic_exchange(&d->retired, true)) {
            fp_defer_forget(d->defer);
            fp_pool_forget_segments(d->pool);
            fp_vmm_forget(d->vmm);
        }
    }
}

size_t fp_pools_idle(CUdevice dev)
{
    size_t idle = 0;
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (pools[i].dev == dev && !atomic_load(&pools[i].retired))
            idle += fp_pool_idle_bytes(pools[i].pool);
    return idle;
}

void fp_pools_each(void (*fn)(fp_ctx_pool *d, void *ud), void *ud)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (pools[i].pool) /* a reused slot whose new pool could not be made */
            fn(&pools[i], ud);
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
        fp_vmm_fork_prepare(pools[i].vmm);
    }
}

void fp_pools_fork_after(bool child)
{
    int n = atomic_load_explicit(&npools, memory_order_acquire);
    for (int i = n - 1; i >= 0; i--) {
        if (!pools[i].pool)
            continue;
        fp_vmm_fork_after(pools[i].vmm, child);
        fp_defer_fork_after(pools[i].defer, child);
        fp_pool_fork_after(pools[i].pool, child);
    }
    fp_capture_gate_fork_after(child);
    if (child)
        pthread_mutex_init(&grow_lock, NULL);
    else
        pthread_mutex_unlock(&grow_lock);
}
