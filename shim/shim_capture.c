/* shim_capture.c - the wrapped graph-capture calls of the driver API
 * (cuStreamBeginCapture*, cuStreamEndCapture*): an interposer that tells
 * the capture registry (shim_streams.c) when a capture begins and ends.
 *
 * Invariant: a begin-capture call runs with the capture gate shut, so no
 * fence is in flight when the capture starts; an end-capture call ends a
 * capture that was under way on its stream whatever it returns.
 */
#include "shim_life.h"
#include "shim_real.h"
#include "shim_streams.h"

#define REAL_OR(fn, ...) (fp_shim_init() && fp_real.fn ? fp_real.fn(__VA_ARGS__) \
                                                       : CUDA_ERROR_NOT_INITIALIZED)

/* Runs a begin-capture call with the gate shut: no fence is in flight
 * when the capture starts. */
#define BEGIN(call)                                                         \
    do {                                                                    \
        fp_capture_begin_shut();                                            \
        CUresult r_ = (call);                                               \
        fp_capture_begin_open(r_ == CUDA_SUCCESS);                          \
        return r_;                                                          \
    } while (0)

static bool is_capturing(fp_PFN_cuStreamIsCapturing query, CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return query && query(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static CUresult ended(bool was, CUresult r)
{
    fp_capture_ended(was);
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
