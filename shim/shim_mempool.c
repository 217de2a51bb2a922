/* shim_mempool.c - the driver's stream-ordered pool API, telling the
 * truth while fragpool serves cuMemAllocAsync from its own pools.
 *
 * fragpool stands in for each device's default pool: the pool
 * cuMemAllocAsync draws from while the program has made no other pool
 * current.  For a stand-in pool, cuMemPoolGetAttribute answers:
 *   USED_MEM_CURRENT      the requested bytes of the live stream-ordered
 *                         blocks fragpool served on the device (exact; drops
 *                         at the free call, as the driver's does);
 *   USED_MEM_HIGH         the highest of that since the last reset;
 *   RESERVED_MEM_CURRENT  every byte fragpool's pools of the device hold
 *                         (cuMemAlloc's blocks share their segments), never
 *                         below USED_MEM_CURRENT;
 *   RESERVED_MEM_HIGH     the highest of that seen at an allocation or a
 *                         read since the last reset;
 * each added to the driver's own answer, which counts what the driver
 * itself served from that pool (a profiler's passthrough,
 * cuMemAllocFromPoolAsync on the default pool).  The driver is always
 * called first, so that its errors (a bad pool, a NULL value, an unknown
 * attribute, a nonzero high reset) come back unchanged; every other
 * attribute and every other pool is the driver's alone.
 * cuMemPoolSetAttribute: a high reset (value 0) sets fragpool's mark to its
 * current value; RELEASE_THRESHOLD is remembered, and once it is below
 * UINT64_MAX each successful synchronization of the program (context,
 * stream, event) gives back that device's idle memory above it.  The
 * default threshold 0 is not honoured: fragpool would drop its cache at
 * every synchronization.  cuMemPoolTrimTo trims the device's idle memory
 * to max(keep, used).  cuDeviceSetMemPool: while the program has made
 * another pool current on a device, cuMemAllocAsync there goes to the
 * driver untouched (shim_core.c asks fp_mempool_foreign).
 *
 * Trimming is as safe as empty_cache: a classic pool synchronizes its
 * context first (not while a graph is captured: then it keeps its
 * memory), a virtual-memory pool's unmaps wait for the work queued before
 * each page's last free (shim_pages.c).
 *
 * Invariants: a block is in the table iff fragpool served it to
 * cuMemAllocAsync and no free of it has been called (the free takes it
 * out before the pool gets it back, so an address handed out again is
 * never taken for the old block); a device's used bytes are the sum of its
 * blocks in the table; the table and the used numbers change only under
 * the lock.  Lock: taken while holding no lock of fragpool's; under it
 * only pool locks (fp_pools_owner), so it ranks just above the device
 * pools in shim_life.c's list.  Devices past FP_MP_DEVICES are not
 * counted: their pools' attributes are the driver's.
 */
#include "shim_mempool.h"
#include "fp_hmap.h"
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_streams.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct mp_dev {
    _Atomic(CUmemoryPool) def; /* its default pool; NULL until asked  */
    atomic_ullong used;        /* live stream-ordered bytes (lock)    */
    atomic_ullong used_high;   /* (lock)                              */
    atomic_ullong reserved_high;
    atomic_ullong threshold; /* RELEASE_THRESHOLD the program set   */
    atomic_bool trims;       /* threshold < UINT64_MAX              */
} mp_dev;

static mp_dev devs[FP_MP_DEVICES];
atomic_bool fp_mempool_foreign_dev[FP_MP_DEVICES + 1];
atomic_size_t fp_mempool_nlive;
atomic_bool fp_mempool_trimming;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fp_hmap blocks; /* address -> requested bytes << 8 | device */

static bool tracked(CUdevice dev)
{
    return dev >= 0 && dev < FP_MP_DEVICES;
}

static uint64_t pack(CUdevice dev, size_t size)
{
    return (uint64_t)size << 8 | (uint64_t)dev; /* size > 0: never 0 */
}

static CUdevice dev_of(uint64_t v)
{
    return (CUdevice)(v & 0xff);
}

static uint64_t size_of(uint64_t v)
{
    return v >> 8;
}

