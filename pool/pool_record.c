/* pool_record.c - the pool's record of its own requests: every allocation
 * and free it served, in order, so that a replay can rebuild the pool's
 * state at an out-of-memory failure and prove which setting would have
 * held (docs/advice.md).
 *
 * An event is 16 bytes (fp_rec_event): the op and the allocation's ordinal
 * (b->stamp while the block is live) in one word, the requested bytes in
 * the other.  Events go into two generations of at most half the cap each.
 * When the newer one is full, the older is dropped, the newer becomes the
 * older, and a new one starts with a base: the blocks live at that moment
 * (ordinal and size), in ordinal order.  What a replay reads is then the
 * older generation's base as allocations, then both generations' events:
 * the live set at a known moment, packed, followed by at least half the
 * cap of exact history.  Nothing older is needed, because a free only ever
 * names a block of the base or of the events after it.
 *
 * Invariants:
 *  - recorded under the pool's lock, in the order the pool served them;
 *  - g[0].start + g[0].n == g[1].start, and g[1].n > 0 only when g[0].n ==
 *    half (the older generation is full before the newer takes events);
 *  - total == g[1].start + g[1].n once g[1] has started, else g[0]'s;
 *  - a failed host allocation stops the record (broken) and never the pool.
 */
#include "pool_internal.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC_OP_SHIFT 62
#define REC_ORD_MASK (((uint64_t)1 << REC_OP_SHIFT) - 1)
enum { REC_ALLOC = 0, REC_FREE = 1 };

_Static_assert(sizeof(fp_rec_event) == 16, "fp_rec_event: 16 bytes, as docs/advice.md says");

void fp_record_init(fp_record *r, size_t cap_events)
{
    memset(r, 0, sizeof *r);
    r->half = cap_events / 2;
}

static void gen_free(fp_rec_gen *g)
{
    free(g->ev);
    free(g->base);
    memset(g, 0, sizeof *g);
}

void fp_record_fini(fp_record *r)
{
    gen_free(&r->g[0]);
    gen_free(&r->g[1]);
}

/* v[0..n) by ordinal (word): an LSD radix sort, 11 bits a pass, as many
 * passes as the largest ordinal needs (3 up to 8.6 billion allocations).
 * qsort here cost 60-100 ns per pair at 100,000 live blocks (bench_pool).
 * tmp has room for n.  Stable, so equal keys (none occur) keep order. */
#define RADIX_BITS 11
static void sort_by_ordinal(fp_rec_event *v, fp_rec_event *tmp, size_t n)
{
    uint64_t top = 0;
    for (size_t i = 0; i < n; i++)
        top |= v[i].word;
    for (unsigned shift = 0; shift < 64 && (top >> shift); shift += RADIX_BITS) {
        size_t count[(1u << RADIX_BITS) + 1] = {0};
        for (size_t i = 0; i < n; i++)
            count[((v[i].word >> shift) & ((1u << RADIX_BITS) - 1)) + 1]++;
        for (size_t d = 1; d <= (1u << RADIX_BITS); d++)
            count[d] += count[d - 1];
        for (size_t i = 0; i < n; i++)
            tmp[count[(v[i].word >> shift) & ((1u << RADIX_BITS) - 1)]++] = v[i];
        memcpy(v, tmp, n * sizeof *v);
    }
}

/* g->base = the blocks live now, in ordinal order. */
static int take_base(fp_pool *p, fp_rec_gen *g)
{
    size_t n = p->live.count, k = 0;
    g->base = n ? malloc(n * sizeof *g->base) : NULL;
    fp_rec_event *tmp = n ? malloc(n * sizeof *tmp) : NULL;
    if (n && (!g->base || !tmp)) {
        free(g->base);
        free(tmp);
        g->base = NULL;
        return ENOMEM;
    }
    for (size_t i = 0; i <= p->live.mask && k < n; i++) {
        const fp_block *b = (const fp_block *)(uintptr_t)p->live.slots[i].val;
        if (b)
            g->base[k++] = (fp_rec_event){(uint64_t)b->stamp, b->requested};
    }
    sort_by_ordinal(g->base, tmp, k);
    free(tmp);
    g->nbase = k;
    return 0;
}

