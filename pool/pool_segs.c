/* pool_segs.c - the pool's segments sorted by address, so that any device
 * address can be traced to the segment holding it in O(log n).
 *
 * Invariant: v[0..n) is sorted by addr and the ranges do not overlap.
 */
#include "pool_internal.h"
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
