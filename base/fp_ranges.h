/* fp_ranges.h - the one table of address ranges: disjoint [start,
 * start+size) ranges sorted by start, each with a payload of its owner's
 * (elem bytes, kept in the table), found from any address inside in
 * O(log n).  pool/'s segments, the shim's pinned blocks and the simulated
 * device's allocations use it instead of their own sorted arrays.
 *
 * Invariants:
 *  - r[0..n) is sorted by start and disjoint:
 *    r[i].start + r[i].size <= r[i+1].start; every range is non-empty and
 *    ends at or below 2^64 (size - 1 <= UINT64_MAX - start);
 *  - payload i (fp_ranges_val) belongs to r[i] and moves with it;
 *  - v is the one allocation: cap payload slots of fp_ranges_slot(elem)
 *    bytes (elem rounded up to fp_range's alignment), then cap ranges (r
 *    points there), so a growth succeeds whole or changes nothing, and
 *    freeing v frees it all;
 *  - on failure nothing changes.
 *
 * No locking: the table is its owner's, used under the owner's lock (the
 * pool's lock, the shim's blocks_lock, the simulator's mem lock).
 * Iteration is by index, in address order: r[i] and fp_ranges_val(t, i)
 * for i in [0, n); an erase moves the ranges after i down one, so a loop
 * that erases as it goes walks from n down.
 */
#ifndef FP_RANGES_H
#define FP_RANGES_H

#include <stddef.h>
#include <stdint.h>

typedef struct fp_range {
    uint64_t start;
    uint64_t size; /* bytes, > 0 */
} fp_range;

typedef struct fp_ranges {
    void *v;     /* cap payload slots, then cap ranges; or NULL */
    fp_range *r; /* the ranges, inside v's allocation           */
    size_t n;    /* ranges held                                 */
    size_t cap;  /* room, in ranges                             */
    size_t elem; /* payload bytes per range (0: none)           */
} fp_ranges;

/* What the lookups return when no range answers. */
#define FP_RANGES_NONE SIZE_MAX

/* An empty table whose payloads are elem bytes each; the same as the
 * initializer {.elem = elem} (a zeroed table is one with no payload). */
void fp_ranges_init(fp_ranges *t, size_t elem);
/* Frees the table; it is empty and usable again after. */
void fp_ranges_fini(fp_ranges *t);

/* [start, start+size) with a copy of val's elem bytes (val may be NULL
 * when elem is 0): 0; EINVAL when size is 0 or the range ends past 2^64;
 * EEXIST when it overlaps a range held; ENOMEM. */
int fp_ranges_insert(fp_ranges *t, uint64_t start, uint64_t size, const void *val);
/* Removes the range starting at start: 0, or ENOENT when none does. */
int fp_ranges_remove(fp_ranges *t, uint64_t start);
/* Removes range i (< n). */
void fp_ranges_erase(fp_ranges *t, size_t i);

/* The index of the range holding addr, or FP_RANGES_NONE. */
size_t fp_ranges_find(const fp_ranges *t, uint64_t addr);
/* The index of the range starting at start, or FP_RANGES_NONE. */
size_t fp_ranges_at(const fp_ranges *t, uint64_t start);

/* Bytes a payload slot takes: elem rounded up to fp_range's alignment. */
static inline size_t fp_ranges_slot(size_t elem)
{
    return (elem + _Alignof(fp_range) - 1) / _Alignof(fp_range) * _Alignof(fp_range);
}
/* The payload of range i (< n), aligned for the type of elem bytes it
 * holds; it moves when the table changes. */
static inline void *fp_ranges_val(const fp_ranges *t, size_t i)
{
    return (char *)t->v + i * fp_ranges_slot(t->elem);
}

#endif