static void raise_to(atomic_ullong *mark, uint64_t v)
{
    unsigned long long cur = atomic_load_explicit(mark, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak_explicit(mark, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

/* ---- the table of live stream-ordered blocks (lock held) ----------------- */

static void count_in(uint64_t v)
{
    mp_dev *m = &devs[dev_of(v)];
    uint64_t used =
        atomic_fetch_add_explicit(&m->used, size_of(v), memory_order_relaxed) + size_of(v);
    if (used > atomic_load_explicit(&m->used_high, memory_order_relaxed))
        atomic_store_explicit(&m->used_high, used, memory_order_relaxed);
}

static void count_out(uint64_t v)
{
    atomic_fetch_sub_explicit(&devs[dev_of(v)].used, size_of(v), memory_order_relaxed);
}

static void set_live(void)
{
    atomic_store_explicit(&fp_mempool_nlive, blocks.count, memory_order_relaxed);
}

/* Files p -> v; a stale entry at p (its context gone unnoticed) is
 * replaced.  false when the host has no memory for the table. */
static bool put_locked(CUdeviceptr p, uint64_t v)
{
    if ((!blocks.slots && fp_hmap_init(&blocks, 0)) || fp_hmap_make_room(&blocks))
        return false;
    size_t i = fp_hmap_slot(&blocks, p);
    uint64_t old = fp_hmap_at(&blocks, i);
    if (old) {
        count_out(old);
        blocks.slots[i].val = v;
    } else {
        fp_hmap_fill(&blocks, i, p, v);
    }
    count_in(v);
    set_live();
    return true;
}

static uint64_t take_locked(CUdeviceptr p)
{
    if (!blocks.slots)
        return 0;
    size_t i = fp_hmap_slot(&blocks, p);
    uint64_t v = fp_hmap_at(&blocks, i);
    if (v) {
        fp_hmap_erase(&blocks, i);
        count_out(v);
        set_live();
    }
    return v;
}

static void say_no_room(void)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&said))
        fp_say("no host memory for the table of stream-ordered blocks; the stream-ordered "
               "pool statistics (cuMemPoolGetAttribute) leave out the blocks it could not hold");
}

/* ---- reserved bytes -------------------------------------------------------- */

typedef struct dev_sum {
    CUdevice dev;
    uint64_t bytes;
} dev_sum;

static void add_reserved(fp_ctx_pool *d, void *ud)
{
    dev_sum *s = ud;
    if (d->dev == s->dev && d->pool)
        s->bytes += fp_pool_reserved_bytes(d->pool);
}

/* RESERVED_MEM_CURRENT of fragpool's on dev, noted in its high. */
static uint64_t reserved_of(CUdevice dev)
{
    dev_sum s = {dev, 0};
    fp_pools_each(add_reserved, &s);
    uint64_t used = atomic_load_explicit(&devs[dev].used, memory_order_relaxed);
    uint64_t r = s.bytes > used ? s.bytes : used;
    raise_to(&devs[dev].reserved_high, r);
    return r;
}

/* ---- what shim_core.c reports ---------------------------------------------- */

void fp_mempool_allocated(CUdevice dev, CUdeviceptr p, size_t size)
{
    if (!tracked(dev) || !size)
        return;
    pthread_mutex_lock(&lock);
    bool ok = put_locked(p, pack(dev, size));
    pthread_mutex_unlock(&lock);
    if (!ok)
        say_no_room();
    reserved_of(dev);
}

uint64_t fp_mempool_take_slow(CUdeviceptr p)
{
    pthread_mutex_lock(&lock);
    uint64_t v = take_locked(p);
    pthread_mutex_unlock(&lock);
    return v;
}

void fp_mempool_untake(CUdeviceptr p, uint64_t held)
{
    if (!held)
        return;
    pthread_mutex_lock(&lock);
    bool ok = put_locked(p, held);
    pthread_mutex_unlock(&lock);
    if (!ok)
        say_no_room();
}

static bool owned_live(CUdeviceptr p)
{
    fp_ctx_pool *d = fp_pools_owner(p);
    fp_pools_put(d);
    return d != NULL;
}

/* Under the lock, so that no block is filed meanwhile: an address that a
 * live pool has handed out again stays (its new owner replaces the entry). */
