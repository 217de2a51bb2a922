/* trace_events.c - the trace in memory: events pushed by the readers,
 * freed by the callers (fp_trace.h), each with the slot of its id that a
 * replay keeps the id's address in.
 *
 * Invariants: the arrays grow through base/fp_vec; a failed push leaves
 * the trace as it was; an id is in the map iff an allocation of it was
 * pushed after its last free, and then it holds the id's slot (+1: a
 * map value is never 0); a slot is either an id's in the map or on the
 * free list, never both, so two ids live at once never share one. */
#include "fp_trace.h"
#include "fp_hmap.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdlib.h>

struct fp_trace_ids {
    fp_hmap map;     /* id -> slot + 1                 */
    fp_hmap threads; /* a row's thread -> its index + 1 */
    uint32_t *spare; /* slots given back, reused first */
    size_t nspare, spare_cap;
};

static int ids_ready(fp_trace *t)
{
    if (t->ids)
        return 0;
    fp_trace_ids *d = calloc(1, sizeof *d);
    if (!d || fp_hmap_init(&d->map, 0) || fp_hmap_init(&d->threads, 0)) {
        if (d) {
            fp_hmap_fini(&d->map);
            fp_hmap_fini(&d->threads);
        }
        free(d);
        return ENOMEM;
    }
    t->ids = d;
    return 0;
}

/* A slot for a new live id: a spare one, or the next. */
static int take_slot(fp_trace *t, uint32_t *out)
{
    fp_trace_ids *d = t->ids;
    if (d->nspare) {
        *out = d->spare[--d->nspare];
        return 0;
    }
    if (t->nslots >= FP_TRACE_NO_SLOT - 1)
        return EOVERFLOW;
    *out = (uint32_t)t->nslots++;
    return 0;
}

/* The slot of event (op, id), updating the map; the map and the spare
 * list are changed only once nothing can fail. */
static int slot_of(fp_trace *t, char op, uint64_t id, uint32_t *out)
{
    fp_trace_ids *d = t->ids;
    *out = FP_TRACE_NO_SLOT;
    if (op != 'a' && op != 'f')
        return 0;
    if (fp_hmap_make_room(&d->map))
        return ENOMEM;
    uint32_t *sp = fp_vec_grow(d->spare, &d->spare_cap, d->nspare + 1, sizeof *sp, 256);
    if (!sp)
        return ENOMEM;
    d->spare = sp;
    size_t i = fp_hmap_slot(&d->map, id);
    uint64_t held = fp_hmap_at(&d->map, i);
    if (held) {
        *out = (uint32_t)(held - 1);
        if (op == 'f') {
            fp_hmap_erase(&d->map, i);
            d->spare[d->nspare++] = *out;
        }
        return 0;
    }
    if (op == 'f')
        return 0; /* not live: no slot */
    int err = take_slot(t, out);
    if (!err)
        fp_hmap_fill(&d->map, i, id, (uint64_t)*out + 1);
    return err;
}

int fp_trace_push(fp_trace *t, char op, uint64_t id, uint64_t size, uint32_t stream)
{
    fp_tracer_event *nv = fp_vec_grow(t->ev, &t->cap, t->n + 1, sizeof *nv, 4096);
    if (!nv)
        return ENOMEM;
    t->ev = nv;
    uint32_t *ns = fp_vec_grow(t->slot, &t->slot_cap, t->n + 1, sizeof *ns, 4096);
    if (!ns)
        return ENOMEM;
    t->slot = ns;
    uint32_t slot;
    int err = ids_ready(t);
    if (!err)
        err = slot_of(t, op, id, &slot);
    if (err)
        return err;
    t->slot[t->n] = slot;
    t->ev[t->n++] = (fp_tracer_event){.id = id, .size = size, .stream = stream, .op = op};
    return 0;
}

int fp_trace_set_thread(fp_trace *t, uint64_t thread)
{
    fp_hmap *m = &t->ids->threads;
    if (fp_hmap_make_room(m))
        return ENOMEM;
    size_t i = fp_hmap_slot(m, thread);
    uint64_t k = fp_hmap_at(m, i);
    if (!k) {
        if (t->threads >= FP_TRACE_MAX_THREADS)
            return E2BIG;
        k = ++t->threads;
        fp_hmap_fill(m, i, thread, k);
    }
    t->ev[t->n - 1].thread = (uint16_t)(k - 1);
    return 0;
}

int fp_trace_push_segment(fp_trace *t, uint64_t addr, uint64_t size)
{
    fp_trace_seg *v = fp_vec_grow(t->segs, &t->segs_cap, t->nsegs + 1, sizeof *v, 64);
    if (!v)
        return ENOMEM;
    t->segs = v;
    v[t->nsegs++] = (fp_trace_seg){addr, size};
    return 0;
}

void fp_trace_free(fp_trace *t)
{
    free(t->segs);
    if (t->ids) {
        fp_hmap_fini(&t->ids->map);
        fp_hmap_fini(&t->ids->threads);
        free(t->ids->spare);
        free(t->ids);
    }
    free(t->slot);
    free(t->ev);
    *t = (fp_trace){0};
}
