/* pool_vmm.c - virtual-memory segments (expandable_segments:True).
 *
 * A segment of this kind is a large reserved range of address space
 * (reserve_va) tiled by blocks exactly as a classic segment is, starting
 * as one free block.  Physical memory comes in pages of the backend's
 * granularity (or vmm_page), mapped only when a block that is handed out
 * covers them.  A freed range keeps its pages.  When the cap or the
 * device refuses new pages, idle pages (whole pages that no live block
 * touches) are unmapped, oldest free first, and the request maps its own;
 * empty_cache unmaps them all, and a caller's trim (fp_pool_trim) as many
 * as it needs, in the same order.  So does a map that would leave the
 * device less than vmm_headroom free (the backend's device_free): the
 * driver's own needs (a kernel module loaded lazily, a larger
 * local-memory stack, a library's own cudaMalloc) then find memory.  A
 * request whose pages the device cannot hold even then maps none of them:
 * it fails before it takes the headroom.
 * Every unmap names the newest free stamp of the blocks that used it, so
 * that the backend fences before it gives the memory back.
 *
 * Sizes (fp_vmm_size): the page is vmm_page rounded up to the granularity,
 * at most an FP_VMM_PAGE_SHARE-th of the device; a range is vmm_reserve
 * (else the device's size) rounded up to the page, at most
 * FP_VMM_RANGE_TIMES the device and FP_VMM_RANGE_MAX, so that no setting
 * the parser takes asks the driver for a page it can never map or a
 * reservation it refuses, and no rounding overflows.
 *
 * Which pages are mapped is a set in two levels (pool_pages.c), so a
 * range of 2^48 bytes costs its chunks, not a step per page.
 *
 * Invariants (checked by fp_pool_check):
 *  - page i of s is in s->pages iff it is mapped; s->mapped counts them;
 *  - every page a live block touches is mapped;
 *  - the reserved stat == sum over segments of fp_segment_held().
 */
#include "fp_vec.h"
#include "pool_stats.h"
#include <errno.h>
#include <stdlib.h>

#define VMM_DEFAULT_RANGE (64 * FP_GIB) /* when the device size is unknown */

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

/* v rounded up to a multiple of to, or the largest multiple when that
 * would not fit in a size_t. */
static size_t round_up_sat(size_t v, size_t to)
{
    return v > SIZE_MAX - (to - 1) ? SIZE_MAX / to * to : round_up(v, to);
}

/* The largest page a device of total bytes allows: a share of it, whole
 * granules, at least one. */
static size_t page_limit(size_t total, size_t g)
{
    size_t most = total ? total / FP_VMM_PAGE_SHARE : FP_VMM_RANGE_MAX;
    most = most > FP_VMM_RANGE_MAX ? FP_VMM_RANGE_MAX : most;
    return most / g * g > g ? most / g * g : g;
}

/* The most address space one range may take: a few times the device
 * (pages mapped at once never exceed it), at most FP_VMM_RANGE_MAX, at
 * least one page. */
static size_t range_limit(size_t total, size_t page)
{
    size_t most = FP_VMM_RANGE_MAX;
    if (total && total <= FP_VMM_RANGE_MAX / FP_VMM_RANGE_TIMES)
        most = total * FP_VMM_RANGE_TIMES;
    return most / page * page > page ? most / page * page : page;
}

void fp_vmm_size(const fp_pool_opts *o, size_t g, fp_vmm_sizes *z)
{
    g = g ? g : 1;
    size_t total = o->device_total;
    *z = (fp_vmm_sizes){.page_max = page_limit(total, g)};
    z->page = o->vmm_page > g ? round_up_sat(o->vmm_page, g) : g;
    if (z->page > z->page_max) {
        z->page = z->page_max;
        z->page_clamped = o->vmm_page != 0;
    }
    z->range_max = range_limit(total, z->page);
    size_t asked = o->vmm_reserve ? o->vmm_reserve : total ? total : VMM_DEFAULT_RANGE;
    z->range = round_up_sat(asked, z->page);
    if (z->range > z->range_max) {
        z->range = z->range_max;
        z->range_clamped = o->vmm_reserve != 0;
    }
}

void fp_vmm_setup(fp_pool *p)
{
    const fp_backend *be = &p->be;
    if (!p->opts.expandable_segments || !be->granularity || !be->reserve_va || !be->free_va ||
        !be->map || !be->unmap)
        return;
    size_t g = be->granularity(be->ctx);
    if (!g)
        return;
    fp_vmm_sizes z;
    fp_vmm_size(&p->opts, g, &z);
    p->page = z.page;
    p->vmm_range = z.range;
    p->st.page_size = p->page;
}

