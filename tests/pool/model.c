/* tests/pool/model.c - the model checker: a randomized run of the pool
 * cross-checked, after every operation, against an independent model.
 *
 * The model keeps the live blocks (address, request, rounded size, block
 * size) and every stat as a pool would count it (kst), predicts each
 * allocation from the previous walk (best fit, ref_refuses, ref_splits, or
 * exactly one new segment of ref_segment_size) and each free, empty_cache,
 * invalid free and owns query.  xcheck() then demands that the walk, the
 * mock's live reservations, the pool's stats and the model agree, and
 * fp_pool_check runs after every pool call.  An OOM is accepted only when
 * no fitting block was free, no wholly free segment was kept, and the
 * segment really did not fit under the cap.
 */
#include "model.h"

typedef struct mlive {
    uint64_t addr;
    size_t req, rounded, bsize;
    int small;
} mlive;

typedef struct kst { /* a model fp_stat */
    int64_t cur, peak, alloc, freed;
} kst;

static void ks_add(kst *k, int64_t d)
{
    if (d > 0)
        k->alloc += d;
    else
        k->freed += -d;
    k->cur += d;
    if (k->cur > k->peak)
        k->peak = k->cur;
}

static void ks_add2(kst *k, int small, int64_t d) /* FP_ALL and the kind */
{
    ks_add(&k[FP_ALL], d);
    ks_add(&k[small ? FP_SMALL : FP_LARGE], d);
}

typedef struct rctx {
    pool_fixture f;
    const rphase *ph;
    uint64_t rng;
    size_t cap; /* min(mock capacity, pool cap) */
    mlive *live;
    size_t n, capn;
    walk_dump last; /* the walk after the previous operation */
    uint64_t allocs, frees, ooms, hits, invalid, clock;
    kst req[3], alc[3], cnt[3], res[3], seg[3], over;
    kst actb[3], act[3]; /* active: in use */
    uint64_t last_freed;
    long n_new, n_split, n_oom, n_gc, n_empty;
} rctx;

static uint64_t rnd(rctx *c)
{
    return rng_next(&c->rng);
}

static size_t r_size(rctx *c)
{
    uint64_t x = rnd(c);
    if (x % 10 == 0) {
        const size_t ms = c->f.o.max_split_size;
        const size_t edge[] = {
            1,
            511,
            512,
            513,
            1 * MiB - 512,
            1 * MiB,
            1 * MiB + 1,
            1 * MiB + 512,
            10 * MiB - 512,
            10 * MiB,
            10 * MiB + 512,
            19 * MiB - 512,
            19 * MiB,
            20 * MiB,
            21 * MiB,
            ms == SIZE_MAX ? 18 * MiB : ms - 2 * MiB + 512,
            ms == SIZE_MAX ? 30 * MiB : ms - 512,
            ms == SIZE_MAX ? 32 * MiB : ms,
            ms == SIZE_MAX ? 40 * MiB : ms + 512,
            ms == SIZE_MAX ? 48 * MiB : ms + 8 * MiB,
        };
        return edge[(x >> 8) % (sizeof edge / sizeof edge[0])];
    }
    unsigned e = (unsigned)((x >> 8) % 26);
    size_t s = ((size_t)1 << e) + (size_t)((x >> 16) % ((uint64_t)1 << e));
    if ((x >> 60) % 4 == 0)
        s = (s + 511) / 512 * 512;
    return s;
}

