/* tests/pool/stats.c - every stats field after a known sequence of calls,
 * oversize counts, and the effect of roundup_power2_divisions on them;
 * the cumulative totals stop at INT64_MAX, never wrap (70,000 pairs of
 * 2^47 B: 9.9e18 B, past 2^63 - 1).
 * Every pool call is followed by fp_pool_check (those 70,000 pairs: the
 * last).
 */
#include "pool_test.h"

static void st_(const fp_stat *s, int64_t cur, int64_t peak, int64_t alloc, int64_t freed,
                const char *name, int line)
{
    if (s->current != cur || s->peak != peak || s->allocated != alloc || s->freed != freed)
        fail_msg("line %d: %s = {cur %jd, peak %jd, alloc %jd, freed %jd}, "
                 "expected {%jd, %jd, %jd, %jd}",
                 line, name, (intmax_t)s->current, (intmax_t)s->peak, (intmax_t)s->allocated,
                 (intmax_t)s->freed, (intmax_t)cur, (intmax_t)peak, (intmax_t)alloc,
                 (intmax_t)freed);
}
#define STAT_IS(s, c, p, a, f) st_(&(s), (c), (p), (a), (f), #s, __LINE__)

/* current and peak only, with allocated - freed == current */
static void stcp_(const fp_stat *s, int64_t cur, int64_t peak, const char *name, int line)
{
    if (s->current != cur || s->peak != peak || s->allocated - s->freed != s->current)
        fail_msg("line %d: %s = {cur %jd, peak %jd, alloc %jd, freed %jd}, "
                 "expected cur %jd, peak %jd, alloc - freed == cur",
                 line, name, (intmax_t)s->current, (intmax_t)s->peak, (intmax_t)s->allocated,
                 (intmax_t)s->freed, (intmax_t)cur, (intmax_t)peak);
}
#define STAT_CUR_PEAK(s, c, p) stcp_(&(s), (c), (p), #s, __LINE__)

