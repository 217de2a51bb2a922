/* simdev/sim_capture.c: the state of stream captures and their rules.
 *
 * A capture belongs to the stream that began it (origin); streams that
 * wait on an event recorded in the capture join it (their cap points to
 * the same structure).  Work submitted to a capturing stream is counted as
 * a node of the capture's graph and not executed; cuMemAllocAsync there
 * makes a graph allocation (sim_mem.c).  The calls that begin, end and
 * query a capture are in sim_graph.c; this file is what the streams,
 * events and memory calls below them consult.
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
 * Everything here runs with g_sim.lock held (but the mode exchange, which
 * is per thread), and uses only the state and the stream predicates of
 * sim_op.c.
 */
#include "sim.h"

#include <stdlib.h>

static _Thread_local CUstreamCaptureMode tl_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Iterates the captures in progress: each once, through its origin. */
#define FOR_EACH_CAPTURE(cap, body)                                                                \
    for (int d_ = 0; d_ < g_sim.ndev; d_++)                                                        \
        for (sim_stream *s_ = g_sim.dev[d_].streams; s_ != NULL; s_ = s_->next)                    \
            if (s_->cap != NULL && s_->cap->origin == s_) {                                        \
                sim_capture *cap = s_->cap;                                                        \
                body                                                                               \
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

void sim_capture_add_node(sim_capture *cap)
{
    cap->graph->nodes++;
}

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

bool sim_capture_on_dev(int dev, bool blocking_only)
{
    for (sim_stream *s = g_sim.dev[dev].streams; s != NULL; s = s->next)
        if (s->cap != NULL && (!blocking_only || sim_stream_blocking(s)))
            return true;
    return false;
}

CUresult sim_capture_conflict(int dev, bool blocking_only, CUresult err)
{
    if (!sim_capture_on_dev(dev, blocking_only))
        return CUDA_SUCCESS;
    for (sim_stream *s = g_sim.dev[dev].streams; s != NULL; s = s->next)
        if (s->cap != NULL && (!blocking_only || sim_stream_blocking(s)))
            sim_capture_invalidate(s->cap);
    return err;
}

/* Ends cap: every member leaves it; returns its graph (caller owns). */
sim_graph *sim_capture_end(sim_capture *cap)
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
        free(sim_capture_end(s->cap));
    else
        s->cap = NULL;
}

/* ---- API: the calling thread's mode ------------------------------------- */

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (mode == NULL || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = tl_mode;
    tl_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
