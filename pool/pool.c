/* pool.c - allocation and free: PyTorch's caching-allocator rules over
 * segments reserved through a backend.
 *
 * An allocation rounds the request, looks for the best-fitting free block
 * of its pool (small or large) that the max_split rules allow, and splits
 * it when the split rules say so (the rules: pool_rules.c).  On a miss it
 * reserves a new segment; when the backend or the cap refuses, it releases
 * cached memory in PyTorch's order and retries once before it reports
 * ENOMEM.  A free merges the block with free neighbours of the same
 * segment.  Segments go back to the backend only on release-and-retry, GC,
 * empty_cache or a caller's trim (least recently freed first).
 *
 * Invariants: see pool_internal.h.  Every public entry takes p->lock,
 * but allocation and free in a pool made with opts.solo (one thread
 * makes every call: a replay).
 */
#include "fp_assert.h"
#include "fp_lock.h"
#include "pool_stats.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- segments ------------------------------------------------------------- */

static size_t reserved_now(const fp_pool *p)
{
    return (size_t)p->st.reserved_bytes[FP_ALL].current;
}

/* The clock: a thread's cache may tick it without the lock (pool_front.c). */
static uint64_t clock_now(const fp_pool *p)
{
    return __atomic_load_n(&p->clock, __ATOMIC_ACQUIRE);
}

/* A tick of the clock under the lock: atomic for the threads' caches,
 * a plain add where one thread makes every call (opts.solo), which saves
 * a locked instruction per allocation. */
static uint64_t clock_tick(fp_pool *p)
{
    if (p->opts.solo)
        return ++p->clock;
    return __atomic_add_fetch(&p->clock, 1, __ATOMIC_RELEASE); /* read outside the lock */
}

/* Reserves a segment and files its single free block in the index;
 * *out gets that block. */
static int new_segment(fp_pool *p, size_t size, bool small, fp_block **out)
{
    if (size > p->cap || reserved_now(p) > p->cap - size) {
        p->last_oom.over_cap = 1;
        return ENOMEM;
    }
    uint64_t addr = 0;
    int err = p->be.reserve(p->be.ctx, size, &addr);
    if (err) {
        p->last_oom.over_cap = 0;
        p->last_oom.backend_err = err;
        return err;
    }
    fp_segment *s = malloc(sizeof *s);
    fp_block *b = s ? fp_block_new(p) : NULL;
    if (b) {
        *s = (fp_segment){.addr = addr,
                          .size = size,
                          .first = b,
                          .small = small,
                          .oversize = fp_pool_is_oversize(&p->opts, size)};
        *b = (fp_block){.addr = addr,
                        .size = size,
                        .state = FP_BLOCK_FREE,
                        .small = small,
                        .stamp = FP_NEVER_FREED};
    }
    if (!b || fp_segment_file(p, s)) {
        free(s);
        p->be.release(p->be.ctx, addr, size);
        return fp_pool_host_short(p);
    }
    *out = b;
    return 0;
}

static bool segment_is_free(const fp_segment *s)
{
    return s->first->state == FP_BLOCK_FREE && s->first->size == s->size;
}

static void release_segment(fp_pool *p, fp_segment *s)
{
    fp_block *b = s->first;
    fp_index_remove(fp_index_of(p, s->small), b);
    if (s->vmm)
        fp_vmm_release_range(p, s); /* its pages first: held drops to 0 */
    fp_account_segment(p, s, -1);
    fp_segtab_remove(&p->segs, s);
    fp_seglist_unlink(p, s);
    if (!s->vmm)
        p->be.release(p->be.ctx, s->addr, s->size);
    p->st.num_release_calls++;
    fp_block_put(p, b);
    fp_segment_free(s);
}

/* Releases every wholly free segment; returns the bytes released. */
static size_t release_free_segments(fp_pool *p)
{
    size_t bytes = 0;
    for (fp_segment *s = p->seg_head, *n; s; s = n) {
        n = s->next;
        if (segment_is_free(s)) {
            bytes += s->size;
            release_segment(p, s);
        }
    }
    return bytes;
}

static int by_size_desc(const void *a, const void *b)
{
    const fp_segment *x = *(fp_segment *const *)a, *y = *(fp_segment *const *)b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->addr < y->addr ? 1 : -1;
}

