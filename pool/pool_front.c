/* pool_front.c - the pool's front end: each thread's cache of the blocks
 * it freed, so that a thread's free and its next allocation of a fitting
 * size take no shared lock (fp_pool.h, "the front end"; docs/pool.md).
 *
 * A thread's cache (fp_tcache) has its own lock, which only its thread
 * takes on the hot path; the pool takes it (pool lock first, then the
 * cache's) to flush, to disown a block another thread frees, to read the
 * stats and at fork.  The cache knows the blocks its thread allocated
 * (`owned`: address -> size, bit 0 set while cached) and holds the freed
 * ones in a FIFO of FRONT_PER_CLASS per size class (four classes per power
 * of two, blocks up to FRONT_MAX_BLOCK), each with its free stamp and
 * stream.  The pool maps every owned address to its cache (`owners`), so a
 * free from any thread finds it.
 *
 * Invariants:
 *  - an address is in a cache's `owned` iff `owners` maps it to that cache,
 *    and then it is a live block of the pool;
 *  - a cached block is in its class's FIFO iff its `owned` value has bit 0;
 *  - a cache's bytes and kind counts equal the sum over its FIFOs;
 *  - nothing is cached while front_on is 0 (one thread joined, ever).
 */
#include "fp_lock.h"
#include "pool_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FRONT_CLASSES   64
#define FRONT_PER_CLASS 4
#define FRONT_OWNED_MAX 1024               /* blocks a cache follows at once  */
#define FRONT_MAX_BLOCK ((size_t)16 << 20) /* larger blocks are never cached  */
#define CACHED          1u                 /* bit 0 of an `owned` value       */

typedef struct cached {
    uint64_t addr, stamp, stream;
    size_t size;
} cached;

struct fp_tcache {
    pthread_mutex_t lock;
    fp_tcache *next; /* the pool's list, under the pool's lock */
    fp_hmap owned;
    cached fifo[FRONT_CLASSES][FRONT_PER_CLASS]; /* oldest first */
    uint8_t n[FRONT_CLASSES];
    size_t bytes;
    size_t kind_bytes[FP_NKINDS];
    int64_t kind_blocks[FP_NKINDS];
    uint64_t allocs, frees;
};

static uint64_t next_serial = 1;

uint64_t fp_pool_serial(const fp_pool *p)
{
    return p->serial;
}

/* Four classes per power of two of 512-byte units. */
static int class_of(size_t size)
{
    uint64_t u = size >> 9;
    int k = 63 - __builtin_clzll(u);
    int sub = k >= 2 ? (int)((u >> (k - 2)) & 3) : (int)(u & (uint64_t)k) * 2;
    return k * 4 + sub;
}

static bool front_on(const fp_pool *p)
{
    return __atomic_load_n(&p->front_on, __ATOMIC_ACQUIRE) != 0;
}

