/* replay_threads.c - a replay drives the pool's front end as the recorded
 * run's threads drove it (docs/replay.md, "Threads").
 *
 * The shim writes a 'j' row when a thread joins a pool's front end, an
 * 'l' row when it leaves (its exit), and each row's thread, in the order
 * the rows changed the pool and the caches (shim_trace.c's order lock).
 * Replayed in that order, each trace thread's calls go through its own
 * cache (fp_pool_front_alloc, fp_pool_front_free) exactly as the shim
 * made them: the same hits, the same flushes before growth, the same
 * layout.  A trace with no 'j' row, and a replay with thread_cache 0,
 * take the pool alone, as before.
 *
 * Invariants: as replay_threads.h; the caches belong to the pool, which
 * frees them (fp_pool_destroy), so this file only forgets them.  The
 * summary's "Thread caches" rows come from the pool's one list
 * (FP_FRONT_COUNTS), as the shim's do.
 */
#include "replay_threads.h"
#include <errno.h>
#include <stdlib.h>

int fp_rthreads_init(fp_rthreads *r, const fp_trace *t, const fp_pool_opts *opts)
{
    r->on = opts->thread_cache != 0;
    r->n = r->on ? t->threads : 0;
    r->tc = r->n ? calloc(r->n, sizeof *r->tc) : NULL;
    return r->n && !r->tc ? ENOMEM : 0;
}

void fp_rthreads_fini(fp_rthreads *r)
{
    free(r->tc);
    r->tc = NULL;
    r->n = 0;
}

static fp_tcache *cache_of(const fp_rthreads *r, const fp_tracer_event *e)
{
    return e->thread < r->n ? r->tc[e->thread] : NULL;
}

int fp_rthreads_row(fp_rthreads *r, fp_pool *p, const fp_tracer_event *e)
{
    if (e->thread >= r->n)
        return 0;
    fp_tcache **at = &r->tc[e->thread];
    if (e->op == 'j')
        return *at ? 0 : fp_pool_front_join(p, at);
    if (*at)
        fp_pool_front_leave(p, *at);
    *at = NULL;
    return 0;
}

int fp_rthreads_alloc(fp_rthreads *r, fp_pool *p, const fp_tracer_event *e, uint64_t *addr)
{
    fp_tcache *t = cache_of(r, e);
    if (!t)
        return fp_pool_alloc(p, (size_t)e->size, addr);
    fp_grant g;
    int same;
    int err = fp_pool_front_alloc(p, t, (size_t)e->size, UINT64_MAX, e->stream, &g, &same);
    if (!err)
        *addr = g.addr;
    return err;
}

void fp_rthreads_free(fp_rthreads *r, fp_pool *p, const fp_tracer_event *e, uint64_t addr)
{
    fp_tcache *t = cache_of(r, e);
    size_t size;
    uint64_t stamp;
    if (!t || fp_pool_front_free(p, t, addr, e->stream, &size, &stamp))
        fp_pool_free(p, addr);
}

#define FRONT_ROW(field, key, one, many, kind) +1
_Static_assert(0 FP_FRONT_COUNTS(FRONT_ROW) == FP_REPLAY_FRONT_ROWS, "one row per count");
#undef FRONT_ROW

int fp_replay_front_group(fp_pool *p, fp_row rows[FP_REPLAY_FRONT_ROWS], fp_group *g)
{
    fp_front_counts c;
    fp_pool_front_counts(p, &c);
    if (!c.threads)
        return 0;
    size_t n = 0;
#define FRONT_ROW(field, key, one, many, kind)                                                     \
    rows[n++] = (fp_row){key, one, many, FP_ROW_##kind, c.field, 0};
    FP_FRONT_COUNTS(FRONT_ROW)
#undef FRONT_ROW
    *g = (fp_group){.rows = rows, .nrows = n, .per_line = 3}; /* key and label: report/'s table */
    return 1;
}
