/* shim_ranges.c - what the driver says about the allocation behind a
 * pointer (cuMemGetAddressRange_v2, cuPointerGetAttribute,
 * cuPointerGetAttributes, cuMemRetainAllocationHandle, cuMemGetAccess,
 * cuPointerSetAttribute), answered for the allocation the program was
 * given, not for the pool segment that holds it, and as for a cudaMalloc
 * when that segment is virtual memory (the table in docs/shim.md, "What
 * the driver says about a block").
 *
 * Natively (measured on an H200, driver 580) a cudaMalloc of 1000 bytes
 * answers (its start, 1000) from any pointer inside it; one byte past the
 * end, or once freed, the pointer belongs to nothing: cuMemGetAddressRange
 * says CUDA_ERROR_NOT_FOUND, cuPointerGetAttribute CUDA_ERROR_INVALID_VALUE
 * for every attribute, and cuPointerGetAttributes succeeds with the
 * defaults (zeros, no context).  Each allocation has a BUFFER_ID of its
 * own.  Under fragpool the driver sees only segments, so:
 *
 *   a live block of a device pool   range (block start, requested bytes),
 *                                   a BUFFER_ID of its own (bit 62 set, so
 *                                   never one of the driver's counters),
 *                                   IS_LEGACY_CUDA_IPC_CAPABLE 1 when
 *                                   cuIpcGetMemHandle would give it a
 *                                   handle (shim_ipc.c), CONTEXT the pool's
 *                                   context (the driver has none for
 *                                   virtual memory; a cudaMalloc has one);
 *   a live block of the pinned      range (block start, requested bytes);
 *   host pool
 *   a pointer opened through a      range (the pointer, the exported
 *   fragpool IPC handle             block's bytes), as the exporter's
 *                                   allocation;
 *   pool memory in no live block    the answers for memory nobody was
 *                                   given (above);
 *   anything else                   the driver's, untouched.
 *
 * For every device block, MAPPING_BASE_ADDR and MAPPING_SIZE are the 2 MiB
 * window around the block (a cudaMalloc's mapping, not the segment or
 * granule).  For a block of a virtual-memory segment, what would tell it
 * from a cudaMalloc answers as a cudaMalloc: ALLOWED_HANDLE_TYPES 0,
 * IS_HW_DECOMPRESS_CAPABLE 1 where the device has no engine (where it has
 * one the granules are made capable), cuMemRetainAllocationHandle
 * CUDA_ERROR_INVALID_VALUE (classic blocks too: the driver's answer),
 * cuMemGetAccess flags 0, cuPointerSetAttribute(SYNC_MEMOPS) success.
 * IS_GPU_DIRECT_RDMA_CAPABLE is the driver's: the granules are made
 * RDMA-capable where the device offers it (shim_pages.c).
 * Every other attribute is the driver's answer for the segment, which is
 * the block's too (device, memory type, access).  The driver is
 * always asked first, so its own errors (no context, a bad attribute, a
 * NULL argument) come back unchanged; fragpool only replaces values the
 * driver gave for the segment.  For pool memory in no live block the
 * driver is asked about a pointer that is nobody's (NOBODYS_POINTER), so
 * that its error, and what it leaves in the outputs, are its own.
 */
#include "shim_host.h"
#include "shim_ipc.h"
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_state.h"
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#define BUFFER_ID_BIT   (1ull << 62)          /* fragpool's ids; the driver's count up from 1 */
#define NOBODYS_POINTER ((CUdeviceptr)0x1000) /* below mmap_min_addr: never memory */
#define MAPPING_ALIGN   ((uint64_t)2 << 20)   /* the driver's mappings of cudaMalloc */

typedef enum { DRIVERS, LIVE, NOBODYS } verdict;

typedef struct answer {
    verdict v;
    uint64_t base;
    size_t size;
    uint64_t buffer_id; /* 0: the driver's                          */
    int ipc_capable;    /* -1: the driver's                         */
    CUcontext ctx;      /* NULL: the driver's                       */
    bool device;        /* a block of a device pool                 */
    bool vmm;           /* ... in a virtual-memory segment          */
    CUdevice dev;       /* ... of this device                       */
} answer;

static answer device_block(fp_ctx_pool *d, CUdeviceptr p)
{
    fp_found f;
    int err = fp_pool_find_block(d->pool, p, &f);
    if (err == ESRCH) /* the segment went away meanwhile */
        return (answer){.v = DRIVERS};
    if (err)
        return (answer){.v = NOBODYS};
    return (answer){.v = LIVE,
                    .base = f.addr,
                    .size = f.requested,
                    .buffer_id = BUFFER_ID_BIT | fp_pools_trace_id(d, f.seq),
                    .ipc_capable = fp_ipc_exportable(f.vmm, f.addr == f.segment),
                    .ctx = d->ctx,
                    .device = true,
                    .vmm = f.vmm != 0,
                    .dev = d->dev};
}

static answer ask(CUdeviceptr p)
{
    if (!fp_shim_init() || !p)
        return (answer){.v = DRIVERS};
    fp_ctx_pool *d = fp_pools_owner(p);
    if (d) {
        answer a = device_block(d, p);
        fp_pools_put(d);
        return a;
    }
    fp_host_found h;
    int err = fp_host_lookup(p, &h);
    if (err == EINVAL)
        return (answer){.v = NOBODYS};
    if (!err)
        return (answer){.v = LIVE, .base = h.addr, .size = h.size, .ipc_capable = -1};
    uint64_t base;
    size_t size;
    if (fp_ipc_opened_range(p, &base, &size))
        return (answer){.v = LIVE, .base = base, .size = size, .ipc_capable = -1};
    return (answer){.v = DRIVERS};
}