static void test_stats_sequence(void **state)
{
    (void)state;
    const int64_t K = 1024, M = 1024 * 1024;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    fp_pool_stats z = stats_of(f.p), zero;
    memset(&zero, 0, sizeof zero);
    stats_equal_except(z, zero, 0, 0);

    uint64_t a = alloc_ok(f.p, 1000);           /* small: 1024 of a new 2M   */
    uint64_t c = alloc_ok(f.p, 12 * MiB + 100); /* 12M+512 of a new 14M      */
    uint64_t b = alloc_ok(f.p, 3 * MiB);        /* large: 3M of a new 20M    */
    uint64_t d = alloc_ok(f.p, 500);            /* 512, cache hit            */
    free_ok(f.p, a);                            /* free 1024, no merge       */
    free_ok(f.p, b);                            /* merges: 20M whole, free   */
    uint64_t e = alloc_ok(f.p, 19 * MiB);       /* takes the 20M, unsplit    */
    EQ(e, b);
    EQ(d, a + 1024);

    fp_pool_stats s = stats_of(f.p);
    STAT_IS(s.requested_bytes[FP_ALL], 31 * M + 600, 31 * M + 600, 34 * M + 1600, 3 * M + 1000);
    STAT_IS(s.requested_bytes[FP_SMALL], 500, 1500, 1500, 1000);
    STAT_IS(s.requested_bytes[FP_LARGE], 31 * M + 100, 31 * M + 100, 34 * M + 100, 3 * M);
    STAT_IS(s.allocated_bytes[FP_ALL], 32 * M + 1024, 32 * M + 1024, 35 * M + 2048, 3 * M + 1024);
    STAT_IS(s.allocated_bytes[FP_SMALL], 512, 1536, 1536, 1024);
    STAT_IS(s.allocated_bytes[FP_LARGE], 32 * M + 512, 32 * M + 512, 35 * M + 512, 3 * M);
    for (int k = 0; k < FP_NKINDS; k++) {
        STAT_IS(s.active_bytes[k], s.allocated_bytes[k].current, s.allocated_bytes[k].peak,
                s.allocated_bytes[k].allocated, s.allocated_bytes[k].freed);
        STAT_IS(s.active[k], s.allocations[k].current, s.allocations[k].peak,
                s.allocations[k].allocated, s.allocations[k].freed);
    }
    STAT_IS(s.reserved_bytes[FP_ALL], 36 * M, 36 * M, 36 * M, 0);
    STAT_IS(s.reserved_bytes[FP_SMALL], 2 * M, 2 * M, 2 * M, 0);
    STAT_IS(s.reserved_bytes[FP_LARGE], 34 * M, 34 * M, 34 * M, 0);
    STAT_IS(s.allocations[FP_ALL], 3, 4, 5, 2);
    STAT_IS(s.allocations[FP_SMALL], 1, 2, 2, 1);
    STAT_IS(s.allocations[FP_LARGE], 2, 2, 3, 1);
    STAT_IS(s.segments[FP_ALL], 3, 3, 3, 0);
    STAT_IS(s.segments[FP_SMALL], 1, 1, 1, 0);
    STAT_IS(s.segments[FP_LARGE], 2, 2, 2, 0);
    /* free blocks of split segments: small [1024][d][2M-1536], large
     * [c][2M-512]; b's segment is whole again */
    STAT_CUR_PEAK(s.inactive_split_bytes[FP_ALL], 4 * M - 1024, 21 * M - 1024);
    STAT_CUR_PEAK(s.inactive_split_bytes[FP_SMALL], 2 * M - 512, 2 * M - 512);
    STAT_CUR_PEAK(s.inactive_split_bytes[FP_LARGE], 2 * M - 512, 19 * M - 512);
    STAT_CUR_PEAK(s.inactive_split[FP_ALL], 3, 4);
    STAT_CUR_PEAK(s.inactive_split[FP_SMALL], 2, 2);
    STAT_CUR_PEAK(s.inactive_split[FP_LARGE], 1, 2);
    STAT_IS(s.oversize_allocations, 0, 0, 0, 0);
    STAT_IS(s.oversize_segments, 0, 0, 0, 0);
    EQ(s.num_allocs, 5);
    EQ(s.num_frees, 2);
    EQ(s.num_cache_hits, 2);
    EQ(s.num_reserve_calls, 3);
    EQ(s.num_release_calls, 0);
    EQ(s.num_alloc_retries, 0);
    EQ(s.num_ooms, 0);
    EQ(s.num_gc_releases, 0);
    EQ(s.num_invalid_frees, 0);
    EQ(s.largest_free, 2 * MiB - 512);
    TRUE(s.largest_free_at_peak <= 36 * MiB);
    EQ(idle_bytes(f.p), 4 * MiB - 1024);
    (void)K;

    empty_cache_ok(f.p); /* nothing wholly free */
    EQ(stats_of(f.p).num_release_calls, 0);
    free_ok(f.p, d);
    free_ok(f.p, c);
    free_ok(f.p, e);
    s = stats_of(f.p);
    EQ(s.largest_free, 20 * MiB);
    EQ(idle_bytes(f.p), 36 * MiB);
    STAT_CUR_PEAK(s.inactive_split_bytes[FP_ALL], 0, 21 * M - 1024);
    STAT_CUR_PEAK(s.inactive_split[FP_ALL], 0, 4);
    empty_cache_ok(f.p);
    s = stats_of(f.p);
    STAT_IS(s.requested_bytes[FP_ALL], 0, 31 * M + 600, 34 * M + 1600, 34 * M + 1600);
    STAT_IS(s.allocated_bytes[FP_ALL], 0, 32 * M + 1024, 35 * M + 2048, 35 * M + 2048);
    STAT_IS(s.reserved_bytes[FP_ALL], 0, 36 * M, 36 * M, 36 * M);
    STAT_IS(s.reserved_bytes[FP_SMALL], 0, 2 * M, 2 * M, 2 * M);
    STAT_IS(s.reserved_bytes[FP_LARGE], 0, 34 * M, 34 * M, 34 * M);
    STAT_IS(s.allocations[FP_ALL], 0, 4, 5, 5);
    STAT_IS(s.segments[FP_ALL], 0, 3, 3, 3);
    STAT_IS(s.segments[FP_SMALL], 0, 1, 1, 1);
    EQ(s.num_frees, 5);
    EQ(s.num_release_calls, 3);
    EQ(s.largest_free, 0);
    EQ(idle_bytes(f.p), 0);
    EQ(f.m.nlive, 0);
    fixture_close(&f);
}

