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
 *  - a block is in the address map iff it is allocated (with
 *    opts.no_live_map the map stays empty: frees come by handle);
 *  - a free block's stamp is <= the pool clock (deferred reuse relies on it).
 */
#ifndef FP_POOL_INTERNAL_H
#define FP_POOL_INTERNAL_H

#include "fp_pool.h"
#include "fp_hmap.h"
#include "fp_ranges.h"
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>

typedef struct fp_segment fp_segment;
typedef struct fp_block fp_block;

/* One cache line: the hot path touches a header once.  A free block is
 * in the index and needs its tree links; a used one is not and needs its
 * request, so the two share storage. */
struct fp_block {
    uint64_t addr;         /* device address                         */
    size_t size;           /* bytes, a multiple of 512               */
    fp_block *prev, *next; /* physical neighbours in the segment     */
    union {
        struct { /* free: free index links (treap)         */
            fp_block *left, *right, *parent;
        };
        uint64_t requested; /* used: the caller's bytes               */
    };
    uint64_t stamp : 62; /* used: the allocation's ordinal; free: the
                               clock of its last free (FP_NEVER_FREED) */
    uint64_t state : 1;  /* FP_BLOCK_FREE or _ALLOCATED        */
    uint64_t small : 1;  /* belongs to the small pool              */
};
_Static_assert(sizeof(fp_block) == 64, "fp_block: one cache line");
_Static_assert(FP_BLOCK_FREE == 0 && FP_BLOCK_ALLOCATED == 1, "fp_block.state is one bit");

/* The caller's bytes: 0 unless the block is in use. */
static inline uint64_t fp_block_requested(const fp_block *b)
{
    return b->state == FP_BLOCK_FREE ? 0 : b->requested;
}

/* The clock ticks once per allocation: 62 bits never wrap. */

/* Treap priority, derived from the address so it needs no storage. */
static inline uint32_t fp_block_prio(const fp_block *b)
{
    uint64_t x = b->addr * 0xD6E8FEB86659FD93ull;
    return (uint32_t)(x >> 32);
}

/* The mapped pages of a range (pool_pages.c): a bitmap in two levels,
 * chunks of FP_PAGES_CHUNK pages each all unmapped, all mapped, or a
 * bitmap of their own. */
#define FP_PAGES_CHUNK ((size_t)32768)
typedef struct fp_pageset {
    size_t n;         /* pages                                   */
    uint64_t **chunk; /* per chunk: NULL, the full marker, or bits */
} fp_pageset;

int fp_pageset_init(fp_pageset *ps, size_t n); /* none mapped; 0 or ENOMEM */
void fp_pageset_fini(fp_pageset *ps);
bool fp_pageset_get(const fp_pageset *ps, size_t i);
/* The first page in [i, end) in state want; end when none. */
size_t fp_pageset_next(const fp_pageset *ps, size_t i, size_t end, bool want);
/* Makes fp_pageset_mark(ps, i, n, on) unable to fail: 0, or ENOMEM with no
 * page's state changed. */
int fp_pageset_prepare(fp_pageset *ps, size_t i, size_t n, bool on);
/* Pages [i, i+n) to state on, after fp_pageset_prepare with the same
 * arguments (or over maximal runs of the other state, which need none). */
void fp_pageset_mark(fp_pageset *ps, size_t i, size_t n, bool on);
/* The pages mapped; *stray: a page at or past n reads as mapped. */
size_t fp_pageset_count(const fp_pageset *ps, bool *stray);

struct fp_segment {
    uint64_t addr;           /* base as the backend returned it        */
    size_t size;             /* bytes                                  */
    fp_block *first;         /* lowest block                           */
    fp_segment *prev, *next; /* all segments, in creation order        */
    bool small;              /* belongs to the small pool              */
    bool oversize;           /* made for a request >= max_split_size   */
    bool vmm;                /* a reserved range, pages mapped on demand*/
    size_t page;             /* vmm: page size                          */
    size_t npages;           /* vmm: size / page                        */
    size_t mapped;           /* vmm: pages mapped now                   */
    fp_pageset pages;        /* vmm: the pages mapped                   */
};

