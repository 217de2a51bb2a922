/* fp_ranges.c - the sorted table of address ranges of fp_ranges.h.
 *
 * Invariants (fp_ranges.h): r[0..n) sorted by start and disjoint, none
 * empty, none past 2^64; payload i beside r[i]; one allocation, payload
 * slots first, ranges after cap slots.  Every search is one binary search
 * for the first range starting above an address.
 */
#include "fp_ranges.h"

#include "fp_assert.h"
#include "fp_vec.h"
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_CAP 64

void fp_ranges_init(fp_ranges *t, size_t elem)
{
    *t = (fp_ranges){.elem = elem};
}

void fp_ranges_fini(fp_ranges *t)
{
    free(t->v);
    fp_ranges_init(t, t->elem);
}

/* Index of the first range whose start is > addr. */
static size_t upper(const fp_ranges *t, uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->r[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t fp_ranges_find(const fp_ranges *t, uint64_t addr)
{
    size_t i = upper(t, addr);
    return i && addr - t->r[i - 1].start < t->r[i - 1].size ? i - 1 : FP_RANGES_NONE;
}

size_t fp_ranges_at(const fp_ranges *t, uint64_t start)
{
    size_t i = upper(t, start);
    return i && t->r[i - 1].start == start ? i - 1 : FP_RANGES_NONE;
}

/* Room for one more range: the slots and the ranges grow as one
 * allocation, and the ranges move up to their new place after the slots. */
static int make_room(fp_ranges *t)
{
    if (t->elem > SIZE_MAX / 2) /* no allocation holds one, and the slot would overflow */
        return ENOMEM;
    size_t slot = fp_ranges_slot(t->elem), old = t->cap;
    char *v = fp_vec_grow(t->v, &t->cap, t->n + 1, slot + sizeof(fp_range), FIRST_CAP);
    if (!v)
        return ENOMEM;
    if (t->cap != old && t->n)
        memmove(v + t->cap * slot, v + old * slot, t->n * sizeof(fp_range));
    t->v = v;
    t->r = (fp_range *)(v + t->cap * slot);
    return 0;
}

/* Whether [start, start+size) meets neither neighbour of slot i (the
 * first range starting above start). */
static bool fits_at(const fp_ranges *t, size_t i, uint64_t start, uint64_t size)
{
    if (i && start - t->r[i - 1].start < t->r[i - 1].size)
        return false;
    return i == t->n || t->r[i].start - start >= size;
}

int fp_ranges_insert(fp_ranges *t, uint64_t start, uint64_t size, const void *val)
{
    if (size == 0 || size - 1 > UINT64_MAX - start)
        return EINVAL;
    size_t i = upper(t, start);
    if (!fits_at(t, i, start, size))
        return EEXIST;
    if (make_room(t))
        return ENOMEM;
    size_t slot = fp_ranges_slot(t->elem);
    char *at = fp_ranges_val(t, i);
    memmove(at + slot, at, (t->n - i) * slot);
    memmove(&t->r[i + 1], &t->r[i], (t->n - i) * sizeof *t->r);
    if (t->elem)
        memcpy(at, val, t->elem);
    t->r[i] = (fp_range){start, size};
    t->n++;
    return 0;
}

void fp_ranges_erase(fp_ranges *t, size_t i)
{
    fp_assert(i < t->n, "erase a range the table holds");
    size_t slot = fp_ranges_slot(t->elem);
    char *at = fp_ranges_val(t, i);
    memmove(at, at + slot, (t->n - i - 1) * slot);
    memmove(&t->r[i], &t->r[i + 1], (t->n - i - 1) * sizeof *t->r);
    t->n--;
}

int fp_ranges_remove(fp_ranges *t, uint64_t start)
{
    size_t i = fp_ranges_at(t, start);
    if (i == FP_RANGES_NONE)
        return ENOENT;
    fp_ranges_erase(t, i);
    return 0;
}