/* Step 1 of release-and-retry (only with max_split set): release one
 * cached oversize block big enough for the request, or else the largest
 * ones until their total covers it.  True when enough was released. */
static bool release_oversize(fp_pool *p, size_t rounded, bool small)
{
    size_t mss = p->opts.max_split_size;
    if (mss == SIZE_MAX)
        return false;
    size_t key = fp_pool_is_oversize(&p->opts, rounded) ? rounded : mss;
    fp_block *b = fp_index_lower_bound(fp_index_of(p, small), key);
    fp_segment *s = b ? fp_segtab_find(&p->segs, b->addr) : NULL;
    if (s && segment_is_free(s)) {
        release_segment(p, s);
        return true;
    }
    size_t n = 0, total = 0;
    fp_segment **v = malloc((fp_segtab_count(&p->segs) + 1) * sizeof *v);
    if (!v)
        return false;
    for (fp_segment *s = p->seg_head; s; s = s->next)
        if (s->small == small && segment_is_free(s) && fp_pool_is_oversize(&p->opts, s->size))
            v[n++] = s;
    qsort(v, n, sizeof *v, by_size_desc);
    for (size_t i = 0; i < n && total < key; i++) {
        total += v[i]->size;
        release_segment(p, v[i]);
    }
    free(v);
    return total >= key;
}

/* garbage_collection_threshold: over threshold x cap, release idle whole
 * segments of the large pool whose age is at least the average, oldest
 * first in effect, until reserved is back under the threshold. */
static void collect_garbage(fp_pool *p)
{
    if (p->opts.gc_threshold <= 0 || p->cap == SIZE_MAX)
        return;
    size_t limit = (size_t)(p->opts.gc_threshold * (double)p->cap);
    bool freed = true;
    while (reserved_now(p) > limit && freed) {
        double age_sum = 0;
        size_t count = 0;
        for (fp_segment *s = p->seg_head; s; s = s->next)
            if (!s->small && segment_is_free(s)) {
                age_sum += (double)(clock_now(p) - s->first->stamp);
                count++;
            }
        if (!count)
            return;
        double avg = age_sum / (double)count;
        freed = false;
        for (fp_segment *s = p->seg_head, *n; s && reserved_now(p) > limit; s = n) {
            n = s->next;
            if (!s->small && segment_is_free(s) &&
                (double)(clock_now(p) - s->first->stamp) >= avg) {
                release_segment(p, s);
                p->st.num_gc_releases++;
                freed = true;
            }
        }
    }
}

/* The segment a request of rounded bytes needs: PyTorch's sizes, or, with
 * exact_segment_round, a large request's own size rounded up to it. */
static size_t segment_for(const fp_pool *p, size_t rounded)
{
    size_t r = p->opts.exact_segment_round;
    if (!r || fp_pool_is_small(rounded) || rounded > SIZE_MAX - r)
        return fp_pool_segment_size(rounded);
    return (rounded + r - 1) / r * r;
}

/* A new segment for the request; with retry, releasing cache and retrying
 * on ENOMEM.  The caller takes the new segment's block as it is: the
 * max_split refusals apply to cached blocks, not to a segment made for the
 * request. */
static int grow(fp_pool *p, size_t rounded, bool small, bool retry, fp_block **out)
{
    size_t size = segment_for(p, rounded);
    collect_garbage(p);
    int err = new_segment(p, size, small, out);
    if (!retry)
        return err;
    if (err == ENOMEM && release_oversize(p, rounded, small))
        err = new_segment(p, size, small, out);
    if (err == ENOMEM) {
        if (p->be.synchronize)
            p->be.synchronize(p->be.ctx);
        release_free_segments(p);
        p->st.num_alloc_retries++;
        err = new_segment(p, size, small, out);
    }
    return err;
}

/* ---- allocation ------------------------------------------------------------ */

/* PyTorch's best fit with the max_split refusals. */
static fp_block *find_free(fp_pool *p, size_t rounded, bool small)
{
    fp_block *b = fp_index_lower_bound(fp_index_of(p, small), rounded);
    if (!b)
        return NULL;
    return fp_may_take(&p->opts, rounded, b->size) ? b : NULL;
}

