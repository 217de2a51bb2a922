/* tests/pool/api.c - the pool's calls around allocation: empty_cache,
 * invalid frees (counted, nothing changed), fp_pool_owns, fp_pool_walk,
 * destroy with blocks still live, and requests too large for any segment.
 * Every pool call is followed by fp_pool_check.
 */
#include "pool_test.h"

static void test_empty_cache(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    empty_cache_ok(f.p); /* empty pool */
    EQ(f.m.release_calls, 0);
    uint64_t a = alloc_ok(f.p, 512), b = alloc_ok(f.p, 20 * MiB), c = alloc_ok(f.p, 2 * MiB);
    uint64_t d = alloc_ok(f.p, 512);
    free_ok(f.p, b);
    free_ok(f.p, a);
    empty_cache_ok(f.p); /* only b's segment is wholly free */
    EQ(f.m.release_calls, 1);
    EQ(owns_addr(f.p, b), 0);
    EQ(owns_addr(f.p, a), 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.reserved_bytes[FP_ALL].current, 22 * MiB);
    EQ(s.num_release_calls, 1);
    EQ(s.num_alloc_retries, 0);
    free_ok(f.p, d);
    empty_cache_ok(f.p);
    EQ(owns_addr(f.p, a), 0);
    free_ok(f.p, c);
    empty_cache_ok(f.p);
    s = stats_of(f.p);
    EQ(s.reserved_bytes[FP_ALL].current, 0);
    EQ(s.segments[FP_ALL].current, 0);
    EQ(s.num_release_calls, 3);
    EQ(f.m.nlive, 0);
    alloc_ok(f.p, 512); /* and it grows again */
    EQ(f.m.nlive, 1);
    fixture_close(&f);
}

static void test_invalid_free(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 1000), b = alloc_ok(f.p, 3 * MiB);
    EQ(b, a + 2 * MiB); /* adjacent segments */
    fp_pool_stats s0 = stats_of(f.p);
    walk_dump w0 = {0}, w = {0};
    walk_take(f.p, &w0);
    const uint64_t bad[] = {
        0,
        0x1234,
        a - 512,
        a + 512,     /* inside a */
        a + 1024,    /* start of the free tail */
        b + 1 * MiB, /* inside b */
        b + 3 * MiB, /* b's free remainder */
        b + 20 * MiB,
        UINT64_MAX,
    };
    size_t n = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < n; i++) {
        snprintf(g_where, sizeof g_where, "invalid free 0x%llx", (unsigned long long)bad[i]);
        EQ(fp_pool_free(f.p, bad[i]), EINVAL);
        check_pool(f.p);
        fp_pool_stats s = stats_of(f.p);
        EQ(s.num_invalid_frees, i + 1);
        stats_equal_except(s0, s, 0, 1);
        walk_take(f.p, &w);
        TRUE(walk_same(&w0, &w));
    }
    g_where[0] = 0;
    free_ok(f.p, b);
    EQ(fp_pool_free(f.p, b), EINVAL); /* double free */
    check_pool(f.p);
    free_ok(f.p, a);
    EQ(fp_pool_free(f.p, a), EINVAL);
    check_pool(f.p);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_invalid_frees, n + 2);
    EQ(s.num_frees, 2);
    EQ(s.allocations[FP_ALL].current, 0);
    walk_free(&w0);
    walk_free(&w);
    fixture_close(&f);
}

/* Free by the grant's handle: as a free by address, with the live map or
 * (no_live_map, one thread) without it; the checker passes after each,
 * and a NULL handle is an invalid free. */
static void test_free_handle(void **state)
{
    (void)state;
    for (int no_map = 0; no_map < 2; no_map++) {
        fp_pool_opts o;
        fp_pool_opts_default(&o);
        o.expandable_segments = FP_VMM_OFF;
        o.solo = o.no_live_map = no_map;
        pool_fixture f;
        fixture_open(&f, &o, SIZE_MAX);
        fp_grant g[3] = {grant_ok(f.p, 1000, UINT64_MAX), grant_ok(f.p, 3 * MiB, UINT64_MAX),
                         grant_ok(f.p, 2000, UINT64_MAX)};
        TRUE(g[0].handle && g[1].handle && g[2].handle);
        EQ(owns_addr(f.p, g[1].addr), 1);
        for (int i = 2; i >= 0; i--) {
            EQ(fp_pool_free_handle(f.p, g[i].handle), 0);
            check_pool(f.p);
        }
        fp_pool_stats s = stats_of(f.p);
        EQ(s.num_frees, 3);
        EQ(s.allocated_bytes[FP_ALL].current, 0);
        EQ(fp_pool_free_handle(f.p, NULL), EINVAL);
        EQ(stats_of(f.p).num_invalid_frees, 1);
        fp_grant again = grant_ok(f.p, 1000, UINT64_MAX); /* the cached block again */
        EQ(again.addr, g[0].addr);
        EQ(fp_pool_free_handle(f.p, again.handle), 0);
        check_pool(f.p);
        fixture_close(&f);
    }
}

