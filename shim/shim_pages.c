/* shim_pages.c - the virtual-memory backend of a context's pool: the
 * fp_backend VMM ops (pool/fp_pool.h) over the driver's VMM API.
 *
 *   granularity  cuMemGetAllocationGranularity (RECOMMENDED) of pinned
 *                device memory on the pool's device;
 *   reserve_va   cuMemAddressReserve; free_va cuMemAddressFree;
 *   map          per granule cuMemCreate + cuMemMap, then one
 *                cuMemSetAccess for the device and every peer granted;
 *                the granules ask for POSIX file descriptor handles where
 *                the device offers them, so that IPC can export a block
 *                (fp_pages_export, shim_ipc_vmm.c), and to be GPUDirect
 *                RDMA- and HW-decompress-capable where the device offers
 *                that for VMM memory, as a cudaMalloc's memory is (a
 *                driver that refuses it once gets plain pages after, one
 *                line);
 *   unmap        first the device must have finished the work queued
 *                before the pages' newest free (fp_defer_wait_done: the
 *                fence state, else a host wait, counted), then per
 *                granule cuMemUnmap + cuMemRelease.
 *
 * One handle per granule, released at unmap, so that memory given back is
 * the rest of the process's at once (docs/vmm.md says why).  While a graph
 * is being captured no host wait is allowed: an unmap that would need one
 * keeps its pages mapped ("kept"); a later map of them reuses them, and
 * free_va unmaps them after a wait.  Driver errors become errno (out of
 * memory: ENOMEM, so that the pool reclaims and retries; else EIO) and
 * the CUresult stays for fp_pages_last_error.  No driver call once the
 * process is exiting (the driver frees everything then).
 *
 * Invariant: h[i] of a range is nonzero iff granule i is mapped in the
 * driver; every mapped granule grants access to dev and to peers[].
 * Lock: v->lock, taken inside the pool's lock (map/unmap come from the
 * pool) and never around a call into the pool.
 */
#include "shim_pages.h"
#include "fp_assert.h"
#include "shim_clock.h"
#include "shim_real.h"
#include "shim_state.h"
#include "shim_streams.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define FP_VMM_MAX_PEERS 32

typedef struct vmm_range {
    uint64_t addr;
    size_t size;
    CUmemGenericAllocationHandle *h; /* one per granule; 0: unmapped */
    struct vmm_range *next;
} vmm_range;

struct fp_pages {
    pthread_mutex_t lock;
    CUcontext ctx;
    CUdevice dev;
    fp_defer *defer;
    size_t gran;     /* 0 until asked               */
    bool shareable;  /* granules export as POSIX fds  */
    bool rdma;       /* granules GPUDirect RDMA-capable */
    bool decompress; /* granules HW-decompress-capable */
    vmm_range *ranges;
    CUdevice peers[FP_VMM_MAX_PEERS];
    int npeers;
    uint64_t kept; /* granules kept mapped through a
                                          capture, work maybe unfinished */
};

static FP_THREAD_LOCAL CUresult last_error;

CUresult fp_pages_last_error(void)
{
    return last_error;
}

/* 0 for success, else the errno of a driver failure (kept in last_error). */
static int drv(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return 0;
    last_error = r;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM : EIO;
}

static bool exiting(void)
{
    return atomic_load(&fp_shim.exiting);
}

fp_pages *fp_pages_new(CUcontext ctx, CUdevice dev, fp_defer *defer)
{
    fp_pages *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    pthread_mutex_init(&v->lock, NULL);
    v->ctx = ctx;
    v->dev = dev;
    v->defer = defer;
    return v;
}

static CUmemAllocationProp device_prop(const fp_pages *v)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED};
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = v->dev;
    if (v->shareable)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.allocFlags.gpuDirectRDMACapable = v->rdma;
    if (v->decompress)
        p.allocFlags.usage = CU_MEM_CREATE_USAGE_HW_DECOMPRESS;
    return p;
}