/* ---- the page set -------------------------------------------------------- */

static bool is_mapped(const fp_segment *s, size_t i)
{
    return fp_pageset_get(&s->pages, i);
}

/* After fp_pageset_prepare (or over a maximal run of the other state). */
static void mark(fp_segment *s, size_t i, size_t n, bool on)
{
    fp_pageset_mark(&s->pages, i, n, on);
    s->mapped = on ? s->mapped + n : s->mapped - n;
}

/* The first page in [i, end) whose state is want; end when none. */
static size_t next_in_state(const fp_segment *s, size_t i, size_t end, bool want)
{
    return fp_pageset_next(&s->pages, i, end, want);
}

/* ---- ranges ------------------------------------------------------------------ */

int fp_vmm_new_range(fp_pool *p, size_t rounded, bool exact, bool small, fp_block **out)
{
    size_t size = exact || rounded > p->vmm_range ? round_up(rounded, p->page) : p->vmm_range;
    uint64_t addr = 0;
    int err = p->be.reserve_va(p->be.ctx, size, p->page, &addr);
    if (err) {
        p->last_oom.over_cap = 0;
        p->last_oom.backend_err = err;
        return err;
    }
    size_t npages = size / p->page;
    fp_segment *s = calloc(1, sizeof *s);
    fp_pageset pages = {0};
    int bits = fp_pageset_init(&pages, npages);
    fp_block *b = s && !bits ? fp_block_new(p) : NULL;
    if (b) {
        *s = (fp_segment){.addr = addr,
                          .size = size,
                          .first = b,
                          .small = small,
                          .vmm = true,
                          .page = p->page,
                          .npages = npages,
                          .pages = pages};
        *b = (fp_block){.addr = addr,
                        .size = size,
                        .state = FP_BLOCK_FREE,
                        .small = small,
                        .stamp = FP_NEVER_FREED};
    }
    if (!b || fp_segment_file(p, s)) {
        fp_pageset_fini(&pages);
        free(s);
        p->be.free_va(p->be.ctx, addr, size);
        return fp_pool_host_short(p);
    }
    *out = b;
    return 0;
}

/* Out of host memory for the page set's bookkeeping: false, and nothing
 * unmapped. */
static bool unmap_pages(fp_pool *p, fp_segment *s, size_t i, size_t n, uint64_t stamp)
{
    if (fp_pageset_prepare(&s->pages, i, n, false))
        return false;
    p->be.unmap(p->be.ctx, s->addr + i * s->page, n * s->page, stamp);
    mark(s, i, n, false);
    fp_account_held(p, s->small, -(int64_t)(n * s->page));
    p->st.num_unmap_calls++;
    return true;
}

void fp_vmm_release_range(fp_pool *p, fp_segment *s)
{
    for (size_t i = next_in_state(s, 0, s->npages, true); i < s->npages;) {
        size_t j = next_in_state(s, i, s->npages, false);
        unmap_pages(p, s, i, j - i, /* a maximal run: needs no memory */
                    __atomic_load_n(&p->clock, __ATOMIC_ACQUIRE));
        i = next_in_state(s, j, s->npages, true);
    }
    p->be.free_va(p->be.ctx, s->addr, s->size);
}

/* ---- idle pages ---------------------------------------------------------------- */

/* A free block with mapped pages that no live block touches. */
typedef struct idle_run {
    fp_segment *s;
    size_t lo, hi;  /* pages [lo, hi) lie wholly inside the block */
    uint64_t stamp; /* the block's last free                      */
} idle_run;

/* The whole pages of free block b, less the pages [xlo, xhi). */
static bool idle_pages(const fp_segment *s, const fp_block *b, size_t *lo, size_t *hi)
{
    uint64_t off = b->addr - s->addr;
    *lo = (size_t)((off + s->page - 1) / s->page);
    *hi = (size_t)((off + b->size) / s->page);
    return *lo < *hi && next_in_state(s, *lo, *hi, true) < *hi;
}

static int by_stamp(const void *a, const void *b)
{
    const idle_run *x = a, *y = b;
    if (x->stamp != y->stamp)
        return x->stamp < y->stamp ? -1 : 1;
    uint64_t ax = x->s->addr + x->lo * x->s->page, ay = y->s->addr + y->lo * y->s->page;
    return ax < ay ? -1 : ax > ay; /* equal stamps: lower address first */
}

/* Every idle run of mapped pages, oldest free first.  *n gets the count;
 * NULL when there are none.  Out of host memory, the runs found so far. */