static void test_stats_oversize(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t x = alloc_ok(f.p, 40 * MiB);
    uint64_t sm = alloc_ok(f.p, 5 * MiB);
    fp_pool_stats s = stats_of(f.p);
    STAT_IS(s.oversize_allocations, 1, 1, 1, 0);
    STAT_IS(s.oversize_segments, 1, 1, 1, 0);
    free_ok(f.p, x);
    s = stats_of(f.p);
    STAT_IS(s.oversize_allocations, 0, 1, 1, 1);
    STAT_IS(s.oversize_segments, 1, 1, 1, 0);
    uint64_t y = alloc_ok(f.p, 35 * MiB); /* the cached 40M */
    EQ(y, x);
    s = stats_of(f.p);
    STAT_IS(s.oversize_allocations, 1, 1, 2, 1);
    STAT_IS(s.oversize_segments, 1, 1, 1, 0);
    EQ(s.allocated_bytes[FP_LARGE].current, 40 * MiB + 5 * MiB);
    free_ok(f.p, y);
    free_ok(f.p, sm);
    empty_cache_ok(f.p);
    s = stats_of(f.p);
    STAT_IS(s.oversize_allocations, 0, 1, 2, 2);
    STAT_IS(s.oversize_segments, 0, 1, 1, 1);
    fixture_close(&f);
}

static void test_divisions_effect(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.roundup_divisions[0] = 4;
    o.roundup_divisions[1] = 8;
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 3 * MiB / 2 + 1);
    const expect_block l[] = {{7 * MiB / 4, 1}, {20 * MiB - 7 * MiB / 4, 0}};
    expect_seg(f.p, a, 20 * MiB, 0, l, 2);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current, 7 * MiB / 4);
    EQ(s.requested_bytes[FP_LARGE].current, 3 * MiB / 2 + 1);
    uint64_t b = alloc_ok(f.p, 900 * KiB); /* -> 1 MiB, still the small pool */
    const expect_block m[] = {{1 * MiB, 1}, {1 * MiB, 0}};
    expect_seg(f.p, b, 2 * MiB, 1, m, 2);
    uint64_t c = alloc_ok(f.p, 3 * MiB + 1); /* -> 3.25 MiB, after a */
    EQ(c, a + 7 * MiB / 4);
    s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_ALL].current, 7 * MiB / 4 + 1 * MiB + 13 * MiB / 4);
    fixture_close(&f);

    fixture_open(&f, NULL, SIZE_MAX); /* the same without divisions */
    a = alloc_ok(f.p, 3 * MiB / 2 + 1);
    EQ(stats_of(f.p).allocated_bytes[FP_LARGE].current, 3 * MiB / 2 + 512);
    fixture_close(&f);
}

/* fp_pool_stats_since (a forked child's summary): counters and totals
 * count from the base, current and peak stay. */
static void test_stats_since(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 1000), b = alloc_ok(f.p, 3 * MiB);
    free_ok(f.p, a);
    fp_pool_stats base = stats_of(f.p);
    uint64_t c = alloc_ok(f.p, 2000);
    free_ok(f.p, c);
    alloc_ok(f.p, 500);
    fp_pool_stats s = stats_of(f.p), raw = s;
    fp_pool_stats_since(&s, &base);
    EQ(s.num_allocs, 2);
    EQ(s.num_frees, 1);
    EQ(s.num_reserve_calls, 0);
    EQ(s.num_cache_hits, raw.num_cache_hits - base.num_cache_hits);
    STAT_IS(s.requested_bytes[FP_ALL], raw.requested_bytes[FP_ALL].current,
            raw.requested_bytes[FP_ALL].peak, 2500, 2000);
    STAT_IS(s.allocations[FP_ALL], 2, 2, 2, 1);
    STAT_IS(s.segments[FP_ALL], raw.segments[FP_ALL].current, raw.segments[FP_ALL].peak, 0, 0);
    free_ok(f.p, b);
    fixture_close(&f);
}