static size_t live_find(const rctx *c, uint64_t addr) /* first index >= addr */
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->live[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void live_insert(rctx *c, mlive b)
{
    size_t i = live_find(c, b.addr);
    if (i > 0)
        TRUE(c->live[i - 1].addr + c->live[i - 1].bsize <= b.addr);
    if (i < c->n)
        TRUE(b.addr + b.bsize <= c->live[i].addr);
    if (c->n == c->capn) {
        c->capn = c->capn ? 2 * c->capn : 256;
        c->live = realloc(c->live, c->capn * sizeof *c->live);
        if (!c->live)
            abort();
    }
    memmove(&c->live[i + 1], &c->live[i], (c->n - i) * sizeof *c->live);
    c->live[i] = b;
    c->n++;
}

/* Segments reserved and released between two walks (addresses are never
 * reused, so an address names one reservation). */
static void seg_diff(rctx *c, const walk_dump *pre, const walk_dump *post)
{
    size_t i = 0, j = 0;
    while (i < pre->nseg || j < post->nseg) {
        if (j == post->nseg || (i < pre->nseg && pre->seg[i].addr < post->seg[j].addr)) {
            ks_add2(c->res, pre->seg[i].small, -(int64_t)pre->seg[i].size);
            ks_add2(c->seg, pre->seg[i].small, -1);
            i++;
        } else if (i == pre->nseg || post->seg[j].addr < pre->seg[i].addr) {
            ks_add2(c->res, post->seg[j].small, (int64_t)post->seg[j].size);
            ks_add2(c->seg, post->seg[j].small, 1);
            j++;
        } else {
            EQ(pre->seg[i].size, post->seg[j].size);
            EQ(pre->seg[i].small, post->seg[j].small);
            i++;
            j++;
        }
    }
}

static int whole_free(const walk_dump *w, const walk_seg *g)
{
    return g->n == 1 && w->blk[g->first].state == 0;
}

static void x_stat(const fp_stat *s, const kst *k, const char *name, int kind)
{
    if (s->current != k->cur || s->peak != k->peak || s->allocated != k->alloc ||
        s->freed != k->freed)
        fail_msg("%s: %s[%d] = {cur %jd, peak %jd, alloc %jd, freed %jd}, model "
                 "{%jd, %jd, %jd, %jd}",
                 g_where, name, kind, (intmax_t)s->current, (intmax_t)s->peak,
                 (intmax_t)s->allocated, (intmax_t)s->freed, (intmax_t)k->cur, (intmax_t)k->peak,
                 (intmax_t)k->alloc, (intmax_t)k->freed);
}

static void x_sane(const fp_stat *s, const char *name)
{
    if (s->current < 0 || s->peak < s->current || s->allocated - s->freed != s->current)
        fail_msg("%s: %s = {cur %jd, peak %jd, alloc %jd, freed %jd} inconsistent", g_where, name,
                 (intmax_t)s->current, (intmax_t)s->peak, (intmax_t)s->allocated,
                 (intmax_t)s->freed);
}

/* The pool, its stats, the mock and the model agree. */
static void xcheck(rctx *c)
{
    const walk_dump *w = &c->last;
    const mock *m = &c->f.m;
    mock_ok(m);
    /* the walk's segments are the mock's live reservations */
    EQ(w->nseg, m->nlive);
    for (size_t s = 0; s < w->nseg; s++) {
        EQ(w->seg[s].addr, m->live[s].addr);
        EQ(w->seg[s].size, m->live[s].size);
    }
    /* the walk's allocated blocks are the model's */
    size_t k = 0;
    int64_t isb[3] = {0}, isn[3] = {0}, over = 0;
    size_t largest = 0;
    for (size_t s = 0; s < w->nseg; s++) {
        const walk_seg *g = &w->seg[s];
        for (size_t j = 0; j < g->n; j++) {
            const fp_block_info *b = &w->blk[g->first + j];
            if (b->state == 0) {
                if (b->size > largest)
                    largest = b->size;
                if (g->n > 1) {
                    isb[FP_ALL] += (int64_t)b->size;
                    isb[g->small ? FP_SMALL : FP_LARGE] += (int64_t)b->size;
                    isn[FP_ALL]++;
                    isn[g->small ? FP_SMALL : FP_LARGE]++;
                }
                continue;
            }
            TRUE(k < c->n);
            const mlive *l = &c->live[k++];
            EQ(b->addr, l->addr);
            EQ(b->size, l->bsize);
            EQ(b->state, 1);
            EQ(b->requested, l->req);
            EQ(g->small, l->small);
            if (b->size >= c->f.o.max_split_size)
                over++;
        }
    }
    EQ(k, c->n);

    fp_pool_stats st = stats_of(c->f.p);
    static const char *const kn[3] = {"all", "small", "large"};
    for (int i = 0; i < FP_NKINDS; i++) {
        x_stat(&st.requested_bytes[i], &c->req[i], "requested_bytes", i);
        x_stat(&st.allocated_bytes[i], &c->alc[i], "allocated_bytes", i);
        x_stat(&st.active_bytes[i], &c->actb[i], "active_bytes", i);
        x_stat(&st.allocations[i], &c->cnt[i], "allocations", i);
        x_stat(&st.active[i], &c->act[i], "active", i);
        x_stat(&st.reserved_bytes[i], &c->res[i], "reserved_bytes", i);
        x_stat(&st.segments[i], &c->seg[i], "segments", i);
        x_sane(&st.inactive_split_bytes[i], kn[i]);
        x_sane(&st.inactive_split[i], kn[i]);
        EQ(st.inactive_split_bytes[i].current, isb[i]);
        EQ(st.inactive_split[i].current, isn[i]);
    }
    x_stat(&st.oversize_allocations, &c->over, "oversize_allocations", 0);
    EQ(st.oversize_allocations.current, over);
    x_sane(&st.oversize_segments, "oversize_segments");
    TRUE(st.oversize_segments.current <= st.segments[FP_LARGE].current);
    EQ(st.reserved_bytes[FP_ALL].current, m->live_bytes);
    EQ(st.num_allocs, c->allocs);
    EQ(st.num_frees, c->frees);
    EQ(st.num_cache_hits, c->hits);
    EQ(st.num_ooms, c->ooms);
    EQ(st.num_invalid_frees, c->invalid);
    EQ(st.num_reserve_calls, m->reserve_ok);
    EQ(st.num_release_calls, m->release_calls);
    EQ(st.reserved_bytes[FP_ALL].allocated, m->reserved_total);
    EQ(st.reserved_bytes[FP_ALL].freed, m->released_total);
    TRUE(st.num_gc_releases <= st.num_release_calls);
    if (c->f.o.gc_threshold == 0.0)
        EQ(st.num_gc_releases, 0);
    EQ(st.largest_free, largest);
    TRUE(st.largest_free_at_peak <= (size_t)st.reserved_bytes[FP_ALL].peak);
    EQ(idle_bytes(c->f.p),
       (size_t)(st.reserved_bytes[FP_ALL].current - st.allocated_bytes[FP_ALL].current));
    TRUE(m->live_bytes <= c->cap);
}

static void r_walk(rctx *c) /* after an operation: walk, diff, cross-check */
{
    walk_dump post = {0};
    walk_take(c->f.p, &post);
    seg_diff(c, &c->last, &post);
    walk_free(&c->last);
    c->last = post;
    xcheck(c);
}

static void r_alloc(rctx *c)
{
    fp_pool *p = c->f.p;
    const fp_pool_opts *o = &c->f.o;
    size_t req = r_size(c);
    size_t r = ref_round(o, req);
    int small = r <= FP_SMALL_SIZE;
    const walk_dump *pre = &c->last;
    const fp_block_info *best = NULL;
    for (size_t s = 0; s < pre->nseg; s++) {
        if (pre->seg[s].small != small)
            continue;
        for (size_t k = 0; k < pre->seg[s].n; k++) {
            const fp_block_info *b = &pre->blk[pre->seg[s].first + k];
            if (b->state != 0 || b->size < r)
                continue;
            if (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr))
                best = b;
        }
    }
    int hit = best && !ref_refuses(o, r, best->size);
    fp_block_info cand = {0};
    if (hit)
        cand = *best;
    uint64_t ok0 = c->f.m.reserve_ok, rel0 = c->f.m.release_calls;
    uint64_t inj0 = c->f.m.injected;
    snprintf(g_where + strlen(g_where), sizeof g_where - strlen(g_where),
             " alloc %zu (rounded %zu)", req, r);
    fp_grant gr = {0};
    int rc = fp_pool_alloc_grant(p, req, UINT64_MAX, &gr);
    uint64_t addr = gr.addr;
    check_pool(p);
    c->clock++; /* r_size stays far below FP_MAX_REQUEST */
    walk_dump post = {0};
    walk_take(p, &post);
    if (rc == 0) {
        const walk_seg *g = NULL;
        const fp_block_info *b = walk_block_at(&post, addr, &g);
        if (!b)
            fail_msg("%s: 0x%llx is no block", g_where, (unsigned long long)addr);
        EQ(b->state, 1);
        EQ(b->requested, req);
        EQ(g->small, small);
        size_t bsize;
        if (hit) { /* best fit, no backend, no release */
            EQ(addr, cand.addr);
            EQ(c->f.m.reserve_ok, ok0);
            EQ(c->f.m.release_calls, rel0);
            bsize = ref_splits(o, small, cand.size, r) ? r : cand.size;
            c->hits++;
        } else { /* exactly one new segment, the block at its front */
            EQ(c->f.m.reserve_ok, ok0 + 1);
            EQ(g->addr, addr);
            EQ(g->size, ref_segment_size(r));
            TRUE(walk_segment_at(pre, addr) == NULL);
            bsize = ref_splits(o, small, g->size, r) ? r : g->size;
            c->n_new++;
        }
        EQ(b->size, bsize);
        EQ(gr.size, bsize);
        EQ(gr.now, c->clock); /* one tick per allocation */
        TRUE(gr.freed_at < gr.now);
        if (!hit)
            EQ(gr.freed_at, FP_NEVER_FREED);
        if (bsize != (hit ? cand.size : g->size))
            c->n_split++;
        size_t sz = 0;
        EQ(fp_pool_owns(p, addr, &sz), 1);
        check_pool(p);
        EQ(sz, req);
        live_insert(c, (mlive){addr, req, r, bsize, small});
        c->allocs++;
        ks_add2(c->req, small, (int64_t)req);
        ks_add2(c->alc, small, (int64_t)bsize);
        ks_add2(c->cnt, small, 1);
        ks_add2(c->actb, small, (int64_t)bsize);
        ks_add2(c->act, small, 1);
        if (bsize >= o->max_split_size)
            ks_add(&c->over, 1);
    } else if (rc == ENOMEM) {
        if (hit)
            fail_msg("%s: ENOMEM with a fitting free block at 0x%llx (%zu)", g_where,
                     (unsigned long long)cand.addr, cand.size);
        /* step 2 ran: nothing wholly free is left */
        for (size_t s = 0; s < post.nseg; s++)
            if (whole_free(&post, &post.seg[s]))
                fail_msg("%s: ENOMEM but a wholly free segment is kept", g_where);
        /* and it really did not fit (unless an injected refusal met the
         * last retry: the cap may have refused the first try before the
         * backend saw it) */
        size_t resv = c->f.m.live_bytes;
        TRUE(resv <= c->cap);
        if (c->f.m.injected == inj0)
            TRUE(ref_segment_size(r) > c->cap - resv);
        c->ooms++;
        c->n_oom++;
    } else {
        fail_msg("%s: fp_pool_alloc = %d", g_where, rc);
    }
    walk_free(&post);
    r_walk(c);
}

