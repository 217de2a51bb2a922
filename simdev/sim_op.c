/* simdev/sim_op.c: the objects a stream's queue holds - operations, their
 * dependencies - and the references among streams, operations and events.
 *
 * Reference rules (sim.h has the structs): a stream is freed when its refs
 * drop to 0 (its device list, each dependency and each event recording it
 * hold one); an event is freed when its refs drop to 0 (the live list and
 * each queued record op hold one), and then drops its references on
 * streams.  An operation owns its dependencies and, for SIM_OP_EVENT, a
 * reference on its event.  The counts are under g_sim.lock (a new op
 * is not shared yet).  This file calls no other file of simdev/.
 */
#include "sim.h"

#include <stdlib.h>
#include <time.h>

/* ---- references and operations ------------------------------------------- */

void sim_stream_ref(sim_stream *s)
{
    s->refs++;
}

/* Not inlined: callers that hold a reference of their own call this twice
 * in a row (sim_stream_wait's, then theirs), and gcc -O3, seeing the free
 * of the first call inline, warns about the second (-Wuse-after-free). */
__attribute__((noinline)) void sim_stream_unref(sim_stream *s)
{
    if (--s->refs > 0)
        return;
    pthread_cond_destroy(&s->work);
    free(s);
}

sim_op *sim_op_new(sim_op_kind kind)
{
    sim_op *op = calloc(1, sizeof *op);
    if (op != NULL)
        op->kind = kind;
    return op;
}

void sim_op_free(sim_op *op)
{
    for (int i = 0; i < op->ndeps; i++)
        sim_stream_unref(op->deps[i].stream);
    if (op->kind == SIM_OP_EVENT && op->u.event != NULL)
        sim_event_unref(op->u.event);
    free(op->deps);
    free(op);
}

bool sim_op_add_dep(sim_op *op, sim_stream *s, unsigned long long ticket)
{
    sim_dep *nd = realloc(op->deps, (size_t)(op->ndeps + 1) * sizeof *nd);
    if (nd == NULL)
        return false;
    op->deps = nd;
    nd[op->ndeps].stream = s;
    nd[op->ndeps].ticket = ticket;
    op->ndeps++;
    sim_stream_ref(s);
    return true;
}

bool sim_stream_idle(const sim_stream *s)
{
    return s->done == s->enq;
}

bool sim_stream_blocking(const sim_stream *s)
{
    return s->kind != SIM_STREAM_LEGACY && !(s->flags & CU_STREAM_NON_BLOCKING);
}

/* ---- events: references and the record's timestamp ------------------------------ */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Drops e's context-event set (cuCtxRecordEvent) and its references. */
void sim_event_drop_set(sim_event *e)
{
    for (int i = 0; i < e->nset; i++)
        sim_stream_unref(e->set[i].stream);
    free(e->set);
    e->set = NULL;
    e->nset = 0;
}

void sim_event_unref(sim_event *e)
{
    if (--e->refs > 0)
        return;
    if (e->rec_stream != NULL)
        sim_stream_unref(e->rec_stream);
    sim_event_drop_set(e);
    free(e);
}

void sim_event_fire(sim_event *e, const sim_op *op, const sim_stream *s)
{
    if (e->rec_stream != s || e->rec_ticket != op->ticket)
        return; /* re-recorded since */
    e->time_ns = now_ns();
    e->timed = true;
}
