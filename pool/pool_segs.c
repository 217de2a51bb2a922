/* pool_segs.c - the pool's bookkeeping storage: segments sorted by
 * address, so that any device address can be traced to the segment
 * holding it in O(log n); the list of segments in creation order; and the
 * recycled block headers; and filing a new segment (fp_segment_file), the
 * one way pool.c and pool_vmm.c both add one.
 *
 * Invariants: the segment table is base/'s fp_ranges (sorted, disjoint),
 * each segment filed as [addr, addr+size) with itself as the payload;
 * seg_head..seg_tail
 * links every segment once; a header is in p->spare or in exactly one
 * segment.
 */
#include "pool_internal.h"
#include "pool_stats.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int fp_segtab_insert(fp_segtab *t, fp_segment *s)
{
    if (!t->t.elem) /* the pool is calloc'd: the payload is set here */
        fp_ranges_init(&t->t, sizeof s);
    return fp_ranges_insert(&t->t, s->addr, s->size, &s);
}

fp_segment *fp_segtab_at(const fp_segtab *t, size_t i)
{
    return *(fp_segment **)fp_ranges_val(&t->t, i);
}

size_t fp_segtab_count(const fp_segtab *t)
{
    return t->t.n;
}

void fp_segtab_remove(fp_segtab *t, fp_segment *s)
{
    size_t i = fp_ranges_at(&t->t, s->addr);
    if (i != FP_RANGES_NONE && fp_segtab_at(t, i) == s)
        fp_ranges_erase(&t->t, i);
}

fp_segment *fp_segtab_find(const fp_segtab *t, uint64_t addr)
{
    size_t i = fp_ranges_find(&t->t, addr);
    return i == FP_RANGES_NONE ? NULL : fp_segtab_at(t, i);
}

void fp_segtab_free(fp_segtab *t)
{
    fp_ranges_fini(&t->t);
}

/* ---- segments in creation order ------------------------------------------ */

void fp_seglist_link(fp_pool *p, fp_segment *s)
{
    s->prev = p->seg_tail;
    s->next = NULL;
    if (p->seg_tail)
        p->seg_tail->next = s;
    else
        p->seg_head = s;
    p->seg_tail = s;
}

int fp_segment_file(fp_pool *p, fp_segment *s)
{
    if (fp_segtab_insert(&p->segs, s)) {
        fp_block_put(p, s->first);
        return ENOMEM;
    }
    fp_seglist_link(p, s);
    fp_index_insert(fp_index_of(p, s->small), s->first);
    fp_account_segment(p, s, +1);
    p->st.num_reserve_calls++;
    return 0;
}

void fp_seglist_unlink(fp_pool *p, fp_segment *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        p->seg_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        p->seg_tail = s->prev;
}

void fp_segment_free(fp_segment *s)
{
    if (s && s->vmm)
        fp_pageset_fini(&s->pages);
    free(s);
}

/* ---- block headers --------------------------------------------------------- */

fp_block *fp_block_new(fp_pool *p)
{
    if (!p->spare) {
        fp_chunk *c = aligned_alloc(64, sizeof *c);
        if (!c)
            return NULL;
        c->next = p->chunks;
        p->chunks = c;
        for (size_t i = 0; i < FP_CHUNK_BLOCKS; i++)
            fp_block_put(p, &c->blocks[i]);
    }
    fp_block *b = p->spare;
    p->spare = b->next;
    memset(b, 0, sizeof *b);
    return b;
}

void fp_block_put(fp_pool *p, fp_block *b)
{
    b->next = p->spare;
    p->spare = b;
}
