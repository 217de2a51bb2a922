/* simdev/sim_event.c: events and cross-stream waits.
 *
 * An event remembers its last record as (stream, ticket): it is complete
 * when that stream has completed that ticket, so events complete in stream
 * order by construction.  A never-recorded event is complete.  Recording
 * enqueues a SIM_OP_EVENT that only timestamps the event when the worker
 * reaches it.  cuStreamWaitEvent turns into a dependency on that same
 * (stream, ticket).
 *
 * Lifetime: refs counts the live-list entry and each queued record op, so
 * an event destroyed with a record pending is freed after it runs.  An
 * event holds a reference on the stream of its last record.  The freeing
 * and the record's timestamp, which a stream's worker reaches, are in
 * sim_op.c; the device barrier's use by new work is in sim_stream.c.
 *
 * Recording on a capturing stream marks the event as captured (cap_id);
 * a stream that then waits on it joins the capture, as in the fork/join
 * pattern of multi-stream capture.
 *
 * Context events (CUDA 12.5): cuCtxRecordEvent captures the work of every
 * stream of the context's device queued so far, destroyed streams still
 * draining included, as a set of (stream, ticket); cuCtxWaitEvent adds
 * that set to the device's barrier, which every operation submitted later
 * on any stream of the device depends on.  A simulated context shares its
 * device's streams, so both cover at least what the driver's do.
 * FRAGPOOL_SIM_FENCE_US makes cuCtxWaitEvent take that long on the host,
 * outside the simulator's lock (on an H200 it costs 0.6 us with no busy
 * stream and 6.5 us with 64), so that tests can meet the moment when
 * another thread's fence is still being made.
 */
#include "sim.h"

#include <stdlib.h>
#include <unistd.h>

CUresult sim_event_lookup(CUevent h, sim_event **out)
{
    for (sim_event *e = g_sim.events; e != NULL; e = e->next)
        if ((CUevent)e == h) {
            *out = e;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

static bool event_complete(const sim_event *e)
{
    for (int i = 0; i < e->nset; i++)
        if (e->set[i].stream->done < e->set[i].ticket)
            return false;
    return e->rec_stream == NULL || e->rec_stream->done >= e->rec_ticket;
}

/* The event's last record is part of a capture still in progress. */
static bool event_captured(const sim_event *e)
{
    return e->cap_id != 0 && sim_capture_find(e->cap_id) != NULL;
}

static void set_record(sim_event *e, sim_stream *s, unsigned long long ticket)
{
    sim_event_drop_set(e);
    if (s != NULL)
        sim_stream_ref(s);
    if (e->rec_stream != NULL)
        sim_stream_unref(e->rec_stream);
    e->rec_stream = s;
    e->rec_ticket = ticket;
    e->timed = false;
}

/* ---- API: lifetime ----------------------------------------------------------- */

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    CUresult rc = sim_check_init();
    bool ipc_ok = !(Flags & CU_EVENT_INTERPROCESS) || (Flags & CU_EVENT_DISABLE_TIMING);
    if (rc == CUDA_SUCCESS && (phEvent == NULL || (Flags & ~7u) || !ipc_ok))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_ctx *c = NULL;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_current(&c);
    sim_event *e = rc == CUDA_SUCCESS ? calloc(1, sizeof *e) : NULL;
    if (rc == CUDA_SUCCESS && e == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS)
        return rc;
    e->flags = Flags;
    e->refs = 1;
    sim_lock();
    e->next = g_sim.events;
    g_sim.events = e;
    sim_unlock();
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_event **pp = &g_sim.events;
    while (*pp != NULL && (CUevent)*pp != hEvent)
        pp = &(*pp)->next;
    sim_event *e = *pp;
    if (e == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        *pp = e->next;
        sim_event_unref(e);
    }
    sim_unlock();
    return rc;
}

CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

/* ---- API: record ---------------------------------------------------------------- */

/* Records e into s's capture instead of running it (lock held). */
static CUresult record_captured(sim_event *e, sim_stream *s)
{
    if (s->cap->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sim_capture_add_node(s->cap);
    set_record(e, NULL, 0);
    e->cap_id = s->cap->id;
    return CUDA_SUCCESS;
}

static CUresult record_locked(sim_event *e, sim_stream *s)
{
    if (s->cap != NULL)
        return record_captured(e, s);
    sim_op *op = sim_op_new(SIM_OP_EVENT);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.event = e;
    e->refs++;
    CUresult rc = sim_stream_submit(s, op); /* frees op on failure */
    if (rc != CUDA_SUCCESS)
        return rc;
    set_record(e, s, s->enq); /* the op cannot have run: we hold the lock */
    e->cap_id = 0;
    e->recorded = true;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent h, CUstream hs, bool pt, unsigned flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_event *e = NULL;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_event_lookup(h, &e);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_resolve(hs, pt, &s, NULL);
    if (rc == CUDA_SUCCESS)
        rc = record_locked(e, s);
    sim_unlock();
    return rc;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, false, 0);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, true, 0);
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, false, flags);
}

CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, true, flags);
}

/* ---- API: query, synchronize, timing --------------------------------------------- */

static CUresult event_wait(CUevent h, bool block)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_event *e = NULL;
    sim_lock();
    rc = sim_event_lookup(h, &e);
    if (rc == CUDA_SUCCESS && event_captured(e))
        rc = CUDA_ERROR_CAPTURED_EVENT;
    if (rc == CUDA_SUCCESS && !event_complete(e)) {
        if (!block)
            rc = CUDA_ERROR_NOT_READY;
        for (int i = 0; block && i < e->nset; i++)
            sim_stream_wait(e->set[i].stream, e->set[i].ticket);
        if (block && e->rec_stream != NULL)
            sim_stream_wait(e->rec_stream, e->rec_ticket);
    }
    if (rc == CUDA_SUCCESS && block && e->rec_stream != NULL)
        sim_pool_synced(e->rec_stream->dev); /* its device's pool */
    sim_unlock();
    return rc;
}

CUresult cuEventQuery(CUevent hEvent)
{
    return event_wait(hEvent, false);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    return event_wait(hEvent, true);
}

static CUresult timing_state(const sim_event *e)
{
    if ((e->flags & CU_EVENT_DISABLE_TIMING) || !e->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (event_captured(e))
        return CUDA_ERROR_CAPTURED_EVENT;
    return event_complete(e) && e->timed ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && pMilliseconds == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_event *a = NULL, *b = NULL;
    sim_lock();
    rc = sim_event_lookup(hStart, &a);
    if (rc == CUDA_SUCCESS)
        rc = sim_event_lookup(hEnd, &b);
    if (rc == CUDA_SUCCESS)
        rc = timing_state(a);
    if (rc == CUDA_SUCCESS)
        rc = timing_state(b);
    if (rc == CUDA_SUCCESS)
        *pMilliseconds = (float)((double)(b->time_ns - a->time_ns) / 1e6);
    sim_unlock();
    return rc;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

/* ---- API: cross-stream waits ------------------------------------------------------ */

/* s waits for e's last record (lock held). */
static CUresult wait_locked(sim_stream *s, sim_event *e)
{
    sim_capture *cap = e->cap_id ? sim_capture_find(e->cap_id) : NULL;
    if (s->cap != NULL || cap != NULL) {
        if (s->cap == NULL && s->kind == SIM_STREAM_LEGACY)
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        if (s->cap == NULL)
            s->cap = cap; /* s joins the capture */
        sim_capture_add_node(s->cap);
        return CUDA_SUCCESS;
    }
    if (event_complete(e) || (e->rec_stream == s && e->nset == 0))
        return CUDA_SUCCESS;
    sim_op *op = sim_op_new(SIM_OP_WAIT);
    bool ok = op != NULL;
    for (int i = 0; ok && i < e->nset; i++)
        ok = sim_op_add_dep(op, e->set[i].stream, e->set[i].ticket);
    if (ok && e->rec_stream != NULL)
        ok = sim_op_add_dep(op, e->rec_stream, e->rec_ticket);
    if (!ok) {
        if (op != NULL)
            sim_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return sim_stream_submit(s, op);
}

static CUresult stream_wait_event(CUstream hs, bool pt, CUevent h, unsigned flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_event *e = NULL;
    sim_stream *s = NULL;
    sim_lock();
    rc = sim_stream_resolve(hs, pt, &s, NULL);
    if (rc == CUDA_SUCCESS)
        rc = sim_event_lookup(h, &e);
    if (rc == CUDA_SUCCESS)
        rc = wait_locked(s, e);
    sim_unlock();
    return rc;
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, false, hEvent, Flags);
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, true, hEvent, Flags);
}

/* ---- API: context events ----------------------------------------------------------- */

/* The busy streams of dev as (stream, ticket), each with a reference. */
static bool snapshot_busy(int dev, sim_dep **out, int *n)
{
    int k = 0;
    for (sim_stream *t = g_sim.dev[dev].streams; t != NULL; t = t->next)
        k += !sim_stream_idle(t);
    sim_dep *v = k ? calloc((size_t)k, sizeof *v) : NULL;
    if (k && v == NULL)
        return false;
    int i = 0;
    for (sim_stream *t = g_sim.dev[dev].streams; t != NULL && i < k; t = t->next)
        if (!sim_stream_idle(t)) {
            v[i] = (sim_dep){t, t->enq};
            sim_stream_ref(t);
            i++;
        }
    *out = v;
    *n = i;
    return true;
}

/* The context and event of a context-event call (lock held). */
static CUresult ctx_event_args(CUcontext hc, CUevent he, sim_ctx **c, sim_event **e)
{
    if (sim_driver_version() < 12050)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (hc == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = sim_ctx_from_handle(hc, c);
    if (rc == CUDA_SUCCESS)
        rc = sim_event_lookup(he, e);
    if (rc == CUDA_SUCCESS)
        rc = sim_capture_conflict((*c)->dev, false, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    return rc;
}

CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = NULL;
    sim_event *e = NULL;
    sim_dep *set = NULL;
    int n = 0;
    sim_lock();
    rc = ctx_event_args(hCtx, hEvent, &c, &e);
    if (rc == CUDA_SUCCESS && !snapshot_busy(c->dev, &set, &n))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        set_record(e, NULL, 0);
        e->set = set;
        e->nset = n;
        e->cap_id = 0;
        e->recorded = true;
    }
    sim_unlock();
    return rc;
}

/* Adds e's work to dev's barrier, dropping entries already done. */
static bool barrier_add(sim_device *d, const sim_event *e)
{
    int k = 0;
    for (int i = 0; i < d->nbarrier; i++)
        if (d->barrier[i].stream->done < d->barrier[i].ticket)
            d->barrier[k++] = d->barrier[i];
        else
            sim_stream_unref(d->barrier[i].stream);
    d->nbarrier = k;
    sim_dep *nb = realloc(d->barrier, (size_t)(k + e->nset + 1) * sizeof *nb);
    if (nb == NULL)
        return false;
    d->barrier = nb;
    for (int i = 0; i < e->nset; i++) {
        nb[d->nbarrier++] = e->set[i];
        sim_stream_ref(e->set[i].stream);
    }
    if (e->rec_stream != NULL) {
        nb[d->nbarrier++] = (sim_dep){e->rec_stream, e->rec_ticket};
        sim_stream_ref(e->rec_stream);
    }
    return true;
}

CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = NULL;
    sim_event *e = NULL;
    sim_lock();
    rc = ctx_event_args(hCtx, hEvent, &c, &e);
    if (rc == CUDA_SUCCESS && event_captured(e))
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc == CUDA_SUCCESS && !event_complete(e) && !barrier_add(&g_sim.dev[c->dev], e))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    if (rc == CUDA_SUCCESS && g_sim.fence_us)
        usleep(g_sim.fence_us);
    return rc;
}