void fp_mempool_ctx_gone_slow(void)
{
    pthread_mutex_lock(&lock);
    size_t n = 0, cap = blocks.count;
    CUdeviceptr *gone = cap ? malloc(cap * sizeof *gone) : NULL;
    for (size_t i = 0; gone && blocks.slots && i <= blocks.mask; i++)
        if (blocks.slots[i].val && n < cap && !owned_live(blocks.slots[i].key))
            gone[n++] = blocks.slots[i].key;
    for (size_t k = 0; k < n; k++)
        take_locked(gone[k]);
    pthread_mutex_unlock(&lock);
    free(gone);
}

/* ---- the stand-in pools ------------------------------------------------------ */

/* dev's default pool, asked of the driver now (and cached), or NULL. */
static CUmemoryPool ask_default(CUdevice dev)
{
    CUmemoryPool p = NULL;
    if (!fp_real.cuDeviceGetDefaultMemPool || fp_real.cuDeviceGetDefaultMemPool(&p, dev))
        return NULL;
    if (tracked(dev))
        atomic_store_explicit(&devs[dev].def, p, memory_order_release);
    return p;
}

/* The device whose default pool fragpool stands in for is pool, or -1.
 * The cached handles first; then the driver's, until a device is refused. */
static CUdevice stand_in(CUmemoryPool pool)
{
    if (!pool)
        return -1;
    for (CUdevice d = 0; d < FP_MP_DEVICES; d++)
        if (atomic_load_explicit(&devs[d].def, memory_order_acquire) == pool)
            return d;
    for (CUdevice d = 0; d < FP_MP_DEVICES; d++) {
        CUmemoryPool p = ask_default(d);
        if (!p)
            break;
        if (p == pool)
            return d;
    }
    return -1;
}

/* The driver answered attr of dev's default pool with *v: fragpool adds
 * its own, saturating. */
static void add_ours(CUdevice dev, CUmemPool_attribute attr, uint64_t *v)
{
    mp_dev *m = &devs[dev];
    uint64_t ours = 0;
    switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        ours = atomic_load_explicit(&m->used, memory_order_relaxed);
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        ours = atomic_load_explicit(&m->used_high, memory_order_relaxed);
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: ours = reserved_of(dev); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        reserved_of(dev);
        ours = atomic_load_explicit(&m->reserved_high, memory_order_relaxed);
        break;
    default: return;
    }
    *v = *v > UINT64_MAX - ours ? UINT64_MAX : *v + ours;
}

static bool counted(CUmemPool_attribute attr)
{
    return attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ||
           attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ||
           attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH;
}

/* ---- trimming ---------------------------------------------------------------- */

typedef struct trim_req {
    CUdevice dev;
    uint64_t over; /* bytes still to give back */
} trim_req;

/* One pool of the device gives back what it can of t->over, oldest first:
 * a classic pool after its context is synchronized (as empty_cache), a
 * virtual-memory pool page by page (each unmap waits for its work). */
static void trim_pool(fp_ctx_pool *d, void *ud)
{
    trim_req *t = ud;
    if (!t->over || d->dev != t->dev || fp_pools_retired(d) || !fp_pool_idle_bytes(d->pool))
        return;
    size_t held = fp_pool_reserved_bytes(d->pool);
    if (!fp_pool_is_vmm(d->pool) && (fp_streams_capturing() || fp_pools_sync(d)))
        return;
    size_t got = fp_pool_trim(d->pool, held > t->over ? held - t->over : 0);
    t->over = got >= t->over ? 0 : t->over - got;
}

/* Gives back idle memory of fragpool's on dev until it holds at most
 * max(keep, used) or nothing idle is left. */
void fp_mempool_trim(CUdevice dev, uint64_t keep)
{
    if (!tracked(dev) || atomic_load(&fp_shim.exiting))
        return;
    uint64_t held = reserved_of(dev);
    if (held <= keep)
        return;
    trim_req t = {dev, held - keep};
    fp_pools_each(trim_pool, &t);
}