/* Bytes a segment holds from the device: all of it, or its pages. */
static inline size_t fp_segment_held(const fp_segment *s)
{
    return s->vmm ? s->mapped * s->page : s->size;
}

/* The free-block index: an ordered set by (size, addr).  Sizes fall into
 * segregated bins: one per 512-byte size below 1 MiB (so every small-pool
 * size has its own bin), then 256 per power of two, as in TLSF.  A
 * three-level bitmap finds the next non-empty bin in O(1) and each bin is
 * a small treap.  Bins partition sizes in increasing order, so the first
 * fitting block of the first bin that has one is the exact best fit. */
#define FP_BIN_EXACT 2048u                             /* 512-byte units with a bin each          */
#define FP_BIN_SUB   256u                              /* bins per power of two above that        */
#define FP_NBINS     (FP_BIN_EXACT + 44u * FP_BIN_SUB) /* units < 2^55  */
_Static_assert((FP_MAX_REQUEST >> 9) < ((uint64_t)1 << 55),
               "FP_NBINS: every request size has a bin");
#define FP_NBINWORDS ((FP_NBINS + 63) / 64)
#define FP_NMIDWORDS ((FP_NBINWORDS + 63) / 64)

typedef struct fp_index {
    fp_block *bins[FP_NBINS];    /* treap roots                          */
    uint64_t used[FP_NBINWORDS]; /* bit set when a bin is non-empty      */
    uint64_t mid[FP_NMIDWORDS];  /* bit w set when used[w] != 0          */
    uint64_t top;                /* bit m set when mid[m] != 0           */
    size_t count;                /* blocks indexed                       */
} fp_index;

void fp_index_insert(fp_index *ix, fp_block *b);
void fp_index_remove(fp_index *ix, fp_block *b);
fp_block *fp_index_lower_bound(const fp_index *ix, size_t size);
fp_block *fp_index_max(const fp_index *ix);
/* Calls fn on every block, largest (size, address) first, until fn
 * returns false. */
typedef bool (*fp_index_fn)(const fp_block *b, void *ud);
void fp_index_visit_desc(const fp_index *ix, fp_index_fn fn, void *ud);
bool fp_index_contains(const fp_index *ix, const fp_block *b);
const fp_block *fp_index_bin(const fp_index *ix, unsigned bin); /* checker */

/* Address -> live block: base/'s one hash map, the header pointer as the
 * value (never 0).  pool_map.c gives it the pool's types. */
typedef fp_hmap fp_map;

int fp_map_init(fp_map *m);
void fp_map_fini(fp_map *m);
int fp_map_make_room(fp_map *m); /* then one put cannot fail */
void fp_map_put(fp_map *m, fp_block *b);
fp_block *fp_map_get(const fp_map *m, uint64_t addr);
void fp_map_prefetch(const fp_map *m, uint64_t addr); /* no lock needed */
fp_block *fp_map_take(fp_map *m, uint64_t addr);

/* Segments by address, for "does the pool own addr": base/'s range table
 * (fp_ranges.h), [addr, addr+size) with the segment as its payload.  v
 * and n are the same table read as an array, the segments in address
 * order: pool_segs.c, the one writer, sets them after every change, and
 * free(v) frees the table (a zeroed fp_segtab is an empty one). */
typedef struct fp_segtab {
    fp_ranges t; /* payload: the fp_segment * of each range */
} fp_segtab;

/* The record of requests (pool_record.c): two generations of events. */
typedef struct fp_rec_event {
    uint64_t word; /* op << 62 | the allocation's ordinal      */
    uint64_t size; /* requested bytes                          */
} fp_rec_event;

typedef struct fp_rec_gen {
    fp_rec_event *base; /* blocks live at its start, by ordinal     */
    size_t nbase;
    fp_rec_event *ev; /* its events, in order                     */
    size_t n, cap;
    uint64_t start; /* events recorded before its first         */
} fp_rec_gen;

