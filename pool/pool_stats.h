/* pool_stats.h - the pool's statistics: {current, peak, allocated, freed}
 * counters and the accounting rules that tie them to blocks and segments.
 * Inline: these run several times per allocation and free.
 *
 * Invariant: every change to a block's state or a segment's existence goes
 * through one of the fp_account_* calls, so fp_pool_check can recompute
 * every "current" value from a walk and compare.  With opts.lean_stats
 * only reserved, segments and allocated are counted (the rest stay 0).
 */
#ifndef FP_POOL_STATS_H
#define FP_POOL_STATS_H

#include "pool_internal.h"

/* A cumulative total plus d >= 0, stopping at INT64_MAX (2^63 - 1 bytes,
 * 65,536 pairs of 2^47 B) instead of wrapping. */
static inline int64_t fp_total_add(int64_t total, int64_t d)
{
    return total > INT64_MAX - d ? INT64_MAX : total + d;
}

/* Stat updates: one call per change keeps current/peak/totals coherent.
 * The totals saturate (fp_total_add); then allocated - freed == current
 * no longer holds, and fp_pool_check checks it only below the limit. */
static inline void fp_stat_add(fp_stat *s, int64_t d)
{
    s->current += d;
    if (d > 0) {
        s->allocated = fp_total_add(s->allocated, d);
        if (s->current > s->peak)
            s->peak = s->current;
        if (s->current > s->mark)
            s->mark = s->current;
    } else {
        s->freed = fp_total_add(s->freed, -d);
    }
}

static inline void fp_stat_add3(fp_stat s[FP_NKINDS], bool small, int64_t d)
{
    fp_stat_add(&s[FP_ALL], d);
    fp_stat_add(&s[small ? FP_SMALL : FP_LARGE], d);
}

static inline bool fp_stat_is_split(const fp_block *b)
{
    return b->prev || b->next;
}

/* A block handed to its user (sign +1) or given back by them (-1). */
static inline void fp_account_used(fp_pool *p, fp_block *b, int64_t sign)
{
    bool small = b->small;
    fp_pool_stats *st = &p->st;
    fp_stat_add3(st->allocated_bytes, small, sign * (int64_t)b->size);
    if (p->opts.lean_stats) /* a fifth of a replay's time: tune needs none of the rest */
        return;
    fp_stat_add3(st->requested_bytes, small, sign * (int64_t)b->requested);
    fp_stat_add3(st->allocations, small, sign);
    if (b->size >= p->opts.max_split_size)
        fp_stat_add(&st->oversize_allocations, sign);
}

/* A block leaving the free state (+1) or entering it (-1): active covers
 * blocks in use and blocks pending reuse. */
static inline void fp_account_active(fp_pool *p, fp_block *b, int64_t sign)
{
    if (p->opts.lean_stats)
        return;
    fp_stat_add3(p->st.active_bytes, b->small, sign * (int64_t)b->size);
    fp_stat_add3(p->st.active, b->small, sign);
}

/* Bytes held from the device change by d (segments or pages). */
static inline void fp_account_held(fp_pool *p, bool small, int64_t d)
{
    fp_stat_add3(p->st.reserved_bytes, small, d);
    __atomic_store_n(&p->reserved_mirror, (size_t)p->st.reserved_bytes[FP_ALL].current,
                     __ATOMIC_RELAXED);
}

/* A segment reserved (+1) or released (-1), with the bytes it holds. */
static inline void fp_account_segment(fp_pool *p, fp_segment *s, int64_t sign)
{
    fp_account_held(p, s->small, sign * (int64_t)fp_segment_held(s));
    fp_stat_add3(p->st.segments, s->small, sign);
    if (s->oversize)
        fp_stat_add(&p->st.oversize_segments, sign);
}

/* A free block of a split segment appears (+1) or goes (-1): PyTorch's
 * "non-releasable" memory, held idle inside a partly used segment. */
static inline void fp_account_split_free(fp_pool *p, fp_block *b, int64_t sign)
{
    if (b->state != FP_BLOCK_FREE || !fp_stat_is_split(b) || p->page || p->opts.lean_stats)
        return; /* idle pages of virtual-memory segments can all be released */
    fp_stat_add3(p->st.inactive_split_bytes, b->small, sign * (int64_t)b->size);
    fp_stat_add3(p->st.inactive_split, b->small, sign);
}

#endif
