/* shim_capture.c - the wrapped graph-capture calls of the driver API
 * (cuStreamBeginCapture*, cuStreamEndCapture*, cuStreamDestroy*,
 * cuThreadExchangeStreamCaptureMode): an interposer that tells the capture
 * registry (shim_streams.c) when a capture begins and when it is over, and
 * the pools' deferral (shim_defer.c) when a stream's handle stops naming
 * it.
 *
 * Invariants: a begin-capture call runs with the capture gate shut, so no
 * fence is in flight when the capture starts; a capture is over only when
 * its end succeeds, when the driver says after a failed end that the
 * stream captures no more, or when its stream is destroyed.  Every call
 * returns what the driver returned.
 */
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include "shim_streams.h"

#define REAL_OR(fn, ...)                                                                           \
    (fp_shim_init() && fp_real.fn ? fp_real.fn(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED)

/* Whether the stream names the calling thread's per-thread stream (NULL
 * means it in the _ptsz entry points). */
static bool per_thread(CUstream s, bool ptsz)
{
    return s == CU_STREAM_PER_THREAD || (ptsz && !s);
}

/* The capture's context: the one current, its device, and whether it is
 * the device's primary context (then a reset of the device ends it).
 * Asked before the capture begins: none of these calls may touch it. */
static void describe(fp_capture_desc *d, CUstream s, bool ptsz, CUstreamCaptureMode mode)
{
    *d = (fp_capture_desc){
        .per_thread = per_thread(s, ptsz), .thread = pthread_self(), .mode = mode};
    d->stream = d->per_thread ? CU_STREAM_PER_THREAD : s;
    if (!fp_shim_init() || fp_real.cuCtxGetCurrent(&d->ctx) != CUDA_SUCCESS || !d->ctx ||
        fp_real.cuCtxGetDevice(&d->dev) != CUDA_SUCCESS) {
        d->ctx = NULL;
        return;
    }
    unsigned flags = 0;
    int active = 0;
    CUcontext primary = NULL;
    if (fp_real.cuDevicePrimaryCtxGetState &&
        fp_real.cuDevicePrimaryCtxGetState(d->dev, &flags, &active) == CUDA_SUCCESS && active &&
        fp_real.cuDevicePrimaryCtxRetain &&
        fp_real.cuDevicePrimaryCtxRetain(&primary, d->dev) == CUDA_SUCCESS) {
        d->primary = primary == d->ctx;
        fp_real.cuDevicePrimaryCtxRelease_v2(d->dev);
    }
}

static CUresult begin(CUstream s, bool ptsz, CUstreamCaptureMode mode, CUresult (*call)(void *),
                      void *args)
{
    fp_capture_desc d;
    describe(&d, s, ptsz, mode);
    fp_capture_begin_shut();
    CUresult r = call(args);
    fp_capture_begin_open(r == CUDA_SUCCESS ? &d : NULL);
    return r;
}

typedef struct begin_args {
    CUstream s;
    CUstreamCaptureMode mode;
    CUgraph graph;
    const CUgraphNode *deps;
    const CUgraphEdgeData *edges;
    size_t ndeps;
} begin_args;

static CUresult call_v1(void *p)
{
    return REAL_OR(cuStreamBeginCapture, ((begin_args *)p)->s);
}

static CUresult call_v1_ptsz(void *p)
{
    return REAL_OR(cuStreamBeginCapture_ptsz, ((begin_args *)p)->s);
}

static CUresult call_v2(void *p)
{
    begin_args *a = p;
    return REAL_OR(cuStreamBeginCapture_v2, a->s, a->mode);
}

static CUresult call_v2_ptsz(void *p)
{
    begin_args *a = p;
    return REAL_OR(cuStreamBeginCapture_v2_ptsz, a->s, a->mode);
}

static CUresult call_to_graph(void *p)
{
    begin_args *a = p;
    return REAL_OR(cuStreamBeginCaptureToGraph, a->s, a->graph, a->deps, a->edges, a->ndeps,
                   a->mode);
}

static CUresult call_to_graph_ptsz(void *p)
{
    begin_args *a = p;
    return REAL_OR(cuStreamBeginCaptureToGraph_ptsz, a->s, a->graph, a->deps, a->edges, a->ndeps,
                   a->mode);
}

/* The first cuStreamBeginCapture has no mode: global, the strictest. */
CUresult cuStreamBeginCapture(CUstream hStream)
{
    begin_args a = {.s = hStream, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL};
    return begin(hStream, false, a.mode, call_v1, &a);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    begin_args a = {.s = hStream, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL};
    return begin(hStream, true, a.mode, call_v1_ptsz, &a);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    begin_args a = {.s = hStream, .mode = mode};
    return begin(hStream, false, mode, call_v2, &a);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    begin_args a = {.s = hStream, .mode = mode};
    return begin(hStream, true, mode, call_v2_ptsz, &a);
}

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode)
{
    begin_args a = {hStream, mode, hGraph, dependencies, dependencyData, numDependencies};
    return begin(hStream, false, mode, call_to_graph, &a);
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData,
                                          size_t numDependencies, CUstreamCaptureMode mode)
{
    begin_args a = {hStream, mode, hGraph, dependencies, dependencyData, numDependencies};
    return begin(hStream, true, mode, call_to_graph_ptsz, &a);
}

