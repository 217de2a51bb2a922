/* ref_core.c - what the two reference cores share (ref_core.h): PyTorch's
 * size and split rules, split on allocation, merge on free, segments from
 * a simulated unlimited backend, block headers from chunks, the live-block
 * map and one mutex.  The free index is called through ref_index only.
 * Invariants: see ref_core.h; ref_core_check verifies them. */
#include "ref_core.h"
#include "ref_map.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SMALL_SIZE    (1 * REF_MIB)
#define SMALL_SEGMENT (2 * REF_MIB)
#define LARGE_SEGMENT (20 * REF_MIB)
#define MIN_LARGE_REQ (10 * REF_MIB)
#define ROUND_LARGE   (2 * REF_MIB)
#define CHUNK         4096

struct ref_core {
    const ref_index *ops;
    void *idx[2]; /* [0] large, [1] small */
    ref_map live;
    pthread_mutex_t lock;
    uint64_t next_addr;
    size_t reserved, peak_reserved;
    ref_block *spare; /* recycled headers, linked by next      */
    ref_block **segs; /* first block of every segment, for the check */
    size_t nsegs, segcap;
    void **chunks;
    size_t nchunks, chunkcap;
};

size_t ref_round(size_t size)
{
    if (size < REF_MIN_BLOCK)
        return REF_MIN_BLOCK;
    return (size + REF_MIN_BLOCK - 1) & ~(REF_MIN_BLOCK - 1);
}

size_t ref_segment_size(size_t rounded)
{
    if (rounded <= SMALL_SIZE)
        return SMALL_SEGMENT;
    if (rounded < MIN_LARGE_REQ)
        return LARGE_SEGMENT;
    return (rounded + ROUND_LARGE - 1) & ~(ROUND_LARGE - 1);
}

static int should_split(const ref_block *b, size_t rounded)
{
    size_t rest = b->size - rounded;
    return b->small ? rest >= REF_MIN_BLOCK : rest > SMALL_SIZE;
}

static int push_ptr(void ***arr, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void **a = realloc(*arr, c * sizeof *a);
        if (!a)
            return ENOMEM;
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = p;
    return 0;
}

static ref_block *new_block(ref_core *c)
{
    if (!c->spare) {
        ref_block *chunk = malloc(CHUNK * sizeof *chunk);
        if (!chunk || push_ptr(&c->chunks, &c->nchunks, &c->chunkcap, chunk)) {
            free(chunk);
            return NULL;
        }
        for (size_t i = 0; i < CHUNK; i++) {
            chunk[i].next = c->spare;
            c->spare = &chunk[i];
        }
    }
    ref_block *b = c->spare;
    c->spare = b->next;
    *b = (ref_block){0};
    return b;
}

static void drop_block(ref_core *c, ref_block *b)
{
    b->next = c->spare;
    c->spare = b;
}