/* The newer generation is full: drop the older, start a new one. */
static int rotate(fp_pool *p, fp_record *r)
{
    fp_rec_gen next = {.start = r->total};
    if (take_base(p, &next))
        return ENOMEM;
    if (r->started) {
        gen_free(&r->g[0]);
        r->g[0] = r->g[1];
    }
    r->g[1] = next;
    r->started = 1;
    return 0;
}

/* Called with the event already applied to the live map (the allocated
 * block is in it, the freed one out of it), so that a base taken right
 * after this event is the live set after it. */
static void put(fp_pool *p, unsigned op, uint64_t ordinal, uint64_t size)
{
    fp_record *r = &p->rec;
    if (!r->half || r->broken)
        return;
    fp_rec_gen *g = r->started ? &r->g[1] : &r->g[0];
    if (g->n == g->cap) {
        fp_rec_event *v = fp_vec_grow(g->ev, &g->cap, g->n + 1, sizeof *v, 1024);
        if (!v) {
            r->broken = 1;
            return;
        }
        g->cap = g->cap < r->half ? g->cap : r->half;
        g->ev = v;
    }
    g->ev[g->n++] = (fp_rec_event){(uint64_t)op << REC_OP_SHIFT | (ordinal & REC_ORD_MASK), size};
    r->total++;
    if (g->n == r->half && rotate(p, r))
        r->broken = 1;
}

void fp_record_alloc(fp_pool *p, uint64_t ordinal, uint64_t size)
{
    put(p, REC_ALLOC, ordinal, size);
}

void fp_record_free(fp_pool *p, uint64_t ordinal, uint64_t size)
{
    put(p, REC_FREE, ordinal, size);
}

/* ---- reading it back --------------------------------------------------- */

static int emit_events(const fp_rec_gen *g, uint64_t upto, fp_record_fn fn, void *ud)
{
    for (size_t i = 0; i < g->n && g->start + i < upto; i++) {
        uint64_t w = g->ev[i].word;
        int err =
            fn(ud, (w >> REC_OP_SHIFT) == REC_FREE ? 'f' : 'a', w & REC_ORD_MASK, g->ev[i].size);
        if (err)
            return err;
    }
    return 0;
}

int fp_pool_record_read(fp_pool *p, uint64_t upto, fp_record_fn fn, void *ud, fp_record_info *info)
{
    pthread_mutex_lock(&p->lock);
    const fp_record *r = &p->rec;
    const fp_rec_gen *old = &r->g[0];
    int err = 0;
    memset(info, 0, sizeof *info);
    info->total = r->total;
    info->broken = r->broken;
    info->dropped = old->start;
    info->base_blocks = old->nbase;
    if (!r->half)
        err = ENODATA;
    else if (upto < old->start)
        err = ESTALE; /* the history up to there was dropped */
    for (size_t i = 0; !err && i < old->nbase; i++)
        err = fn(ud, 'a', old->base[i].word, old->base[i].size);
    if (!err)
        err = emit_events(old, upto, fn, ud);
    if (!err && r->started)
        err = emit_events(&r->g[1], upto, fn, ud);
    pthread_mutex_unlock(&p->lock);
    return err;
}

/* The invariants above, for fp_pool_check: 0, or EFAULT with what broke. */
int fp_record_check(const fp_record *r, char *msg, size_t len)
{
    const fp_rec_gen *a = &r->g[0], *b = &r->g[1];
    const char *why = NULL;
    if (!r->half && (r->total || a->n || r->started))
        why = "a record with no room holds events";
    else if (a->n > r->half || b->n > r->half)
        why = "a generation holds more than half the cap";
    else if (r->started && (a->n != r->half || a->start + a->n != b->start))
        why = "the newer generation started before the older one was full";
    else if ((r->started ? b->start + b->n : a->start + a->n) != r->total)
        why = "the generations do not add up to the events recorded";
    for (size_t i = 1; !why && i < a->nbase; i++)
        if (a->base[i - 1].word >= a->base[i].word)
            why = "the base is not in ordinal order";
    if (!why)
        return 0;
    if (msg && len)
        snprintf(msg, len, "record: %s (half %zu, %zu + %zu events, total %llu)", why, r->half,
                 a->n, b->n, (unsigned long long)r->total);
    return EFAULT;
}