/* A random live block, or c->n when there is none. */
static size_t r_pick(rctx *c)
{
    return c->n ? (size_t)(rnd(c) % c->n) : c->n;
}

static void r_free(rctx *c)
{
    size_t i = r_pick(c);
    if (i == c->n)
        return;
    mlive l = c->live[i];
    snprintf(g_where + strlen(g_where), sizeof g_where - strlen(g_where), " free 0x%llx (%zu)",
             (unsigned long long)l.addr, l.req);
    uint64_t rel0 = c->f.m.release_calls;
    free_ok(c->f.p, l.addr);
    memmove(&c->live[i], &c->live[i + 1], (c->n - i - 1) * sizeof *c->live);
    c->n--;
    c->frees++;
    c->last_freed = l.addr;
    ks_add2(c->req, l.small, -(int64_t)l.req);
    ks_add2(c->alc, l.small, -(int64_t)l.bsize);
    ks_add2(c->cnt, l.small, -1);
    ks_add2(c->actb, l.small, -(int64_t)l.bsize);
    ks_add2(c->act, l.small, -1);
    if (l.bsize >= c->f.o.max_split_size)
        ks_add(&c->over, -1);
    r_walk(c);
    EQ(c->f.m.release_calls, rel0); /* caching: a free releases nothing */
    const walk_seg *g = NULL;
    const fp_block_info *b = NULL;
    for (size_t s = 0; s < c->last.nseg && !b; s++) {
        g = &c->last.seg[s];
        if (l.addr >= g->addr && l.addr < g->addr + g->size)
            for (size_t k = 0; k < g->n; k++) {
                const fp_block_info *x = &c->last.blk[g->first + k];
                if (l.addr >= x->addr && l.addr < x->addr + x->size)
                    b = x;
            }
    }
    TRUE(b != NULL);
    EQ(b->state, 0);
}

