/* simdev/sim_pool.c: each device's default stream-ordered memory pool -
 * the pool cuMemAllocAsync draws from - and the calls that read and tune
 * it (cuDeviceGetDefaultMemPool, cuDeviceGetMemPool, cuDeviceSetMemPool,
 * cuMemPoolGetAttribute, cuMemPoolSetAttribute, cuMemPoolTrimTo).
 *
 * The pool is bookkeeping only: the memory behind each allocation is
 * still charged and freed one by one by the registry (sim_registry.c),
 * which reports here, under its mem lock, what happens to the live
 * cuMemAllocAsync allocations made outside capture (graph allocations
 * made during capture are not counted, as natively).
 *
 * The model (kept small; exact native reserved numbers are not the aim):
 *   used      sum of the requested sizes of the live allocations; drops at
 *             the free call (cuMemFreeAsync, cuMemFree), before the stream
 *             reaches the free, as the driver's does;
 *   held      like used, but drops only when the memory is really given
 *             back (the stream ran the free; cuMemFree; context teardown);
 *   reserved  a multiple of CHUNK (32 MiB), never below need = held rounded
 *             up to CHUNK: an allocation raises it to need when need is
 *             larger; a synchronize of the device (stream, context or
 *             event) with reserved above RELEASE_THRESHOLD lowers it to
 *             max(need, threshold rounded down to CHUNK); cuMemPoolTrimTo
 *             lowers it to max(need, min(reserved, minBytesToKeep rounded
 *             up to CHUNK)).  Reuse of freed memory is not modelled.
 * So reserved >= held >= used always.  The highs follow used and reserved;
 * setting one with the value 0 resets it to the current value (any other
 * value: CUDA_ERROR_INVALID_VALUE).  The three REUSE_* attributes read 1
 * and store 0 or 1 (any nonzero int reads back as 1); RELEASE_THRESHOLD
 * round-trips; the current values are read-only.
 *
 * Handles: one fixed handle per device, the address of its pool record.
 * simdev has no cuMemPoolCreate, so cuDeviceSetMemPool accepts only the
 * device's own default pool and cuDeviceGetMemPool always answers it.  An
 * unknown pool handle, a NULL value, an unknown attribute:
 * CUDA_ERROR_INVALID_VALUE.
 *
 * Lock: the pool lock, a leaf taken inside the registry's mem lock (and
 * inside g_sim.lock by the synchronize calls); it calls nothing.
 */
#include "sim.h"

#include <stdint.h>
#include <string.h>

#define CHUNK ((uint64_t)32 << 20)

typedef struct sim_pool {
    uint64_t used, used_high;
    uint64_t held;
    uint64_t reserved, reserved_high;
    uint64_t threshold; /* RELEASE_THRESHOLD */
    int no_reuse[3];    /* REUSE_* attribute k+1 set to 0; zero,
                                  i.e. reuse on, by default */
} sim_pool;

static struct {
    pthread_mutex_t lock;
    sim_pool dev[SIM_MAX_DEVICES];
} g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void pool_lock(void)
{
    pthread_mutex_lock(&g_pool.lock);
}
static void pool_unlock(void)
{
    pthread_mutex_unlock(&g_pool.lock);
}

static uint64_t round_up(uint64_t v)
{
    return v > UINT64_MAX - (CHUNK - 1) ? UINT64_MAX / CHUNK * CHUNK
                                        : (v + CHUNK - 1) / CHUNK * CHUNK;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}
static uint64_t min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* ---- the registry's reports (mem lock held) ------------------------------- */

void sim_pool_alloc(int dev, size_t bytes)
{
    pool_lock();
    sim_pool *p = &g_pool.dev[dev];
    p->used += bytes;
    p->held += bytes;
    p->used_high = max64(p->used_high, p->used);
    p->reserved = max64(p->reserved, round_up(p->held));
    p->reserved_high = max64(p->reserved_high, p->reserved);
    pool_unlock();
}

void sim_pool_free_call(int dev, size_t bytes)
{
    pool_lock();
    g_pool.dev[dev].used -= bytes;
    pool_unlock();
}

void sim_pool_free_undone(int dev, size_t bytes)
{
    pool_lock();
    g_pool.dev[dev].used += bytes;
    pool_unlock();
}

void sim_pool_given_back(int dev, size_t bytes)
{
    pool_lock();
    g_pool.dev[dev].held -= bytes;
    pool_unlock();
}

void sim_pool_synced(int dev)
{
    pool_lock();
    sim_pool *p = &g_pool.dev[dev];
    if (p->reserved > p->threshold)
        p->reserved = max64(round_up(p->held), p->threshold / CHUNK * CHUNK);
    pool_unlock();
}

/* ---- handles ------------------------------------------------------------------ */

static CUmemoryPool handle_of(int dev)
{
    return (CUmemoryPool)(void *)&g_pool.dev[dev];
}

/* The device whose default pool h is, or -1. */
static int dev_of(CUmemoryPool h)
{
    for (int d = 0; d < g_sim.ndev; d++)
        if (h == handle_of(d))
            return d;
    return -1;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && pool_out == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS)
        *pool_out = handle_of(dev);
    return rc;
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return cuDeviceGetDefaultMemPool(pool, dev);
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS)
        rc = sim_check_dev(dev);
    if (rc == CUDA_SUCCESS && dev_of(pool) != dev)
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc;
}

/* ---- attributes --------------------------------------------------------------- */

static bool int_attr(CUmemPool_attribute a)
{
    return a >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
           a <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

/* The 64-bit attributes' value (pool lock held); false: unknown. */
static bool read_u64(const sim_pool *p, CUmemPool_attribute a, uint64_t *v)
{
    switch (a) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *v = p->threshold; return true;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *v = p->reserved; return true;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *v = p->reserved_high; return true;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *v = p->used; return true;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *v = p->used_high; return true;
    default: return false;
    }
}

/* The device of pool, checked with value (the start of both calls). */
static CUresult attr_call(CUmemoryPool pool, const void *value, int *dev)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    *dev = dev_of(pool);
    if (*dev < 0 || value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    int dev = -1;
    CUresult rc = attr_call(pool, value, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pool_lock();
    const sim_pool *p = &g_pool.dev[dev];
    uint64_t v = 0;
    int on = int_attr(attr) && !p->no_reuse[attr - 1];
    if (int_attr(attr))
        memcpy(value, &on, sizeof on);
    else if (read_u64(p, attr, &v))
        memcpy(value, &v, sizeof v);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pool_unlock();
    return rc;
}

/* Sets a 64-bit attribute to v (pool lock held). */
static CUresult write_u64(sim_pool *p, CUmemPool_attribute a, uint64_t v)
{
    switch (a) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = v; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (v != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->reserved_high = p->reserved;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (v != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->used_high = p->used;
        return CUDA_SUCCESS;
    default: /* the current values are read-only; unknown ones */ return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    int dev = -1;
    CUresult rc = attr_call(pool, value, &dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pool_lock();
    sim_pool *p = &g_pool.dev[dev];
    if (int_attr(attr)) {
        int v = 0;
        memcpy(&v, value, sizeof v);
        p->no_reuse[attr - 1] = v == 0;
    } else {
        uint64_t v = 0;
        memcpy(&v, value, sizeof v);
        rc = write_u64(p, attr, v);
    }
    pool_unlock();
    return rc;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    int dev = dev_of(pool);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    pool_lock();
    sim_pool *p = &g_pool.dev[dev];
    uint64_t keep = min64(p->reserved, round_up(minBytesToKeep));
    p->reserved = max64(round_up(p->held), keep);
    pool_unlock();
    return CUDA_SUCCESS;
}