/* ---- the end of a capture ------------------------------------------------------ */

static bool still_capturing(fp_PFN_cuStreamIsCapturing query, CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return !query || query(s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A failed end (no graph pointer, the wrong thread, a stream that only
 * joined the capture) leaves the capture under way: it is over only when
 * the call succeeded or the driver says the stream captures no more (an
 * invalidated capture ends with an error). */
static CUresult end(CUstream s, bool ptsz, CUgraph *phGraph)
{
    if (!fp_shim_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    fp_PFN_cuStreamEndCapture real =
        ptsz ? fp_real.cuStreamEndCapture_ptsz : fp_real.cuStreamEndCapture;
    fp_PFN_cuStreamIsCapturing query =
        ptsz ? fp_real.cuStreamIsCapturing_ptsz : fp_real.cuStreamIsCapturing;
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool pt = per_thread(s, ptsz);
    uint64_t token = fp_capture_lookup(pt ? CU_STREAM_PER_THREAD : s, pt);
    CUresult r = real(s, phGraph);
    bool over = r == CUDA_SUCCESS || (token && !still_capturing(query, s));
    fp_capture_over(token, over);
    return r;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end(hStream, false, phGraph);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end(hStream, true, phGraph);
}

/* ---- streams destroyed while capturing ------------------------------------------ */

static bool forget_stream(fp_ctx_pool *d, void *s)
{
    if (d->defer)
        fp_defer_stream_gone(d->defer, (CUstream)s);
    fp_pool_front_stream_gone(d->pool, (uint64_t)(uintptr_t)s);
    return false; /* every pool */
}

/* The driver ends the capture a destroyed stream began; a capture it only
 * joined goes on (the registry holds the streams that began one).  The
 * deferral forgets the handle before the driver may give it to a new
 * stream. */
static CUresult destroy(fp_PFN_cuStreamDestroy_v2 real, CUstream s)
{
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool user = s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
    if (user)
        fp_pools_put(fp_pools_find(forget_stream, (void *)s));
    uint64_t token = user ? fp_capture_lookup(s, false) : 0;
    CUresult r = real(s);
    if (token)
        fp_capture_over(token, r == CUDA_SUCCESS);
    return r;
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    return destroy(fp_shim_init() ? fp_real.cuStreamDestroy_v2 : NULL, hStream);
}

CUresult cuStreamDestroy(CUstream hStream)
{
    return destroy(fp_shim_init() ? fp_real.cuStreamDestroy : NULL, hStream);
}

/* ---- the calling thread's capture mode ----------------------------------------- */

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode want = mode ? *mode : CU_STREAM_CAPTURE_MODE_GLOBAL;
    CUresult r = REAL_OR(cuThreadExchangeStreamCaptureMode, mode);
    if (r == CUDA_SUCCESS)
        fp_capture_thread_mode(want);
    return r;
}
