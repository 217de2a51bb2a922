/* pool_internal.h - the pool's private structures, shared by the pool sources.
 *
 * A segment is one range reserved from the backend.  It is tiled by
 * blocks, linked in address order through prev/next.  Block headers live
 * in host memory: device memory is never ours to write.
 *
 * Invariants (see fp_pool_check):
 *  - blocks of a segment are contiguous: b->addr + b->size == b->next->addr,
 *    the first starts at the segment, the sizes sum to the segment size;
 *  - a free block has no free neighbour (free merges eagerly);
 *  - a block is in its pool's free index iff it is free;
 *  - a block is in the address map iff it is allocated.
 */
#ifndef FP_POOL_INTERNAL_H
#define FP_POOL_INTERNAL_H

#include "fp_pool.h"
#include <pthread.h>
#include <stdbool.h>

typedef struct fp_segment fp_segment;
typedef struct fp_block fp_block;

enum { FP_BLOCK_FREE = 0, FP_BLOCK_USED = 1 };

struct fp_block {
    uint64_t addr;          /* device address                         */
    size_t size;            /* bytes, a multiple of 512               */
    size_t requested;       /* caller's bytes while allocated         */
    fp_block *prev, *next;  /* physical neighbours in the segment     */
    fp_segment *seg;        /* owning segment                         */
    fp_block *left, *right; /* free index links (treap)               */
    uint32_t prio;          /* treap priority                         */
    uint8_t state;          /* FP_BLOCK_FREE or FP_BLOCK_USED         */
    uint64_t stamp;         /* alloc sequence when used; free time when free */
};

struct fp_segment {
    uint64_t addr;          /* base as the backend returned it        */
    size_t size;            /* bytes                                  */
    fp_block *first;        /* lowest block                           */
    fp_segment *prev, *next;/* all segments, in creation order        */
    bool small;             /* belongs to the small pool              */
    bool oversize;          /* made for a request >= max_split_size   */
};

/* The free-block index: an ordered set by (size, addr), as a treap. */
typedef struct fp_index {
    fp_block *root;
    size_t count;
} fp_index;

void      fp_index_insert(fp_index *ix, fp_block *b);
void      fp_index_remove(fp_index *ix, fp_block *b);
fp_block *fp_index_lower_bound(const fp_index *ix, size_t size);
fp_block *fp_index_max(const fp_index *ix);
bool      fp_index_contains(const fp_index *ix, const fp_block *b);

/* Address -> live block, open addressing with backward-shift deletion. */
typedef struct fp_map {
    fp_block **slots;
    size_t mask;            /* capacity - 1 (capacity a power of two)  */
    size_t count;
} fp_map;

int       fp_map_init(fp_map *m);
void      fp_map_fini(fp_map *m);
int       fp_map_make_room(fp_map *m);      /* then one put cannot fail */
void      fp_map_put(fp_map *m, fp_block *b);
fp_block *fp_map_get(const fp_map *m, uint64_t addr);
fp_block *fp_map_take(fp_map *m, uint64_t addr);

/* Sorted array of segments by address, for "does the pool own addr". */
typedef struct fp_segtab {
    fp_segment **v;
    size_t n, cap;
} fp_segtab;

/* Stat updates: one call per change keeps current/peak/totals coherent. */
void fp_stat_add(fp_stat *s, int64_t d);
void fp_stat_add3(fp_stat s[FP_NKINDS], bool small, int64_t d);

/* Everything one device's pool holds. */
struct fp_pool {
    pthread_mutex_t lock;
    fp_pool_opts opts;
    fp_backend be;
    size_t cap;             /* SIZE_MAX when none                      */
    fp_index free_small;    /* free blocks of small segments           */
    fp_index free_large;    /* free blocks of large segments           */
    fp_map live;            /* allocated blocks by address             */
    fp_segtab segs;         /* segments by address                     */
    fp_segment *seg_head, *seg_tail; /* segments by creation order     */
    fp_block *spare;        /* recycled block headers                  */
    struct fp_chunk *chunks;/* every header allocation, for destroy    */
    uint64_t clock;         /* allocation attempts, for stamps and GC  */
    fp_pool_stats st;
    fp_oom_info last_oom;
    uint32_t rng;           /* treap priorities                        */
};

/* Block headers come from chunks and are recycled through p->spare. */
typedef struct fp_chunk {
    struct fp_chunk *next;
    fp_block blocks[255];
} fp_chunk;

/* Header recycling (pool.c). */
fp_block *fp_block_new(fp_pool *p);
void      fp_block_put(fp_pool *p, fp_block *b);

/* Segment table (pool_segs.c). */
int         fp_segtab_insert(fp_segtab *t, fp_segment *s);
void        fp_segtab_remove(fp_segtab *t, fp_segment *s);
fp_segment *fp_segtab_find(const fp_segtab *t, uint64_t addr);

/* Accounting that the checker mirrors (pool_stats.c). */
void fp_account_alloc(fp_pool *p, fp_block *b, int64_t sign);
void fp_account_segment(fp_pool *p, fp_segment *s, int64_t sign);
void fp_account_split_free(fp_pool *p, fp_block *b, int64_t sign);
bool fp_block_is_split(const fp_block *b);

#endif
