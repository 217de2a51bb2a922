/* shim_mem.c - the driver's allocation entry points that fragpool serves:
 * cuMemAlloc, cuMemAllocPitch, cuMemFree, cuMemAllocAsync, cuMemFreeAsync
 * (and the _ptsz forms).
 *
 * An interposer (docs/design.md) that only translates: it calls
 * fp_shim_init, hands the call to the allocation core (shim_core.c),
 * turns the core's errno code into the driver's CUresult, and forwards
 * what the core does not serve to the driver untouched.  Each function
 * keeps the driver's contract: the same arguments are rejected with the
 * same CUresult, failures return the driver's own code.  The other
 * memory and context entry points are in shim_ctx_api.c.
 *
 * Invariant: it includes only shim_core.h, shim_life.h, shim_real.h and
 * shim_state.h of shim/ (scripts/check_layers.py, rule f): the path of an
 * allocation stays interposer, core, pools, deferral.
 */
#include "shim_core.h"
#include "shim_life.h"
#include "shim_real.h"
#include "shim_state.h"
#include <errno.h>

static void count(int k)
{
    atomic_fetch_add_explicit(&fp_passthrough[k], 1, memory_order_relaxed);
}

/* The CUresult of a core code other than ENOENT (which forwards). */
static CUresult result(int err)
{
    switch (err) {
    case 0: return CUDA_SUCCESS;
    case ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
    case EINVAL: return CUDA_ERROR_INVALID_VALUE;
    case EBUSY: return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    default: return fp_core_last_error();
    }
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    int err = fp_shim_init() ? fp_core_alloc(bytesize, dptr && bytesize, dptr) : ENOENT;
    if (err != ENOENT)
        return result(err);
    return fp_real.cuMemAlloc_v2 ? fp_real.cuMemAlloc_v2(dptr, bytesize)
                                 : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    int err = dptr && fp_shim_init() ? fp_core_free(dptr, "cuMemFree") : ENOENT;
    if (err != ENOENT)
        return result(err);
    if (dptr)
        count(FP_PT_OTHER);
    return fp_real.cuMemFree_v2 ? fp_real.cuMemFree_v2(dptr) : CUDA_ERROR_NOT_INITIALIZED;
}

/* The driver's pitch rule: rows padded to the pitch alignment. */
#define FP_PITCH_ALIGN 512u

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    bool bad = !dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
               (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16);
    size_t pitch = (WidthInBytes + FP_PITCH_ALIGN - 1) & ~(size_t)(FP_PITCH_ALIGN - 1);
    if (!bad && (pitch < WidthInBytes || Height > SIZE_MAX / pitch))
        bad = true;
    size_t size = bad ? 0 : pitch * Height;
    int err = fp_shim_init() ? fp_core_alloc(size, !bad, dptr) : ENOENT;
    if (err == 0)
        *pPitch = pitch;
    if (err != ENOENT)
        return result(err);
    return fp_real.cuMemAllocPitch_v2
               ? fp_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes)
               : CUDA_ERROR_NOT_INITIALIZED;
}

/* ---- stream-ordered allocation ---------------------------------------- */

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream s, fp_PFN_cuMemAllocAsync real,
                            fp_PFN_cuStreamIsCapturing is_capturing)
{
    int err =
        fp_shim_init() ? fp_core_alloc_async(size, dptr && size, s, is_capturing, dptr) : ENOENT;
    if (err != ENOENT)
        return result(err);
    return real ? real(dptr, size, s) : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult free_async(CUdeviceptr p, CUstream s, fp_PFN_cuMemFreeAsync real,
                           fp_PFN_cuStreamIsCapturing is_capturing, fp_PFN_cuStreamSynchronize sync)
{
    int err = p && fp_shim_init() ? fp_core_free_async(p, s, is_capturing, sync, "cuMemFreeAsync")
                                  : ENOENT;
    if (err != ENOENT)
        return result(err);
    if (p)
        count(FP_PT_OTHER);
    return real ? real(p, s) : CUDA_ERROR_NOT_SUPPORTED;
}

/* The stream a _ptsz entry point means: there, 0 is the calling thread's
 * per-thread stream, which fragpool's own calls (and its same-stream
 * matching) must name explicitly. */
static CUstream per_thread(CUstream s)
{
    return s ? s : CU_STREAM_PER_THREAD;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, hStream, fp_real.cuMemAllocAsync,
                       fp_real.cuStreamIsCapturing);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, per_thread(hStream), fp_real.cuMemAllocAsync_ptsz,
                       fp_real.cuStreamIsCapturing_ptsz);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, fp_real.cuMemFreeAsync, fp_real.cuStreamIsCapturing,
                      fp_real.cuStreamSynchronize);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, per_thread(hStream), fp_real.cuMemFreeAsync_ptsz,
                      fp_real.cuStreamIsCapturing_ptsz, fp_real.cuStreamSynchronize_ptsz);
}