static void r_empty(rctx *c)
{
    size_t wholly = 0;
    for (size_t s = 0; s < c->last.nseg; s++)
        wholly += whole_free(&c->last, &c->last.seg[s]);
    uint64_t rel0 = c->f.m.release_calls;
    size_t nseg0 = c->last.nseg;
    strcat(g_where, " empty_cache");
    empty_cache_ok(c->f.p);
    r_walk(c);
    EQ(c->f.m.release_calls, rel0 + wholly);
    EQ(c->last.nseg, nseg0 - wholly);
    c->n_empty++;
}

static void r_invalid(rctx *c)
{
    uint64_t x = rnd(c), a;
    switch (x % 4) {
    case 0: /* inside a live block */
        if (c->n == 0 || c->live[x / 4 % c->n].bsize <= 512)
            return;
        a = c->live[x / 4 % c->n].addr + 512;
        break;
    case 1: /* the last freed address, unless it is live again */
        a = c->last_freed;
        if (a == 0 || (live_find(c, a) < c->n && c->live[live_find(c, a)].addr == a))
            return;
        break;
    case 2: { /* a free block's start */
        size_t nfree = 0, pick;
        for (size_t k = 0; k < c->last.nblk; k++)
            nfree += c->last.blk[k].state == 0;
        if (nfree == 0)
            return;
        pick = (size_t)((x >> 8) % nfree);
        a = 0;
        for (size_t k = 0; k < c->last.nblk; k++)
            if (c->last.blk[k].state == 0 && pick-- == 0) {
                a = c->last.blk[k].addr;
                break;
            }
        break;
    }
    default: /* outside everything */
        a = (x & 1) ? 0x1000 + (x >> 40) : UINT64_MAX - (x >> 40);
        break;
    }
    fp_pool_stats s0 = stats_of(c->f.p);
    snprintf(g_where + strlen(g_where), sizeof g_where - strlen(g_where), " invalid free 0x%llx",
             (unsigned long long)a);
    EQ(fp_pool_free(c->f.p, a), EINVAL);
    check_pool(c->f.p);
    c->invalid++;
    fp_pool_stats s1 = stats_of(c->f.p);
    EQ(s1.num_invalid_frees, s0.num_invalid_frees + 1);
    stats_equal_except(s0, s1, 0, 1);
    walk_dump post = {0};
    walk_take(c->f.p, &post);
    TRUE(walk_same(&c->last, &post));
    walk_free(&post);
    xcheck(c);
}

