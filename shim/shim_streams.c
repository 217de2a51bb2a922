/* shim_streams.c - the streams a program uses, and whether any stream is
 * being captured into a graph.
 *
 * A fence must cover every stream that may still touch a freed block.
 * Blocking streams (and every thread's per-thread default stream) are
 * ordered with the legacy default stream, so one event there covers them;
 * each non-blocking stream needs an event of its own.  So the registry
 * keeps the non-blocking streams, per context.  While any capture is
 * under way, fragpool records no event and synchronizes nothing: either
 * would join or break the program's graph.
 *
 * A stream destroyed with work still queued is covered by a fence sealed
 * just before it goes (fp_defer_stream_gone).
 *
 * Invariant: the registry holds exactly the live non-blocking streams the
 * program created through the driver since fragpool loaded.
 */
#include "shim.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct fp_stream_ent {
    CUstream s;
    CUcontext ctx;
} fp_stream_ent;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fp_stream_ent *ents;
static size_t nents, capents;
static atomic_int captures;

bool fp_streams_capturing(void)
{
    return atomic_load_explicit(&captures, memory_order_acquire) > 0;
}

static void add(CUstream s, unsigned flags)
{
    CUcontext ctx = NULL;
    if (!(flags & CU_STREAM_NON_BLOCKING) || fp_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&lock);
    if (nents == capents) {
        size_t ncap = capents ? capents * 2 : 16;
        fp_stream_ent *n = realloc(ents, ncap * sizeof *n);
        if (n) {
            ents = n;
            capents = ncap;
        }
    }
    if (nents < capents)
        ents[nents++] = (fp_stream_ent){s, ctx};
    pthread_mutex_unlock(&lock);
}

/* The context of tracked stream s, or NULL. */
static CUcontext ctx_of(CUstream s)
{
    CUcontext ctx = NULL;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nents; i++)
        if (ents[i].s == s)
            ctx = ents[i].ctx;
    pthread_mutex_unlock(&lock);
    return ctx;
}

/* Before a tracked stream goes, a fence must cover the work still queued
 * on it (shim_defer.c); then it leaves the registry. */
static void drop(CUstream s)
{
    CUcontext ctx = ctx_of(s);
    if (!ctx)
        return;
    fp_defer_stream_gone(ctx, s);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nents; i++)
        if (ents[i].s == s) {
            ents[i] = ents[--nents];
            break;
        }
    pthread_mutex_unlock(&lock);
}

size_t fp_streams_of(CUcontext ctx, CUstream *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nents && n < max; i++)
        if (ents[i].ctx == ctx)
            out[n++] = ents[i].s;
    pthread_mutex_unlock(&lock);
    return n;
}

size_t fp_streams_count(CUcontext ctx)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nents; i++)
        n += ents[i].ctx == ctx;
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---- the wrapped driver calls ------------------------------------------- */

#define REAL_OR(fn, ...) (fp_shim_init() && fp_real.fn ? fp_real.fn(__VA_ARGS__) \
                                                       : CUDA_ERROR_NOT_INITIALIZED)

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUresult r = REAL_OR(cuStreamCreate, phStream, Flags);
    if (r == CUDA_SUCCESS)
        add(*phStream, Flags);
    return r;
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    CUresult r = REAL_OR(cuStreamCreateWithPriority, phStream, flags, priority);
    if (r == CUDA_SUCCESS)
        add(*phStream, flags);
    return r;
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    if (fp_shim_init())
        drop(hStream);
    return REAL_OR(cuStreamDestroy_v2, hStream);
}

CUresult cuStreamDestroy(CUstream hStream)
{
    if (fp_shim_init())
        drop(hStream);
    return REAL_OR(cuStreamDestroy, hStream);
}

static CUresult began(CUresult r)
{
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&captures, 1);
    return r;
}

static bool is_capturing(fp_PFN_cuStreamIsCapturing query, CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return query && query(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A capture that was under way is over whatever the result: an
 * invalidated capture ends with an error. */
static CUresult ended(bool was, CUresult r)
{
    if (was && atomic_load(&captures) > 0)
        atomic_fetch_sub(&captures, 1);
    return r;
}

CUresult cuStreamBeginCapture(CUstream hStream)
{
    return began(REAL_OR(cuStreamBeginCapture, hStream));
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return began(REAL_OR(cuStreamBeginCapture_ptsz, hStream));
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return began(REAL_OR(cuStreamBeginCapture_v2, hStream, mode));
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return began(REAL_OR(cuStreamBeginCapture_v2_ptsz, hStream, mode));
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    bool was = fp_shim_init() && is_capturing(fp_real.cuStreamIsCapturing, hStream);
    return ended(was, REAL_OR(cuStreamEndCapture, hStream, phGraph));
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    bool was = fp_shim_init() && is_capturing(fp_real.cuStreamIsCapturing_ptsz, hStream);
    return ended(was, REAL_OR(cuStreamEndCapture_ptsz, hStream, phGraph));
}