static bool should_split(const fp_pool *p, bool small, size_t rounded, size_t rest)
{
    if (small || p->page) /* address space costs nothing: split any block */
        return rest >= FP_MIN_BLOCK;
    return fp_may_split_large(&p->opts, rounded, rest);
}

/* Takes free block b for a request of rounded bytes, splitting off the
 * remainder when the rules allow.  Returns 0 or ENOMEM (no header). */
static int take_block(fp_pool *p, fp_block *b, size_t rounded, bool small)
{
    fp_assert(b->state == FP_BLOCK_FREE && b->size >= rounded,
              "take a free block that holds the request");
    size_t rest = b->size - rounded;
    fp_block *r = NULL;
    if (should_split(p, small, rounded, rest) && !(r = fp_block_new(p)))
        return fp_pool_host_short(p);
    fp_index *ix = fp_index_of(p, small);
    fp_account_split_free(p, b, -1);
    fp_index_remove(ix, b);
    b->state = FP_BLOCK_ALLOCATED;
    if (r) {
        *r = (fp_block){.addr = b->addr + rounded,
                        .size = rest,
                        .prev = b,
                        .next = b->next,
                        .state = FP_BLOCK_FREE,
                        .small = small,
                        .stamp = b->stamp};
        if (b->next)
            b->next->prev = r;
        b->next = r;
        b->size = rounded;
        fp_index_insert(ix, r);
        fp_account_split_free(p, r, +1);
    }
    return 0;
}

static size_t largest_free_locked(fp_pool *p)
{
    if (p->page)
        return fp_vmm_largest_free(p);
    fp_block *s = fp_index_max(&p->free_small), *l = fp_index_max(&p->free_large);
    size_t a = s ? s->size : 0, c = l ? l->size : 0;
    return a > c ? a : c;
}

static void note_oom(fp_pool *p, size_t size, size_t rounded)
{
    fp_oom_info *o = &p->last_oom;
    o->requested = size;
    o->rounded = rounded;
    o->segment = segment_for(p, rounded);
    o->allocated = (size_t)p->st.allocated_bytes[FP_ALL].current;
    o->reserved = reserved_now(p);
    o->idle = o->reserved - o->allocated;
    o->largest_free = largest_free_locked(p);
    o->cap = p->cap;
    o->record_at = p->rec.total;
    p->st.num_ooms++;
}

/* How an allocation may be served.  unsafe_from: a cached block freed at
 * or after this clock is passed over for a new segment (no release and
 * retry), so that the caller never gets memory it cannot make safe. */
typedef struct alloc_req {
    size_t size;
    uint64_t unsafe_from;
} alloc_req;

/* Whether threads' caches may hold blocks (a second thread joined). */
static bool front_holds(const fp_pool *p)
{
    return __atomic_load_n(&p->front_on, __ATOMIC_ACQUIRE) != 0;
}

/* Whether the first rounded bytes of free block b lie in mapped pages (a
 * block needs no map).  Conservative: false when it may need one. */
static bool vmm_backed(fp_pool *p, const fp_block *b, size_t rounded)
{
    fp_segment *s = fp_segtab_find(&p->segs, b->addr);
    if (!s || !s->vmm)
        return true;
    size_t lo = (size_t)((b->addr - s->addr) / s->page), end = 0;
    size_t hi = (size_t)((b->addr - s->addr + rounded + s->page - 1) / s->page);
    return fp_vmm_mapped_run(s, lo, &end) == lo && end >= hi;
}

/* A cached block for the request, or a new segment.  *freed_at gets the
 * block's free time (FP_NEVER_FREED for a new segment). */