static void r_owns(rctx *c)
{
    size_t sz;
    uint64_t x = rnd(c);
    if (c->n > 0) {
        const mlive *l = &c->live[x % c->n];
        EQ(owns_size(c->f.p, l->addr, &sz), 1);
        EQ(sz, l->req);
        if (l->bsize > 512) {
            EQ(owns_size(c->f.p, l->addr + 512, &sz), 1);
            EQ(sz, 0);
        }
    }
    EQ(owns_size(c->f.p, MOCK_BASE - 1, &sz), 0);
    EQ(owns_size(c->f.p, c->f.m.next + 2 * SEG_ALIGN, &sz), 0);
    for (size_t s = 0; s < c->last.nseg; s++) {
        const walk_seg *g = &c->last.seg[s];
        EQ(owns_size(c->f.p, g->addr + g->size - 1, &sz), 1);
        if (s + 1 == c->last.nseg || c->last.seg[s + 1].addr != g->addr + g->size)
            EQ(owns_size(c->f.p, g->addr + g->size, &sz), 0);
    }
}

void model_run_phase(const rphase *ph)
{
    static rctx c;
    memset(&c, 0, sizeof c);
    c.ph = ph;
    c.rng = ph->seed;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_split_size = ph->max_split;
    if (ph->non_split)
        o.max_non_split_rounding = ph->non_split;
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++)
        o.roundup_divisions[i] = ph->div == 0 ? 0 : ph->div == 2 ? 4 : i == 0 ? 4 : i <= 5 ? 8 : 2;
    o.max_reserved = ph->max_reserved;
    o.gc_threshold = ph->gc;
    fixture_open(&c.f, &o, ph->capacity);
    size_t pc = fp_pool_opts_cap(&o);
    c.cap = pc < ph->capacity ? pc : ph->capacity;
    for (int op = 0; op < ph->ops; op++) {
        snprintf(g_where, sizeof g_where, "[%s op %d]", ph->name, op);
        uint64_t r = rnd(&c) % 1000;
        if (r < 2)
            r_empty(&c);
        else if (r < 6)
            r_invalid(&c);
        else if (r < 9)
            c.f.m.fail_next = 1; /* one transient refusal */
        else if (r < 12)
            r_owns(&c);
        else if (c.n == 0 || (c.n < ph->maxlive && r < 560))
            r_alloc(&c);
        else
            r_free(&c);
    }
    c.f.m.fail_next = 0;
    fp_pool_stats st = stats_of(c.f.p);
    print_message("%-10s %d ops: %ju allocs (%ju hits, %ld new segments, %ld "
                  "split), %ju OOMs, %ju retries, %ju GC releases, %ld "
                  "empty_cache, peak reserved %jd MiB\n",
                  ph->name, ph->ops, (uintmax_t)c.allocs, (uintmax_t)c.hits, c.n_new, c.n_split,
                  (uintmax_t)c.ooms, (uintmax_t)st.num_alloc_retries, (uintmax_t)st.num_gc_releases,
                  c.n_empty, (intmax_t)(st.reserved_bytes[FP_ALL].peak / (int64_t)MiB));
    TRUE(c.ooms > 0); /* the OOM path ran */
    TRUE(c.hits > 0);
    while (c.n > 0) {
        snprintf(g_where, sizeof g_where, "[%s drain %zu]", ph->name, c.n);
        r_free(&c);
    }
    r_empty(&c);
    EQ(c.last.nseg, 0);
    g_where[0] = 0;
    walk_free(&c.last);
    free(c.live);
    fixture_close(&c.f);
}
