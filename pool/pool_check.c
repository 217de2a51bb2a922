/* pool_check.c - walks of the whole pool: the invariant checker (in the
 * manner of tlsf_check) and the segment walk used by reports.
 *
 * fp_pool_check recomputes everything from the segments and compares it
 * with the indexes, the live map and the stats (those a pool keeps:
 * opts.lean_stats, opts.no_live_map);
 * it changes nothing.
 */
#include "pool_stats.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct tally {
    int64_t active_bytes[FP_NKINDS], active[FP_NKINDS];
    int64_t reserved[FP_NKINDS], segments[FP_NKINDS];
    int64_t allocated[FP_NKINDS], requested[FP_NKINDS], allocations[FP_NKINDS];
    int64_t split_bytes[FP_NKINDS], split_count[FP_NKINDS];
    int64_t oversize_allocs, oversize_segs;
    size_t free_small, free_large, used, nsegs;
} tally;

static int fail(char *msg, size_t len, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return EFAULT;
}

static void add3(int64_t v[FP_NKINDS], bool small, int64_t d)
{
    v[FP_ALL] += d;
    v[small ? FP_SMALL : FP_LARGE] += d;
}

static int check_block(fp_pool *p, const fp_segment *s, const fp_block *b, tally *t, char *msg,
                       size_t len)
{
    if (b->small != s->small || b->size == 0 || b->size % FP_MIN_BLOCK)
        return fail(msg, len, "block %#llx: bad owner or size %zu", (unsigned long long)b->addr,
                    b->size);
    if (b->addr + b->size > s->addr + s->size)
        return fail(msg, len, "block %#llx runs past its segment", (unsigned long long)b->addr);
    if (b->next && (b->next->prev != b || b->addr + b->size != b->next->addr))
        return fail(msg, len, "block %#llx: not contiguous with next", (unsigned long long)b->addr);
    if (b->state == FP_BLOCK_FREE) {
        if (b->next && b->next->state == FP_BLOCK_FREE)
            return fail(msg, len, "blocks %#llx and next both free, unmerged",
                        (unsigned long long)b->addr);
        if (!fp_index_contains(s->small ? &p->free_small : &p->free_large, b))
            return fail(msg, len, "free block %#llx missing from index",
                        (unsigned long long)b->addr);
        if (fp_map_get(&p->live, b->addr) == b)
            return fail(msg, len, "free block %#llx in live map", (unsigned long long)b->addr);
        if (b->stamp > __atomic_load_n(&p->clock, __ATOMIC_ACQUIRE))
            return fail(msg, len, "free block %#llx freed in the future (stamp %llu > clock %llu)",
                        (unsigned long long)b->addr, (unsigned long long)b->stamp,
                        (unsigned long long)__atomic_load_n(&p->clock, __ATOMIC_ACQUIRE));
        *(s->small ? &t->free_small : &t->free_large) += 1;
        if (fp_stat_is_split(b) && !s->vmm) {
            add3(t->split_bytes, s->small, (int64_t)b->size);
            add3(t->split_count, s->small, 1);
        }
        return 0;
    }
    if (!p->opts.no_live_map && fp_map_get(&p->live, b->addr) != b)
        return fail(msg, len, "live block %#llx missing from map", (unsigned long long)b->addr);
    add3(t->active_bytes, s->small, (int64_t)b->size);
    add3(t->active, s->small, 1);
    if (b->requested > b->size)
        return fail(msg, len, "block %#llx: requested %zu > size %zu", (unsigned long long)b->addr,
                    b->requested, b->size);
    t->used++;
    add3(t->allocated, s->small, (int64_t)b->size);
    add3(t->requested, s->small, (int64_t)b->requested);
    add3(t->allocations, s->small, 1);
    if (fp_pool_is_oversize(&p->opts, b->size))
        t->oversize_allocs++;
    return 0;
}

/* A virtual-memory segment: its bitmap counts s->mapped pages, no bit
 * beyond the last page is set, and every page a live block touches is
 * mapped. */
static int check_pages(const fp_segment *s, char *msg, size_t len)
{
    if (!s->page || !s->pages.chunk || s->pages.n != s->npages || s->size != s->npages * s->page ||
        s->addr % s->page)
        return fail(msg, len, "vmm segment %#llx: bad page geometry", (unsigned long long)s->addr);
    bool stray;
    size_t count = fp_pageset_count(&s->pages, &stray);
    if (stray)
        return fail(msg, len, "vmm segment %#llx: a page past the end is mapped",
                    (unsigned long long)s->addr);
    if (count != s->mapped)
        return fail(msg, len, "vmm segment %#llx: %zu pages mapped, count says %zu",
                    (unsigned long long)s->addr, count, s->mapped);
    for (const fp_block *b = s->first; b; b = b->next) {
        if (b->state == FP_BLOCK_FREE)
            continue;
        size_t lo = (size_t)((b->addr - s->addr) / s->page);
        size_t hi = (size_t)((b->addr - s->addr + b->size + s->page - 1) / s->page);
        size_t i = fp_pageset_next(&s->pages, lo, hi, false);
        if (i < hi)
            return fail(msg, len, "live block %#llx: page %#llx not mapped",
                        (unsigned long long)b->addr, (unsigned long long)(s->addr + i * s->page));
    }
    return 0;
}

