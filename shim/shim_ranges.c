/* shim_ranges.c - what the driver says about the allocation behind a
 * pointer (cuMemGetAddressRange_v2, cuPointerGetAttribute,
 * cuPointerGetAttributes), answered for the allocation the program was
 * given, not for the pool segment that holds it.
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
 * Every other attribute is the driver's answer for the segment, which is
 * the block's too (context, device, memory type, mapping).  The driver is
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
#include <stdint.h>

#define BUFFER_ID_BIT   (1ull << 62)          /* fragpool's ids; the driver's count up from 1 */
#define NOBODYS_POINTER ((CUdeviceptr)0x1000) /* below mmap_min_addr: never memory */

typedef enum { DRIVERS, LIVE, NOBODYS } verdict;

typedef struct answer {
    verdict v;
    uint64_t base;
    size_t size;
    uint64_t buffer_id; /* 0: the driver's                          */
    int ipc_capable;    /* -1: the driver's                         */
    CUcontext ctx;      /* NULL: the driver's                       */
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
                    .ctx = d->ctx};
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

/* Replaces the driver's value of one attribute for a live block. */
static void fill(const answer *a, CUpointer_attribute attr, void *data)
{
    if (!data)
        return;
    switch ((int)attr) {
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
    if (r != CUDA_SUCCESS && a.v == LIVE && a.ctx && data &&
        attribute == CU_POINTER_ATTRIBUTE_CONTEXT)
        r = CUDA_SUCCESS; /* virtual memory has no context; the block has */
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
