/* replay_segs.c - a replay reserves its segments where the recorded run
 * got them (docs/replay.md, "Threads").
 *
 * The pool's best fit breaks ties between free blocks of one size by
 * address, and a thread's cache keeps particular blocks: a replay places
 * blocks exactly as the run did only when its segments lie in the same
 * order.  The driver's addresses need not increase (the simulated device's
 * come from the host's heap and mappings), so the shim writes each
 * segment it reserves ('s' rows) and the replay hands out those addresses
 * in order, as long as each reserve asks for the size the run reserved
 * next and the range is free; at the first one that does not, the replay
 * has left the run's path and takes its own addresses from then on, above
 * every recorded one.  A trace with no 's' rows (PyTorch's, RMM's) replays
 * as before.
 *
 * Invariants: as replay_segs.h; `live` holds exactly the recorded ranges
 * handed out and not yet released.
 */
#include "replay_segs.h"
#include "fp_vec.h"
#include <stdlib.h>

void fp_rsegs_init(fp_rsegs *r, const fp_trace *t)
{
    *r = (fp_rsegs){.run = t->segs, .n = t->nsegs};
    for (size_t i = 0; i < t->nsegs; i++) {
        uint64_t end = t->segs[i].addr + t->segs[i].size;
        if (end > r->top && end >= t->segs[i].addr)
            r->top = end;
    }
}

void fp_rsegs_fini(fp_rsegs *r)
{
    free(r->live);
    r->live = NULL;
}

static bool overlaps_live(const fp_rsegs *r, uint64_t addr, uint64_t size)
{
    for (size_t i = 0; i < r->nlive; i++)
        if (addr < r->live[i].addr + r->live[i].size && r->live[i].addr < addr + size)
            return true;
    return false;
}

bool fp_rsegs_take(fp_rsegs *r, size_t size, uint64_t *addr)
{
    if (r->next >= r->n)
        return false;
    const fp_trace_seg *s = &r->run[r->next];
    fp_trace_seg *v = fp_vec_grow(r->live, &r->cap, r->nlive + 1, sizeof *v, 16);
    if (v)
        r->live = v;
    if (s->size != size || s->addr + size < s->addr || overlaps_live(r, s->addr, size) || !v) {
        r->next = r->n; /* off the run's path: for good */
        return false;
    }
    r->live[r->nlive++] = *s;
    r->next++;
    *addr = s->addr;
    return true;
}

void fp_rsegs_released(fp_rsegs *r, uint64_t addr)
{
    for (size_t i = 0; i < r->nlive; i++)
        if (r->live[i].addr == addr) {
            r->live[i] = r->live[--r->nlive];
            return;
        }
}

uint64_t fp_rsegs_top(const fp_rsegs *r)
{
    return r->top;
}
