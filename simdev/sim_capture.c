/* simdev/sim_capture.c: stream capture and the graphs it produces.
 *
 * A capture belongs to the stream that began it (origin); streams that
 * wait on an event recorded in the capture join it (their cap points to
 * the same structure).  Work submitted to a capturing stream is counted as
 * a graph node and not executed; cuMemAllocAsync there makes a graph
 * allocation (sim_mem.c).  Graphs are only counted nodes: cuGraphLaunch is
 * not simulated, cuGraphDestroy frees the handle.
 *
 * Capture-mode rules (public CUDA semantics), for "potentially unsafe"
 * calls such as cuMemAlloc, cuMemFree, cuCtxSynchronize: the calling
 * thread's mode (cuThreadExchangeStreamCaptureMode, default GLOBAL)
 * decides:
 *   GLOBAL:       prohibited while this thread has a non-relaxed capture
 *                 or any thread has a GLOBAL capture;
 *   THREAD_LOCAL: prohibited while this thread has a non-relaxed capture;
 *   RELAXED:      never prohibited.
 * A prohibited call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
 * invalidates the captures that caused it.  Ending a capture that is not
 * relaxed must happen on the thread that began it.
 *
 * Everything here runs with g_sim.lock held.
 */
#include "sim.h"

#include <stdlib.h>

static _Thread_local CUstreamCaptureMode tl_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Iterates the captures in progress: each once, through its origin. */
#define FOR_EACH_CAPTURE(cap, body)                                         \
  for (int d_ = 0; d_ < g_sim.ndev; d_++)                                   \
    for (sim_stream *s_ = g_sim.dev[d_].streams; s_ != NULL; s_ = s_->next) \
      if (s_->cap != NULL && s_->cap->origin == s_) {                       \
        sim_capture *cap = s_->cap;                                         \
        body                                                                \
      }

sim_capture *sim_capture_find(unsigned long long id)
{
  FOR_EACH_CAPTURE(cap, if (cap->id == id) return cap;)
  return NULL;
}

void sim_capture_invalidate(sim_capture *cap)
{
  cap->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

void sim_capture_add_node(sim_capture *cap) { cap->graph->nodes++; }

static bool own_capture(const sim_capture *cap)
{
  return cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
         pthread_equal(cap->thread, pthread_self());
}

CUresult sim_capture_unsafe_check(void)
{
  bool own = false, global = false;
  FOR_EACH_CAPTURE(cap, {
    own |= own_capture(cap);
    global |= cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  })
  bool by_global = tl_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && global;
  bool by_own = tl_mode != CU_STREAM_CAPTURE_MODE_RELAXED && own;
  if (!by_global && !by_own)
    return CUDA_SUCCESS;
  FOR_EACH_CAPTURE(cap, {
    if ((by_own && own_capture(cap)) ||
        (by_global && cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))
      sim_capture_invalidate(cap);
  })
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static bool dev_capturing(int dev, bool blocking_only)
{
  for (sim_stream *s = g_sim.dev[dev].streams; s != NULL; s = s->next)
    if (s->cap != NULL && (!blocking_only || sim_stream_blocking(s)))
      return true;
  return false;
}

CUresult sim_capture_conflict(int dev, bool blocking_only, CUresult err)
{
  if (!dev_capturing(dev, blocking_only))
    return CUDA_SUCCESS;
  for (sim_stream *s = g_sim.dev[dev].streams; s != NULL; s = s->next)
    if (s->cap != NULL && (!blocking_only || sim_stream_blocking(s)))
      sim_capture_invalidate(s->cap);
  return err;
}

/* Ends cap: every member leaves it; returns its graph (caller owns). */
static sim_graph *capture_end(sim_capture *cap)
{
  for (int d = 0; d < g_sim.ndev; d++)
    for (sim_stream *s = g_sim.dev[d].streams; s != NULL; s = s->next)
      if (s->cap == cap)
        s->cap = NULL;
  sim_graph *g = cap->graph;
  free(cap);
  return g;
}

void sim_capture_detach(sim_stream *s)
{
  if (s->cap == NULL)
    return;
  if (s->cap->origin == s)
    free(capture_end(s->cap));
  else
    s->cap = NULL;
}

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
  if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      !pthread_equal(cap->thread, pthread_self()))
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
    sim_graph *g = capture_end(s->cap);
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
  if (rc == CUDA_SUCCESS && s->kind == SIM_STREAM_LEGACY &&
      dev_capturing(s->dev, true))
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

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *st,
                                cuuint64_t *id)
{
  capture_info o = {.status = st, .id = id};
  return capture_query(hStream, false, &o);
}

CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                     CUstreamCaptureStatus *st, cuuint64_t *id)
{
  capture_info o = {.status = st, .id = id};
  return capture_query(hStream, true, &o);
}

CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *st,
                                   cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, size_t *ndeps)
{
  capture_info o = {st, id, graph, deps, NULL, ndeps};
  return capture_query(hStream, false, &o);
}

CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                        CUstreamCaptureStatus *st,
                                        cuuint64_t *id, CUgraph *graph,
                                        const CUgraphNode **deps,
                                        size_t *ndeps)
{
  capture_info o = {st, id, graph, deps, NULL, ndeps};
  return capture_query(hStream, true, &o);
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *st,
                                   cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps,
                                   const CUgraphEdgeData **edges, size_t *ndeps)
{
  capture_info o = {st, id, graph, deps, edges, ndeps};
  return capture_query(hStream, false, &o);
}

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                        CUstreamCaptureStatus *st,
                                        cuuint64_t *id, CUgraph *graph,
                                        const CUgraphNode **deps,
                                        const CUgraphEdgeData **edges,
                                        size_t *ndeps)
{
  capture_info o = {st, id, graph, deps, edges, ndeps};
  return capture_query(hStream, true, &o);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
  if (mode == NULL || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode old = tl_mode;
  tl_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
  CUresult rc = sim_check_init();
  if (rc != CUDA_SUCCESS)
    return rc;
  sim_lock();
  sim_graph **pp = &g_sim.graphs;
  while (*pp != NULL && (CUgraph)*pp != hGraph)
    pp = &(*pp)->next;
  sim_graph *g = *pp;
  if (g != NULL)
    *pp = g->next;
  sim_unlock();
  free(g);
  return g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