static void test_owns(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    size_t sz;
    EQ(owns_size(f.p, MOCK_BASE, &sz), 0);
    uint64_t a = alloc_ok(f.p, 1000);
    uint64_t b = alloc_ok(f.p, 1);
    EQ(owns_size(f.p, a, &sz), 1);
    EQ(sz, 1000);
    EQ(owns_size(f.p, b, &sz), 1);
    EQ(sz, 1);
    EQ(owns_size(f.p, a + 512, &sz), 1); /* inside a */
    EQ(sz, 0);
    EQ(owns_size(f.p, a + 1536, &sz), 1); /* the free tail */
    EQ(sz, 0);
    EQ(owns_size(f.p, a + 2 * MiB - 1, &sz), 1);
    EQ(sz, 0);
    EQ(owns_size(f.p, a + 2 * MiB, &sz), 0); /* the end is outside */
    EQ(owns_size(f.p, a - 1, &sz), 0);
    EQ(owns_size(f.p, 0, &sz), 0);
    EQ(owns_size(f.p, UINT64_MAX, &sz), 0);
    free_ok(f.p, a);
    EQ(owns_size(f.p, a, &sz), 1); /* still cached */
    EQ(sz, 0);
    free_ok(f.p, b);
    empty_cache_ok(f.p);
    EQ(owns_size(f.p, a, &sz), 0);
    fixture_close(&f);
}

static void test_walk(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    walk_dump w = {0};
    walk_take(f.p, &w);
    EQ(w.nseg, 0);
    uint64_t a = alloc_ok(f.p, 1000), b = alloc_ok(f.p, 3 * MiB), c = alloc_ok(f.p, 512);
    walk_take(f.p, &w);
    EQ(w.nseg, 2);
    EQ(w.seg[0].addr, a);
    EQ(w.seg[0].size, 2 * MiB);
    EQ(w.seg[0].small, 1);
    EQ(w.seg[0].n, 3);
    EQ(w.seg[1].addr, b);
    EQ(w.seg[1].size, 20 * MiB);
    EQ(w.seg[1].small, 0);
    EQ(w.seg[1].n, 2);
    const fp_block_info *x = &w.blk[w.seg[0].first];
    EQ(x[0].addr, a);
    EQ(x[0].size, 1024);
    EQ(x[0].requested, 1000);
    EQ(x[0].state, 1);
    EQ(x[1].addr, c);
    EQ(x[1].size, 512);
    EQ(x[1].requested, 512);
    EQ(x[1].state, 1);
    EQ(x[2].size, 2 * MiB - 1536);
    EQ(x[2].state, 0);
    const fp_block_info *y = &w.blk[w.seg[1].first];
    EQ(y[0].size, 3 * MiB);
    EQ(y[0].requested, 3 * MiB);
    EQ(y[0].state, 1);
    EQ(y[1].size, 17 * MiB);
    EQ(y[1].state, 0);
    TRUE(x[0].seq < y[0].seq); /* in allocation order */
    TRUE(y[0].seq < x[1].seq);
    free_ok(f.p, a);
    uint64_t a2 = alloc_ok(f.p, 1000);
    EQ(a2, a);
    walk_take(f.p, &w);
    TRUE(w.blk[w.seg[0].first].seq > w.blk[w.seg[0].first + 1].seq);
    walk_free(&w);
    fixture_close(&f);
}

static void test_destroy(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 512);
    alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 30 * MiB);
    free_ok(f.p, a);
    fp_pool_destroy(f.p, 0); /* releases every segment, live or not */
    EQ(f.m.nlive, 0);
    EQ(f.m.release_calls, 3);
    mock_ok(&f.m);
    mock_fini(&f.m);

    fixture_open(&f, NULL, SIZE_MAX);
    alloc_ok(f.p, 512);
    alloc_ok(f.p, 20 * MiB);
    fp_pool_destroy(f.p, 1); /* keeps them */
    EQ(f.m.nlive, 2);
    EQ(f.m.release_calls, 0);
    mock_ok(&f.m);
    mock_fini(&f.m);

    fp_pool_opts o = opts_max_split(40 * MiB);
    o.roundup_divisions[3] = 4;
    o.max_reserved = 1 * GiB;
    fixture_open(&f, &o, SIZE_MAX);
    const fp_pool_opts *g = fp_pool_get_opts(f.p);
    check_pool(f.p);
    EQ(g->max_split_size, 40 * MiB);
    EQ(g->roundup_divisions[3], 4);
    EQ(g->max_reserved, 1 * GiB);
    EQ(g->max_non_split_rounding, 20 * MiB);
    fixture_close(&f);
}

static void test_huge(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, 1 * GiB);
    uint64_t x;
    EQ(alloc_try(f.p, (size_t)1 << 50, &x), ENOMEM);
    EQ(stats_of(f.p).num_ooms, 1);
    TRUE(alloc_try(f.p, SIZE_MAX / 2, &x) != 0);
    TRUE(alloc_try(f.p, SIZE_MAX - 100, &x) != 0);
    TRUE(alloc_try(f.p, SIZE_MAX, &x) != 0);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_allocs, 0);
    EQ(s.allocations[FP_ALL].current, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 0);
    alloc_ok(f.p, 512);
    mock_ok(&f.m);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_cache), cmocka_unit_test(test_invalid_free),
        cmocka_unit_test(test_owns),        cmocka_unit_test(test_walk),
        cmocka_unit_test(test_destroy),     cmocka_unit_test(test_huge),
        cmocka_unit_test(test_free_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
