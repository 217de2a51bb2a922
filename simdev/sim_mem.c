/* simdev/sim_mem.c: the memory-management API.
 *
 * Device memory is host memory: the device pointer is the host address,
 * aligned to 512 B (2 MiB for requests of 2 MiB or more) and charged
 * against the device's capacity rounded to that alignment.  The registry
 * and the accounting live in sim_registry.c.
 *
 * Behaviour kept from the real driver:
 *   - cuMemFree synchronizes the device first, except for stream-ordered
 *     (cuMemAllocAsync) and graph allocations, as documented;
 *   - cuMemAllocAsync allocates at once; cuMemFreeAsync releases the memory
 *     when the stream reaches the free;
 *   - during stream capture cuMemAllocAsync makes a graph allocation and
 *     cuMemFreeAsync of a graph allocation of the same capture frees it; a
 *     captured free of any other allocation becomes a graph node only (it
 *     would run at graph launch, which is not simulated);
 *   - allocation and free calls obey the capture-mode rules
 *     (sim_capture.c).
 * Address-range queries, as the native driver answers them (H200, driver
 * 580.159.04): cuMemGetAddressRange gives (base, requested size) of the
 * allocation holding the pointer - for VMM memory the mapping (cuMemMap)
 * that covers it - and CUDA_ERROR_NOT_FOUND elsewhere (one past the end,
 * freed, never allocated, reserved but not mapped); NULL outputs are
 * allowed.  cuPointerGetAttribute answers CUDA_ERROR_INVALID_VALUE there
 * and for an unknown attribute; its RANGE_START_ADDR and RANGE_SIZE are
 * the allocation's, for VMM memory the whole reservation's; BUFFER_ID is
 * unique per allocation; IS_LEGACY_CUDA_IPC_CAPABLE is 1 for cuMemAlloc
 * memory only.  The attributes that tell VMM memory apart (handle types,
 * RDMA, decompression, mapping, SYNC_MEMOPS, which only cuMemAlloc-like
 * memory takes) are vmm_attr's; a VMM mapping has no context.
 * Chosen where the documentation is silent: cuMemFree(0), cuMemFreeAsync(0)
 * and cuMemFreeHost(NULL) succeed; cuMemGetInfo accepts NULL outputs.
 */
#include "sim.h"

#include <stdint.h>
#include <string.h>

/* NOT_INITIALIZED before cuInit, else INVALID_VALUE. */
static CUresult bad_arg(void)
{
    CUresult rc = sim_check_init();
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
}

/* Current context, also checking the capture-mode rules (locks). */
static CUresult unsafe_call_ctx(sim_ctx **out)
{
    sim_lock();
    CUresult rc = sim_ctx_current_locked(out);
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_unsafe_check();
    sim_unlock();
    return rc;
}

static CUresult alloc_in_ctx(CUdeviceptr *dptr, size_t size, sim_mem_kind kind, unsigned flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (dptr == NULL || size == 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = NULL;
    if (rc == CUDA_SUCCESS)
        rc = unsafe_call_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc req = {.dev = c->dev, .ctx = c, .size = size, .kind = kind, .flags = flags};
    return sim_mem_alloc(&req, dptr);
}

/* ---- API: synchronous allocation ------------------------------------------- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return alloc_in_ctx(dptr, bytesize, SIM_MEM_DEVICE, 0);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    bool elem_ok = ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16;
    if (pPitch == NULL || !elem_ok || WidthInBytes == 0 || Height == 0)
        return bad_arg();
    /* Widths past 2^31 - 1 are allowed, as the H200's driver (580.159.04)
   * allows them: 2^31 succeeds with pitch 2^31, 2^40 is out of memory.
   * A width or size past SIZE_MAX is an impossible size: the capacity
   * check refuses it. */
    size_t pitch = WidthInBytes > SIZE_MAX - (SIM_PITCH_ALIGN - 1)
                       ? SIZE_MAX
                       : (WidthInBytes + SIM_PITCH_ALIGN - 1) & ~(size_t)(SIM_PITCH_ALIGN - 1);
    size_t bytes = Height > SIZE_MAX / pitch ? SIZE_MAX : pitch * Height;
    CUresult rc = alloc_in_ctx(dptr, bytes, SIM_MEM_DEVICE, 0);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return bad_arg();
    return alloc_in_ctx(dptr, bytesize, SIM_MEM_MANAGED, flags);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (pp == NULL || (Flags & ~7u) != 0)
        return bad_arg();
    CUdeviceptr p = 0;
    CUresult rc = alloc_in_ctx(&p, bytesize, SIM_MEM_HOST, Flags);
    if (rc == CUDA_SUCCESS)
        *pp = (void *)(uintptr_t)p;
    return rc;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

/* ---- API: synchronous free -------------------------------------------------- */

static bool needs_sync(sim_mem_kind kind)
{
    return kind == SIM_MEM_DEVICE || kind == SIM_MEM_MANAGED || kind == SIM_MEM_HOST;
}

/* Checks the capture rules, then synchronizes what a free of a must. */
static CUresult free_prologue(const sim_alloc *a)
{
    sim_lock();
    CUresult rc = sim_capture_unsafe_check();
    if (rc == CUDA_SUCCESS && needs_sync(a->kind))
        sim_device_sync(a->dev);
    sim_unlock();
    return rc;
}

static CUresult free_common(CUdeviceptr p, sim_free_mode mode)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS || p == 0)
        return rc;
    sim_alloc a;
    bool host = mode == SIM_FREE_HOST;
    if (sim_mem_find(p, &a) != CUDA_SUCCESS || a.base != p || (a.kind == SIM_MEM_HOST) != host ||
        a.free_pending)
        return CUDA_ERROR_INVALID_VALUE;
    rc = free_prologue(&a);
    return rc == CUDA_SUCCESS ? sim_mem_release(p, mode) : rc;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return free_common(dptr, SIM_FREE_SYNC);
}