/* The driver's value of a device attribute, 0 when it has none. */
static int dev_attr(CUdevice dev, CUdevice_attribute a)
{
    int v = 0;
    return fp_real.cuDeviceGetAttribute && fp_real.cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS
               ? v
               : 0;
}

/* Whether the device's granules can be exported as POSIX file descriptors. */
static bool fd_handles(CUdevice dev)
{
    int yes = 0;
    return fp_real.cuMemExportToShareableHandle && fp_real.cuDeviceGetAttribute &&
           fp_real.cuDeviceGetAttribute(
               &yes, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) ==
               CUDA_SUCCESS &&
           yes;
}

bool fp_pages_supported(CUdevice dev)
{
    int yes = 0;
    return fp_real.cuDeviceGetAttribute &&
           fp_real.cuDeviceGetAttribute(&yes,
                                        CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                        dev) == CUDA_SUCCESS &&
           yes;
}

/* 0 when the driver lacks any VMM call: the pool stays classic. */
size_t fp_pages_granularity(fp_pages *v)
{
    if (!fp_real.cuMemGetAllocationGranularity || !fp_real.cuMemCreate ||
        !fp_real.cuMemAddressReserve || !fp_real.cuMemMap || !fp_real.cuMemSetAccess ||
        !fp_real.cuMemUnmap || !fp_real.cuMemRelease || !fp_real.cuMemAddressFree)
        return 0;
    v->shareable = fd_handles(v->dev);
    /* as a cudaMalloc's memory: RDMA- and decompress-capable where the
     * device offers it for VMM memory (docs/shim.md, "What the driver
     * says about a block") */
    v->rdma = dev_attr(v->dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) != 0;
    v->decompress = dev_attr(v->dev, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK) != 0;
    CUmemAllocationProp p = device_prop(v);
    size_t g = 0;
    if (fp_real.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return 0;
    v->gran = g;
    return g;
}

size_t fp_pages_page(fp_pages *v)
{
    return v->gran;
}

bool fp_pages_shareable(fp_pages *v)
{
    return v->shareable;
}

/* ---- ranges ------------------------------------------------------------ */

static vmm_range *find_range(fp_pages *v, uint64_t addr)
{
    for (vmm_range *r = v->ranges; r; r = r->next)
        if (addr >= r->addr && addr - r->addr < r->size)
            return r;
    return NULL;
}

bool fp_pages_owns(fp_pages *v, uint64_t addr)
{
    pthread_mutex_lock(&v->lock);
    bool hit = find_range(v, addr) != NULL;
    pthread_mutex_unlock(&v->lock);
    return hit;
}

/* Closes fds[0..n). */
static void close_all(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

int fp_pages_export(fp_pages *v, uint64_t addr, size_t n, int *fds)
{
    if (exiting() || !v->shareable)
        return EIO;
    pthread_mutex_lock(&v->lock);
    vmm_range *r = find_range(v, addr);
    size_t i = r ? (size_t)(addr - r->addr) / v->gran : 0, done = 0;
    int err = !r || (addr - r->addr) % v->gran || i + n > r->size / v->gran ? EINVAL : 0;
    while (!err && done < n) {
        CUmemGenericAllocationHandle h = r->h[i + done];
        int fd = -1;
        err = !h ? EFAULT
                 : drv(fp_real.cuMemExportToShareableHandle(
                       &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        if (!err)
            fds[done++] = fd;
    }
    pthread_mutex_unlock(&v->lock);
    if (err)
        close_all(fds, done);
    return err;
}

int fp_pages_reserve_va(fp_pages *v, size_t size, size_t align, uint64_t *addr)
{
    vmm_range *r = calloc(1, sizeof *r);
    CUmemGenericAllocationHandle *h = calloc(size / v->gran, sizeof *h);
    if (!r || !h) {
        free(r);
        free(h);
        return ENOMEM;
    }
    CUdeviceptr p = 0;
    fp_time_slow();
    int err = drv(fp_real.cuMemAddressReserve(&p, size, align, 0, 0));
    if (err) {
        free(r);
        free(h);
        return err;
    }
    *r = (vmm_range){.addr = p, .size = size, .h = h};
    pthread_mutex_lock(&v->lock);
    r->next = v->ranges;
    v->ranges = r;
    pthread_mutex_unlock(&v->lock);
    *addr = p;
    return 0;
}

/* Unmaps and releases granules [i, j) of r that are mapped. */
static void drop_granules(fp_pages *v, vmm_range *r, size_t i, size_t j)
{
    for (size_t k = i; k < j; k++) {
        if (!r->h[k])
            continue;
        fp_real.cuMemUnmap(r->addr + k * v->gran, v->gran);
        fp_real.cuMemRelease(r->h[k]);
        r->h[k] = 0;
    }
}

static void unlink_range(fp_pages *v, vmm_range *r)
{
    for (vmm_range **pp = &v->ranges; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

int fp_pages_free_va(fp_pages *v, uint64_t addr, size_t size)
{
    pthread_mutex_lock(&v->lock);
    vmm_range *r = find_range(v, addr);
    int err = r ? 0 : EINVAL;
    if (r && !exiting() && v->kept) /* pages kept through a capture */
        err = fp_streams_capturing() ? EBUSY : drv(fp_real_ctx_sync(v->ctx));
    if (r && !err)
        v->kept = 0; /* all work is done: kept pages are safe to drop */
    if (r && !err && !exiting()) {
        fp_time_slow();
        drop_granules(v, r, 0, r->size / v->gran);
        err = drv(fp_real.cuMemAddressFree(addr, size));
    }
    if (r && !err) {
        unlink_range(v, r);
        free(r->h);
        free(r);
    }
    pthread_mutex_unlock(&v->lock);
    return err;
}

/* ---- pages --------------------------------------------------------------- */

/* One access descriptor for the device and one per peer; returns count. */
static size_t access_list(const fp_pages *v, CUmemAccessDesc *d)
{
    size_t n = 0;
    d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d[n].location.id = v->dev;
    d[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int i = 0; i < v->npeers; i++) {
        d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d[n].location.id = v->peers[i];
        d[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return n;
}

/* Maps granule k of r with a new handle; 0 or an errno. */
static int map_granule(fp_pages *v, vmm_range *r, size_t k)
{
    fp_assert(!r->h[k], "a granule mapped once (a handle iff mapped)");
    CUmemAllocationProp p = device_prop(v);
    CUmemGenericAllocationHandle h = 0;
    CUresult cr = fp_real.cuMemCreate(&h, v->gran, &p, 0);
    if (cr != CUDA_SUCCESS && cr != CUDA_ERROR_OUT_OF_MEMORY && (v->rdma || v->decompress)) {
        fp_say("device %d refused GPUDirect RDMA / decompress-capable pages (CUresult %d); "
               "mapping plain pages from now on",
               (int)v->dev, (int)cr);
        v->rdma = v->decompress = false;
        p = device_prop(v);
        cr = fp_real.cuMemCreate(&h, v->gran, &p, 0);
    }
    int err = drv(cr);
    if (err)
        return err;
    err = drv(fp_real.cuMemMap(r->addr + k * v->gran, v->gran, 0, h, 0));
    if (err) {
        fp_real.cuMemRelease(h);
        return err;
    }
    r->h[k] = h;
    return 0;
}

int fp_pages_map(fp_pages *v, uint64_t addr, size_t size)
{
    if (exiting())
        return EIO;
    pthread_mutex_lock(&v->lock);
    vmm_range *r = find_range(v, addr);
    size_t i = r ? (size_t)(addr - r->addr) / v->gran : 0, j = i + size / v->gran;
    int err = r ? 0 : EINVAL;
    bool *fresh = r ? calloc(j - i, sizeof *fresh) : NULL;
    if (r && !fresh)
        err = ENOMEM;
    fp_time_slow();
    for (size_t k = i; !err && k < j; k++) {
        if (r->h[k]) { /* kept mapped through a capture: reused */
            v->kept -= v->kept > 0;
            continue;
        }
        err = map_granule(v, r, k);
        fresh[k - i] = !err;
    }
    CUmemAccessDesc d[FP_VMM_MAX_PEERS + 1];
    if (!err)
        err = drv(fp_real.cuMemSetAccess(addr, size, d, access_list(v, d)));
    for (size_t k = i; err && fresh && k < j; k++) /* undo what this call made */
        if (fresh[k - i])
            drop_granules(v, r, k, k + 1);
    free(fresh);
    pthread_mutex_unlock(&v->lock);
    return err;
}

int fp_pages_unmap(fp_pages *v, uint64_t addr, size_t size, uint64_t freed_at)
{
    if (exiting())
        return 0; /* the driver frees everything at teardown */
    int wait = fp_defer_wait_done(v->defer, freed_at);
    pthread_mutex_lock(&v->lock);
    vmm_range *r = find_range(v, addr);
    size_t i = r ? (size_t)(addr - r->addr) / v->gran : 0, j = i + size / v->gran;
    if (r && wait) {
        for (size_t k = i; k < j; k++)
            v->kept += r->h[k] != 0;
    } else if (r) {
        fp_time_slow();
        drop_granules(v, r, i, j);
    }
    pthread_mutex_unlock(&v->lock);
    return r ? wait : EINVAL;
}

uint64_t fp_pages_kept(fp_pages *v)
{
    pthread_mutex_lock(&v->lock);
    uint64_t n = v->kept;
    pthread_mutex_unlock(&v->lock);
    return n;
}

/* ---- peers ----------------------------------------------------------------- */

/* Grants peer access on every run of mapped granules of r. */
static int grant_range(fp_pages *v, vmm_range *r, const CUmemAccessDesc *d)
{
    size_t n = r->size / v->gran;
    int err = 0;
    for (size_t k = 0; k < n && !err;) {
        if (!r->h[k]) {
            k++;
            continue;
        }
        size_t e = k;
        while (e < n && r->h[e])
            e++;
        err = drv(fp_real.cuMemSetAccess(r->addr + k * v->gran, (e - k) * v->gran, d, 1));
        k = e;
    }
    return err;
}

int fp_pages_add_peer(fp_pages *v, CUdevice peer)
{
    pthread_mutex_lock(&v->lock);
    bool known = peer == v->dev;
    for (int i = 0; i < v->npeers; i++)
        known = known || v->peers[i] == peer;
    int err = 0;
    if (!known && v->npeers == FP_VMM_MAX_PEERS)
        err = ENOSPC;
    if (!known && !err) {
        v->peers[v->npeers++] = peer;
        CUmemAccessDesc d = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, peer},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        for (vmm_range *r = v->ranges; r && !err; r = r->next)
            err = grant_range(v, r, &d);
    }
    pthread_mutex_unlock(&v->lock);
    return err;
}

/* ---- life ------------------------------------------------------------------ */

static void drop_table(fp_pages *v)
{
    for (vmm_range *r = v->ranges, *n; r; r = n) {
        n = r->next;
        free(r->h);
        free(r);
    }
    v->ranges = NULL;
    v->kept = 0;
}

void fp_pages_release_all(fp_pages *v)
{
    pthread_mutex_lock(&v->lock);
    for (vmm_range *r = v->ranges; r && !exiting(); r = r->next) {
        drop_granules(v, r, 0, r->size / v->gran);
        fp_real.cuMemAddressFree(r->addr, r->size);
    }
    drop_table(v);
    pthread_mutex_unlock(&v->lock);
}

void fp_pages_free(fp_pages *v)
{
    if (!v)
        return;
    drop_table(v);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

void fp_pages_fork_prepare(fp_pages *v)
{
    pthread_mutex_lock(&v->lock);
}

void fp_pages_fork_after(fp_pages *v, bool child)
{
    if (child)
        pthread_mutex_init(&v->lock, NULL);
    else
        pthread_mutex_unlock(&v->lock);
}
