/* simdev/sim_registry.c: the registry of live allocations and the capacity
 * accounting of each device.
 *
 * Invariants (under the mem lock, rank 2 in sim.h; the tables have no
 * lock of their own):
 *   - `all` (base/'s fp_ranges) holds every live entry as [base,
 *     base+size) with the entry as its payload: sorted by base, disjoint
 *     (they are distinct host allocations; an insert that would overlap
 *     is refused);
 *   - for each device, in_use equals the sum of `charged` over its live
 *     entries plus its VMM physical memory (phys); pinned host memory is
 *     never charged, nor are SIM_MEM_VMM mappings (their handles are);
 *   - an entry with free_pending has exactly one SIM_OP_FREE queued;
 *   - a SIM_MEM_DEVICE entry spans whole pages (span bytes from base), so
 *     that sim_ipc.c can share them (sim_devfile.c moves them into the
 *     shared device file); shared ones go back to private pages
 *     before they are freed; SIM_MEM_IPC entries are mappings of another
 *     process's memory, never charged, removed only by cuIpcCloseMemHandle
 *     or their context's end;
 *   - the default pool of each device (sim_pool.c) hears of every live
 *     SIM_MEM_ASYNC entry's birth, free call (free_pending set, or a
 *     cuMemFree) and end, under the mem lock;
 *   - `g_res` (an fp_ranges too, no payload) holds the VMM reservations
 *     (sim_vmm.c adds and removes them), so that pointer queries can
 *     answer a reservation's range.
 * The device pointer of an allocation is its host address.
 */
#include "sim.h"

#include "fp_ranges.h"
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct mem_dev {
    size_t capacity; /* bytes */
    size_t in_use;   /* bytes charged */
    fpsim_counts c;  /* memory part of the counters */
} mem_dev;

static struct {
    pthread_mutex_t lock;
    fp_ranges all; /* the live entries by base; payload: sim_alloc */
    mem_dev dev[SIM_MAX_DEVICES];
    unsigned fail_nth;      /* 0: off; else fail when seq reaches it */
    unsigned long long seq; /* counted allocations since armed */
    unsigned long long next_id;
} g_mem = {.lock = PTHREAD_MUTEX_INITIALIZER, .all = {.elem = sizeof(sim_alloc)}};

static void mem_lock(void)
{
    pthread_mutex_lock(&g_mem.lock);
}
static void mem_unlock(void)
{
    pthread_mutex_unlock(&g_mem.lock);
}

void sim_mem_fork_lock(bool lock)
{
    if (lock)
        mem_lock();
    else
        mem_unlock();
}

void sim_mem_setup(int ndev, size_t capacity, unsigned fail_nth)
{
    mem_lock();
    for (int d = 0; d < ndev; d++)
        g_mem.dev[d].capacity = capacity;
    g_mem.fail_nth = fail_nth;
    g_mem.seq = 0;
    mem_unlock();
}

/* ---- the table ------------------------------------------------------------ */

/* Entry i of the table, or NULL for FP_RANGES_NONE (mem lock held). */
static sim_alloc *entry(size_t i)
{
    return i == FP_RANGES_NONE ? NULL : fp_ranges_val(&g_mem.all, i);
}

/* Entry containing p, or NULL. */
static sim_alloc *containing(CUdeviceptr p)
{
    return entry(fp_ranges_find(&g_mem.all, p));
}

static sim_alloc *exact(CUdeviceptr base)
{
    return entry(fp_ranges_at(&g_mem.all, base));
}

/* 0; EEXIST when a overlaps a live entry; ENOMEM. */
static int insert(const sim_alloc *a)
{
    return fp_ranges_insert(&g_mem.all, a->base, a->size, a);
}

static void erase(const sim_alloc *a)
{
    fp_ranges_remove(&g_mem.all, a->base);
}

/* ---- accounting ----------------------------------------------------------- */

static bool counted(sim_mem_kind kind)
{
    return kind != SIM_MEM_HOST && kind != SIM_MEM_IPC && kind != SIM_MEM_VMM &&
           kind != SIM_MEM_REGISTERED;
}

#define SIM_PAGE ((size_t)4096)

/* Gives the host memory of a back (a's entry already erased). */
static void release_host(const sim_alloc *a)
{
    void *p = (void *)(uintptr_t)a->base;
    if (a->kind == SIM_MEM_REGISTERED)
        return; /* the caller's memory: only unregistered */
    if (a->kind == SIM_MEM_IPC) {
        munmap(p, a->span);
        return;
    }
    if (a->shared)
        sim_devfile_unshare_pages(a->base, a->span, a->id);
    free(p);
}

