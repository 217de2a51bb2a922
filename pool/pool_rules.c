/* pool_rules.c - the pool's options and size rules, the one copy of each:
 * the default options and the cap they set, rounding (with
 * roundup_power2_divisions), the segment size of a request, and the
 * small/oversize and split rules of max_split_size (pool/fp_pool.h says
 * what each means).  Pure functions of their arguments: the replay, the
 * checker and the tests ask them as the pool does.
 *
 * Invariant: fp_round_size(o, n) >= n and is a multiple of FP_MIN_BLOCK
 * (or the largest such size); fp_pool_segment_size(r) >= r for any r the
 * pool can reserve.
 */
#include "pool_internal.h"
#include "fp_assert.h"
#include <string.h>

void fp_pool_opts_default(fp_pool_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_split_size = SIZE_MAX;
    o->max_non_split_rounding = FP_LARGE_SEGMENT;
    o->expandable_segments = FP_VMM_AUTO;
    o->vmm_headroom = FP_VMM_HEADROOM;
    o->thread_cache = FP_THREAD_CACHE_BYTES;
}

size_t fp_pool_opts_cap(const fp_pool_opts *o)
{
    size_t cap = o->max_reserved ? o->max_reserved : SIZE_MAX;
    if (o->memory_fraction > 0 && o->device_total) {
        size_t f = (size_t)(o->memory_fraction * (double)o->device_total);
        if (f < cap)
            cap = f;
    }
    return cap;
}

static unsigned log2_floor(size_t v)
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

static unsigned divisions_for(const fp_pool_opts *o, size_t size)
{
    unsigned lg = log2_floor(size);
    unsigned i = lg > 20 ? lg - 20 : 0; /* intervals start at 1 MiB */
    if (i >= FP_ROUNDUP_INTERVALS)
        i = FP_ROUNDUP_INTERVALS - 1;
    return o->roundup_divisions[i];
}

/* The next of d equal steps between two powers of two at or above size. */
static size_t next_division(size_t size, unsigned d)
{
    if ((size & (size - 1)) == 0)
        return size;
    size_t floor2 = (size_t)1 << log2_floor(size);
    size_t step = floor2 >> log2_floor(d);
    if (step == 0)
        return floor2 << 1;
    size_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

size_t fp_round_size(const fp_pool_opts *o, size_t size)
{
    if (size < FP_MIN_BLOCK)
        return FP_MIN_BLOCK;
    unsigned d = divisions_for(o, size);
    if (d > 1 && size > FP_MIN_BLOCK * d)
        return next_division(size, d);
    if (size > SIZE_MAX - FP_MIN_BLOCK)
        return SIZE_MAX & ~(FP_MIN_BLOCK - 1);
    return (size + FP_MIN_BLOCK - 1) & ~(FP_MIN_BLOCK - 1);
}

int fp_pool_is_small(size_t rounded)
{
    return rounded <= FP_SMALL_SIZE;
}

int fp_pool_is_oversize(const fp_pool_opts *o, size_t size)
{
    return size >= o->max_split_size;
}

int fp_may_take(const fp_pool_opts *o, size_t rounded, size_t block_size)
{
    fp_assert(block_size >= rounded, "best fit found a block too small");
    if (!fp_pool_is_oversize(o, rounded))
        return !fp_pool_is_oversize(o, block_size);
    return block_size - rounded < o->max_non_split_rounding;
}

int fp_may_split_large(const fp_pool_opts *o, size_t rounded, size_t rest)
{
    return !fp_pool_is_oversize(o, rounded) && rest > FP_SMALL_SIZE;
}

size_t fp_pool_segment_size(size_t rounded)
{
    if (rounded <= FP_SMALL_SIZE)
        return FP_SMALL_SEGMENT;
    if (rounded < FP_MIN_LARGE_REQ)
        return FP_LARGE_SEGMENT;
    if (rounded > SIZE_MAX - FP_ROUND_LARGE)
        return SIZE_MAX & ~(FP_ROUND_LARGE - 1);
    return (rounded + FP_ROUND_LARGE - 1) & ~(FP_ROUND_LARGE - 1);
}