int fp_pool_front_join(fp_pool *p, fp_tcache **out)
{
    fp_tcache *t = calloc(1, sizeof *t);
    if (!t || fp_hmap_init(&t->owned, 0)) {
        free(t);
        return ENOMEM;
    }
    fp_mutex_init_brief(&t->lock);
    pthread_mutex_lock(&p->lock);
    if (!p->owners.slots && fp_hmap_init(&p->owners, 0)) {
        pthread_mutex_unlock(&p->lock);
        fp_hmap_fini(&t->owned);
        free(t);
        return ENOMEM;
    }
    t->next = p->tcaches;
    p->tcaches = t;
    if (++p->nthreads >= 2 && p->opts.thread_cache)
        __atomic_store_n(&p->front_on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
    *out = t;
    return 0;
}

/* ---- a thread's own calls --------------------------------------------- */

static void owned_set(fp_tcache *t, uint64_t addr, uint64_t val)
{
    size_t i = fp_hmap_slot(&t->owned, addr);
    t->owned.slots[i].val = val; /* the key is there: only the value changes */
}

static void count_cached(fp_tcache *t, size_t size, int sign)
{
    int k = fp_pool_is_small(size) ? FP_SMALL : FP_LARGE;
    t->bytes = sign > 0 ? t->bytes + size : t->bytes - size;
    t->kind_bytes[k] = sign > 0 ? t->kind_bytes[k] + size : t->kind_bytes[k] - size;
    t->kind_blocks[k] += sign;
}

static void fifo_remove(fp_tcache *t, int c, int i)
{
    memmove(&t->fifo[c][i], &t->fifo[c][i + 1], (size_t)(t->n[c] - i - 1) * sizeof(cached));
    t->n[c]--;
}

/* The entry of class c that fits rounded (same kind, at most a quarter
 * more), freed before unsafe_from: one freed on stream first, else the
 * oldest; -1 when none. */
static int pick(const fp_tcache *t, int c, size_t rounded, uint64_t unsafe_from, uint64_t stream)
{
    int best = -1;
    bool small = fp_pool_is_small(rounded);
    for (int i = 0; i < t->n[c]; i++) {
        const cached *e = &t->fifo[c][i];
        if (e->size < rounded || e->size - rounded > rounded / 4 ||
            (bool)fp_pool_is_small(e->size) != small || e->stamp >= unsafe_from)
            continue;
        if (stream && e->stream == stream)
            return i;
        if (best < 0)
            best = i;
    }
    return best;
}

bool fp_front_take(fp_pool *p, fp_tcache *t, size_t rounded, uint64_t unsafe_from, uint64_t stream,
                   fp_grant *g, int *same_stream)
{
    int c0 = class_of(rounded), c = -1, i = -1;
    pthread_mutex_lock(&t->lock);
    for (int k = c0; k <= c0 + 1 && k < FRONT_CLASSES && i < 0; k++)
        if ((i = pick(t, k, rounded, unsafe_from, stream)) >= 0)
            c = k;
    if (i >= 0) {
        cached e = t->fifo[c][i];
        fifo_remove(t, c, i);
        count_cached(t, e.size, -1);
        owned_set(t, e.addr, e.size);
        t->allocs++;
        *same_stream = stream && e.stream == stream;
        *g = (fp_grant){.addr = e.addr, .size = e.size, .freed_at = e.stamp};
    }
    pthread_mutex_unlock(&t->lock);
    if (i < 0)
        return false;
    /* The clock passes the stamp, as an allocation in the pool makes it:
     * a fence made for this grant then covers it. */
    uint64_t now = __atomic_load_n(&p->clock, __ATOMIC_ACQUIRE);
    if (now <= g->freed_at)
        now = __atomic_add_fetch(&p->clock, 1, __ATOMIC_ACQ_REL);
    g->now = now;
    return true;
}

int fp_pool_front_free(fp_pool *p, fp_tcache *t, uint64_t addr, uint64_t stream, size_t *size,
                       uint64_t *freed_at)
{
    if (!t || !front_on(p))
        return ENOENT;
    pthread_mutex_lock(&t->lock);
    uint64_t v = fp_hmap_at(&t->owned, fp_hmap_slot(&t->owned, addr));
    size_t sz = (size_t)(v & ~(uint64_t)CACHED);
    int c = v && !(v & CACHED) && sz <= FRONT_MAX_BLOCK ? class_of(sz) : -1;
    bool take = c >= 0 && t->n[c] < FRONT_PER_CLASS && t->bytes + sz <= p->opts.thread_cache;
    if (take) {
        uint64_t stamp = __atomic_load_n(&p->clock, __ATOMIC_ACQUIRE);
        t->fifo[c][t->n[c]++] =
            (cached){.addr = addr, .stamp = stamp, .stream = stream, .size = sz};
        owned_set(t, addr, v | CACHED);
        count_cached(t, sz, +1);
        t->frees++;
        *size = sz;
        *freed_at = stamp;
    }
    pthread_mutex_unlock(&t->lock);
    return take ? 0 : ENOENT; /* else the pool frees it (and disowns it) */
}

/* ---- under the pool's lock ----------------------------------------------- */

void fp_front_adopt(fp_pool *p, fp_tcache *t, const fp_grant *g)
{
    if (!t || !front_on(p) || g->size > FRONT_MAX_BLOCK || fp_hmap_make_room(&p->owners))
        return;
    pthread_mutex_lock(&t->lock);
    if (t->owned.count < FRONT_OWNED_MAX && fp_hmap_make_room(&t->owned) == 0) {
        fp_hmap_fill(&t->owned, fp_hmap_slot(&t->owned, g->addr), g->addr, g->size);
        fp_hmap_fill(&p->owners, fp_hmap_slot(&p->owners, g->addr), g->addr,
                     (uint64_t)(uintptr_t)t);
    }
    pthread_mutex_unlock(&t->lock);
}

static void erase(fp_hmap *m, uint64_t addr)
{
    size_t i = fp_hmap_slot(m, addr);
    if (fp_hmap_at(m, i))
        fp_hmap_erase(m, i);
}

int fp_front_disown(fp_pool *p, uint64_t addr)
{
    if (!p->owners.count)
        return 0;
    size_t i = fp_hmap_slot(&p->owners, addr);
    fp_tcache *t = (fp_tcache *)(uintptr_t)fp_hmap_at(&p->owners, i);
    if (!t)
        return 0;
    pthread_mutex_lock(&t->lock);
    size_t j = fp_hmap_slot(&t->owned, addr);
    bool cached_now = (fp_hmap_at(&t->owned, j) & CACHED) != 0;
    if (!cached_now)
        fp_hmap_erase(&t->owned, j);
    pthread_mutex_unlock(&t->lock);
    if (cached_now)
        return EINVAL;
    fp_hmap_erase(&p->owners, i);
    return 0;
}

bool fp_front_cached(fp_pool *p, uint64_t addr)
{
    fp_tcache *t = (fp_tcache *)(uintptr_t)fp_hmap_at(&p->owners, fp_hmap_slot(&p->owners, addr));
    if (!t)
        return false;
    pthread_mutex_lock(&t->lock);
    bool cached_now = (fp_hmap_at(&t->owned, fp_hmap_slot(&t->owned, addr)) & CACHED) != 0;
    pthread_mutex_unlock(&t->lock);
    return cached_now;
}

/* Every cached block of t back to best fit (t's lock held). */
static size_t flush_one(fp_pool *p, fp_tcache *t)
{
    size_t bytes = 0;
    for (int c = 0; c < FRONT_CLASSES; c++) {
        for (int i = 0; i < t->n[c]; i++) {
            const cached *e = &t->fifo[c][i];
            erase(&t->owned, e->addr);
            erase(&p->owners, e->addr);
            p->free_live(p, e->addr);
            bytes += e->size;
        }
        t->n[c] = 0;
    }
    t->bytes = 0;
    memset(t->kind_bytes, 0, sizeof t->kind_bytes);
    memset(t->kind_blocks, 0, sizeof t->kind_blocks);
    return bytes;
}

size_t fp_front_flush(fp_pool *p, bool for_growth)
{
    size_t bytes = 0;
    for (fp_tcache *t = p->tcaches; t; t = t->next) {
        pthread_mutex_lock(&t->lock);
        if (t->bytes)
            bytes += flush_one(p, t);
        pthread_mutex_unlock(&t->lock);
    }
    if (bytes && for_growth) {
        p->front.flushes++;
        p->front.returned += bytes;
    }
    return bytes;
}

void fp_front_stats(fp_pool *p, fp_pool_stats *st)
{
    for (fp_tcache *t = p->tcaches; t; t = t->next) {
        pthread_mutex_lock(&t->lock);
        for (int k = FP_SMALL; k <= FP_LARGE; k++) {
            int64_t b = (int64_t)t->kind_bytes[k], n = t->kind_blocks[k];
            int ks[2] = {FP_ALL, k};
            for (int j = 0; j < 2; j++) {
                st->allocated_bytes[ks[j]].current -= b;
                st->active_bytes[ks[j]].current -= b;
                st->allocations[ks[j]].current -= n;
                st->active[ks[j]].current -= n;
            }
        }
        pthread_mutex_unlock(&t->lock);
    }
}

void fp_pool_front_counts(fp_pool *p, fp_front_counts *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->front;
    out->threads = p->nthreads;
    for (fp_tcache *t = p->tcaches; t; t = t->next) {
        pthread_mutex_lock(&t->lock);
        out->allocs += t->allocs;
        out->frees += t->frees;
        pthread_mutex_unlock(&t->lock);
    }
    pthread_mutex_unlock(&p->lock);
}

/* t's records go: its cached blocks back (t locked), its owned ones
 * plain live blocks of the pool. */
static void drop_records(fp_pool *p, fp_tcache *t)
{
    flush_one(p, t);
    p->front.allocs += t->allocs; /* its counts stay the pool's */
    p->front.frees += t->frees;
    for (size_t i = 0; i <= t->owned.mask; i++)
        if (t->owned.slots[i].val)
            erase(&p->owners, t->owned.slots[i].key);
}

static void free_cache(fp_tcache *t)
{
    fp_hmap_fini(&t->owned);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

void fp_pool_front_leave(fp_pool *p, fp_tcache *t)
{
    pthread_mutex_lock(&p->lock);
    fp_tcache **at = &p->tcaches;
    while (*at && *at != t)
        at = &(*at)->next;
    if (*at) {
        *at = t->next;
        pthread_mutex_lock(&t->lock);
        drop_records(p, t);
        pthread_mutex_unlock(&t->lock);
    }
    pthread_mutex_unlock(&p->lock);
    free_cache(t);
}

void fp_pool_front_stream_gone(fp_pool *p, uint64_t stream)
{
    pthread_mutex_lock(&p->lock);
    for (fp_tcache *t = p->tcaches; t; t = t->next) {
        pthread_mutex_lock(&t->lock);
        for (int c = 0; c < FRONT_CLASSES; c++)
            for (int i = 0; i < t->n[c]; i++)
                if (t->fifo[c][i].stream == stream)
                    t->fifo[c][i].stream = 0;
        pthread_mutex_unlock(&t->lock);
    }
    pthread_mutex_unlock(&p->lock);
}

void fp_front_forget(fp_pool *p)
{
    for (fp_tcache *t = p->tcaches; t; t = t->next) {
        pthread_mutex_lock(&t->lock);
        memset(t->n, 0, sizeof t->n);
        t->bytes = 0;
        memset(t->kind_bytes, 0, sizeof t->kind_bytes);
        memset(t->kind_blocks, 0, sizeof t->kind_blocks);
        for (size_t i = 0; i <= t->owned.mask; i++)
            t->owned.slots[i].val = 0;
        t->owned.count = 0;
        pthread_mutex_unlock(&t->lock);
    }
    if (p->owners.slots) {
        memset(p->owners.slots, 0, (p->owners.mask + 1) * sizeof *p->owners.slots);
        p->owners.count = 0;
    }
}

void fp_front_destroy(fp_pool *p)
{
    for (fp_tcache *t = p->tcaches, *n; t; t = n) {
        n = t->next;
        free_cache(t);
    }
    p->tcaches = NULL;
    fp_hmap_fini(&p->owners);
}

void fp_front_fork_prepare(fp_pool *p)
{
    for (fp_tcache *t = p->tcaches; t; t = t->next)
        pthread_mutex_lock(&t->lock);
}

/* The child has only the forking thread: every cache goes back. */
void fp_front_fork_after(fp_pool *p, bool child)
{
    for (fp_tcache *t = p->tcaches; t; t = t->next) {
        if (child)
            fp_mutex_init_brief(&t->lock);
        else
            pthread_mutex_unlock(&t->lock);
    }
    if (child)
        fp_front_flush(p, false);
}

bool fp_front_locks_free(fp_pool *p)
{
    bool ok = true;
    for (fp_tcache *t = p->tcaches; t && ok; t = t->next) {
        ok = pthread_mutex_trylock(&t->lock) == 0;
        if (ok)
            pthread_mutex_unlock(&t->lock);
    }
    return ok;
}

/* The pool's serial, at its creation (pool.c). */
void fp_front_init(fp_pool *p)
{
    p->serial = __atomic_fetch_add(&next_serial, 1, __ATOMIC_RELAXED);
}
