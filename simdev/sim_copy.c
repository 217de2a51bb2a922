/* simdev/sim_copy.c: memory copies and memsets, synchronous and on streams.
 *
 * Every copy or memset becomes a stream operation run by the stream's
 * worker: the _Async forms on the given stream, the synchronous forms on
 * the legacy default stream (or, for the _ptds forms, the calling thread's
 * per-thread default stream) and then wait for it.  So a synchronous copy
 * is ordered after all earlier work of the blocking streams, like the real
 * one, and later work of those streams is ordered after it.
 *
 * Arguments are validated at submission: a device side must lie inside one
 * live allocation (any kind: device, managed, pinned host - unified
 * addressing), a host side must be non-NULL; the unified cuMemcpy accepts
 * either.  Zero-byte operations are accepted and do nothing.
 */
#include "sim.h"

#include <stdint.h>

typedef enum side { SIDE_HOST, SIDE_DEV, SIDE_ANY } side;

static bool side_ok(CUdeviceptr p, size_t n, side sd)
{
    if (n == 0)
        return true;
    sim_alloc a;
    switch (sd) {
    case SIDE_HOST: return p != 0;
    case SIDE_DEV: return sim_mem_range_ok(p, n);
    case SIDE_ANY:
        if (sim_mem_find(p, &a) == CUDA_SUCCESS)
            return sim_mem_range_ok(p, n);
        return p != 0;
    }
    return false;
}

/* Submits op on the resolved stream; sync: waits for it (takes op). */
static CUresult submit_mem(sim_op *op, CUstream h, bool pt, bool sync)
{
    sim_stream *s = NULL;
    sim_lock();
    CUresult rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS && sync && s->cap != NULL) {
        sim_capture_invalidate(s->cap); /* synchronous work in capture */
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (rc == CUDA_SUCCESS) {
        rc = sim_stream_submit(s, op);
        if (rc == CUDA_SUCCESS && sync)
            sim_stream_wait(s, s->enq);
    } else {
        sim_op_free(op);
    }
    sim_unlock();
    return rc;
}

static CUresult copy_common(CUdeviceptr dst, side ds, CUdeviceptr src, side ss, size_t n,
                            CUstream h, bool pt, bool sync)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (!side_ok(dst, n, ds) || !side_ok(src, n, ss)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_op *op = sim_op_new(SIM_OP_COPY);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = (void *)(uintptr_t)dst;
    op->u.copy.src = (const void *)(uintptr_t)src;
    op->u.copy.n = n;
    return submit_mem(op, h, pt, sync);
}

static CUresult set_common(CUdeviceptr dst, unsigned value, size_t count, size_t width, CUstream h,
                           bool pt, bool sync)
{
    CUresult rc = sim_check_init();
    bool shape_ok = width == 1 || (dst % 4 == 0 && count <= SIZE_MAX / 4);
    if (rc == CUDA_SUCCESS && (!shape_ok || !side_ok(dst, count * width, SIDE_DEV)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_op *op = sim_op_new(width == 1 ? SIM_OP_SET8 : SIM_OP_SET32);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = (void *)(uintptr_t)dst;
    op->u.set.value = value;
    op->u.set.count = count;
    return submit_mem(op, h, pt, sync);
}

#define HOST_PTR(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- synchronous, legacy stream ------------------------------------------- */

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy_common(dst, SIDE_ANY, src, SIDE_ANY, ByteCount, NULL, false, true);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy_common(dstDevice, SIDE_DEV, HOST_PTR(srcHost), SIDE_HOST, ByteCount, NULL, false,
                       true);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy_common(HOST_PTR(dstHost), SIDE_HOST, srcDevice, SIDE_DEV, ByteCount, NULL, false,
                       true);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy_common(dstDevice, SIDE_DEV, srcDevice, SIDE_DEV, ByteCount, NULL, false, true);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return set_common(dstDevice, uc, N, 1, NULL, false, true);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return set_common(dstDevice, ui, N, 4, NULL, false, true);
}

/* ---- synchronous, per-thread default stream --------------------------------- */

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy_common(dst, SIDE_ANY, src, SIDE_ANY, ByteCount, NULL, true, true);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy_common(dstDevice, SIDE_DEV, HOST_PTR(srcHost), SIDE_HOST, ByteCount, NULL, true,
                       true);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy_common(HOST_PTR(dstHost), SIDE_HOST, srcDevice, SIDE_DEV, ByteCount, NULL, true,
                       true);
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy_common(dstDevice, SIDE_DEV, srcDevice, SIDE_DEV, ByteCount, NULL, true, true);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return set_common(dstDevice, uc, N, 1, NULL, true, true);
}

CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return set_common(dstDevice, ui, N, 4, NULL, true, true);
}

/* ---- asynchronous ---------------------------------------------------------- */

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy_common(dst, SIDE_ANY, src, SIDE_ANY, ByteCount, hStream, false, false);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy_common(dst, SIDE_ANY, src, SIDE_ANY, ByteCount, hStream, true, false);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream)
{
    return copy_common(dstDevice, SIDE_DEV, HOST_PTR(srcHost), SIDE_HOST, ByteCount, hStream, false,
                       false);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    return copy_common(dstDevice, SIDE_DEV, HOST_PTR(srcHost), SIDE_HOST, ByteCount, hStream, true,
                       false);
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return copy_common(HOST_PTR(dstHost), SIDE_HOST, srcDevice, SIDE_DEV, ByteCount, hStream, false,
                       false);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return copy_common(HOST_PTR(dstHost), SIDE_HOST, srcDevice, SIDE_DEV, ByteCount, hStream, true,
                       false);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return copy_common(dstDevice, SIDE_DEV, srcDevice, SIDE_DEV, ByteCount, hStream, false, false);
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return copy_common(dstDevice, SIDE_DEV, srcDevice, SIDE_DEV, ByteCount, hStream, true, false);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return set_common(dstDevice, uc, N, 1, hStream, false, false);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return set_common(dstDevice, uc, N, 1, hStream, true, false);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return set_common(dstDevice, ui, N, 4, hStream, false, false);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return set_common(dstDevice, ui, N, 4, hStream, true, false);
}
