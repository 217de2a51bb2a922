/* pool_pages.c - the set of mapped pages of one virtual-memory range
 * (fp_pageset, pool_internal.h): a bitmap in two levels.
 *
 * Pages come in chunks of FP_PAGES_CHUNK.  A chunk is all unmapped (NULL),
 * all mapped (FULL, a marker shared by every set), or mixed (a bitmap of
 * its own, one bit a page).  A mark that covers a whole chunk only sets
 * its pointer, and a scan steps over NULL and FULL chunks at once, so
 * marking, scanning and counting cost the chunks a range spans plus the
 * words of the bitmaps it touches, never one step a page: a 256 TiB range
 * of 2 MiB pages is 4,096 pointers, where one bit a page was 16 MiB filled
 * bit by bit.
 *
 * Invariants:
 *  - chunk[c] is NULL, FULL, or a bitmap of FP_PAGES_CHUNK bits owned by
 *    this set;
 *  - FULL only for a chunk that lies wholly below n, and no bitmap has a
 *    bit set at or past n: no page past the end reads as mapped;
 *  - fp_pageset_mark never allocates: fp_pageset_prepare, its only fallible
 *    step, gives the (at most two) chunks a mark covers in part a bitmap
 *    of their own first, and changes no page's state.
 */
#include "pool_internal.h"

#include "fp_assert.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WORDS (FP_PAGES_CHUNK / 64)

static uint64_t full_marker;
#define FULL (&full_marker)

int fp_pageset_init(fp_pageset *ps, size_t n)
{
    size_t nchunks = n / FP_PAGES_CHUNK + (n % FP_PAGES_CHUNK != 0);
    ps->n = n;
    ps->chunk = calloc(nchunks ? nchunks : 1, sizeof *ps->chunk);
    return ps->chunk ? 0 : ENOMEM;
}

void fp_pageset_fini(fp_pageset *ps)
{
    size_t nchunks = ps->n / FP_PAGES_CHUNK + (ps->n % FP_PAGES_CHUNK != 0);
    for (size_t c = 0; ps->chunk && c < nchunks; c++)
        if (ps->chunk[c] != FULL)
            free(ps->chunk[c]);
    free(ps->chunk);
    ps->chunk = NULL;
}

/* Word w of chunk c, whatever its kind. */
static uint64_t word_at(const fp_pageset *ps, size_t c, size_t w)
{
    const uint64_t *l = ps->chunk[c];
    return l == NULL ? 0 : l == FULL ? ~(uint64_t)0 : l[w];
}

bool fp_pageset_get(const fp_pageset *ps, size_t i)
{
    return (word_at(ps, i / FP_PAGES_CHUNK, i % FP_PAGES_CHUNK / 64) >> (i % 64)) & 1;
}

/* The first page in [i, cend) of chunk c's bitmap l in state want; cend
 * when none. */
static size_t next_in_leaf(const uint64_t *l, size_t c, size_t i, size_t cend, bool want)
{
    size_t base = c * FP_PAGES_CHUNK;
    while (i < cend) {
        size_t b = i - base;
        uint64_t w = want ? l[b / 64] : ~l[b / 64];
        w &= ~(uint64_t)0 << (b % 64);
        if (w) {
            size_t j = base + b / 64 * 64 + (size_t)__builtin_ctzll(w);
            return j < cend ? j : cend;
        }
        i = base + (b / 64 + 1) * 64;
    }
    return cend;
}

size_t fp_pageset_next(const fp_pageset *ps, size_t i, size_t end, bool want)
{
    while (i < end) {
        size_t c = i / FP_PAGES_CHUNK, cend = (c + 1) * FP_PAGES_CHUNK;
        const uint64_t *l = ps->chunk[c];
        cend = cend < end ? cend : end;
        if (l == NULL || l == FULL) {
            if ((l == FULL) == want)
                return i;
            i = cend;
            continue;
        }
        size_t j = next_in_leaf(l, c, i, cend, want);
        if (j < cend)
            return j;
        i = cend;
    }
    return end;
}

