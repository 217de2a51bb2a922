/* simdev/sim_vmm.c: the driver's virtual memory management API
 * (cuMemGetAllocationGranularity, cuMemAddressReserve/Free,
 * cuMemCreate/Release, cuMemMap/Unmap, cuMemSetAccess, cuMemGetAccess,
 * cuMemRetainAllocationHandle)
 * and its shareable handles (cuMemExportToShareableHandle,
 * cuMemImportFromShareableHandle: POSIX file descriptors).
 *
 * Physical memory is a sparse memory file of the process (sim_vmmfile.c;
 * several under a file-size limit): a handle is a run of one's 2 MiB pages, charged against
 * the device's capacity (CUDA_ERROR_OUT_OF_MEMORY when it is full).  A reservation is host
 * address space mapped PROT_NONE.  cuMemMap maps the handle's file pages
 * there, still inaccessible; cuMemSetAccess makes them readable/writable
 * and registers the mapping with the registry (kind SIM_MEM_VMM), so that
 * copies, memsets and pointer queries find it; cuMemUnmap puts PROT_NONE
 * address space back and unregisters it.  Copies to address space that is
 * reserved but not mapped with access fail with CUDA_ERROR_INVALID_VALUE,
 * as they would fault on a GPU.
 *
 * Reservations are told to the registry too, so that pointer queries
 * answer a reservation's range (sim_mem.c).
 *
 * What the driver does differently for VMM memory, modelled: a mapping is
 * registered with what its handle was created with (requestedHandleTypes,
 * gpuDirectRDMACapable, the HW_DECOMPRESS usage) and the devices granted
 * access, so that pointer attributes answer them and a device without
 * access cannot copy to or from it (sim_copy.c); it has no context and no
 * legacy IPC (sim_mem.c); cuMemRetainAllocationHandle gives the handle of
 * a mapping (one more reference, given back by cuMemRelease) and
 * CUDA_ERROR_INVALID_VALUE for any other memory; cuMemGetAccess answers 0
 * (success) for memory of cuMemAlloc and the like, as for memory no VMM
 * call made.  cuMemCreate refuses gpuDirectRDMACapable when the device
 * does not offer it (FRAGPOOL_SIM_VMM_RDMA=0) and the HW_DECOMPRESS usage
 * (an H200 has no decompression engine).
 *
 * Rules kept (the driver's): sizes, addresses and offsets are multiples
 * of the granularity; a mapping lies inside one reservation and overlaps
 * no other; an unmap covers whole mappings; a handle released while
 * mapped lives until its last unmap; a reservation is freed whole, with
 * nothing mapped; requestedHandleTypes may be NONE or
 * POSIX_FILE_DESCRIPTOR.
 *
 * Shareable handles: an export gives the caller a new descriptor (it owns
 * and closes it; no current context is needed) naming the handle's pages
 * of the memory file (sim_vmmfile.c says how).  Another process - or this
 * one - imports it as a handle of its own, mapped like any other: both
 * then see the same bytes.  The import keeps a duplicate of the
 * descriptor (the caller may close its own at once); an imported handle
 * is not charged against capacity (the exporter's is) and cannot be
 * mapped past the exported size.  An exported handle's pages outlive its
 * release, as natively: the importer still reads them after the exporter
 * unmapped and released it (the exporter's capacity comes back at the
 * release; the pages are never reused).  Chosen where the documentation
 * is silent: exporting a handle created without POSIX_FILE_DESCRIPTOR in
 * requestedHandleTypes, an unknown or released handle, another handle
 * type or flags != 0 is CUDA_ERROR_INVALID_VALUE; importing a descriptor
 * that is not one of simdev's exports (a pipe, /dev/null, a closed
 * number, any other file) is CUDA_ERROR_INVALID_VALUE, decided without
 * reading anything that could wait.
 *
 * Lock: vmm lock, taken before the registry's mem lock (never the
 * reverse), never with g_sim.lock held.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define VMM_GRAN SIM_VMM_GRAN

typedef struct vmm_handle {
    size_t first, npages; /* pages of the memory file */
    int fd;               /* that file: this process's, or (imported)
                             a descriptor this handle owns */
    int dev;
    int maps;        /* live mappings */
    bool released;   /* cuMemRelease was called */
    bool shareable;  /* may be exported (POSIX_FILE_DESCRIPTOR) */
    bool exported;   /* was exported: pages never reused */
    bool imported;   /* another export's pages, not charged */
    int retained;    /* cuMemRetainAllocationHandle references, each
                       given back by a cuMemRelease of its own */
    bool rdma;       /* created gpuDirectRDMACapable */
    bool decompress; /* created with CU_MEM_CREATE_USAGE_HW_DECOMPRESS */
} vmm_handle;