static int find_or_grow(fp_pool *p, const alloc_req *rq, size_t rounded, fp_block **out,
                        uint64_t *freed_at)
{
    bool small = fp_pool_is_small(rounded);
    fp_block *b = find_free(p, rounded, small);
    if ((!b || b->stamp >= rq->unsafe_from) && front_holds(p) && fp_front_flush(p, true))
        b = find_free(p, rounded, small); /* the threads' caches first */
    bool too_fresh = b && b->stamp >= rq->unsafe_from;
    if (b && !too_fresh) {
        p->st.num_cache_hits++;
        *freed_at = b->stamp;
        *out = b;
        return 0;
    }
    *freed_at = FP_NEVER_FREED;
    int err = grow(p, rounded, small, !too_fresh, out);
    if (err == ENOMEM && !too_fresh && front_holds(p) && fp_front_flush(p, true)) {
        b = find_free(p, rounded, small); /* cached meanwhile: before an OOM */
        if (b) {
            p->st.num_cache_hits++;
            *freed_at = b->stamp;
            *out = b;
            return 0;
        }
    }
    if (err == ENOMEM && !too_fresh)
        note_oom(p, rq->size, rounded);
    return too_fresh && err ? EAGAIN : err;
}

/* The virtual-memory variant: best fit over address space, with no
 * max_split refusals (a free range strands no memory: its pages can be
 * taken back), then the pages the block will cover are mapped.  A block
 * too fresh for the caller is passed over for a range of its own. */
static int vmm_find(fp_pool *p, const alloc_req *rq, size_t rounded, fp_block **out,
                    uint64_t *freed_at)
{
    bool small = fp_pool_is_small(rounded);
    fp_block *b = fp_index_lower_bound(fp_index_of(p, small), rounded);
    if (front_holds(p) && (!b || b->stamp >= rq->unsafe_from || !vmm_backed(p, b, rounded)) &&
        fp_front_flush(p, true))
        b = fp_index_lower_bound(fp_index_of(p, small), rounded); /* the caches first */
    bool too_fresh = b && b->stamp >= rq->unsafe_from;
    uint64_t maps = p->st.num_map_calls;
    int err = b && !too_fresh ? 0 : fp_vmm_new_range(p, rounded, too_fresh, small, &b);
    if (!err) {
        size_t rest = b->size - rounded;
        err = fp_vmm_back(p, b->addr, should_split(p, small, rounded, rest) ? rounded : b->size);
    }
    if (err) {
        if (err == ENOMEM)
            note_oom(p, rq->size, rounded);
        return err;
    }
    if (!too_fresh && p->st.num_map_calls == maps && b->stamp != FP_NEVER_FREED)
        p->st.num_cache_hits++;
    *freed_at = b->stamp;
    *out = b;
    return 0;
}

static int alloc_locked(fp_pool *p, const alloc_req *rq, fp_grant *g)
{
    size_t size = rq->size, rounded = fp_round_size(&p->opts, size);
    p->last_oom.host = 0;
    /* Over what any pool serves, or over the whole device: refused before
     * anything is reserved or mapped. */
    if (size > FP_MAX_REQUEST || (p->opts.device_total && rounded > p->opts.device_total)) {
        p->last_oom.over_cap = 0; /* neither the cap nor the backend refused it */
        p->last_oom.backend_err = 0;
        note_oom(p, size, rounded);
        return ENOMEM;
    }
    g->now = clock_tick(p);
    fp_block *b = NULL;
    int err = p->page ? vmm_find(p, rq, rounded, &b, &g->freed_at)
                      : find_or_grow(p, rq, rounded, &b, &g->freed_at);
    if (err)
        return err;
    if (g->freed_at >= g->now) /* a block the threads' caches gave back just now */
        g->now = clock_tick(p);
    if (!p->opts.no_live_map && fp_map_make_room(&p->live))
        return fp_pool_host_short(p);
    if (take_block(p, b, rounded, fp_pool_is_small(rounded)))
        return ENOMEM;
    if (!p->opts.no_live_map)
        fp_map_put(&p->live, b);
    b->requested = size;
    b->stamp = p->st.num_allocs + 1; /* the allocation's ordinal */
    fp_record_alloc(p, b->stamp, size);
    fp_stat *a = &p->st.allocated_bytes[FP_ALL];
    int64_t old_peak = a->peak;
    fp_account_used(p, b, +1);
    fp_account_active(p, b, +1);
    if (a->peak > old_peak) /* a new peak: remember the free space then */
        p->st.largest_free_at_peak = largest_free_locked(p);
    p->st.num_allocs++;
    g->addr = b->addr;
    g->size = b->size;
    g->handle = b;
    return 0;
}

