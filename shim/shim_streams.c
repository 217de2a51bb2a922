/* shim_streams.c - whether any stream is being captured into a graph.
 *
 * While a capture is under way fragpool makes no fence and synchronizes
 * nothing: cuCtxRecordEvent, cuCtxWaitEvent and cuCtxSynchronize would
 * each break the program's graph.  So the capture calls are wrapped and
 * counted, and a fence is made only inside the gate: a read lock that
 * the begin-capture wrappers take for writing, so no capture can begin
 * while a fence is being made.
 *
 * Invariant: captures counts the captures begun through the driver API
 * since fragpool loaded and not yet ended.
 */
#include "shim.h"
#include <pthread.h>

static pthread_rwlock_t gate = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int captures;

bool fp_streams_capturing(void)
{
    return atomic_load_explicit(&captures, memory_order_acquire) > 0;
}

bool fp_capture_gate_enter(void)
{
    pthread_rwlock_rdlock(&gate);
    if (!fp_streams_capturing())
        return true;
    pthread_rwlock_unlock(&gate);
    return false;
}

void fp_capture_gate_leave(void)
{
    pthread_rwlock_unlock(&gate);
}

/* ---- the wrapped driver calls ------------------------------------------- */

#define REAL_OR(fn, ...) (fp_shim_init() && fp_real.fn ? fp_real.fn(__VA_ARGS__) \
                                                       : CUDA_ERROR_NOT_INITIALIZED)

/* Runs a begin-capture call with the gate shut: no fence is in flight
 * when the capture starts. */
#define BEGIN(call)                                                         \
    do {                                                                    \
        pthread_rwlock_wrlock(&gate);                                       \
        CUresult r_ = (call);                                               \
        if (r_ == CUDA_SUCCESS)                                             \
            atomic_fetch_add(&captures, 1);                                 \
        pthread_rwlock_unlock(&gate);                                       \
        return r_;                                                          \
    } while (0)

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
    BEGIN(REAL_OR(cuStreamBeginCapture, hStream));
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    BEGIN(REAL_OR(cuStreamBeginCapture_ptsz, hStream));
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    BEGIN(REAL_OR(cuStreamBeginCapture_v2, hStream, mode));
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    BEGIN(REAL_OR(cuStreamBeginCapture_v2_ptsz, hStream, mode));
}

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData,
                                     size_t numDependencies, CUstreamCaptureMode mode)
{
    BEGIN(REAL_OR(cuStreamBeginCaptureToGraph, hStream, hGraph, dependencies, dependencyData,
                  numDependencies, mode));
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData,
                                          size_t numDependencies, CUstreamCaptureMode mode)
{
    BEGIN(REAL_OR(cuStreamBeginCaptureToGraph_ptsz, hStream, hGraph, dependencies,
                  dependencyData, numDependencies, mode));
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