static idle_run *collect_idle(fp_pool *p, size_t *n)
{
    size_t cap = 0;
    idle_run *v = NULL;
    *n = 0;
    for (fp_segment *s = p->seg_head; s; s = s->next) {
        if (!s->vmm || !s->mapped)
            continue;
        for (fp_block *b = s->first; b; b = b->next) {
            size_t lo, hi;
            if (b->state != FP_BLOCK_FREE || !idle_pages(s, b, &lo, &hi))
                continue;
            idle_run *nv = fp_vec_grow(v, &cap, *n + 1, sizeof *v, 64);
            if (!nv)
                goto sort;
            v = nv;
            v[(*n)++] = (idle_run){s, lo, hi, b->stamp};
        }
    }
sort:
    if (*n)
        qsort(v, *n, sizeof *v, by_stamp);
    return v;
}

/* Unmaps mapped pages of run r outside [xlo, xhi) of segment xs, until
 * want bytes are back; returns the bytes unmapped. */
static size_t unmap_run(fp_pool *p, const idle_run *r, size_t want, const fp_segment *xs,
                        size_t xlo, size_t xhi)
{
    fp_segment *s = r->s;
    size_t got = 0;
    size_t i = next_in_state(s, r->lo, r->hi, true);
    while (i < r->hi && got < want) {
        if (s == xs && i >= xlo && i < xhi) {
            i = next_in_state(s, xhi, r->hi, true);
            continue;
        }
        size_t j = next_in_state(s, i, r->hi, false);
        if (s == xs && i < xlo && j > xlo)
            j = xlo;
        size_t rest = want - got, left = rest / s->page + (rest % s->page != 0);
        size_t n = j - i;
        n = n < left ? n : left;
        if (!unmap_pages(p, s, i, n, r->stamp))
            break;
        got += n * s->page;
        i = next_in_state(s, i + n, r->hi, true);
    }
    return got;
}

/* Takes back at least want bytes of idle pages, never pages [xlo, xhi)
 * of xs (the request's own).  Returns the bytes unmapped. */
static size_t reclaim(fp_pool *p, size_t want, const fp_segment *xs, size_t xlo, size_t xhi)
{
    size_t n, got = 0;
    idle_run *v = collect_idle(p, &n);
    for (size_t k = 0; k < n && got < want; k++)
        got += unmap_run(p, &v[k], want - got, xs, xlo, xhi);
    free(v);
    if (n)
        p->st.num_reclaims++;
    return got;
}

size_t fp_vmm_trim(fp_pool *p)
{
    return fp_vmm_trim_to(p, SIZE_MAX);
}

size_t fp_vmm_trim_to(fp_pool *p, size_t want)
{
    if (!p->page || !want)
        return 0;
    return reclaim(p, want, NULL, 0, 0);
}

/* ---- backing a block ---------------------------------------------------------- */

static size_t reserved_now(const fp_pool *p)
{
    return (size_t)p->st.reserved_bytes[FP_ALL].current;
}

static size_t count_unmapped(const fp_segment *s, size_t lo, size_t hi)
{
    size_t n = 0;
    for (size_t i = next_in_state(s, lo, hi, false); i < hi;) {
        size_t j = next_in_state(s, i, hi, true);
        n += j - i;
        i = next_in_state(s, j, hi, false);
    }
    return n;
}

/* Maps pages [i, j) of s; when the device is full, takes idle pages back
 * (as many as the run, or all there are) and tries once more. */
static int map_pages(fp_pool *p, fp_segment *s, size_t i, size_t j, size_t lo, size_t hi)
{
    size_t bytes = (j - i) * s->page;
    if (fp_pageset_prepare(&s->pages, i, j - i, true))
        return fp_pool_host_short(p);
    int err = p->be.map(p->be.ctx, s->addr + i * s->page, bytes);
    if (err == ENOMEM && reclaim(p, bytes, s, lo, hi) > 0)
        err = p->be.map(p->be.ctx, s->addr + i * s->page, bytes);
    if (err) {
        p->last_oom.over_cap = 0;
        p->last_oom.backend_err = err;
        return err;
    }
    mark(s, i, j - i, true);
    fp_account_held(p, s->small, (int64_t)bytes);
    p->st.num_map_calls++;
    return 0;
}

/* vmm_headroom: before need more bytes are mapped, idle pages (never the
 * request's own, [lo, hi) of s) are unmapped until the device keeps the
 * headroom free, as far as there are idle pages; a soft limit, unlike the
 * cap: without idle pages the map goes ahead.  Returns the device's free
 * bytes after that (SIZE_MAX: unknown, or vmm_headroom off). */