/* The lock of the hot calls: none in a pool that one thread alone calls
 * (opts.solo, a replay), where an uncontended lock and unlock were a
 * tenth of a replay's time. */
static void lock_hot(fp_pool *p)
{
    if (!p->opts.solo)
        pthread_mutex_lock(&p->lock);
}

static void unlock_hot(fp_pool *p)
{
    if (!p->opts.solo)
        pthread_mutex_unlock(&p->lock);
}

/* FP_ASSERT_LEVEL 2 (base/fp_assert.h): the whole pool checked after every
 * allocation and free, as the tests do. */
static void check_whole(fp_pool *p)
{
#if FP_ASSERT_LEVEL >= 2
    char msg[256];
    if (fp_pool_check(p, msg, sizeof msg))
        fp_assert_fail(__FILE__, __LINE__, "fp_pool_check(p) == 0", msg);
#else
    (void)p;
#endif
}

int fp_pool_alloc_grant(fp_pool *p, size_t size, uint64_t unsafe_from, fp_grant *g)
{
    alloc_req rq = {.size = size, .unsafe_from = unsafe_from};
    lock_hot(p);
    int err = alloc_locked(p, &rq, g);
    unlock_hot(p);
    check_whole(p);
    return err;
}

int fp_pool_front_alloc(fp_pool *p, fp_tcache *t, size_t size, uint64_t unsafe_from,
                        uint64_t stream, fp_grant *g, int *same_stream)
{
    *same_stream = 0;
    if (t && __atomic_load_n(&p->front_on, __ATOMIC_ACQUIRE) && size <= FP_MAX_REQUEST &&
        fp_front_take(p, t, fp_round_size(&p->opts, size), unsafe_from, stream, g, same_stream))
        return 0;
    alloc_req rq = {.size = size, .unsafe_from = unsafe_from};
    pthread_mutex_lock(&p->lock);
    int err = alloc_locked(p, &rq, g);
    if (!err && t)
        fp_front_adopt(p, t, g);
    pthread_mutex_unlock(&p->lock);
    check_whole(p);
    return err;
}

int fp_pool_alloc(fp_pool *p, size_t size, uint64_t *addr)
{
    fp_grant g;
    int err = fp_pool_alloc_grant(p, size, UINT64_MAX, &g);
    if (!err)
        *addr = g.addr;
    return err;
}

/* ---- free ----------------------------------------------------------------- */

/* Takes free block b out of the index, with its accounting. */
static void unfile(fp_pool *p, fp_index *ix, fp_block *b)
{
    fp_account_split_free(p, b, -1);
    fp_index_remove(ix, b);
}

static void file(fp_pool *p, fp_index *ix, fp_block *b)
{
    fp_index_insert(ix, b);
    fp_account_split_free(p, b, +1);
}

/* Folds b->next into b; both are free and out of the index. */
static void merge_next(fp_pool *p, fp_block *b)
{
    fp_block *n = b->next;
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    fp_block_put(p, n);
}

static inline __attribute__((always_inline)) void free_block(fp_pool *p, fp_block *b)
{
    fp_index *ix = fp_index_of(p, b->small);
    fp_account_used(p, b, -1);
    fp_account_active(p, b, -1);
    b->state = FP_BLOCK_FREE;
    b->requested = 0;
    b->stamp = clock_now(p);
    if (b->next && b->next->state == FP_BLOCK_FREE) {
        unfile(p, ix, b->next);
        merge_next(p, b);
    }
    if (b->prev && b->prev->state == FP_BLOCK_FREE) {
        fp_block *prev = b->prev;
        unfile(p, ix, prev);
        merge_next(p, prev);
        prev->stamp = clock_now(p);
        b = prev;
    }
    file(p, ix, b);
}

/* A free of a block that is not live here: EINVAL (counted) inside one
 * of the pool's segments, else ENOENT (not counted: not the pool's). */
static int not_live(fp_pool *p, uint64_t addr, bool foreign_ok)
{
    if (foreign_ok && !fp_segtab_find(&p->segs, addr))
        return ENOENT;
    p->st.num_invalid_frees++;
    return EINVAL;
}