typedef struct fp_record {
    size_t half;     /* events per generation; 0: recording off  */
    fp_rec_gen g[2]; /* older, newer                             */
    int started;     /* the newer generation exists              */
    int broken;      /* a host allocation failed: stopped        */
    uint64_t total;  /* events recorded                          */
} fp_record;

void fp_record_init(fp_record *r, size_t cap_events);
void fp_record_fini(fp_record *r);
int fp_record_check(const fp_record *r, char *msg, size_t len); /* fp_pool_check */
/* Under p->lock, as the pool serves them. */
void fp_record_alloc(fp_pool *p, uint64_t ordinal, uint64_t size);
void fp_record_free(fp_pool *p, uint64_t ordinal, uint64_t size);

/* Everything one device's pool holds. */
struct fp_pool {
    pthread_mutex_t lock;
    fp_pool_opts opts;
    fp_backend be;
    size_t cap;                      /* SIZE_MAX when none                      */
    fp_index free_small;             /* free blocks of small segments           */
    fp_index free_large;             /* free blocks of large segments           */
    fp_map live;                     /* allocated blocks by address             */
    fp_segtab segs;                  /* segments by address                     */
    fp_segment *seg_head, *seg_tail; /* segments by creation order     */
    fp_block *spare;                 /* recycled block headers                  */
    struct fp_chunk *chunks;         /* every header allocation, for destroy    */
    uint64_t clock;                  /* allocation attempts, for stamps and GC  */
    fp_pool_stats st;
    size_t reserved_mirror; /* st.reserved_bytes[FP_ALL].current, for
                               lock-free readers (atomic builtins only) */
    fp_oom_info last_oom;
    fp_record rec;    /* what a replay needs (pool_record.c)     */
    size_t page;      /* VMM page size; 0 = classic segments     */
    size_t vmm_range; /* VMM: address space per range            */
    /* ---- the front end (pool_front.c) ---- */
    uint64_t serial;       /* unique in the process                   */
    fp_tcache *tcaches;    /* the threads' caches, under lock         */
    unsigned nthreads;     /* threads that ever joined                */
    int front_on;          /* a second thread joined (atomic builtins) */
    fp_hmap owners;        /* addr -> its thread's fp_tcache, for blocks
                               a thread's cache may take back             */
    fp_front_counts front; /* flushes and returned (allocs, frees: the
                               caches' own, summed when read)             */
    /* pool.c's free of a live block whose records are gone already (the
       flush's, passed in so that pool_front.c needs no call of pool.c's) */
    void (*free_live)(fp_pool *p, uint64_t addr);
};

/* ---- the front end (pool_front.c), under p->lock -------------------- */
/* Gives every cached block back to best fit; returns the bytes (counted as
 * returned before growth when for_growth). */
size_t fp_front_flush(fp_pool *p, bool for_growth);
/* A free of addr in the pool: addr leaves its thread's records; EINVAL
 * when it sits in a thread's cache (freed already). */
int fp_front_disown(fp_pool *p, uint64_t addr);
/* Whether live block addr sits in a thread's cache (freed already). */
bool fp_front_cached(fp_pool *p, uint64_t addr);
/* Thread t's cached block for a request of rounded bytes, taken without
 * the pool's lock (fp_pool_front_alloc's hit); false when none fits. */
bool fp_front_take(fp_pool *p, fp_tcache *t, size_t rounded, uint64_t unsafe_from, uint64_t stream,
                   fp_grant *g, int *same_stream);
/* Block g just allocated for thread t: t may cache it at its free. */
void fp_front_adopt(fp_pool *p, fp_tcache *t, const fp_grant *g);
/* Cached blocks, by kind, to leave out of the allocated and active stats. */
void fp_front_stats(fp_pool *p, fp_pool_stats *st);
void fp_front_init(fp_pool *p);    /* at creation: the serial              */
void fp_front_forget(fp_pool *p);  /* segments forgotten: caches emptied   */
void fp_front_destroy(fp_pool *p); /* pool destroyed: caches freed          */
void fp_front_fork_prepare(fp_pool *p);
void fp_front_fork_after(fp_pool *p, bool child);
bool fp_front_locks_free(fp_pool *p);