CUresult cuMemFreeHost(void *p)
{
    return free_common((CUdeviceptr)(uintptr_t)p, SIM_FREE_HOST);
}

/* ---- API: stream-ordered allocation ------------------------------------------ */

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream h, bool pt)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (dptr == NULL || size == 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_ctx *c = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, &c);
    sim_alloc req = {.size = size, .kind = SIM_MEM_ASYNC};
    if (rc == CUDA_SUCCESS && s->cap != NULL) {
        bool active = s->cap->status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
        rc = active ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        req.kind = SIM_MEM_GRAPH;
        req.cap_id = s->cap->id;
    }
    if (rc == CUDA_SUCCESS) {
        req.dev = s->dev;
        req.ctx = c;
        rc = sim_mem_alloc(&req, dptr);
    }
    if (rc == CUDA_SUCCESS && s->cap != NULL)
        sim_capture_add_node(s->cap);
    sim_unlock();
    return rc;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream, false);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream, true);
}

/* cuMemFreeAsync on a capturing stream (lock held). */
static CUresult free_captured(sim_stream *s, CUdeviceptr p)
{
    sim_capture *cap = s->cap;
    if (cap->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sim_alloc a;
    if (sim_mem_find(p, &a) != CUDA_SUCCESS || a.base != p || a.kind == SIM_MEM_HOST ||
        a.free_pending)
        return CUDA_ERROR_INVALID_VALUE;
    sim_capture_add_node(cap);
    if (a.kind == SIM_MEM_GRAPH && a.cap_id == cap->id)
        return sim_mem_release(p, SIM_FREE_CAPTURED);
    return CUDA_SUCCESS;
}

/* cuMemFreeAsync outside capture: mark, then enqueue (lock held). */
static CUresult free_enqueue(sim_stream *s, CUdeviceptr p)
{
    sim_alloc a;
    CUresult rc = sim_mem_mark_pending(p, &a);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_op *op = sim_op_new(SIM_OP_FREE);
    if (op == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        op->u.free_ptr = p;
    if (op != NULL)
        rc = sim_stream_submit(s, op);
    if (rc != CUDA_SUCCESS)
        sim_mem_unmark_pending(p);
    return rc;
}

static CUresult free_async(CUdeviceptr p, CUstream h, bool pt)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS || p == 0)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS)
        rc = s->cap != NULL ? free_captured(s, p) : free_enqueue(s, p);
    sim_unlock();
    return rc;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, false);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, true);
}