static int free_locked(fp_pool *p, uint64_t addr, bool foreign_ok, fp_freed *out)
{
    if (p->owners.count && fp_front_disown(p, addr)) { /* in a thread's cache: freed already */
        p->st.num_invalid_frees++;
        return EINVAL;
    }
    fp_block *b = fp_map_take(&p->live, addr);
    if (!b)
        return not_live(p, addr, foreign_ok);
    fp_freed f = {.size = b->size, .requested = b->requested, .seq = b->stamp};
    fp_record_free(p, b->stamp, b->requested);
    free_block(p, b);
    p->st.num_frees++;
    f.freed_at = clock_now(p);
    if (out)
        *out = f;
    return 0;
}

static void free_live_locked(fp_pool *p, uint64_t addr)
{
    fp_block *b = fp_map_take(&p->live, addr);
    fp_assert(b != NULL, "a cached block is live in the pool");
    if (!b)
        return;
    fp_record_free(p, b->stamp, b->requested);
    free_block(p, b);
    p->st.num_frees++;
}

int fp_pool_free_seen(fp_pool *p, uint64_t addr, fp_freed *out, fp_free_seen seen, void *ud)
{
    fp_map_prefetch(&p->live, addr);
    fp_freed f;
    pthread_mutex_lock(&p->lock);
    int err = free_locked(p, addr, true, &f);
    if (!err && seen)
        seen(ud, &f);
    pthread_mutex_unlock(&p->lock);
    if (!err && out)
        *out = f;
    check_whole(p);
    return err;
}

int fp_pool_free_handle(fp_pool *p, void *handle)
{
    fp_block *b = handle;
    lock_hot(p);
    int err = b && b->state == FP_BLOCK_ALLOCATED ? 0 : EINVAL;
    if (!err && !p->opts.no_live_map)
        fp_map_take(&p->live, b->addr);
    if (!err) {
        fp_record_free(p, b->stamp, b->requested);
        free_block(p, b);
        p->st.num_frees++;
    } else {
        p->st.num_invalid_frees++;
    }
    unlock_hot(p);
    check_whole(p);
    return err;
}

int fp_pool_free_at(fp_pool *p, uint64_t addr, uint64_t *freed_at, size_t *size)
{
    fp_freed f;
    int err = fp_pool_free_seen(p, addr, &f, NULL, NULL);
    if (!err && freed_at)
        *freed_at = f.freed_at;
    if (!err && size)
        *size = f.size;
    return err;
}

int fp_pool_free(fp_pool *p, uint64_t addr)
{
    if (!p->opts.solo) /* warms the map's line before the lock is taken */
        fp_map_prefetch(&p->live, addr);
    lock_hot(p);
    int err = free_locked(p, addr, false, NULL);
    unlock_hot(p);
    check_whole(p);
    return err;
}

/* ---- lifetime and queries -------------------------------------------------- */

int fp_pool_create(const fp_pool_opts *opts, const fp_backend *backend, fp_pool **out)
{
    if (!opts || !backend || !backend->reserve || !backend->release || !out)
        return EINVAL;
    fp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ENOMEM;
    if (fp_map_init(&p->live)) {
        free(p);
        return ENOMEM;
    }
    fp_mutex_init_brief(&p->lock);
    p->opts = *opts;
    p->be = *backend;
    p->cap = fp_pool_opts_cap(opts);
    fp_record_init(&p->rec, opts->record_bytes / sizeof(fp_rec_event));
    fp_vmm_setup(p);
    fp_front_init(p);
    p->free_live = free_live_locked;
    *out = p;
    return 0;
}