/* reset_peak_memory_stats: every mark drops to its current value and
 * rises with it again; the run's own peak never moves back. */
static void test_reset_peaks(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 3 * MiB), b = alloc_ok(f.p, 5 * MiB);
    free_ok(f.p, b);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_ALL].mark, 8 * MiB);
    fp_pool_reset_peaks(f.p);
    check_pool(f.p);
    s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_ALL].mark, 3 * MiB);
    EQ(s.allocated_bytes[FP_ALL].peak, 8 * MiB);
    EQ(s.allocations[FP_ALL].mark, 1);
    EQ(s.reserved_bytes[FP_ALL].mark, s.reserved_bytes[FP_ALL].current);
    uint64_t c = alloc_ok(f.p, 1 * MiB);
    s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_ALL].mark, 4 * MiB);
    EQ(s.allocated_bytes[FP_ALL].peak, 8 * MiB);
    free_ok(f.p, a);
    free_ok(f.p, c);
    fixture_close(&f);
}

/* set_per_process_memory_fraction: the cap follows the fraction, down and
 * up again; a fraction outside [0, 1] is refused and changes nothing. */
static void test_set_fraction(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.expandable_segments = FP_VMM_OFF;
    o.device_total = 100 * MiB;
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 30 * MiB);
    EQ(fp_pool_set_fraction(f.p, 0.5), 0);
    uint64_t x;
    EQ(alloc_try(f.p, 30 * MiB, &x), ENOMEM); /* 30 + 30 > 50 */
    EQ(fp_pool_set_fraction(f.p, 1.5), EINVAL);
    EQ(fp_pool_set_fraction(f.p, -0.1), EINVAL);
    EQ(alloc_try(f.p, 30 * MiB, &x), ENOMEM);
    EQ(fp_pool_set_fraction(f.p, 0), 0); /* no fraction: no cap */
    uint64_t b = alloc_ok(f.p, 30 * MiB);
    free_ok(f.p, a);
    free_ok(f.p, b);
    fixture_close(&f);
}

static void test_totals_saturate(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    const size_t big = (size_t)1 << 47;
    for (int i = 0; i < 70000; i++) { /* the pool is checked after the last pair */
        uint64_t a = 0;
        EQ(fp_pool_alloc(f.p, big, &a), 0);
        EQ(fp_pool_free(f.p, a), 0);
    }
    check_pool(f.p);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_allocs, 70000);
    STAT_IS(s.allocated_bytes[FP_ALL], 0, (int64_t)big, INT64_MAX, INT64_MAX);
    STAT_IS(s.requested_bytes[FP_LARGE], 0, (int64_t)big, INT64_MAX, INT64_MAX);
    STAT_IS(s.allocations[FP_ALL], 0, 1, 70000, 70000);
    fp_pool_stats base = s;
    free_ok(f.p, alloc_ok(f.p, big));
    s = stats_of(f.p);
    fp_pool_stats_since(&s, &base);
    STAT_IS(s.allocated_bytes[FP_ALL], 0, (int64_t)big, INT64_MAX, INT64_MAX);
    STAT_IS(s.allocations[FP_ALL], 0, 1, 1, 1);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_sequence),  cmocka_unit_test(test_stats_since),
        cmocka_unit_test(test_stats_oversize),  cmocka_unit_test(test_divisions_effect),
        cmocka_unit_test(test_reset_peaks),     cmocka_unit_test(test_set_fraction),
        cmocka_unit_test(test_totals_saturate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
