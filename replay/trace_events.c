/* trace_events.c - the trace in memory: events pushed by the readers,
 * freed by the callers (fp_trace.h).  Invariant: the array grows by
 * through base/fp_vec; a failed push leaves the trace as it was. */
#include "fp_trace.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdlib.h>

int fp_trace_push(fp_trace *t, char op, uint64_t id, uint64_t size, uint32_t stream)
{
    fp_tracer_event *nv = fp_vec_grow(t->ev, &t->cap, t->n + 1, sizeof *nv, 4096);
    if (!nv)
        return ENOMEM;
    t->ev = nv;
    t->ev[t->n++] = (fp_tracer_event){id, size, stream, op};
    return 0;
}

void fp_trace_free(fp_trace *t)
{
    free(t->ev);
    *t = (fp_trace){0};
}