/* Whether bytes more fit on dev, and then charged to the shared capacity
 * when there is one (sim_share.c; mem lock held). */
static bool fits(int dev, size_t bytes)
{
    const mem_dev *d = &g_mem.dev[dev];
    if (sim_share_on())
        return sim_share_charge(dev, bytes, d->capacity);
    return bytes <= (d->capacity > d->in_use ? d->capacity - d->in_use : 0);
}

static void unfit(int dev, size_t bytes)
{
    if (sim_share_on())
        sim_share_uncharge(dev, bytes);
}

/* Charges a counted allocation, or says why not (mem lock held). */
static CUresult charge(const sim_alloc *req)
{
    mem_dev *d = &g_mem.dev[req->dev];
    d->c.alloc_calls++;
    if (req->kind == SIM_MEM_ASYNC || req->kind == SIM_MEM_GRAPH)
        d->c.async_alloc_calls++;
    bool injected = g_mem.fail_nth != 0 && ++g_mem.seq == g_mem.fail_nth;
    if (injected)
        g_mem.fail_nth = 0;
    if (injected || !fits(req->dev, req->charged)) {
        d->c.alloc_failures++;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->in_use += req->charged;
    if (d->in_use > d->c.bytes_peak)
        d->c.bytes_peak = d->in_use;
    return CUDA_SUCCESS;
}

static void uncharge(const sim_alloc *a, bool is_free, bool async)
{
    if (!counted(a->kind))
        return;
    mem_dev *d = &g_mem.dev[a->dev];
    d->in_use -= a->charged;
    unfit(a->dev, a->charged);
    if (!is_free)
        return;
    d->c.free_calls++;
    d->c.live_allocations--;
    if (async)
        d->c.async_free_calls++;
}

static size_t alloc_align(const sim_alloc *req)
{
    if (req->kind == SIM_MEM_HOST)
        return 4096;
    return req->size >= SIM_LARGE_ALIGN ? SIM_LARGE_ALIGN : SIM_SMALL_ALIGN;
}

/* ---- allocation and release ----------------------------------------------- */

/* What the default pool (sim_pool.c) learns when the stream-ordered
 * allocation a goes away: its free call, unless cuMemFreeAsync made it
 * already, and the memory given back (mem lock held). */
static void pool_gone(const sim_alloc *a)
{
    if (a->kind != SIM_MEM_ASYNC)
        return;
    if (!a->free_pending)
        sim_pool_free_call(a->dev, a->size);
    sim_pool_given_back(a->dev, a->size);
}

/* Registers the host block p for req (mem lock held). */
static bool publish(sim_alloc *req, void *p)
{
    req->base = (CUdeviceptr)(uintptr_t)p;
    req->id = ++g_mem.next_id;
    req->free_pending = false;
    if (insert(req) != 0)
        return false;
    if (counted(req->kind))
        g_mem.dev[req->dev].c.live_allocations++;
    if (req->kind == SIM_MEM_ASYNC)
        sim_pool_alloc(req->dev, req->size);
    return true;
}

CUresult sim_mem_alloc(sim_alloc *req, CUdeviceptr *out)
{
    size_t align = alloc_align(req);
    bool big = req->size > SIZE_MAX - align;
    size_t rounded = big ? SIZE_MAX : (req->size + align - 1) & ~(align - 1);
    req->charged = counted(req->kind) ? rounded : 0;
    if (big && !counted(req->kind))
        return CUDA_ERROR_OUT_OF_MEMORY;
    mem_lock(); /* a huge counted request fails in charge(): no room */
    CUresult rc = counted(req->kind) ? charge(req) : CUDA_SUCCESS;
    mem_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    req->span = rounded;
    if (req->kind == SIM_MEM_DEVICE) { /* whole pages: IPC may share them */
        align = align < SIM_PAGE ? SIM_PAGE : align;
        req->span = (rounded + SIM_PAGE - 1) & ~(SIM_PAGE - 1);
    }
    req->shared = false;
    void *p = NULL;
    if (req->span < rounded || posix_memalign(&p, align, req->span) != 0)
        p = NULL;
    mem_lock();
    if (p == NULL || !publish(req, p)) {
        uncharge(req, false, false);
        if (counted(req->kind))
            g_mem.dev[req->dev].c.alloc_failures++;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    mem_unlock();
    if (rc != CUDA_SUCCESS)
        free(p);
    else
        *out = req->base;
    return rc;
}

static bool may_free(const sim_alloc *a, sim_free_mode mode)
{
    switch (mode) {
    case SIM_FREE_SYNC:
    case SIM_FREE_CAPTURED:
        return a->kind != SIM_MEM_HOST && a->kind != SIM_MEM_IPC && a->kind != SIM_MEM_VMM &&
               a->kind != SIM_MEM_REGISTERED && !a->free_pending;
    case SIM_FREE_HOST: return a->kind == SIM_MEM_HOST;
    case SIM_FREE_ASYNC_RUN: return a->free_pending;
    }
    return false;
}

CUresult sim_mem_release(CUdeviceptr base, sim_free_mode mode)
{
    mem_lock();
    sim_alloc *a = exact(base);
    if (a == NULL || !may_free(a, mode)) {
        mem_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    uncharge(a, true, mode == SIM_FREE_ASYNC_RUN || mode == SIM_FREE_CAPTURED);
    pool_gone(a);
    sim_alloc gone = *a;
    erase(a);
    mem_unlock();
    release_host(&gone);
    return CUDA_SUCCESS;
}

CUresult sim_mem_mark_pending(CUdeviceptr base, sim_alloc *out)
{
    mem_lock();
    sim_alloc *a = exact(base);
    bool ok = a != NULL && may_free(a, SIM_FREE_SYNC);
    if (ok) {
        a->free_pending = true;
        *out = *a;
        if (a->kind == SIM_MEM_ASYNC)
            sim_pool_free_call(a->dev, a->size);
    }
    mem_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

void sim_mem_unmark_pending(CUdeviceptr base)
{
    mem_lock();
    sim_alloc *a = exact(base);
    if (a != NULL && a->free_pending && a->kind == SIM_MEM_ASYNC)
        sim_pool_free_undone(a->dev, a->size);
    if (a != NULL)
        a->free_pending = false;
    mem_unlock();
}

void sim_mem_release_ctx(const sim_ctx *ctx)
{
    mem_lock();
    for (size_t i = g_mem.all.n; i-- > 0;) {
        sim_alloc *a = entry(i);
        if (a->ctx != ctx)
            continue;
        sim_alloc gone = *a;
        uncharge(a, true, false);
        pool_gone(a);
        fp_ranges_erase(&g_mem.all, i);
        release_host(&gone);
    }
    mem_unlock();
}

/* ---- IPC ------------------------------------------------------------------- */

CUresult sim_mem_share(CUdeviceptr p, sim_alloc *out)
{
    mem_lock();
    sim_alloc *a = containing(p);
    CUresult rc = CUDA_SUCCESS;
    if (a == NULL || a->kind != SIM_MEM_DEVICE || a->free_pending)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!a->shared && sim_devfile_share_pages(a->base, a->span, a->id) != 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        a->shared = true;
        *out = *a;
    }
    mem_unlock();
    return rc;
}

CUresult sim_mem_add_import(sim_alloc *req)
{
    mem_lock();
    req->id = ++g_mem.next_id;
    req->charged = 0;
    req->free_pending = false;
    bool ok = insert(req) == 0; /* refused too where it overlaps an entry */
    mem_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult sim_mem_remove_import(CUdeviceptr base, sim_alloc *out)
{
    mem_lock();
    sim_alloc *a = exact(base);
    bool ok = a != NULL && a->kind == SIM_MEM_IPC;
    if (ok) {
        *out = *a;
        erase(a);
    }
    mem_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_mem_charge_phys(int dev, size_t bytes)
{
    mem_lock();
    mem_dev *d = &g_mem.dev[dev];
    bool ok = fits(dev, bytes);
    if (ok) {
        d->in_use += bytes;
        if (d->in_use > d->c.bytes_peak)
            d->c.bytes_peak = d->in_use;
    }
    mem_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void sim_mem_uncharge_phys(int dev, size_t bytes)
{
    mem_lock();
    g_mem.dev[dev].in_use -= bytes;
    unfit(dev, bytes);
    mem_unlock();
}

void sim_mem_remove_vmm(CUdeviceptr base)
{
    mem_lock();
    sim_alloc *a = exact(base);
    if (a != NULL && a->kind == SIM_MEM_VMM)
        erase(a);
    mem_unlock();
}

/* ---- VMM reservations -------------------------------------------------------- */

static fp_ranges g_res = {.elem = 0}; /* under the mem lock */

CUresult sim_mem_add_reservation(CUdeviceptr base, size_t size)
{
    mem_lock();
    bool ok = fp_ranges_insert(&g_res, base, size, NULL) == 0;
    mem_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void sim_mem_remove_reservation(CUdeviceptr base)
{
    mem_lock();
    fp_ranges_remove(&g_res, base);
    mem_unlock();
}

bool sim_mem_find_reservation(CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
    mem_lock();
    size_t i = fp_ranges_find(&g_res, p);
    bool found = i != FP_RANGES_NONE;
    if (found) {
        *base = g_res.r[i].start;
        *size = (size_t)g_res.r[i].size;
    }
    mem_unlock();
    return found;
}

/* ---- registered host memory ------------------------------------------------ */

CUresult sim_mem_add_registered(sim_alloc *req)
{
    mem_lock();
    req->id = ++g_mem.next_id;
    req->charged = 0;
    req->span = req->size;
    req->free_pending = false;
    req->kind = SIM_MEM_REGISTERED;
    int err = insert(req);
    mem_unlock();
    if (err == EEXIST)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    return err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult sim_mem_remove_registered(CUdeviceptr base)
{
    mem_lock();
    sim_alloc *a = exact(base);
    bool ok = a != NULL && a->kind == SIM_MEM_REGISTERED;
    if (ok)
        erase(a);
    mem_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* ---- queries --------------------------------------------------------------- */

void sim_mem_set_vmm_access(CUdeviceptr base, unsigned access)
{
    mem_lock();
    sim_alloc *a = exact(base);
    if (a != NULL && a->kind == SIM_MEM_VMM)
        a->access = access;
    mem_unlock();
}

CUresult sim_mem_set_sync_memops(CUdeviceptr p, bool on)
{
    mem_lock();
    sim_alloc *a = (sim_alloc *)containing(p);
    CUresult rc = a == NULL                ? CUDA_ERROR_INVALID_VALUE
                  : a->kind == SIM_MEM_VMM ? CUDA_ERROR_NOT_SUPPORTED
                                           : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        a->sync_memops = on;
    mem_unlock();
    return rc;
}

bool sim_mem_dev_reaches(CUdeviceptr p, size_t n, int dev)
{
    bool ok = true;
    mem_lock();
    for (CUdeviceptr at = p; ok && n > 0 && at - p < n;) {
        const sim_alloc *a = containing(at);
        if (a == NULL || a->kind != SIM_MEM_VMM)
            break; /* not VMM memory: reachable (or checked elsewhere) */
        ok = (a->access >> dev) & 1u;
        at = a->base + a->size;
    }
    mem_unlock();
    return ok;
}

CUresult sim_mem_find(CUdeviceptr p, sim_alloc *out)
{
    mem_lock();
    const sim_alloc *a = containing(p);
    if (a != NULL)
        *out = *a;
    mem_unlock();
    return a != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool sim_mem_range_ok(CUdeviceptr p, size_t n)
{
    mem_lock();
    const sim_alloc *a = containing(p);
    bool ok = a != NULL && n <= a->size - (p - a->base);
    /* VMM mappings side by side are one range to the device. */
    while (!ok && a != NULL && a->kind == SIM_MEM_VMM) {
        CUdeviceptr end = a->base + a->size;
        const sim_alloc *next = containing(end);
        ok = next != NULL && next->kind == SIM_MEM_VMM && next->base == end &&
             n - (end - p) <= next->size;
        if (!ok && next != NULL && next->kind == SIM_MEM_VMM && next->base == end)
            n -= end - p, p = end, a = next;
        else
            a = ok ? a : NULL;
    }
    mem_unlock();
    return ok;
}

void sim_mem_info(int dev, size_t *free_b, size_t *total_b)
{
    mem_lock();
    const mem_dev *d = &g_mem.dev[dev];
    size_t used = sim_share_on() ? sim_share_used(dev) : d->in_use;
    if (free_b != NULL)
        *free_b = d->capacity > used ? d->capacity - used : 0;
    if (total_b != NULL)
        *total_b = d->capacity;
    mem_unlock();
}

/* ---- test control ------------------------------------------------------------ */

void sim_mem_stats(int dev, fpsim_counts *out)
{
    mem_lock();
    const mem_dev *d = &g_mem.dev[dev];
    *out = d->c;
    out->bytes_in_use = d->in_use;
    out->capacity = d->capacity;
    mem_unlock();
}

void sim_mem_reset_stats(int dev)
{
    mem_lock();
    mem_dev *d = &g_mem.dev[dev];
    unsigned long long live = d->c.live_allocations;
    memset(&d->c, 0, sizeof d->c);
    d->c.live_allocations = live;
    d->c.bytes_peak = d->in_use;
    mem_unlock();
}

void sim_mem_set_capacity(int dev, size_t bytes)
{
    mem_lock();
    g_mem.dev[dev].capacity = bytes;
    mem_unlock();
}

void sim_mem_fail_nth(unsigned n)
{
    mem_lock();
    g_mem.fail_nth = n;
    g_mem.seq = 0;
    mem_unlock();
}
