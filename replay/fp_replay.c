/* fp_replay.c - runs a trace through the pool on a simulated device.
 *
 * The simulated backend is a bump allocator over a 2 MiB-aligned address
 * space, with an optional budget: a reserve that would take the bytes in
 * use past it fails with ENOMEM, as a full device would; so does one that
 * would run past the end of the 64-bit address space.  A trace id's address
 * is kept by the slot fp_trace_push gave it (an array of the ids live at
 * once), and with opts.no_live_map its grant's handle too, by which it is
 * freed (the pool then keeps no map of live blocks).  An allocation of a live id
 * is refused and counted (dup_allocs), a free of an id that is not live is
 * skipped and counted (bad_frees); neither is an OOM.  A trace with a
 * deadline is checked against the clock every FP_REPLAY_CHECK_EVERY events:
 * past it, the replay stops and returns ETIMEDOUT.  An allocation the
 * pool refuses for lack of host memory (fp_oom_info.host) fails the whole
 * replay with ENOMEM: its peaks would be nobody's.  The recorded run's
 * threads ('j' and 'l' rows, each row's thread) go through their own
 * caches of the pool's front end (replay_threads.c), and its segments
 * get the run's addresses while the replay follows it (replay_segs.c).
 * With the threads' caches on, the pool is not solo and keeps its map of
 * live blocks (the caches free by address and take the pool's lock).
 */
#include "fp_trace.h"
#include "replay_segs.h"
#include "replay_threads.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sim_dev {
    uint64_t next;           /* next address to hand out   */
    size_t in_use;           /* bytes reserved now         */
    size_t budget;           /* 0 = unlimited              */
    const fp_replay_hook *h; /* its on_change sees the segments */
    size_t idx;              /* the event being replayed   */
    fp_rsegs *rec;           /* the run's segment addresses */
    size_t ok_max;           /* most bytes in use after a reserve or map */
    size_t over_min;         /* least bytes a refused one asked for      */
} sim_dev;

/* A reserve or map of size bytes on top of in_use: 0 when it fits the
 * budget, else ENOMEM; either way noted in ok_max or over_min, so that
 * the replay can say which budgets it holds for (fp_replay_result). */
static int sim_fits(sim_dev *d, size_t size)
{
    size_t limit = d->budget ? d->budget : SIZE_MAX;
    size_t want = d->in_use > SIZE_MAX - size ? SIZE_MAX : d->in_use + size;
    if (size > limit || d->in_use > limit - size) {
        d->over_min = want < d->over_min ? want : d->over_min;
        return ENOMEM;
    }
    d->ok_max = want > d->ok_max ? want : d->ok_max;
    return 0;
}

static void note(const fp_replay_hook *h, int kind, uint64_t addr, uint64_t size, size_t idx)
{
    if (h && h->on_change)
        h->on_change(h->ud, kind, addr, size, idx);
}

static int sim_reserve(void *ctx, size_t size, uint64_t *addr)
{
    sim_dev *d = ctx;
    uint64_t span = (size + FP_ROUND_LARGE - 1) & ~(uint64_t)(FP_ROUND_LARGE - 1);
    if (span < size || d->next > UINT64_MAX - span)
        return ENOMEM; /* past the end of the address space, whatever the budget */
    if (sim_fits(d, size))
        return ENOMEM;
    if (!fp_rsegs_take(d->rec, size, addr)) {
        *addr = d->next;
        d->next += span;
    }
    d->in_use += size;
    note(d->h, FP_REPLAY_SEGMENT_ALLOC, *addr, size, d->idx);
    return 0;
}

static int sim_release(void *ctx, uint64_t addr, size_t size)
{
    sim_dev *d = ctx;
    d->in_use -= size;
    fp_rsegs_released(d->rec, addr);
    note(d->h, FP_REPLAY_SEGMENT_FREE, addr, size, d->idx);
    return 0;
}

#define SIM_GRANULARITY (2 * FP_MIB) /* cuMemGetAllocationGranularity on an H200 */

static size_t sim_granularity(void *ctx)
{
    (void)ctx;
    return SIM_GRANULARITY;
}

