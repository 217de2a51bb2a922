/* ref_core.h - the two reference allocator cores of the CPU benchmark
 * (tests/bench/bench_cores.c), written for it from their published
 * descriptions, not taken from any project:
 *   - "bestfit": exact best fit over one ordered set of (size, address)
 *     per pool, the structure PyTorch's caching allocator keeps in a
 *     std::set; here a height-balanced (AVL) binary search tree;
 *   - "tlsf": two-level segregated fit (Masmano et al., ECRTS 2004): size
 *     classes of 32 steps per power of two, a bitmap per level, a free list
 *     per class; O(1) search, which takes the head of the first non-empty
 *     class whose every block fits (good fit, not exact best fit).
 * Both share ref_core.c: PyTorch's size rules (512 B rounding, a small pool
 * of 2 MiB segments for requests <= 1 MiB, 20 MiB segments under 10 MiB,
 * else the request rounded to 2 MiB), its split rules (small: remainder
 * >= 512 B; large: remainder > 1 MiB), merge with free neighbours inside a
 * segment, a hash map of live blocks, one mutex per core, and a simulated
 * unlimited backend (addresses only; no memory behind them).  Only the free
 * index differs, behind ref_index.
 *
 * Invariants (ref_core_check): the blocks of a segment tile it in address
 * order; no two neighbours are both free; every free block is in its
 * pool's index and nothing else is; every live block is in the map.
 */
#ifndef REF_CORE_H
#define REF_CORE_H

#include <stddef.h>
#include <stdint.h>

#define REF_MIN_BLOCK ((size_t)512)
#define REF_MIB       ((size_t)1 << 20)

typedef struct ref_block {
    uint64_t addr;
    size_t size;
    struct ref_block *prev, *next;  /* neighbours in the segment        */
    struct ref_block *left, *right; /* AVL children / TLSF list next, prev */
    int32_t height;                 /* AVL height of this subtree       */
    uint8_t is_free;
    uint8_t small; /* which pool                       */
} ref_block;

/* A free index: one instance per pool (small, large). */
typedef struct ref_index {
    const char *name;
    void *(*create)(void);
    void (*destroy)(void *idx);
    void (*insert)(void *idx, ref_block *b);
    void (*remove)(void *idx, ref_block *b);
    /* A free block of at least size bytes, or NULL; leaves it in place. */
    ref_block *(*find)(void *idx, size_t size);
    /* Whether b is in the index. */
    int (*contains)(void *idx, const ref_block *b);
    /* Structural check; 0, else EFAULT with msg; *count gets the blocks. */
    int (*check)(void *idx, size_t *count, char *msg, size_t len);
} ref_index;

extern const ref_index ref_bestfit_index;
extern const ref_index ref_tlsf_index;

typedef struct ref_core ref_core;

/* base: the first address the simulated backend hands out. */
int ref_core_create(const ref_index *ops, uint64_t base, ref_core **out);
void ref_core_destroy(ref_core *c);
/* 0 and *addr, or ENOMEM when host memory for headers runs out. */
int ref_core_alloc(ref_core *c, size_t size, uint64_t *addr);
/* 0, or EINVAL when addr is not a live block. */
int ref_core_free(ref_core *c, uint64_t addr);
/* The whole size of the live block at addr, or 0. */
size_t ref_core_block_size(ref_core *c, uint64_t addr);
size_t ref_core_reserved(const ref_core *c);
size_t ref_core_peak_reserved(const ref_core *c);
int ref_core_check(ref_core *c, char *msg, size_t len);

/* The size rules, shared with the tests. */
size_t ref_round(size_t size);
size_t ref_segment_size(size_t rounded);

#endif