/* The free index a block of the small or the large pool lives in. */
static inline fp_index *fp_index_of(fp_pool *p, bool small)
{
    return small ? &p->free_small : &p->free_large;
}

/* Block headers come from chunks and are recycled through p->spare. */
#define FP_CHUNK_BYTES 16384
/* As many headers as fit beside the link: 255. */
#define FP_CHUNK_BLOCKS (FP_CHUNK_BYTES / sizeof(fp_block) - 1)
typedef struct fp_chunk {
    _Alignas(64) fp_block blocks[FP_CHUNK_BLOCKS];
    struct fp_chunk *next;
} fp_chunk;
_Static_assert(sizeof(fp_chunk) == FP_CHUNK_BYTES, "fp_chunk: 16 KiB");

/* A host allocation (a header, a page set) failed: marks the failure as
 * the host's, not the device's, and returns ENOMEM. */
static inline int fp_pool_host_short(fp_pool *p)
{
    p->last_oom.host = 1;
    return ENOMEM;
}

/* Header recycling and segment bookkeeping (pool_segs.c). */
fp_block *fp_block_new(fp_pool *p);
void fp_block_put(fp_pool *p, fp_block *b);
void fp_seglist_link(fp_pool *p, fp_segment *s); /* creation order */
void fp_seglist_unlink(fp_pool *p, fp_segment *s);
void fp_segment_free(fp_segment *s); /* with its pages */
/* Files a new segment s whose one free block is s->first: segment table,
 * creation list, index, accounting, num_reserve_calls.  On failure puts
 * s->first back and returns ENOMEM; s and its range stay the caller's. */
int fp_segment_file(fp_pool *p, fp_segment *s);

/* Segment table (pool_segs.c). */
int fp_segtab_insert(fp_segtab *t, fp_segment *s);
void fp_segtab_remove(fp_segtab *t, fp_segment *s);
fp_segment *fp_segtab_find(const fp_segtab *t, uint64_t addr);
size_t fp_segtab_count(const fp_segtab *t);             /* segments held     */
fp_segment *fp_segtab_at(const fp_segtab *t, size_t i); /* by address, i < n */
void fp_segtab_free(fp_segtab *t);                      /* the pool is freed */

/* Virtual-memory segments (pool_vmm.c). */
void fp_vmm_setup(fp_pool *p); /* sets page/vmm_range, or leaves 0 */
/* A range for a request of rounded bytes (exact: just that, rounded to
 * pages; else the configured range or more); *out: its free block. */
int fp_vmm_new_range(fp_pool *p, size_t rounded, bool exact, bool small, fp_block **out);
/* Maps every page of [addr, addr+size), taking idle pages back when the
 * cap or the device refuses.  0, or ENOMEM/the backend's errno. */
int fp_vmm_back(fp_pool *p, uint64_t addr, size_t size);
/* Unmaps every idle page (empty_cache); returns the bytes. */
size_t fp_vmm_trim(fp_pool *p);
/* The largest free run of memory the pool holds: in a range, free bytes
 * in mapped pages (address space alone serves nothing); a classic
 * segment's free blocks whole.  Walks the free blocks largest first and
 * stops at the first no larger than the best run found. */
size_t fp_vmm_largest_free(const fp_pool *p);
/* The first page >= i of the next run of mapped pages of s, the run's end
 * in *end; s->npages when none is left. */
size_t fp_vmm_mapped_run(const fp_segment *s, size_t i, size_t *end);
/* Unmaps idle pages, oldest free first, until at least want bytes are
 * back or none is left (each unmap names its pages' newest free stamp);
 * returns the bytes. */
size_t fp_vmm_trim_to(fp_pool *p, size_t want);
/* Unmaps every page and frees the range (destroy). */
void fp_vmm_release_range(fp_pool *p, fp_segment *s);

#endif