static int sim_reserve_va(void *ctx, size_t size, size_t align, uint64_t *addr)
{
    sim_dev *d = ctx;
    uint64_t a = align ? (d->next + align - 1) / align * align : d->next;
    if (a < d->next || a > UINT64_MAX - size)
        return ENOMEM;
    *addr = a;
    d->next = a + size;
    return 0;
}

static int sim_free_va(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

static int sim_map(void *ctx, uint64_t addr, size_t size)
{
    sim_dev *d = ctx;
    if (sim_fits(d, size))
        return ENOMEM;
    d->in_use += size;
    note(d->h, FP_REPLAY_SEGMENT_MAP, addr, size, d->idx);
    return 0;
}

static int sim_unmap(void *ctx, uint64_t addr, size_t size, uint64_t freed_at)
{
    sim_dev *d = ctx;
    (void)freed_at;
    d->in_use -= size;
    note(d->h, FP_REPLAY_SEGMENT_UNMAP, addr, size, d->idx);
    return 0;
}

/* What each live id holds, by its slot (fp_trace.h): the address, or in
 * fp_trace_peak_live the rounded size; 0 when the id holds nothing.
 * One array of the most ids live at once, not a map sized for the trace:
 * the working set stays in cache however long the trace, and a lookup is
 * one load (a hash map of 2 x events slots made every lookup a cache
 * miss, and had every replay of tune's budget search fault in tens of
 * MB).  Values are never 0 (simulated addresses start high; a rounded
 * size is >= 512). */
typedef struct idmap {
    uint64_t *held;
    fp_rthreads threads; /* fp_replay_ex's: the trace's threads' caches */
    void **handle;       /* each held address's grant handle: a pool with no
                            live map (opts.no_live_map) frees by it; else NULL */
} idmap;

static int idmap_init(idmap *m, const fp_trace *t)
{
    m->held = calloc(t->nslots ? t->nslots : 1, sizeof *m->held);
    m->threads = (fp_rthreads){0};
    m->handle = NULL;
    return m->held ? 0 : ENOMEM;
}

static void idmap_free(idmap *m)
{
    free(m->held);
    free(m->handle);
    fp_rthreads_fini(&m->threads);
}

/* An allocation of the replay: its address and its grant's handle (kept
 * in the idmap when the pool frees by handle). */
static int replay_take(fp_pool *p, size_t size, uint64_t *addr, void **handle)
{
    fp_grant g;
    int err = fp_pool_alloc_grant(p, size, UINT64_MAX, &g);
    if (!err) {
        *addr = g.addr;
        *handle = g.handle;
    }
    return err;
}

/* The replay's free of what replay_take gave. */
static void replay_give(fp_pool *p, const idmap *m, uint64_t addr, void *handle)
{
    if (m->handle)
        fp_pool_free_handle(p, handle);
    else
        fp_pool_free(p, addr);
}

static void count_event(size_t *count, size_t *first, size_t idx)
{
    if ((*count)++ == 0)
        *first = idx;
}

/* After a refusal: 1 (and counted) when host memory ran out. */
static int host_short(fp_pool *p, fp_replay_result *r)
{
    fp_oom_info o;
    fp_pool_last_oom(p, &o);
    if (!o.host)
        return 0;
    r->host_fails++;
    return 1;
}

static void replay_alloc(fp_pool *p, idmap *m, const fp_tracer_event *e, uint32_t slot, size_t idx,
                         const fp_replay_hook *h, fp_replay_result *r)
{
    uint64_t addr;
    void *handle = NULL;
    if (m->held[slot]) {
        count_event(&r->dup_allocs, &r->first_dup_alloc, idx);
        return;
    }
    int err = m->threads.n ? fp_rthreads_alloc(&m->threads, p, e, &addr)
                           : replay_take(p, (size_t)e->size, &addr, &handle);
    if (err) {
        if (host_short(p, r))
            return;
        if (r->ooms++ == 0) {
            r->first_oom_event = idx;
            fp_pool_last_oom(p, &r->first_oom);
        }
        note(h, FP_REPLAY_OOM, 0, e->size, idx);
        return;
    }
    m->held[slot] = addr;
    if (m->handle)
        m->handle[slot] = handle;
    note(h, FP_REPLAY_ALLOC, addr, e->size, idx);
}

/* An 'o' row: the recorded run asked for this and was refused.  Asked
 * again here; served, it is given straight back (the run never had it). */
static void replay_refused(fp_pool *p, const idmap *m, const fp_tracer_event *e, size_t idx,
                           const fp_replay_hook *h, fp_replay_result *r)
{
    uint64_t addr;
    void *handle;
    r->recorded_ooms++;
    if (replay_take(p, (size_t)e->size, &addr, &handle) == 0) {
        replay_give(p, m, addr, handle);
        return;
    }
    if (host_short(p, r))
        return;
    r->recorded_refused++;
    if (r->ooms++ == 0) {
        r->first_oom_event = idx;
        fp_pool_last_oom(p, &r->first_oom);
    }
    note(h, FP_REPLAY_OOM, 0, e->size, idx);
}

static void replay_event(fp_pool *p, idmap *m, const fp_trace *t, size_t idx,
                         const fp_replay_hook *h, fp_replay_result *r)
{
    const fp_tracer_event *e = &t->ev[idx];
    uint32_t slot = t->slot[idx];
    if (e->op == 'a') {
        replay_alloc(p, m, e, slot, idx, h, r);
        return;
    }
    if (e->op == 'o') {
        replay_refused(p, m, e, idx, h, r);
        return;
    }
    if (e->op == 'j' || e->op == 'l') {
        if (fp_rthreads_row(&m->threads, p, e))
            r->host_fails++;
        return;
    }
    uint64_t addr = slot == FP_TRACE_NO_SLOT ? 0 : m->held[slot];
    if (!addr) {
        count_event(&r->bad_frees, &r->first_bad_free, idx);
        return;
    }
    size_t size = 0;
    uint64_t seq;
    if (h && h->on_change) /* the block's size, for the hook alone */
        fp_pool_lookup(p, addr, &size, &seq);
    if (m->threads.n) /* the threads' caches: by address (no_live_map is off then) */
        fp_rthreads_free(&m->threads, p, e, addr);
    else
        replay_give(p, m, addr, m->handle ? m->handle[slot] : NULL);
    note(h, FP_REPLAY_FREE, addr, size, idx);
    m->held[slot] = 0;
}

int fp_replay(const fp_trace *t, const fp_pool_opts *opts, size_t budget, fp_replay_result *r,
              fp_pool **keep)
{
    return fp_replay_ex(t, opts, budget, NULL, r, keep);
}

int fp_trace_past_deadline(const fp_trace *t)
{
    if (!t->deadline_ns)
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec >= t->deadline_ns;
}

/* Stops at the hook's request or, with stop_at_oom, at the first refusal;
 * ETIMEDOUT at t's deadline. */
static int replay_all(fp_pool *p, idmap *m, const fp_trace *t, const fp_replay_hook *h,
                      sim_dev *dev, fp_replay_result *r)
{
    size_t i = 0;
    while (i < t->n && !r->host_fails) {
        if (i % FP_REPLAY_CHECK_EVERY == 0 && fp_trace_past_deadline(t)) {
            r->events = i;
            return ETIMEDOUT;
        }
        size_t ooms = r->ooms;
        dev->idx = i;
        replay_event(p, m, t, i, h, r);
        i++;
        if (h && h->stop_at_oom && r->ooms != ooms)
            break;
        if (h && h->after_event && h->after_event(h->ud, p, i - 1, r->ooms != ooms))
            break;
    }
    r->events = i;
    return 0;
}

int fp_replay_ex(const fp_trace *t, const fp_pool_opts *opts, size_t budget,
                 const fp_replay_hook *h, fp_replay_result *r, fp_pool **keep)
{
    fp_rsegs rec;
    fp_rsegs_init(&rec, t);
    sim_dev dev = {
        .next = 0x7f0000000000ull, .budget = budget, .h = h, .rec = &rec, .over_min = SIZE_MAX};
    uint64_t top = fp_rsegs_top(&rec); /* the replay's own addresses: above the run's */
    if (top > dev.next)
        dev.next = (top + SIM_GRANULARITY - 1) & ~(uint64_t)(SIM_GRANULARITY - 1);
    fp_backend be = {.ctx = &dev,
                     .reserve = sim_reserve,
                     .release = sim_release,
                     .granularity = sim_granularity,
                     .reserve_va = sim_reserve_va,
                     .free_va = sim_free_va,
                     .map = sim_map,
                     .unmap = sim_unmap};
    if (fp_trace_past_deadline(t))
        return ETIMEDOUT;
    fp_pool_opts o = *opts;
    o.record_bytes = 0;               /* a replay's own pool needs no record */
    o.thread_cache = t->thread_cache; /* the recorded run's (fp_trace.h) */
    o.solo = 1;                       /* nor a lock: this thread alone calls it */
    if (o.thread_cache)               /* the threads' caches lock the pool and free by address */
        o.solo = o.no_live_map = 0;
    if (!o.device_total)
        o.device_total = budget;
    fp_pool *p;
    int err = fp_pool_create(&o, &be, &p);
    if (err) {
        fp_rsegs_fini(&rec);
        return err;
    }
    idmap m;
    if (idmap_init(&m, t) || fp_rthreads_init(&m.threads, t, &o) ||
        (o.no_live_map && !(m.handle = calloc(t->nslots ? t->nslots : 1, sizeof *m.handle)))) {
        idmap_free(&m);
        fp_rsegs_fini(&rec);
        fp_pool_destroy(p, 0);
        return ENOMEM;
    }
    memset(r, 0, sizeof *r);
    r->first_oom_event = r->first_bad_free = r->first_dup_alloc = t->n;
    err = replay_all(p, &m, t, h, &dev, r);
    fp_pool_get_stats(p, &r->stats);
    r->budget_from = dev.ok_max;
    r->budget_below = dev.over_min;
    idmap_free(&m);
    fp_rsegs_fini(&rec); /* a kept pool's segments stay: no release comes */
    if (!err && r->host_fails)
        err = ENOMEM;
    if (err) {
        fp_pool_destroy(p, 1);
        return err;
    }
    if (keep)
        *keep = p;
    else
        fp_pool_destroy(p, 1);
    return 0;
}

/* One pass with the id table holding rounded sizes instead of addresses.
 * A request no pool serves (over FP_MAX_REQUEST) is never live and is
 * left out.  The sum saturates at SIZE_MAX (2^17 requests of 2^47 bytes),
 * never wraps; fp_advise says "more than" for it. */
size_t fp_trace_peak_live(const fp_trace *t, const fp_pool_opts *opts)
{
    idmap m;
    if (idmap_init(&m, t))
        return 0;
    size_t live = 0, peak = 0;
    for (size_t k = 0; k < t->n; k++) {
        const fp_tracer_event *e = &t->ev[k];
        uint32_t slot = t->slot[k];
        uint64_t held = slot == FP_TRACE_NO_SLOT ? 0 : m.held[slot];
        if (e->op != 'f' && e->size > FP_MAX_REQUEST)
            continue;
        if (e->op == 'a' && !held) {
            size_t sz = fp_round_size(opts, (size_t)e->size);
            m.held[slot] = sz;
            live = live > SIZE_MAX - sz ? SIZE_MAX : live + sz;
            peak = live > peak ? live : peak;
        } else if (e->op == 'f' && held) {
            live = live == SIZE_MAX ? live : live - (size_t)held;
            m.held[slot] = 0;
        } else if (e->op == 'o') { /* refused in the run: needed at that moment */
            size_t sz = fp_round_size(opts, (size_t)e->size);
            size_t at = live > SIZE_MAX - sz ? SIZE_MAX : live + sz;
            peak = at > peak ? at : peak;
        }
    }
    free(m.held);
    return peak;
}

void fp_replay_trace_group(const fp_replay_result *r, fp_row rows[2], fp_group *g)
{
    rows[0] = (fp_row){"unknown_frees",
                       " free of an unknown id (skipped)",
                       " frees of unknown ids (skipped)",
                       FP_ROW_COUNT,
                       r->bad_frees,
                       0};
    rows[1] = (fp_row){"duplicate_allocs",
                       " allocation of a live id (refused)",
                       " allocations of live ids (refused)",
                       FP_ROW_COUNT,
                       r->dup_allocs,
                       0};
    *g = (fp_group){.rows = rows, .nrows = 2, .zero = "none"}; /* key and label: report/'s table */
}