static int check_segment(fp_pool *p, const fp_segment *s, tally *t, char *msg, size_t len)
{
    if (!s->first || s->first->addr != s->addr || s->first->prev)
        return fail(msg, len, "segment %#llx: bad first block", (unsigned long long)s->addr);
    if (fp_segtab_find(&p->segs, s->addr) != s)
        return fail(msg, len, "segment %#llx missing from table", (unsigned long long)s->addr);
    size_t sum = 0;
    for (const fp_block *b = s->first; b; b = b->next) {
        int err = check_block(p, s, b, t, msg, len);
        if (err)
            return err;
        sum += b->size;
    }
    if (sum != s->size)
        return fail(msg, len, "segment %#llx: blocks sum to %zu, not %zu",
                    (unsigned long long)s->addr, sum, s->size);
    if (s->vmm) {
        int err = check_pages(s, msg, len);
        if (err)
            return err;
    }
    t->nsegs++;
    add3(t->reserved, s->small, (int64_t)fp_segment_held(s));
    add3(t->segments, s->small, 1);
    t->oversize_segs += s->oversize;
    return 0;
}

/* In-order walk of a treap: sorted keys, heap priorities, parent links,
 * free blocks of the right pool.  Returns the node count, or -1 on a
 * violation. */
static long check_tree(const fp_block *t, bool small, const fp_block **last)
{
    if (!t)
        return 0;
    if ((t->left && (fp_block_prio(t->left) > fp_block_prio(t) || t->left->parent != t)) ||
        (t->right && (fp_block_prio(t->right) > fp_block_prio(t) || t->right->parent != t)))
        return -1;
    long l = check_tree(t->left, small, last);
    if (l < 0 || t->state != FP_BLOCK_FREE || t->small != small)
        return -1;
    if (*last &&
        ((*last)->size > t->size || ((*last)->size == t->size && (*last)->addr >= t->addr)))
        return -1;
    *last = t;
    long r = check_tree(t->right, small, last);
    return r < 0 ? -1 : l + 1 + r;
}

/* Each summary bit must say whether the word below it has any bit set. */
static bool check_bitmap(const fp_index *ix)
{
    for (unsigned w = 0; w < FP_NBINWORDS; w++)
        if (((ix->mid[w / 64] >> (w % 64)) & 1) != (ix->used[w] != 0))
            return false;
    for (unsigned m = 0; m < FP_NMIDWORDS; m++)
        if (((ix->top >> m) & 1) != (ix->mid[m] != 0))
            return false;
    return true;
}

/* Every bin in order: together they must be one sorted sequence, and a
 * bin's bitmap bit must say whether it holds anything. */
static long check_index(const fp_index *ix, bool small)
{
    const fp_block *last = NULL;
    long total = 0;
    if (!check_bitmap(ix))
        return -1;
    for (unsigned bin = 0; bin < FP_NBINS; bin++) {
        const fp_block *root = fp_index_bin(ix, bin);
        bool marked = (ix->used[bin / 64] >> (bin % 64)) & 1;
        if (marked != (root != NULL) || (root && root->parent))
            return -1;
        if (!root)
            continue;
        long n = check_tree(root, small, &last);
        if (n < 0)
            return -1;
        total += n;
    }
    return total;
}

static int check_indexes(fp_pool *p, const tally *t, char *msg, size_t len)
{
    long ns = check_index(&p->free_small, true);
    long nl = check_index(&p->free_large, false);
    if (ns < 0 || nl < 0)
        return fail(msg, len, "free index out of order or holds a wrong block");
    if ((size_t)ns != t->free_small || (size_t)nl != t->free_large ||
        p->free_small.count != t->free_small || p->free_large.count != t->free_large)
        return fail(msg, len, "free index counts %ld/%ld, walk found %zu/%zu", ns, nl,
                    t->free_small, t->free_large);
    if (!p->opts.no_live_map && p->live.count != t->used)
        return fail(msg, len, "live map holds %zu, walk found %zu", p->live.count, t->used);
    if (fp_segtab_count(&p->segs) != t->nsegs)
        return fail(msg, len, "segment table holds %zu, walk found %zu", fp_segtab_count(&p->segs),
                    t->nsegs);
    for (size_t i = 1; i < fp_segtab_count(&p->segs); i++)
        if (fp_segtab_at(&p->segs, i - 1)->addr + fp_segtab_at(&p->segs, i - 1)->size >
            fp_segtab_at(&p->segs, i)->addr)
            return fail(msg, len, "segments %#llx and %#llx overlap",
                        (unsigned long long)fp_segtab_at(&p->segs, i - 1)->addr,
                        (unsigned long long)fp_segtab_at(&p->segs, i)->addr);
    return 0;
}