typedef struct vmm_map {
    CUdeviceptr ptr;
    size_t size;
    vmm_handle *h;
    unsigned long long access[SIM_MAX_DEVICES];
    bool registered; /* in the registry (access granted) */
} vmm_map;

typedef struct vmm_range {
    CUdeviceptr ptr;
    size_t size;
} vmm_range;

static struct {
    pthread_mutex_t lock;
    vmm_map *maps;
    size_t nmaps, capmaps;
    vmm_range *ranges;
    size_t nranges, capranges;
} g_vmm = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool aligned(size_t v)
{
    return v % VMM_GRAN == 0;
}

static CUresult grow(void **v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return CUDA_SUCCESS;
    size_t ncap = *cap ? *cap * 2 : 64;
    void *nv = realloc(*v, ncap * elem);
    if (nv == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *v = nv;
    *cap = ncap;
    return CUDA_SUCCESS;
}

/* ---- handles (vmm lock held) -------------------------------------------------- */

static void handle_free(vmm_handle *h)
{
    if (h->imported) {
        close(h->fd); /* its mappings keep the file */
    } else {
        sim_vmmfile_give(h->fd, h->first, h->npages, h->exported);
        sim_mem_uncharge_phys(h->dev, h->npages * VMM_GRAN);
    }
    free(h);
}

/* ---- lookups (vmm lock held) ---------------------------------------------- */

static vmm_range *range_holding(CUdeviceptr p, size_t n)
{
    for (size_t i = 0; i < g_vmm.nranges; i++) {
        vmm_range *r = &g_vmm.ranges[i];
        if (p >= r->ptr && n <= r->size && p - r->ptr <= r->size - n)
            return r;
    }
    return NULL;
}

static bool overlaps_map(CUdeviceptr p, size_t n)
{
    for (size_t i = 0; i < g_vmm.nmaps; i++) {
        const vmm_map *m = &g_vmm.maps[i];
        if (p < m->ptr + m->size && m->ptr < p + n)
            return true;
    }
    return false;
}

/* True when [p, p+n) is exactly a union of whole mappings. */
static bool whole_maps(CUdeviceptr p, size_t n)
{
    size_t covered = 0;
    for (size_t i = 0; i < g_vmm.nmaps; i++) {
        const vmm_map *m = &g_vmm.maps[i];
        if (!(p < m->ptr + m->size && m->ptr < p + n))
            continue;
        if (m->ptr < p || m->ptr + m->size > p + n)
            return false;
        covered += m->size;
    }
    return covered == n;
}

static vmm_handle *handle_of(CUmemGenericAllocationHandle h)
{
    return (vmm_handle *)(uintptr_t)h;
}

/* Every handle cuMemCreate made that is not yet freed (vmm lock held):
 * a value that is not one of them is refused, never dereferenced. */
static vmm_handle **g_handles;
static size_t g_nhandles, g_caphandles;

static bool handle_known(const vmm_handle *h)
{
    for (size_t i = 0; i < g_nhandles; i++)
        if (g_handles[i] == h)
            return true;
    return false;
}

static CUresult track(vmm_handle *h)
{
    CUresult rc = grow((void **)&g_handles, &g_caphandles, g_nhandles, sizeof *g_handles);
    if (rc == CUDA_SUCCESS)
        g_handles[g_nhandles++] = h;
    return rc;
}

static void untrack(vmm_handle *h)
{
    for (size_t i = 0; i < g_nhandles; i++)
        if (g_handles[i] == h) {
            g_handles[i] = g_handles[--g_nhandles];
            return;
        }
}

/* ---- API ---------------------------------------------------------------------- */

static CUresult prop_ok(const CUmemAllocationProp *prop)
{
    if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
         prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_check_dev(prop->location.id);
    int engines = 0;
    if (rc == CUDA_SUCCESS && (prop->allocFlags.usage & CU_MEM_CREATE_USAGE_HW_DECOMPRESS) &&
        (sim_attr_value(CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK, prop->location.id,
                        &engines) != 0 ||
         engines == 0))
        rc = CUDA_ERROR_INVALID_VALUE; /* no decompression engine */
    if (rc == CUDA_SUCCESS && prop->allocFlags.gpuDirectRDMACapable && !g_sim.vmm_rdma)
        rc = CUDA_ERROR_INVALID_VALUE; /* FRAGPOOL_SIM_VMM_RDMA=0 */
    return rc;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (granularity == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if (!g_sim.vmm)
        return CUDA_ERROR_NOT_SUPPORTED; /* FRAGPOOL_SIM_VMM=0 */
    rc = prop_ok(prop);
    if (rc == CUDA_SUCCESS)
        *granularity = VMM_GRAN;
    return rc;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    CUresult rc = sim_check_init();
    (void)addr; /* a hint only */
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ptr == NULL || size == 0 || !aligned(size) || flags != 0 ||
        (alignment & (alignment - 1)) != 0 || size > ((size_t)1 << 46))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > VMM_GRAN ? alignment : VMM_GRAN;
    void *raw =
        mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t lo = (uintptr_t)raw, start = (lo + align - 1) / align * align;
    if (start > lo)
        munmap(raw, start - lo);
    if (align > start - lo)
        munmap((void *)(start + size), align - (start - lo));
    pthread_mutex_lock(&g_vmm.lock);
    rc = grow((void **)&g_vmm.ranges, &g_vmm.capranges, g_vmm.nranges, sizeof(vmm_range));
    if (rc == CUDA_SUCCESS)
        rc = sim_mem_add_reservation(start, size);
    if (rc == CUDA_SUCCESS)
        g_vmm.ranges[g_vmm.nranges++] = (vmm_range){start, size};
    pthread_mutex_unlock(&g_vmm.lock);
    if (rc != CUDA_SUCCESS)
        munmap((void *)start, size);
    else
        *ptr = start;
    return rc;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_vmm.lock);
    rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g_vmm.nranges; i++) {
        vmm_range *r = &g_vmm.ranges[i];
        if (r->ptr != ptr || r->size != size || overlaps_map(ptr, size))
            continue;
        munmap((void *)(uintptr_t)ptr, size);
        sim_mem_remove_reservation(ptr);
        *r = g_vmm.ranges[--g_vmm.nranges];
        rc = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&g_vmm.lock);
    return rc;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (handle == NULL || size == 0 || !aligned(size) || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g_sim.vmm)
        return CUDA_ERROR_NOT_SUPPORTED; /* FRAGPOOL_SIM_VMM=0 */
    if ((rc = prop_ok(prop)) != CUDA_SUCCESS)
        return rc;
    vmm_handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->dev = prop->location.id;
    h->npages = size / VMM_GRAN;
    h->shareable = prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    h->rdma = prop->allocFlags.gpuDirectRDMACapable != 0;
    h->decompress = (prop->allocFlags.usage & CU_MEM_CREATE_USAGE_HW_DECOMPRESS) != 0;
    pthread_mutex_lock(&g_vmm.lock);
    rc = sim_mem_charge_phys(h->dev, size);
    if (rc == CUDA_SUCCESS && sim_vmmfile_take(h->npages, &h->first, &h->fd) != 0) {
        sim_mem_uncharge_phys(h->dev, size);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (rc == CUDA_SUCCESS && (rc = track(h)) != CUDA_SUCCESS) {
        sim_vmmfile_give(h->fd, h->first, h->npages, false);
        sim_mem_uncharge_phys(h->dev, size);
    }
    pthread_mutex_unlock(&g_vmm.lock);
    if (rc != CUDA_SUCCESS) {
        free(h);
        return rc;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    vmm_handle *h = handle_of(handle);
    pthread_mutex_lock(&g_vmm.lock);
    if (!handle_known(h) || (h->released && h->retained == 0)) {
        pthread_mutex_unlock(&g_vmm.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (h->retained > 0) /* a retained reference goes first */
        h->retained--;
    else
        h->released = true;
    if (h->maps == 0 && h->released && h->retained == 0) {
        untrack(h);
        handle_free(h);
    }
    pthread_mutex_unlock(&g_vmm.lock);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset) || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    vmm_handle *h = handle_of(handle);
    pthread_mutex_lock(&g_vmm.lock);
    rc = CUDA_ERROR_INVALID_VALUE;
    if (handle_known(h) && !h->released && offset / VMM_GRAN + size / VMM_GRAN <= h->npages &&
        range_holding(ptr, size) && !overlaps_map(ptr, size))
        rc = grow((void **)&g_vmm.maps, &g_vmm.capmaps, g_vmm.nmaps, sizeof(vmm_map));
    if (rc == CUDA_SUCCESS) {
        off_t at = (off_t)(h->first * VMM_GRAN + offset);
        void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, at);
        if (p == MAP_FAILED) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            g_vmm.maps[g_vmm.nmaps++] = (vmm_map){.ptr = ptr, .size = size, .h = h};
            h->maps++;
        }
    }
    pthread_mutex_unlock(&g_vmm.lock);
    return rc;
}

