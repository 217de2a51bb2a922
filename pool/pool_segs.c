/* pool_segs.c - the pool's bookkeeping storage: segments sorted by
 * address, so that any device address can be traced to the segment
 * holding it in O(log n); the list of segments in creation order; and the
 * recycled block headers; and filing a new segment (fp_segment_file), the
 * one way pool.c and pool_vmm.c both add one.
 *
 * Invariants: v[0..n) is sorted by addr and the ranges do not overlap;
 * seg_head..seg_tail links every segment once; a header is in p->spare
 * or in exactly one segment.
 */
#include "pool_internal.h"
#include "pool_stats.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Index of the first segment whose base is > addr. */
static size_t upper(const fp_segtab *t, uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int fp_segtab_insert(fp_segtab *t, fp_segment *s)
{
    fp_segment **nv = fp_vec_grow(t->v, &t->cap, t->n + 1, sizeof *nv, 64);
    if (!nv)
        return ENOMEM;
    t->v = nv;
    size_t i = upper(t, s->addr);
    memmove(t->v + i + 1, t->v + i, (t->n - i) * sizeof *t->v);
    t->v[i] = s;
    t->n++;
    return 0;
}

void fp_segtab_remove(fp_segtab *t, fp_segment *s)
{
    size_t i = upper(t, s->addr);
    if (i == 0 || t->v[i - 1] != s)
        return;
    i--;
    memmove(t->v + i, t->v + i + 1, (t->n - i - 1) * sizeof *t->v);
    t->n--;
}

fp_segment *fp_segtab_find(const fp_segtab *t, uint64_t addr)
{
    size_t i = upper(t, addr);
    if (i == 0)
        return NULL;
    fp_segment *s = t->v[i - 1];
    return addr - s->addr < s->size ? s : NULL;
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
    if (s)
        free(s->pages);
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