void fp_mempool_synchronized_slow(void)
{
    for (CUdevice d = 0; d < FP_MP_DEVICES; d++)
        if (atomic_load_explicit(&devs[d].trims, memory_order_relaxed))
            fp_mempool_trim(d, atomic_load_explicit(&devs[d].threshold, memory_order_relaxed));
}

static void set_threshold(CUdevice dev, uint64_t v)
{
    atomic_store(&devs[dev].threshold, v);
    atomic_store(&devs[dev].trims, v != UINT64_MAX);
    bool any = false;
    for (CUdevice d = 0; d < FP_MP_DEVICES; d++)
        any |= atomic_load(&devs[d].trims);
    atomic_store(&fp_mempool_trimming, any);
}

/* ---- the entry points -------------------------------------------------------- */

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    fp_shim_init();
    if (!fp_real.cuMemPoolGetAttribute)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = fp_real.cuMemPoolGetAttribute(pool, attr, value);
    CUdevice dev;
    if (r != CUDA_SUCCESS || !value || !counted(attr) || (dev = stand_in(pool)) < 0)
        return r;
    uint64_t v;
    memcpy(&v, value, sizeof v);
    add_ours(dev, attr, &v);
    memcpy(value, &v, sizeof v);
    return r;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    fp_shim_init();
    if (!fp_real.cuMemPoolSetAttribute)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = fp_real.cuMemPoolSetAttribute(pool, attr, value);
    CUdevice dev;
    if (r != CUDA_SUCCESS || !value || (dev = stand_in(pool)) < 0)
        return r;
    mp_dev *m = &devs[dev];
    uint64_t v;
    if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
        pthread_mutex_lock(&lock);
        atomic_store(&m->used_high, atomic_load(&m->used));
        pthread_mutex_unlock(&lock);
    } else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
        atomic_store(&m->reserved_high, 0);
        reserved_of(dev);
    } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        memcpy(&v, value, sizeof v);
        set_threshold(dev, v);
    }
    return r;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    fp_shim_init();
    if (!fp_real.cuMemPoolTrimTo)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = fp_real.cuMemPoolTrimTo(pool, minBytesToKeep);
    CUdevice dev;
    if (r == CUDA_SUCCESS && (dev = stand_in(pool)) >= 0)
        fp_mempool_trim(dev, minBytesToKeep);
    return r;
}

/* The driver's first; then whether cuMemAllocAsync on dev is fragpool's:
 * only while dev's current pool is its default one (a later device that
 * ever had another pool stays the driver's). */
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    fp_shim_init();
    if (!fp_real.cuDeviceSetMemPool)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = fp_real.cuDeviceSetMemPool(dev, pool);
    if (r != CUDA_SUCCESS)
        return r;
    bool foreign = !pool || ask_default(dev) != pool;
    if (tracked(dev))
        atomic_store_explicit(&fp_mempool_foreign_dev[dev], foreign, memory_order_relaxed);
    else if (foreign)
        atomic_store_explicit(&fp_mempool_foreign_dev[FP_MP_DEVICES], true, memory_order_relaxed);
    return r;
}

/* ---- synchronizations: where a release threshold is honoured ---------------- */

CUresult cuStreamSynchronize(CUstream hStream)
{
    if (!fp_shim_init() || !fp_real.cuStreamSynchronize)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuStreamSynchronize(hStream);
    if (r == CUDA_SUCCESS)
        fp_mempool_synchronized();
    return r;
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    if (!fp_shim_init() || !fp_real.cuStreamSynchronize_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuStreamSynchronize_ptsz(hStream);
    if (r == CUDA_SUCCESS)
        fp_mempool_synchronized();
    return r;
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    if (!fp_shim_init() || !fp_real.cuEventSynchronize)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuEventSynchronize(hEvent);
    if (r == CUDA_SUCCESS)
        fp_mempool_synchronized();
    return r;
}

/* ---- fork -------------------------------------------------------------------- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

static void fork_after(bool child)
{
    fp_mutex_fork_after(&lock, child);
}

/* Before main: the row of shim_life.c's ranked list this lock takes. */
__attribute__((constructor)) static void rank_locks(void)
{
    fp_life_rank_lock("stream-ordered blocks", fork_prepare, fork_after);
}