int ref_core_create(const ref_index *ops, uint64_t base, ref_core **out)
{
    ref_core *c = calloc(1, sizeof *c);
    if (!c)
        return ENOMEM;
    c->ops = ops;
    c->next_addr = base;
    c->idx[0] = ops->create();
    c->idx[1] = ops->create();
    if (!c->idx[0] || !c->idx[1] || ref_map_init(&c->live)) {
        if (c->idx[0])
            ops->destroy(c->idx[0]);
        if (c->idx[1])
            ops->destroy(c->idx[1]);
        free(c);
        return ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

void ref_core_destroy(ref_core *c)
{
    if (!c)
        return;
    c->ops->destroy(c->idx[0]);
    c->ops->destroy(c->idx[1]);
    ref_map_fini(&c->live);
    for (size_t i = 0; i < c->nchunks; i++)
        free(c->chunks[i]);
    free(c->chunks);
    free(c->segs);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* A new segment as one free block (not in the index). */
static ref_block *reserve(ref_core *c, size_t rounded)
{
    size_t seg = ref_segment_size(rounded);
    ref_block *b = new_block(c);
    if (!b)
        return NULL;
    if (push_ptr((void ***)&c->segs, &c->nsegs, &c->segcap, b)) {
        drop_block(c, b);
        return NULL;
    }
    b->addr = c->next_addr;
    b->size = seg;
    b->small = rounded <= SMALL_SIZE;
    b->is_free = 1;
    c->next_addr += (seg + ROUND_LARGE - 1) & ~(uint64_t)(ROUND_LARGE - 1);
    c->reserved += seg;
    if (c->reserved > c->peak_reserved)
        c->peak_reserved = c->reserved;
    return b;
}

/* Cut b to rounded bytes; the rest becomes a free block in the index. */
static int split(ref_core *c, ref_block *b, size_t rounded)
{
    ref_block *rest = new_block(c);
    if (!rest)
        return ENOMEM;
    rest->addr = b->addr + rounded;
    rest->size = b->size - rounded;
    rest->small = b->small;
    rest->is_free = 1;
    rest->prev = b;
    rest->next = b->next;
    if (b->next)
        b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    c->ops->insert(c->idx[rest->small], rest);
    return 0;
}

static int alloc_locked(ref_core *c, size_t size, uint64_t *addr)
{
    size_t rounded = ref_round(size);
    void *idx = c->idx[rounded <= SMALL_SIZE];
    ref_block *b = c->ops->find(idx, rounded);
    if (b)
        c->ops->remove(idx, b);
    else if (!(b = reserve(c, rounded)))
        return ENOMEM;
    if (should_split(b, rounded) && split(c, b, rounded))
        return ENOMEM; /* headers exhausted; b is left out of the pool */
    if (ref_map_put(&c->live, b))
        return ENOMEM;
    b->is_free = 0;
    *addr = b->addr;
    return 0;
}

int ref_core_alloc(ref_core *c, size_t size, uint64_t *addr)
{
    pthread_mutex_lock(&c->lock);
    int rc = alloc_locked(c, size, addr);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* b takes over its following neighbour n, which leaves the segment. */
static void join(ref_core *c, ref_block *b, ref_block *n)
{
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    drop_block(c, n);
}

static void free_locked(ref_core *c, ref_block *b)
{
    ref_block *n = b->next, *p = b->prev;
    if (n && n->is_free) {
        c->ops->remove(c->idx[n->small], n);
        join(c, b, n);
    }
    if (p && p->is_free) {
        c->ops->remove(c->idx[p->small], p);
        join(c, p, b);
        b = p;
    }
    b->is_free = 1;
    c->ops->insert(c->idx[b->small], b);
}

int ref_core_free(ref_core *c, uint64_t addr)
{
    pthread_mutex_lock(&c->lock);
    ref_block *b = ref_map_take(&c->live, addr);
    if (b)
        free_locked(c, b);
    pthread_mutex_unlock(&c->lock);
    return b ? 0 : EINVAL;
}

size_t ref_core_block_size(ref_core *c, uint64_t addr)
{
    pthread_mutex_lock(&c->lock);
    ref_block *b = ref_map_get(&c->live, addr);
    size_t s = b ? b->size : 0;
    pthread_mutex_unlock(&c->lock);
    return s;
}

size_t ref_core_reserved(const ref_core *c)
{
    return c->reserved;
}

size_t ref_core_peak_reserved(const ref_core *c)
{
    return c->peak_reserved;
}

/* One segment: tiling, no free pair, index and map membership. */
static int check_segment(ref_core *c, ref_block *first, size_t *nfree, char *msg, size_t len)
{
    if (first->prev) {
        snprintf(msg, len, "segment at %#llx has a predecessor", (unsigned long long)first->addr);
        return EFAULT;
    }
    for (ref_block *b = first; b; b = b->next) {
        const char *bad = NULL;
        if (!b->size || b->size % REF_MIN_BLOCK)
            bad = "size is not a non-zero multiple of 512";
        else if (b->next && (b->next->addr != b->addr + b->size || b->next->prev != b))
            bad = "blocks do not tile the segment";
        else if (b->next && b->is_free && b->next->is_free)
            bad = "two free neighbours";
        else if (b->small != first->small)
            bad = "block of another pool";
        else if (b->is_free && !c->ops->contains(c->idx[b->small], b))
            bad = "free block missing from the index";
        else if (!b->is_free && ref_map_get(&c->live, b->addr) != b)
            bad = "live block missing from the map";
        if (bad) {
            snprintf(msg, len, "block %#llx size %zu: %s", (unsigned long long)b->addr, b->size,
                     bad);
            return EFAULT;
        }
        *nfree += b->is_free;
    }
    return 0;
}

int ref_core_check(ref_core *c, char *msg, size_t len)
{
    size_t nfree = 0, indexed = 0, live = 0, reserved = 0;
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nsegs && !rc; i++) {
        for (ref_block *b = c->segs[i]; b; b = b->next) {
            reserved += b->size;
            live += !b->is_free;
        }
        rc = check_segment(c, c->segs[i], &nfree, msg, len);
    }
    for (int k = 0; k < 2 && !rc; k++) {
        size_t n = 0;
        rc = c->ops->check(c->idx[k], &n, msg, len);
        indexed += n;
    }
    if (!rc && (indexed != nfree || live != c->live.used || reserved != c->reserved)) {
        snprintf(msg, len,
                 "counts differ: %zu indexed for %zu free, %zu mapped for %zu live, "
                 "%zu reserved for %zu",
                 indexed, nfree, c->live.used, live, c->reserved, reserved);
        rc = EFAULT;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