void fp_pool_destroy(fp_pool *p, int keep_segments)
{
    if (!p)
        return;
    for (fp_segment *s = p->seg_head, *n; s; s = n) {
        n = s->next;
        if (!keep_segments && s->vmm)
            fp_vmm_release_range(p, s);
        else if (!keep_segments)
            p->be.release(p->be.ctx, s->addr, s->size);
        fp_segment_free(s);
    }
    for (fp_chunk *c = p->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    fp_front_destroy(p);
    fp_map_fini(&p->live);
    fp_record_fini(&p->rec);
    fp_segtab_free(&p->segs);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Live block b (or NULL), unless it sits in a thread's cache: the
 * program freed it, so no query answers it as live. */
static fp_block *live_for_queries(fp_pool *p, fp_block *b)
{
    return b && p->owners.count && fp_front_cached(p, b->addr) ? NULL : b;
}

int fp_pool_lookup(fp_pool *p, uint64_t addr, size_t *size, uint64_t *seq)
{
    pthread_mutex_lock(&p->lock);
    fp_block *b = live_for_queries(p, fp_map_get(&p->live, addr));
    bool used = b != NULL;
    *size = used ? b->requested : 0;
    *seq = used ? b->stamp : 0;
    pthread_mutex_unlock(&p->lock);
    return used ? 0 : EINVAL;
}

int fp_pool_owns(fp_pool *p, uint64_t addr, size_t *size)
{
    pthread_mutex_lock(&p->lock);
    fp_segment *s = fp_segtab_find(&p->segs, addr);
    fp_block *b = s ? live_for_queries(p, fp_map_get(&p->live, addr)) : NULL;
    if (size)
        *size = b ? b->requested : 0;
    pthread_mutex_unlock(&p->lock);
    return s != NULL;
}

int fp_pool_find_block(fp_pool *p, uint64_t addr, fp_found *out)
{
    pthread_mutex_lock(&p->lock);
    fp_segment *s = fp_segtab_find(&p->segs, addr);
    fp_block *b = s ? s->first : NULL;
    while (b && addr - b->addr >= b->size) /* the block whose bytes hold addr */
        b = b->next;
    bool live = b && b->state == FP_BLOCK_ALLOCATED && addr - b->addr < b->requested &&
                live_for_queries(p, b);
    if (live)
        *out = (fp_found){.addr = b->addr,
                          .requested = b->requested,
                          .seq = b->stamp,
                          .segment = s->addr,
                          .vmm = s->vmm};
    pthread_mutex_unlock(&p->lock);
    return !s ? ESRCH : live ? 0 : ENOENT;
}

/* The context that held the segments is gone, and the driver freed them:
 * drop every block and segment without calling the backend. */
void fp_pool_forget_segments(fp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    fp_front_forget(p);
    for (fp_segment *s = p->seg_head, *n; s; s = n) {
        n = s->next;
        for (fp_block *b = s->first, *bn; b; b = bn) {
            bn = b->next;
            if (b->state != FP_BLOCK_FREE) {
                fp_map_take(&p->live, b->addr);
                fp_account_used(p, b, -1);
                p->st.num_frees++;
                fp_account_active(p, b, -1);
            } else {
                unfile(p, fp_index_of(p, s->small), b);
            }
            fp_block_put(p, b);
        }
        fp_account_segment(p, s, -1);
        fp_segtab_remove(&p->segs, s);
        fp_segment_free(s);
    }
    p->seg_head = p->seg_tail = NULL;
    pthread_mutex_unlock(&p->lock);
}

int fp_pool_empty_cache(fp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    fp_front_flush(p, false);
    if (p->be.synchronize)
        p->be.synchronize(p->be.ctx);
    release_free_segments(p);
    fp_vmm_trim(p);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* The wholly free segment freed longest ago, or NULL. */
static fp_segment *oldest_free_segment(fp_pool *p)
{
    fp_segment *best = NULL;
    for (fp_segment *s = p->seg_head; s; s = s->next)
        if (!s->vmm && segment_is_free(s) && (!best || s->first->stamp < best->first->stamp))
            best = s;
    return best;
}

static size_t trim_locked(fp_pool *p, size_t keep);

size_t fp_pool_trim(fp_pool *p, size_t keep)
{
    pthread_mutex_lock(&p->lock);
    size_t bytes = trim_locked(p, keep);
    pthread_mutex_unlock(&p->lock);
    return bytes;
}

int fp_pool_trim_try(fp_pool *p, size_t keep, size_t *bytes)
{
    if (pthread_mutex_trylock(&p->lock) != 0)
        return EBUSY;
    *bytes = trim_locked(p, keep);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Least recently freed first: whole classic segments, then idle pages. */
static size_t trim_locked(fp_pool *p, size_t keep)
{
    size_t bytes = 0;
    fp_front_flush(p, false);
    fp_segment *s;
    while (reserved_now(p) > keep && (s = oldest_free_segment(p))) {
        bytes += s->size;
        release_segment(p, s);
    }
    if (reserved_now(p) > keep) /* then idle pages of virtual-memory segments */
        bytes += fp_vmm_trim_to(p, reserved_now(p) - keep);
    return bytes;
}

/* A saturated total (INT64_MAX) stays so: what part came since is unknown. */
static void stat_since(fp_stat *s, const fp_stat *base, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s[i].allocated -= s[i].allocated == INT64_MAX ? 0 : base[i].allocated;
        s[i].freed -= s[i].freed == INT64_MAX ? 0 : base[i].freed;
    }
}

void fp_pool_stats_since(fp_pool_stats *st, const fp_pool_stats *base)
{
#define FP_SINCE(f, n) stat_since((fp_stat *)&st->f, (const fp_stat *)&base->f, n);
    FP_POOL_STATS(FP_SINCE)
#undef FP_SINCE
    uint64_t *c = &st->num_allocs;
    const uint64_t *b = &base->num_allocs;
    for (size_t i = 0; i < FP_POOL_NCOUNTS; i++)
        c[i] -= b[i];
}

void fp_pool_get_stats(fp_pool *p, fp_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    fp_front_stats(p, out);
    out->largest_free = largest_free_locked(p);
    pthread_mutex_unlock(&p->lock);
}

static void reset_mark(fp_stat *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s[i].mark = s[i].current;
}

void fp_pool_reset_peaks(fp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    fp_pool_stats *st = &p->st;
#define FP_RESET(f, n) reset_mark((fp_stat *)&st->f, n);
    FP_POOL_STATS(FP_RESET)
#undef FP_RESET
    pthread_mutex_unlock(&p->lock);
}

int fp_pool_set_fraction(fp_pool *p, double fraction)
{
    if (!(fraction >= 0 && fraction <= 1))
        return EINVAL;
    pthread_mutex_lock(&p->lock);
    p->opts.memory_fraction = fraction;
    p->cap = fp_pool_opts_cap(&p->opts);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void fp_pool_note_oom(fp_pool *p, size_t size)
{
    pthread_mutex_lock(&p->lock);
    note_oom(p, size, fp_round_size(&p->opts, size));
    pthread_mutex_unlock(&p->lock);
}

void fp_pool_oom_averted(fp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->st.num_ooms)
        p->st.num_ooms--;
    pthread_mutex_unlock(&p->lock);
}

void fp_pool_last_oom(fp_pool *p, fp_oom_info *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->last_oom;
    pthread_mutex_unlock(&p->lock);
}

const fp_pool_opts *fp_pool_get_opts(const fp_pool *p)
{
    return &p->opts;
}

uint64_t fp_pool_clock(const fp_pool *p)
{
    return __atomic_load_n(&p->clock, __ATOMIC_ACQUIRE);
}

size_t fp_pool_reserved_bytes(const fp_pool *p)
{
    return __atomic_load_n(&p->reserved_mirror, __ATOMIC_RELAXED);
}

static size_t idle_locked(const fp_pool *p)
{
    return reserved_now(p) - (size_t)p->st.allocated_bytes[FP_ALL].current;
}

size_t fp_pool_idle_bytes(fp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t idle = idle_locked(p);
    pthread_mutex_unlock(&p->lock);
    return idle;
}

int fp_pool_idle_try(fp_pool *p, size_t *idle)
{
    if (pthread_mutex_trylock(&p->lock) != 0)
        return EBUSY;
    *idle = idle_locked(p);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void fp_pool_fork_prepare(fp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    fp_front_fork_prepare(p);
}

int fp_pool_lock_free(fp_pool *p)
{
    if (pthread_mutex_trylock(&p->lock) != 0)
        return 0;
    bool ok = fp_front_locks_free(p);
    pthread_mutex_unlock(&p->lock);
    return ok;
}

void fp_pool_fork_after(fp_pool *p, int child)
{
    if (child) {
        fp_mutex_init_brief(&p->lock);
        pthread_mutex_lock(&p->lock);
        fp_front_fork_after(p, true);
        pthread_mutex_unlock(&p->lock);
    } else {
        fp_front_fork_after(p, false);
        pthread_mutex_unlock(&p->lock);
    }
}