static void unmap_one(size_t i)
{
    vmm_map *m = &g_vmm.maps[i];
    if (m->registered)
        sim_mem_remove_vmm(m->ptr);
    mmap((void *)(uintptr_t)m->ptr, m->size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    vmm_handle *h = m->h;
    *m = g_vmm.maps[--g_vmm.nmaps];
    if (--h->maps == 0 && h->released && h->retained == 0) {
        untrack(h);
        handle_free(h);
    }
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !aligned(ptr) || !aligned(size))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm.lock);
    rc = whole_maps(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = g_vmm.nmaps; rc == CUDA_SUCCESS && i-- > 0;) {
        const vmm_map *m = &g_vmm.maps[i];
        if (m->ptr >= ptr && m->ptr + m->size <= ptr + size)
            unmap_one(i);
    }
    pthread_mutex_unlock(&g_vmm.lock);
    return rc;
}

/* Grants d's access to mapping m; the first grant registers it, with
 * what its handle was created with. */
static CUresult grant(vmm_map *m, const CUmemAccessDesc *d)
{
    m->access[d->location.id] = (unsigned long long)d->flags;
    int prot = PROT_NONE;
    unsigned reach = 0;
    for (int k = 0; k < SIM_MAX_DEVICES; k++) {
        prot = m->access[k] ? PROT_READ | PROT_WRITE : prot;
        reach |= m->access[k] ? 1u << k : 0u;
    }
    mprotect((void *)(uintptr_t)m->ptr, m->size, prot);
    if (m->registered || prot == PROT_NONE) {
        if (m->registered)
            sim_mem_set_vmm_access(m->ptr, reach);
        return CUDA_SUCCESS;
    }
    const vmm_handle *h = m->h;
    sim_alloc req = {.base = m->ptr,
                     .size = m->size,
                     .dev = h->dev,
                     .kind = SIM_MEM_VMM,
                     .span = m->size,
                     .handle_types = h->shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0,
                     .rdma = h->rdma,
                     .decompress = h->decompress,
                     .access = reach};
    CUresult rc = sim_mem_add_import(&req);
    m->registered = rc == CUDA_SUCCESS;
    return rc;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || desc == NULL || count == 0 || !aligned(ptr) || !aligned(size))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < count; k++) {
        if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
             desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
        if ((rc = sim_check_dev(desc[k].location.id)) != CUDA_SUCCESS)
            return rc;
    }
    pthread_mutex_lock(&g_vmm.lock);
    rc = whole_maps(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < g_vmm.nmaps; i++) {
        vmm_map *m = &g_vmm.maps[i];
        for (size_t k = 0; k < count && m->ptr >= ptr && m->ptr + m->size <= ptr + size; k++)
            if ((rc = grant(m, &desc[k])) != CUDA_SUCCESS)
                break;
    }
    pthread_mutex_unlock(&g_vmm.lock);
    return rc;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags == NULL || location == NULL || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = sim_check_dev(location->id)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_vmm.lock);
    rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g_vmm.nmaps; i++) {
        const vmm_map *m = &g_vmm.maps[i];
        if (ptr >= m->ptr && ptr - m->ptr < m->size) {
            *flags = m->access[location->id];
            rc = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_vmm.lock);
    sim_alloc a;
    if (rc != CUDA_SUCCESS && sim_mem_find(ptr, &a) == CUDA_SUCCESS && a.kind != SIM_MEM_VMM) {
        *flags = 0; /* memory of cuMemAlloc and the like: no VMM access */
        rc = CUDA_SUCCESS;
    }
    return rc;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    pthread_mutex_lock(&g_vmm.lock);
    rc = CUDA_ERROR_INVALID_VALUE; /* not VMM memory (a cuMemAlloc, say) */
    for (size_t i = 0; i < g_vmm.nmaps; i++) {
        vmm_map *m = &g_vmm.maps[i];
        if (p >= m->ptr && p - m->ptr < m->size) {
            m->h->retained++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&g_vmm.lock);
    return rc;
}

/* ---- API: shareable handles ------------------------------------------------------- */

/* The CUresult of a failed export (errno of sim_vmmfile_export). */
static CUresult export_error(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY
                                                     : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (shareableHandle == NULL || flags != 0 ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    vmm_handle *h = handle_of(handle);
    int fd = -1;
    pthread_mutex_lock(&g_vmm.lock);
    if (!handle_known(h) || h->released || !h->shareable) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        h->exported = true; /* from now on its pages are never reused */
        fd = sim_vmmfile_export(h->fd, h->first, h->npages, h->dev);
        rc = fd >= 0 ? CUDA_SUCCESS : export_error(errno);
    }
    pthread_mutex_unlock(&g_vmm.lock);
    if (rc == CUDA_SUCCESS)
        memcpy(shareableHandle, &fd, sizeof fd);
    return rc;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (handle == NULL || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    intptr_t fd = (intptr_t)osHandle;
    vmm_handle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int e = fd < 0 || fd > INT32_MAX
                ? EINVAL
                : sim_vmmfile_import((int)fd, &h->fd, &h->first, &h->npages, &h->dev);
    if (e != 0) {
        free(h);
        return e == ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    h->dev = sim_check_dev(h->dev) == CUDA_SUCCESS ? h->dev : 0;
    h->imported = h->shareable = true;
    pthread_mutex_lock(&g_vmm.lock);
    rc = track(h);
    pthread_mutex_unlock(&g_vmm.lock);
    if (rc != CUDA_SUCCESS) {
        close(h->fd);
        free(h);
        return rc;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}
