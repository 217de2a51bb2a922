/* tests/pool/pages.c - pool/pool_pages.c, the set of mapped pages of a
 * virtual-memory range, and the size bomb it answers.
 *
 * Checked:
 *  - against a plain array of one flag a page, through 3,000 random
 *    marks (within a word, across words, across chunks, whole chunks,
 *    the partial last chunk): every count, every page's state, every
 *    "next page in this state" query, and no page past the end mapped;
 *  - a range of 2^27 pages (2^48 bytes of 2 MiB pages) mapped whole holds
 *    one pointer a chunk, each the shared "all mapped" marker: no bitmap
 *    of its own, where one bit a page was 16 MiB, filled bit by bit;
 *    unmapping a run in its middle gives two chunks (at most) a bitmap;
 *  - the pool: 100 live requests of 2^48 - 1 bytes under the default
 *    (virtual-memory) segments: fp_pool_check passes after each, every
 *    range's page set holds no bitmap of its own, and the reserved bytes
 *    are 100 x 2^48.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pool_internal.h"

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t ref_next(const bool *ref, size_t i, size_t end, bool want)
{
    while (i < end && ref[i] != want)
        i++;
    return i;
}

static void set(fp_pageset *ps, size_t i, size_t n, bool on)
{
    assert_int_equal(fp_pageset_prepare(ps, i, n, on), 0);
    fp_pageset_mark(ps, i, n, on);
}

static void against_reference(void **state)
{
    (void)state;
    const size_t n = 3 * FP_PAGES_CHUNK + 1000;
    bool *ref = calloc(n, sizeof *ref);
    assert_non_null(ref);
    fp_pageset ps;
    assert_int_equal(fp_pageset_init(&ps, n), 0);
    uint64_t seed = 0x1234567;
    size_t count = 0;
    for (int op = 0; op < 3000; op++) {
        size_t kind = rng(&seed) % 4, i = rng(&seed) % n, len;
        if (kind == 0)
            len = 1 + rng(&seed) % 70; /* within a word or two */
        else if (kind == 1)
            len = 1 + rng(&seed) % (2 * FP_PAGES_CHUNK); /* across chunks */
        else if (kind == 2)
            i = rng(&seed) % 4 * FP_PAGES_CHUNK, len = FP_PAGES_CHUNK; /* a whole chunk */
        else
            len = 1 + rng(&seed) % 5000;
        if (i >= n)
            i = n - 1;
        len = len < n - i ? len : n - i;
        bool on = rng(&seed) & 1;
        set(&ps, i, len, on);
        for (size_t k = i; k < i + len; k++) {
            count += on && !ref[k];
            count -= !on && ref[k];
            ref[k] = on;
        }
        bool stray;
        assert_int_equal(fp_pageset_count(&ps, &stray), count);
        assert_false(stray);
        for (int q = 0; q < 4; q++) {
            size_t a = rng(&seed) % n, b = a + rng(&seed) % (n - a + 1);
            bool want = rng(&seed) & 1;
            assert_int_equal(fp_pageset_next(&ps, a, b, want), ref_next(ref, a, b, want));
            assert_int_equal(fp_pageset_get(&ps, a), ref[a]);
        }
    }
    fp_pageset_fini(&ps);
    free(ref);
}

static size_t own_bitmaps(const fp_pageset *ps)
{
    size_t nchunks = (ps->n + FP_PAGES_CHUNK - 1) / FP_PAGES_CHUNK, own = 0;
    const uint64_t *full = NULL;
    for (size_t c = 0; c < nchunks; c++) {
        if (fp_pageset_get(ps, c * FP_PAGES_CHUNK) &&
            fp_pageset_next(ps, c * FP_PAGES_CHUNK, (c + 1) * FP_PAGES_CHUNK, false) ==
                (c + 1) * FP_PAGES_CHUNK)
            full = full ? full : ps->chunk[c]; /* the first whole chunk: the marker */
    }
    for (size_t c = 0; c < nchunks; c++)
        own += ps->chunk[c] && ps->chunk[c] != full;
    return own;
}

static void huge_range_costs_its_chunks(void **state)
{
    (void)state;
    const size_t n = (size_t)1 << 27;
    fp_pageset ps;
    assert_int_equal(fp_pageset_init(&ps, n), 0);
    set(&ps, 0, n, true);
    bool stray;
    assert_int_equal(fp_pageset_count(&ps, &stray), n);
    assert_false(stray);
    for (size_t c = 1; c < n / FP_PAGES_CHUNK; c++)
        assert_ptr_equal(ps.chunk[c], ps.chunk[0]);
    assert_int_equal(own_bitmaps(&ps), 0);
    set(&ps, 5 * FP_PAGES_CHUNK + 7, 40 * FP_PAGES_CHUNK, false);
    assert_int_equal(fp_pageset_count(&ps, &stray), n - 40 * FP_PAGES_CHUNK);
    assert_int_equal(own_bitmaps(&ps), 2);
    assert_int_equal(fp_pageset_next(&ps, 0, n, false), 5 * FP_PAGES_CHUNK + 7);
    assert_int_equal(fp_pageset_next(&ps, 5 * FP_PAGES_CHUNK + 7, n, true),
                     45 * FP_PAGES_CHUNK + 7);
    fp_pageset_fini(&ps);
}

/* A device with room for anything: address space and pages from a bump
 * pointer, nothing tracked page by page. */
typedef struct roomy {
    uint64_t next;
} roomy;

static size_t r_gran(void *ctx)
{
    (void)ctx;
    return 2 * FP_MIB;
}

static int r_reserve_va(void *ctx, size_t size, size_t align, uint64_t *addr)
{
    roomy *d = ctx;
    *addr = (d->next + align - 1) / align * align;
    d->next = *addr + size;
    return 0;
}

static int r_free_va(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

static int r_map(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

static int r_unmap(void *ctx, uint64_t addr, size_t size, uint64_t freed_at)
{
    (void)ctx, (void)addr, (void)size, (void)freed_at;
    return 0;
}

static int r_reserve(void *ctx, size_t size, uint64_t *addr)
{
    return r_reserve_va(ctx, size, 2 * FP_MIB, addr);
}

static int r_release(void *ctx, uint64_t addr, size_t size)
{
    return r_free_va(ctx, addr, size);
}

static void size_bomb(void **state)
{
    (void)state;
    roomy d = {.next = 0x100000000000ull};
    fp_backend be = {.ctx = &d,
                     .reserve = r_reserve,
                     .release = r_release,
                     .granularity = r_gran,
                     .reserve_va = r_reserve_va,
                     .free_va = r_free_va,
                     .map = r_map,
                     .unmap = r_unmap};
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = 1;
    fp_pool *p;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    assert_true(fp_pool_is_vmm(p));
    char msg[256];
    for (int k = 0; k < 100; k++) {
        uint64_t addr;
        assert_int_equal(fp_pool_alloc(p, FP_MAX_REQUEST, &addr), 0);
        if (fp_pool_check(p, msg, sizeof msg))
            fail_msg("%s", msg);
    }
    size_t ranges = 0;
    for (const fp_segment *s = p->seg_head; s; s = s->next, ranges++) {
        assert_true(s->vmm);
        assert_int_equal(own_bitmaps(&s->pages), 0);
    }
    assert_int_equal(ranges, 100);
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    assert_true((uint64_t)st.reserved_bytes[FP_ALL].current == 100 * ((uint64_t)1 << 48));
    fp_pool_destroy(p, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(against_reference),
        cmocka_unit_test(huge_range_costs_its_chunks),
        cmocka_unit_test(size_bomb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