/* Whether dev has a hardware decompression engine. */
static bool decompress_engine(CUdevice dev)
{
    int mask = 0;
    return fp_real.cuDeviceGetAttribute &&
           fp_real.cuDeviceGetAttribute(&mask, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK,
                                        dev) == CUDA_SUCCESS &&
           mask != 0;
}

/* The mapping a cudaMalloc of the block would lie in: the 2 MiB-aligned
 * window around it (the driver's own is the pool's segment or granule). */
static uint64_t mapping(const answer *a, CUpointer_attribute attr)
{
    uint64_t base = a->base & ~(MAPPING_ALIGN - 1);
    uint64_t end = (a->base + a->size + MAPPING_ALIGN - 1) & ~(MAPPING_ALIGN - 1);
    return attr == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR ? base : end - base;
}

/* Attributes whose answer for a device block is fragpool's alone, so
 * that the driver's error for the segment (virtual memory has no
 * context, say) is not the block's. */
static bool ours(const answer *a, CUpointer_attribute attr)
{
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return a->ctx != NULL;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return a->device;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return a->vmm;
    }
    return false;
}

/* The attributes that would tell a virtual-memory block from a cudaMalloc:
 * no shareable handle type (fragpool's IPC exports its granules itself),
 * decompress-capable as a cudaMalloc where the device has no engine to use
 * it (where it has one, the granules were made capable: the driver's). */
static void fill_vmm(const answer *a, CUpointer_attribute attr, void *data)
{
    if (attr == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES)
        *(unsigned long long *)data = 0;
    else if (attr == CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE && !decompress_engine(a->dev))
        *(unsigned int *)data = 1;
}

/* Replaces the driver's value of one attribute for a live block. */
static void fill(const answer *a, CUpointer_attribute attr, void *data)
{
    if (!data)
        return;
    if (a->vmm)
        fill_vmm(a, attr, data);
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        if (a->device)
            *(uint64_t *)data = mapping(a, attr);
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        if (a->buffer_id)
            *(unsigned long long *)data = a->buffer_id;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        if (a->ipc_capable >= 0)
            *(unsigned int *)data = (unsigned)a->ipc_capable;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (a->ctx)
            *(CUcontext *)data = a->ctx;
        break;
    default: break;
    }
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    answer a = ask(dptr);
    if (!fp_real.cuMemGetAddressRange_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r =
        fp_real.cuMemGetAddressRange_v2(pbase, psize, a.v == NOBODYS ? NOBODYS_POINTER : dptr);
    if (r != CUDA_SUCCESS || a.v != LIVE)
        return r;
    if (pbase)
        *pbase = a.base;
    if (psize)
        *psize = a.size;
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    answer a = ask(ptr);
    if (!fp_real.cuPointerGetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r =
        fp_real.cuPointerGetAttribute(data, attribute, a.v == NOBODYS ? NOBODYS_POINTER : ptr);
    if (r != CUDA_SUCCESS && a.v == LIVE && data && ours(&a, attribute))
        r = CUDA_SUCCESS; /* e.g. virtual memory has no context; the block has */
    if (r != CUDA_SUCCESS || a.v != LIVE)
        return r;
    fill(&a, attribute, data);
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                void **data, CUdeviceptr ptr)
{
    answer a = ask(ptr);
    if (!fp_real.cuPointerGetAttributes)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* memory in no live block: the driver's defaults for a pointer it never gave */
    CUresult r = fp_real.cuPointerGetAttributes(numAttributes, attributes, data,
                                                a.v == NOBODYS ? NOBODYS_POINTER : ptr);
    if (r != CUDA_SUCCESS || a.v != LIVE || !attributes || !data)
        return r;
    for (unsigned i = 0; i < numAttributes; i++)
        fill(&a, attributes[i], data[i]);
    return CUDA_SUCCESS;
}

/* ---- what tells virtual memory from a cudaMalloc ---------------------- */

/* A pooled block is no VMM allocation of the program's: the driver's
 * answer for memory of cudaMalloc, CUDA_ERROR_INVALID_VALUE, and no
 * handle to a granule that holds other blocks.  Pool memory in no live
 * block answers the same (it is nobody's). */
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    answer a = ask((CUdeviceptr)(uintptr_t)addr);
    if (!fp_real.cuMemRetainAllocationHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (a.v == NOBODYS || (a.v == LIVE && a.device))
        return fp_real.cuMemRetainAllocationHandle(handle, (void *)(uintptr_t)NOBODYS_POINTER);
    return fp_real.cuMemRetainAllocationHandle(handle, addr);
}

/* Access flags are a VMM mapping's: for a block of a virtual-memory
 * segment the answer for memory of cudaMalloc, 0, once the driver has
 * taken the arguments (its errors stay its own). */
CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    answer a = ask(ptr);
    if (!fp_real.cuMemGetAccess)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = fp_real.cuMemGetAccess(flags, location, a.v == NOBODYS ? NOBODYS_POINTER : ptr);
    if (r == CUDA_SUCCESS && a.v == LIVE && a.vmm && flags)
        *flags = 0;
    return r;
}

/* SYNC_MEMOPS, which GPUDirect RDMA users set on every buffer they
 * register: the driver takes it for memory of cudaMalloc and refuses it
 * for virtual memory (CUDA_ERROR_NOT_SUPPORTED); on a block of a
 * virtual-memory segment it succeeds (docs/shim.md says what it does not
 * give there). */
CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    answer a = ask(ptr);
    if (!fp_real.cuPointerSetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r =
        fp_real.cuPointerSetAttribute(value, attribute, a.v == NOBODYS ? NOBODYS_POINTER : ptr);
    if (r == CUDA_ERROR_NOT_SUPPORTED && a.v == LIVE && a.vmm && value &&
        attribute == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        r = CUDA_SUCCESS;
    return r;
}