/* [lo, hi) of chunk c is all of it (and the chunk lies wholly below n). */
static bool covers_chunk(const fp_pageset *ps, size_t c, size_t lo, size_t hi)
{
    return lo == c * FP_PAGES_CHUNK && hi == (c + 1) * FP_PAGES_CHUNK && hi <= ps->n;
}

/* Chunk c, which a mark of [i, i+n) to state on covers in part, gets a
 * bitmap of its own unless it has one or is all in state on already. */
static int own_bitmap(fp_pageset *ps, size_t c, size_t i, size_t n, bool on)
{
    size_t lo = c * FP_PAGES_CHUNK, hi = lo + FP_PAGES_CHUNK;
    lo = lo > i ? lo : i;
    hi = hi < i + n ? hi : i + n;
    uint64_t *l = ps->chunk[c];
    if (covers_chunk(ps, c, lo, hi) || (l != NULL && l != FULL) || (l == FULL) == on)
        return 0;
    uint64_t *own = malloc(WORDS * sizeof *own);
    if (!own)
        return ENOMEM;
    memset(own, l == FULL ? 0xff : 0, WORDS * sizeof *own);
    ps->chunk[c] = own;
    return 0;
}

int fp_pageset_prepare(fp_pageset *ps, size_t i, size_t n, bool on)
{
    if (!n)
        return 0;
    size_t first = i / FP_PAGES_CHUNK, last = (i + n - 1) / FP_PAGES_CHUNK;
    int err = own_bitmap(ps, first, i, n, on);
    return err || last == first ? err : own_bitmap(ps, last, i, n, on);
}

/* Bits [lo, hi) of bitmap l (chunk-relative) set to on, a word at a time. */
static void mark_bits(uint64_t *l, size_t lo, size_t hi, bool on)
{
    while (lo < hi) {
        size_t w = lo / 64, top = (w + 1) * 64 < hi ? (w + 1) * 64 : hi;
        uint64_t m = (top - lo == 64 ? ~(uint64_t)0 : (((uint64_t)1 << (top - lo)) - 1))
                     << (lo % 64);
        l[w] = on ? l[w] | m : l[w] & ~m;
        lo = top;
    }
}

void fp_pageset_mark(fp_pageset *ps, size_t i, size_t n, bool on)
{
    for (size_t c = i / FP_PAGES_CHUNK; n && c <= (i + n - 1) / FP_PAGES_CHUNK; c++) {
        size_t base = c * FP_PAGES_CHUNK, lo = base > i ? base : i;
        size_t hi = base + FP_PAGES_CHUNK < i + n ? base + FP_PAGES_CHUNK : i + n;
        uint64_t *l = ps->chunk[c];
        if (covers_chunk(ps, c, lo, hi)) {
            if (l != NULL && l != FULL)
                free(l);
            ps->chunk[c] = on ? FULL : NULL;
        } else if (l != NULL && l != FULL) {
            mark_bits(l, lo - base, hi - base, on);
        } else {
            fp_assert((l == FULL) == on, "a chunk marked in part has its own bitmap");
        }
    }
}

size_t fp_pageset_count(const fp_pageset *ps, bool *stray)
{
    size_t nchunks = ps->n / FP_PAGES_CHUNK + (ps->n % FP_PAGES_CHUNK != 0), count = 0;
    *stray = false;
    for (size_t c = 0; c < nchunks; c++) {
        const uint64_t *l = ps->chunk[c];
        size_t valid = ps->n - c * FP_PAGES_CHUNK < FP_PAGES_CHUNK ? ps->n - c * FP_PAGES_CHUNK
                                                                   : FP_PAGES_CHUNK;
        if (l == FULL) {
            count += FP_PAGES_CHUNK;
            *stray |= valid < FP_PAGES_CHUNK;
        } else if (l) {
            for (size_t w = 0; w < WORDS; w++)
                count += (size_t)__builtin_popcountll(l[w]);
            *stray |= next_in_leaf(l, c, c * FP_PAGES_CHUNK + valid, (c + 1) * FP_PAGES_CHUNK,
                                   true) < (c + 1) * FP_PAGES_CHUNK;
        }
    }
    return count;
}