/* ---- API: queries ------------------------------------------------------------ */

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    sim_ctx *c = NULL;
    CUresult rc = sim_ctx_current(&c);
    if (rc == CUDA_SUCCESS)
        sim_mem_info(c->dev, free, total);
    return rc;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc a;
    if (sim_mem_find(dptr, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase != NULL)
        *pbase = a.base;
    if (psize != NULL)
        *psize = a.size;
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (pdptr == NULL || Flags != 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc a;
    CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)p;
    if (sim_mem_find(ptr, &a) != CUDA_SUCCESS ||
        (a.kind != SIM_MEM_HOST && a.kind != SIM_MEM_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = ptr;
    return CUDA_SUCCESS;
}

/* ---- API: pointer attributes ------------------------------------------------- */

/* Bytes written for attr, 0 if unsupported. */
static size_t attr_size(CUpointer_attribute attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return sizeof(unsigned);
    }
    return 0;
}

/* RANGE_START_ADDR or RANGE_SIZE: the allocation's (base, size), or for
 * VMM memory the reservation holding ptr (0 when there is none). */
static uint64_t range_attr(CUdeviceptr base, size_t size, CUpointer_attribute attr, CUdeviceptr ptr,
                           bool vmm)
{
    if (vmm && !sim_mem_find_reservation(ptr, &base, &size))
        base = 0, size = 0;
    return attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ? base : size;
}

/* MAPPING_BASE_ADDR or MAPPING_SIZE: a VMM mapping is its own (cuMemMap's);
 * any other allocation lies in the driver's 2 MiB-aligned mapping around it. */
static uint64_t mapping_attr(const sim_alloc *a, CUpointer_attribute attr)
{
    uint64_t base = a->base, end = a->base + a->size;
    if (a->kind != SIM_MEM_VMM) {
        base -= base % SIM_LARGE_ALIGN;
        end = (end + SIM_LARGE_ALIGN - 1) / SIM_LARGE_ALIGN * SIM_LARGE_ALIGN;
    }
    return attr == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR ? base : end - base;
}

/* The attributes that tell VMM memory from a cuMemAlloc (sim_vmm.c says
 * what a mapping carries): device memory of cuMemAlloc is RDMA- and
 * decompress-capable with no shareable handle type, as natively. */
static bool vmm_attr(const sim_alloc *a, CUpointer_attribute attr, uint64_t *v)
{
    bool vmm = a->kind == SIM_MEM_VMM,
         dev = !vmm &&
               (a->kind == SIM_MEM_DEVICE || a->kind == SIM_MEM_ASYNC || a->kind == SIM_MEM_GRAPH);
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *v = vmm ? a->handle_types : 0; return true;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *v = vmm ? a->rdma : dev; return true;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: *v = vmm ? a->decompress : dev; return true;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *v = a->sync_memops; return true;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *v = 3; return true;   /* read and write */
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *v = 0; return true; /* not modelled */
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *v = a->id; return true;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *v = mapping_attr(a, attr); return true;
    }
    return false;
}

/* The value of attr for ptr inside allocation a, as 8 bytes. */
static CUresult attr_value(const sim_alloc *a, CUpointer_attribute attr, CUdeviceptr ptr,
                           uint64_t *v)
{
    if (vmm_attr(a, attr, v))
        return CUDA_SUCCESS;
    bool pinned = a->kind == SIM_MEM_HOST || a->kind == SIM_MEM_REGISTERED;
    bool host_visible = pinned || a->kind == SIM_MEM_MANAGED;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *v = (uintptr_t)a->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *v = pinned ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *v = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host_visible)
            return CUDA_ERROR_INVALID_VALUE;
        *v = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *v = a->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *v = a->kind == SIM_MEM_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *v = (uint64_t)a->dev; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *v = a->kind == SIM_MEM_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *v = range_attr(a->base, a->size, attr, ptr, a->kind == SIM_MEM_VMM);
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *v = 1; break;
    default: return CUDA_ERROR_INVALID_VALUE; /* the rest: vmm_attr */
    }
    return CUDA_SUCCESS;
}

/* Stores v in the attribute's own width. */
static void attr_store(void *data, CUpointer_attribute attr, uint64_t v)
{
    if (attr_size(attr) == sizeof(unsigned)) {
        unsigned u = (unsigned)v;
        memcpy(data, &u, sizeof u);
    } else {
        memcpy(data, &v, sizeof v);
    }
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (data == NULL || attr_size(attribute) == 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc a;
    uint64_t v = 0;
    if (sim_mem_find(ptr, &a) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    rc = attr_value(&a, attribute, ptr, &v);
    if (rc == CUDA_SUCCESS)
        attr_store(data, attribute, v);
    return rc;
}

/* Unlike the singular form, unknown pointers and inapplicable attributes
 * read as zero / NULL (documented behaviour), except that an address of
 * a VMM reservation that is not mapped still reads the reservation's
 * range, as natively. */
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                void **data, CUdeviceptr ptr)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && numAttributes != 0 && (attributes == NULL || data == NULL))
        rc = CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; rc == CUDA_SUCCESS && i < numAttributes; i++)
        if (data[i] == NULL || attr_size(attributes[i]) == 0)
            rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc a;
    bool known = sim_mem_find(ptr, &a) == CUDA_SUCCESS;
    for (unsigned i = 0; i < numAttributes; i++) {
        uint64_t v = 0;
        bool range = attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                     attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
        if (known && attr_value(&a, attributes[i], ptr, &v) != CUDA_SUCCESS)
            v = 0;
        else if (!known && range) /* reserved, not mapped: the reservation */
            v = range_attr(0, 0, attributes[i], ptr, true);
        attr_store(data[i], attributes[i], v);
    }
    return CUDA_SUCCESS;
}

/* SYNC_MEMOPS is the one settable attribute; VMM memory does not take it
 * (CUDA_ERROR_NOT_SUPPORTED, measured on an H200). */
CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (value == NULL || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    unsigned on;
    memcpy(&on, value, sizeof on);
    return sim_mem_set_sync_memops(ptr, on != 0);
}
