/* simdev/sim_graph.c: the stream-capture calls - begin, end, queries - and
 * the graphs they produce.
 *
 * The capture state and its rules (what a capture is, which calls
 * invalidate it) are in sim_capture.c; this file resolves the stream of
 * each call, and keeps the rules of ending one (end_checks).  A captured
 * graph is only counted nodes: launching it does nothing (sim_nodes.c
 * builds, launches and destroys graphs).  A graph handed out by
 * cuStreamEndCapture is on g_sim.graphs until cuGraphDestroy; an
 * invalidated capture's graph is freed at its end.
 */
#include "sim.h"

#include <stdlib.h>

/* ---- API: begin and end -------------------------------------------------------- */

static CUresult capture_new(sim_stream *s, CUstreamCaptureMode mode)
{
    sim_capture *cap = calloc(1, sizeof *cap);
    sim_graph *g = calloc(1, sizeof *g);
    if (cap == NULL || g == NULL) {
        free(cap);
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cap->id = ++g_sim.next_id;
    cap->mode = mode;
    cap->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    cap->origin = s;
    cap->thread = pthread_self();
    cap->graph = g;
    g->id = cap->id;
    s->cap = cap;
    return CUDA_SUCCESS;
}

static CUresult begin_capture(CUstream h, bool pt, CUstreamCaptureMode mode)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS && s->kind == SIM_STREAM_LEGACY)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (rc == CUDA_SUCCESS && s->cap != NULL)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS)
        rc = capture_new(s, mode);
    sim_unlock();
    return rc;
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, false, mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, true, mode);
}

CUresult cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, false, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return begin_capture(hStream, true, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static CUresult end_checks(const sim_stream *s)
{
    const sim_capture *cap = s->cap;
    if (cap == NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (cap->origin != s)
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(cap->thread, pthread_self()))
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    return CUDA_SUCCESS;
}

static CUresult end_capture(CUstream h, bool pt, CUgraph *phGraph)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && phGraph == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS)
        rc = end_checks(s);
    if (rc == CUDA_SUCCESS) {
        bool valid = s->cap->status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
        sim_graph *g = sim_capture_end(s->cap);
        if (valid) {
            g->next = g_sim.graphs;
            g_sim.graphs = g;
        } else {
            free(g);
            g = NULL;
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        *phGraph = (CUgraph)g;
    }
    sim_unlock();
    return rc;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, false, phGraph);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, true, phGraph);
}

/* ---- API: queries ----------------------------------------------------------------- */

typedef struct capture_info {
    CUstreamCaptureStatus *status;
    cuuint64_t *id;
    CUgraph *graph;
    const CUgraphNode **deps;
    const CUgraphEdgeData **edges;
    size_t *ndeps;
} capture_info;

static void fill_info(const sim_stream *s, const capture_info *o)
{
    const sim_capture *cap = s->cap;
    *o->status = cap ? cap->status : CU_STREAM_CAPTURE_STATUS_NONE;
    if (cap != NULL && o->id != NULL)
        *o->id = cap->id;
    if (o->graph != NULL)
        *o->graph = cap ? (CUgraph)cap->graph : NULL;
    if (o->deps != NULL)
        *o->deps = NULL;
    if (o->edges != NULL)
        *o->edges = NULL;
    if (o->ndeps != NULL)
        *o->ndeps = 0;
}

static CUresult capture_query(CUstream h, bool pt, const capture_info *o)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && o->status == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(h, pt, &s, NULL);
    if (rc == CUDA_SUCCESS && s->kind == SIM_STREAM_LEGACY && sim_capture_on_dev(s->dev, true))
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (rc == CUDA_SUCCESS)
        fill_info(s, o);
    sim_unlock();
    return rc;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *st)
{
    capture_info o = {.status = st};
    return capture_query(hStream, false, &o);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *st)
{
    capture_info o = {.status = st};
    return capture_query(hStream, true, &o);
}

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    capture_info o = {.status = st, .id = id};
    return capture_query(hStream, false, &o);
}

CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    capture_info o = {.status = st, .id = id};
    return capture_query(hStream, true, &o);
}

CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id,
                                   CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    capture_info o = {st, id, graph, deps, NULL, ndeps};
    return capture_query(hStream, false, &o);
}

CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id,
                                        CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    capture_info o = {st, id, graph, deps, NULL, ndeps};
    return capture_query(hStream, true, &o);
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id,
                                   CUgraph *graph, const CUgraphNode **deps,
                                   const CUgraphEdgeData **edges, size_t *ndeps)
{
    capture_info o = {st, id, graph, deps, edges, ndeps};
    return capture_query(hStream, false, &o);
}

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id,
                                        CUgraph *graph, const CUgraphNode **deps,
                                        const CUgraphEdgeData **edges, size_t *ndeps)
{
    capture_info o = {st, id, graph, deps, edges, ndeps};
    return capture_query(hStream, true, &o);
}