static size_t keep_headroom(fp_pool *p, size_t need, const fp_segment *s, size_t lo, size_t hi)
{
    size_t head = p->opts.vmm_headroom;
    size_t room = head && p->be.device_free ? p->be.device_free(p->be.ctx) : SIZE_MAX;
    if (room == SIZE_MAX || (room > need && room - need >= head))
        return room;
    size_t short_by = head > SIZE_MAX - need ? SIZE_MAX : need + head - room;
    size_t got = reclaim(p, short_by, s, lo, hi);
    if (got > 0)
        p->st.num_headroom_reclaims++;
    return got > SIZE_MAX - room ? SIZE_MAX : room + got;
}

int fp_vmm_back(fp_pool *p, uint64_t addr, size_t size)
{
    fp_segment *s = fp_segtab_find(&p->segs, addr);
    if (!s || !s->vmm)
        return 0;
    size_t lo = (size_t)((addr - s->addr) / s->page);
    size_t hi = (size_t)((addr - s->addr + size + s->page - 1) / s->page);
    size_t need = count_unmapped(s, lo, hi) * s->page;
    if (!need)
        return 0;
    if (need > p->cap || reserved_now(p) > p->cap - need) {
        size_t over = reserved_now(p) + need - p->cap;
        if (need > p->cap || reclaim(p, over, s, lo, hi) < over) {
            p->last_oom.over_cap = 1;
            return ENOMEM;
        }
    }
    if (keep_headroom(p, need, s, lo, hi) < need) { /* it cannot complete: map none of it */
        p->last_oom.over_cap = 0;
        p->last_oom.backend_err = ENOMEM; /* the device's free memory refused it */
        return ENOMEM;
    }
    for (size_t i = next_in_state(s, lo, hi, false); i < hi;) {
        size_t j = next_in_state(s, i, hi, true);
        int err = map_pages(p, s, i, j, lo, hi);
        if (err)
            return err;
        i = next_in_state(s, j, hi, false);
    }
    return 0;
}

/* ---- queries -------------------------------------------------------------------- */

size_t fp_vmm_mapped_run(const fp_segment *s, size_t i, size_t *end)
{
    i = next_in_state(s, i, s->npages, true);
    *end = next_in_state(s, i, s->npages, false);
    return i;
}

/* The longest run of bytes of free block b that lie in mapped pages. */
static size_t mapped_run(const fp_segment *s, const fp_block *b)
{
    uint64_t off = b->addr - s->addr, end = off + b->size;
    size_t best = 0, last = (size_t)((end - 1) / s->page) + 1;
    for (size_t i = (size_t)(off / s->page); i < last;) {
        size_t j = next_in_state(s, i, last, false); /* mapped: [i, j) */
        if (j > i) {
            uint64_t lo = (uint64_t)i * s->page, hi = (uint64_t)j * s->page;
            lo = lo > off ? lo : off;
            hi = hi < end ? hi : end;
            if (hi - lo > best)
                best = (size_t)(hi - lo);
        }
        i = j < last ? next_in_state(s, j, last, true) : last;
    }
    return best;
}

typedef struct largest_acc {
    const fp_pool *p;
    size_t best;
} largest_acc;

/* Blocks come largest first: once one is no larger than the best run
 * found, no later one can beat it. */
static bool largest_step(const fp_block *b, void *ud)
{
    largest_acc *a = ud;
    if (b->size <= a->best)
        return false;
    const fp_segment *s = fp_segtab_find(&a->p->segs, b->addr);
    size_t n = s && s->vmm ? mapped_run(s, b) : b->size;
    a->best = n > a->best ? n : a->best;
    return true;
}

size_t fp_vmm_largest_free(const fp_pool *p)
{
    largest_acc a = {p, 0};
    fp_index_visit_desc(&p->free_small, largest_step, &a);
    fp_index_visit_desc(&p->free_large, largest_step, &a);
    return a.best;
}

int fp_pool_is_vmm(const fp_pool *p)
{
    return p->page != 0;
}

void fp_pool_walk_pages(fp_pool *p, fp_page_fn fn, void *ud)
{
    pthread_mutex_lock(&p->lock);
    for (size_t k = 0; k < fp_segtab_count(&p->segs); k++) {
        const fp_segment *s = fp_segtab_at(&p->segs, k);
        if (!s->vmm)
            continue;
        for (size_t i = 0; i < s->npages;) {
            bool m = is_mapped(s, i);
            size_t j = next_in_state(s, i, s->npages, !m);
            fp_page_run r = {.addr = s->addr + i * s->page,
                             .size = (j - i) * s->page,
                             .mapped = m,
                             .small = s->small,
                             .range = s->addr,
                             .range_size = s->size};
            fn(ud, &r);
            i = j;
        }
    }
    pthread_mutex_unlock(&p->lock);
}