static int check_stat3(const fp_stat s[FP_NKINDS], const int64_t v[FP_NKINDS], const char *name,
                       char *msg, size_t len)
{
    for (int k = 0; k < FP_NKINDS; k++) {
        const fp_stat *x = &s[k];
        bool saturated = x->allocated == INT64_MAX || x->freed == INT64_MAX;
        if (x->current != v[k] || x->peak < x->current ||
            (!saturated && x->allocated - x->freed != x->current) || x->mark < x->current ||
            x->mark > x->peak)
            return fail(msg, len, "stat %s[%d]: current %lld, walk %lld", name, k,
                        (long long)x->current, (long long)v[k]);
    }
    return 0;
}

static int check_counts(const fp_pool_stats *st, const tally *t, char *msg, size_t len)
{
    if (st->num_allocs - st->num_frees != t->used)
        return fail(msg, len, "allocs - frees = %llu, walk found %zu live",
                    (unsigned long long)(st->num_allocs - st->num_frees), t->used);
    return 0;
}

static int check_stats(fp_pool *p, const tally *t, char *msg, size_t len)
{
    const fp_pool_stats *st = &p->st;
    int err = check_stat3(st->reserved_bytes, t->reserved, "reserved_bytes", msg, len);
    if (!err)
        err = check_stat3(st->segments, t->segments, "segments", msg, len);
    if (!err)
        err = check_stat3(st->allocated_bytes, t->allocated, "allocated_bytes", msg, len);
    if (!err && p->opts.lean_stats) /* the rest are not kept */
        return check_counts(st, t, msg, len);
    if (!err)
        err = check_stat3(st->active_bytes, t->active_bytes, "active_bytes", msg, len);
    if (!err)
        err = check_stat3(st->requested_bytes, t->requested, "requested_bytes", msg, len);
    if (!err)
        err = check_stat3(st->allocations, t->allocations, "allocations", msg, len);
    if (!err)
        err = check_stat3(st->active, t->active, "active", msg, len);
    if (!err)
        err =
            check_stat3(st->inactive_split_bytes, t->split_bytes, "inactive_split_bytes", msg, len);
    if (!err)
        err = check_stat3(st->inactive_split, t->split_count, "inactive_split", msg, len);
    if (err)
        return err;
    if (st->oversize_allocations.current != t->oversize_allocs ||
        st->oversize_segments.current != t->oversize_segs)
        return fail(msg, len, "oversize stats %lld/%lld, walk %lld/%lld",
                    (long long)st->oversize_allocations.current,
                    (long long)st->oversize_segments.current, (long long)t->oversize_allocs,
                    (long long)t->oversize_segs);
    return check_counts(st, t, msg, len);
}

int fp_pool_check(fp_pool *p, char *msg, size_t len)
{
    tally t = {0};
    int err = 0;
    pthread_mutex_lock(&p->lock);
    for (fp_segment *s = p->seg_head; s && !err; s = s->next)
        err = check_segment(p, s, &t, msg, len);
    if (!err)
        err = check_indexes(p, &t, msg, len);
    if (!err)
        err = check_stats(p, &t, msg, len);
    if (!err)
        err = fp_record_check(&p->rec, msg, len);
    pthread_mutex_unlock(&p->lock);
    if (!err && msg && len)
        msg[0] = '\0';
    return err;
}

/* The blocks of s that lie in [lo, hi), clipped to it, into *v. */
static size_t blocks_in(const fp_segment *s, uint64_t lo, uint64_t hi, fp_block_info **v,
                        size_t *cap)
{
    size_t n = 0;
    for (const fp_block *b = s->first; b; b = b->next) {
        uint64_t a = b->addr > lo ? b->addr : lo, e = b->addr + b->size;
        e = e < hi ? e : hi;
        if (a >= e)
            continue;
        fp_block_info *nv = fp_vec_grow(*v, cap, n + 1, sizeof *nv, 64);
        if (!nv)
            break;
        *v = nv;
        nv[n++] = (fp_block_info){a, (size_t)(e - a), fp_block_requested(b), b->state,
                                  b->state == FP_BLOCK_ALLOCATED ? b->stamp : 0};
    }
    return n;
}

void fp_pool_walk(fp_pool *p, fp_segment_fn fn, void *ud)
{
    pthread_mutex_lock(&p->lock);
    fp_front_flush(p, false); /* a block in a thread's cache is free, not live */
    size_t cap = 0;
    fp_block_info *v = NULL;
    for (size_t i = 0; i < fp_segtab_count(&p->segs); i++) {
        const fp_segment *s = fp_segtab_at(&p->segs, i);
        if (!s->vmm) {
            size_t n = blocks_in(s, s->addr, s->addr + s->size, &v, &cap);
            fn(ud, s->addr, s->size, s->small, v, n);
            continue;
        }
        for (size_t k = 0, end; (k = fp_vmm_mapped_run(s, k, &end)) < s->npages; k = end) {
            uint64_t lo = s->addr + k * s->page, hi = s->addr + end * s->page;
            size_t n = blocks_in(s, lo, hi, &v, &cap);
            fn(ud, lo, (size_t)(hi - lo), s->small, v, n);
        }
    }
    free(v);
    pthread_mutex_unlock(&p->lock);
}
