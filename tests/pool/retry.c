/* tests/pool/retry.c - when memory runs out: release and retry in its
 * three steps, the OOM of a full device, backend errors passed through, the
 * cap (max_reserved, memory_fraction), and the garbage collector's order
 * and threshold.  Every pool call is followed by fp_pool_check.
 */
#include "pool_test.h"

static void test_retry_release_all(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, 40 * MiB);
    uint64_t a = alloc_ok(f.p, 20 * MiB), b = alloc_ok(f.p, 20 * MiB);
    free_ok(f.p, a);
    free_ok(f.p, b);
    uint64_t c = alloc_ok(f.p, 30 * MiB); /* refused, release both, retry */
    EQ(f.m.sync_calls, 1);
    EQ(f.m.release_calls, 2);
    EQ(owns_addr(f.p, a), 0);
    EQ(owns_addr(f.p, b), 0);
    EQ(owns_addr(f.p, c), 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.num_ooms, 0);
    EQ(s.num_release_calls, 2);
    EQ(s.num_reserve_calls, 3);
    EQ(s.reserved_bytes[FP_ALL].current, 30 * MiB);
    EQ(s.segments[FP_ALL].current, 1);
    EQ(s.num_allocs, 3);
    fixture_close(&f);

    /* both pools are emptied; live segments stay */
    fixture_open(&f, NULL, 42 * MiB);
    uint64_t sm = alloc_ok(f.p, 512), l = alloc_ok(f.p, 20 * MiB), k = alloc_ok(f.p, 20 * MiB);
    free_ok(f.p, sm);
    free_ok(f.p, l);
    uint64_t x = alloc_ok(f.p, 22 * MiB);
    EQ(f.m.release_calls, 2);
    EQ(f.m.sync_calls, 1);
    EQ(owns_addr(f.p, k), 1);
    EQ(owns_addr(f.p, x), 1);
    EQ(owns_addr(f.p, sm), 0);
    s = stats_of(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.reserved_bytes[FP_SMALL].current, 0);
    EQ(s.reserved_bytes[FP_LARGE].current, 42 * MiB);
    fixture_close(&f);

    /* a transient refusal: the retry succeeds with nothing to release */
    fixture_open(&f, NULL, SIZE_MAX);
    f.m.fail_next = 1;
    alloc_ok(f.p, 5 * MiB);
    EQ(f.m.reserve_calls, 2);
    EQ(f.m.sync_calls, 1);
    s = stats_of(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.num_ooms, 0);
    EQ(s.num_reserve_calls, 1);
    fixture_close(&f);
}

static void test_retry_oversize_largest_first(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, 200 * MiB);
    uint64_t o1 = alloc_ok(f.p, 40 * MiB), o2 = alloc_ok(f.p, 50 * MiB),
             o3 = alloc_ok(f.p, 60 * MiB);
    uint64_t l = alloc_ok(f.p, 20 * MiB), sm = alloc_ok(f.p, 512); /* 172 MiB */
    free_ok(f.p, o1);
    free_ok(f.p, o2);
    free_ok(f.p, o3);
    free_ok(f.p, l);
    /* 100M: 172 + 100 > 200; release 60, then 50 (>= 100): retry fits */
    uint64_t r = alloc_ok(f.p, 100 * MiB);
    EQ(f.m.release_calls, 2);
    EQ(f.m.sync_calls, 0);
    EQ(owns_addr(f.p, o3), 0);
    EQ(owns_addr(f.p, o2), 0);
    EQ(owns_addr(f.p, o1), 1);
    EQ(owns_addr(f.p, l), 1);
    EQ(owns_addr(f.p, sm), 1);
    EQ(owns_addr(f.p, r), 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_alloc_retries, 0);
    EQ(s.num_ooms, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 162 * MiB);
    EQ(s.oversize_segments.current, 2);
    EQ(s.oversize_allocations.current, 1);
    fixture_close(&f);
}

static void test_retry_oversize_single(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    /* 40 + 70 + 80 + 2 = 192 MiB of 200 */
    fixture_open(&f, &o, 200 * MiB);
    uint64_t o1 = alloc_ok(f.p, 40 * MiB), o3 = alloc_ok(f.p, 70 * MiB),
             o4 = alloc_ok(f.p, 80 * MiB);
    uint64_t sm = alloc_ok(f.p, 512);
    free_ok(f.p, o1);
    free_ok(f.p, o3);
    free_ok(f.p, o4);
    /* 45M: best fit 70 >= 65 refused; 192 + 46 > 200; the smallest single
     * oversize block >= 45M is 70M: release just that one */
    uint64_t r = alloc_ok(f.p, 45 * MiB);
    EQ(f.m.release_calls, 1);
    EQ(f.m.sync_calls, 0);
    EQ(owns_addr(f.p, o3), 0);
    EQ(owns_addr(f.p, o1), 1);
    EQ(owns_addr(f.p, o4), 1);
    EQ(owns_addr(f.p, r), 1);
    EQ(owns_addr(f.p, sm), 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_alloc_retries, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 40 * MiB + 80 * MiB + 2 * MiB + 46 * MiB);
    fixture_close(&f);

    /* a request under max_split: key max(5M, 32M) -> the 40M block */
    fixture_open(&f, &o, 110 * MiB);
    o1 = alloc_ok(f.p, 40 * MiB);
    uint64_t o2 = alloc_ok(f.p, 60 * MiB);
    sm = alloc_ok(f.p, 512);
    free_ok(f.p, o1);
    free_ok(f.p, o2);
    r = alloc_ok(f.p, 5 * MiB); /* 102 + 20 > 110 */
    EQ(f.m.release_calls, 1);
    EQ(owns_addr(f.p, o1), 0);
    EQ(owns_addr(f.p, o2), 1);
    EQ(stats_of(f.p).num_alloc_retries, 0);
    EQ(owns_addr(f.p, sm), 1);
    EQ(owns_addr(f.p, r), 1);
    fixture_close(&f);

    /* step 1 not enough: step 2 follows */
    fixture_open(&f, &o, 115 * MiB);
    uint64_t l = alloc_ok(f.p, 20 * MiB);
    o1 = alloc_ok(f.p, 40 * MiB);
    o2 = alloc_ok(f.p, 50 * MiB);
    free_ok(f.p, l);
    free_ok(f.p, o1);
    free_ok(f.p, o2);
    r = alloc_ok(f.p, 100 * MiB);
    EQ(f.m.release_calls, 3);
    EQ(f.m.sync_calls, 1);
    fp_pool_stats s2 = stats_of(f.p);
    EQ(s2.num_alloc_retries, 1);
    EQ(s2.num_ooms, 0);
    EQ(s2.reserved_bytes[FP_ALL].current, 100 * MiB);
    EQ(segment_count(f.p), 1);
    fixture_close(&f);
}

static void test_oom_when_full(void **state)
{
    (void)state;
    for (int ms = 0; ms < 2; ms++) {
        fp_pool_opts o = opts_max_split(ms ? 32 * MiB : SIZE_MAX);
        pool_fixture f;
        fixture_open(&f, &o, 40 * MiB);
        uint64_t a = alloc_ok(f.p, 20 * MiB);
        alloc_ok(f.p, 20 * MiB);
        fp_pool_stats s0 = stats_of(f.p);
        walk_dump w0 = {0}, w1 = {0};
        walk_take(f.p, &w0);
        uint64_t x;
        EQ(alloc_try(f.p, 20 * MiB, &x), ENOMEM);
        fp_pool_stats s1 = stats_of(f.p);
        EQ(s1.num_ooms, 1);
        EQ(s1.num_alloc_retries, 1);
        EQ(f.m.sync_calls, 1);
        EQ(f.m.release_calls, 0);
        stats_equal_except(s0, s1, 1, 0);
        walk_take(f.p, &w1);
        TRUE(walk_same(&w0, &w1));
        fp_oom_info oi;
        memset(&oi, 0xff, sizeof oi);
        fp_pool_last_oom(f.p, &oi);
        check_pool(f.p);
        EQ(oi.requested, 20 * MiB);
        EQ(oi.rounded, 20 * MiB);
        EQ(oi.segment, 20 * MiB);
        EQ(oi.allocated, 40 * MiB);
        EQ(oi.reserved, 40 * MiB);
        EQ(oi.idle, 0);
        EQ(oi.largest_free, 0);
        EQ(oi.cap, SIZE_MAX);
        EQ(oi.over_cap, 0);
        EQ(oi.backend_err, ENOMEM);
        free_ok(f.p, a); /* the pool still works */
        EQ(alloc_ok(f.p, 20 * MiB), a);
        walk_free(&w0);
        walk_free(&w1);
        fixture_close(&f);
    }
}

static void test_backend_error(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 20 * MiB), big = alloc_ok(f.p, 40 * MiB);
    free_ok(f.p, a);
    free_ok(f.p, big);
    fp_pool_stats s0 = stats_of(f.p);
    f.m.fail_next = 1;
    f.m.fail_err = EIO;
    uint64_t x;
    EQ(alloc_try(f.p, 22 * MiB, &x), EIO);
    EQ(f.m.reserve_calls, 3);
    EQ(f.m.release_calls, 0);
    EQ(f.m.sync_calls, 0);
    EQ(owns_addr(f.p, a), 1);
    EQ(owns_addr(f.p, big), 1);
    fp_pool_stats s1 = stats_of(f.p);
    EQ(s1.num_alloc_retries, 0);
    EQ(s1.num_allocs, s0.num_allocs);
    EQ(s1.reserved_bytes[FP_ALL].current, 60 * MiB);
    f.m.fail_next = 1;
    EQ(alloc_try(f.p, 50 * MiB, &x), EIO); /* no oversize release either */
    EQ(f.m.release_calls, 0);
    EQ(owns_addr(f.p, big), 1);
    alloc_ok(f.p, 22 * MiB); /* and then it works */
    fixture_close(&f);
}

static void test_cap(void **state)
{
    (void)state;
    for (int how = 0; how < 4; how++) {
        fp_pool_opts o;
        fp_pool_opts_default(&o);
        o.device_total = 100 * MiB;
        if (how == 0) {
            o.max_reserved = 50 * MiB;
        } else if (how == 1) {
            o.memory_fraction = 0.5;
        } else if (how == 2) { /* both: the smaller is the fraction */
            o.max_reserved = 60 * MiB;
            o.memory_fraction = 0.5;
        } else { /* both: the smaller is max_reserved */
            o.max_reserved = 50 * MiB;
            o.memory_fraction = 0.75;
            o.device_total = 100 * MiB;
        }
        EQ(fp_pool_opts_cap(&o), 50 * MiB);
        pool_fixture f;
        fixture_open(&f, &o, SIZE_MAX);
        alloc_ok(f.p, 20 * MiB);
        uint64_t b = alloc_ok(f.p, 20 * MiB);
        uint64_t x;
        EQ(alloc_try(f.p, 20 * MiB, &x), ENOMEM); /* 60 > 50 */
        EQ(f.m.reserve_calls, 2);                 /* the backend never saw it */
        fp_oom_info oi;
        fp_pool_last_oom(f.p, &oi);
        check_pool(f.p);
        EQ(oi.cap, 50 * MiB);
        EQ(oi.over_cap, 1);
        EQ(oi.requested, 20 * MiB);
        EQ(oi.segment, 20 * MiB);
        fp_pool_stats s = stats_of(f.p);
        EQ(s.num_ooms, 1);
        EQ(s.reserved_bytes[FP_ALL].peak, 40 * MiB);
        alloc_ok(f.p, 10 * MiB); /* 40 + 10 == 50: allowed */
        EQ(alloc_try(f.p, 1, &x), ENOMEM);
        free_ok(f.p, b); /* cached 20M: a 22M request releases it, still over */
        EQ(alloc_try(f.p, 22 * MiB, &x), ENOMEM);
        EQ(owns_addr(f.p, b), 0);
        EQ(f.m.release_calls, 1);
        alloc_ok(f.p, 20 * MiB); /* 30 + 20 == 50 */
        s = stats_of(f.p);
        EQ(s.num_ooms, 3);
        EQ(s.reserved_bytes[FP_ALL].current, 50 * MiB);
        EQ(s.reserved_bytes[FP_ALL].peak, 50 * MiB);
        fixture_close(&f);
    }

    /* the cap releases and retries like the backend */
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_reserved = 40 * MiB;
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 20 * MiB), b = alloc_ok(f.p, 20 * MiB);
    free_ok(f.p, a);
    free_ok(f.p, b);
    alloc_ok(f.p, 30 * MiB);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_alloc_retries, 1);
    EQ(s.num_ooms, 0);
    EQ(f.m.release_calls, 2);
    fixture_close(&f);
}

static fp_pool_opts opts_gc(size_t cap, double th)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.max_reserved = cap;
    o.gc_threshold = th;
    return o;
}

static void test_gc_order(void **state)
{
    (void)state;
    fp_pool_opts o = opts_gc(200 * MiB, 0.45); /* threshold 90 MiB */
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t g = alloc_ok(f.p, 2 * MiB); /* 20M segment: 2M + 18M free */
    uint64_t a = alloc_ok(f.p, 20 * MiB), b = alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 20 * MiB); /* 100 MiB reserved */
    EQ(stats_of(f.p).num_gc_releases, 0);
    free_ok(f.p, a);
    nap();
    EQ(alloc_ok(f.p, 2 * MiB), g + 2 * MiB); /* cache hit from the 18M block */
    nap();
    free_ok(f.p, b);
    nap();
    /* 22M fits nowhere: 100 > 90, so the GC runs; the older a goes, and
     * that is enough (80 <= 90); b, used more recently, stays */
    uint64_t x = alloc_ok(f.p, 22 * MiB);
    EQ(owns_addr(f.p, a), 0);
    EQ(owns_addr(f.p, b), 1);
    EQ(owns_addr(f.p, x), 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_gc_releases, 1);
    EQ(s.num_release_calls, 1);
    EQ(s.num_alloc_retries, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 102 * MiB);
    fixture_close(&f);

    /* age counts from the free, not the allocation: b, allocated first but
     * freed last, is the one that stays */
    fixture_open(&f, &o, SIZE_MAX);
    g = alloc_ok(f.p, 2 * MiB);
    b = alloc_ok(f.p, 20 * MiB);
    a = alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 20 * MiB);
    free_ok(f.p, a);
    nap();
    EQ(alloc_ok(f.p, 2 * MiB), g + 2 * MiB);
    nap();
    free_ok(f.p, b);
    nap();
    x = alloc_ok(f.p, 22 * MiB);
    EQ(owns_addr(f.p, a), 0);
    EQ(owns_addr(f.p, b), 1);
    s = stats_of(f.p);
    EQ(s.num_gc_releases, 1);
    EQ(s.reserved_bytes[FP_ALL].current, 102 * MiB);
    fixture_close(&f);
}

static void test_gc_threshold(void **state)
{
    (void)state;
    /* at the threshold exactly: no GC; above: down to it */
    fp_pool_opts o = opts_gc(200 * MiB, 0.5); /* threshold 100 MiB */
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t a[5];
    for (int i = 0; i < 5; i++)
        a[i] = alloc_ok(f.p, 20 * MiB);
    free_ok(f.p, a[0]);
    alloc_ok(f.p, 22 * MiB); /* 100 is not > 100 */
    EQ(owns_addr(f.p, a[0]), 1);
    EQ(stats_of(f.p).num_gc_releases, 0);
    nap();
    free_ok(f.p, a[1]);
    nap();
    alloc_ok(f.p, 24 * MiB); /* 122 > 100: both free segments must go (102, 82) */
    EQ(owns_addr(f.p, a[0]), 0);
    EQ(owns_addr(f.p, a[1]), 0);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_gc_releases, 2);
    EQ(s.reserved_bytes[FP_ALL].current, 106 * MiB);
    EQ(s.num_alloc_retries, 0);
    fixture_close(&f);

    /* many idle segments: reserved falls to the threshold before the new
     * segment is added */
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t b[6];
    for (int i = 0; i < 6; i++)
        b[i] = alloc_ok(f.p, 20 * MiB);
    for (int i = 0; i < 6; i++)
        free_ok(f.p, b[i]);
    alloc_ok(f.p, 22 * MiB);
    s = stats_of(f.p);
    TRUE(s.num_gc_releases >= 1);
    EQ(s.num_release_calls, s.num_gc_releases);
    TRUE(s.reserved_bytes[FP_ALL].current - (int64_t)(22 * MiB) <= (int64_t)(100 * MiB));
    EQ(s.reserved_bytes[FP_ALL].current, (int64_t)(142 * MiB - 20 * MiB * s.num_gc_releases));
    EQ(s.num_alloc_retries, 0);
    fixture_close(&f);

    /* live segments are never collected */
    o = opts_gc(100 * MiB, 0.5);
    fixture_open(&f, &o, SIZE_MAX);
    alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 20 * MiB);
    alloc_ok(f.p, 512);
    alloc_ok(f.p, 22 * MiB); /* 62 > 50, nothing idle */
    s = stats_of(f.p);
    EQ(s.num_gc_releases, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 84 * MiB);
    fixture_close(&f);

    /* no cap, no GC */
    o = opts_gc(0, 0.5);
    fixture_open(&f, &o, SIZE_MAX);
    for (int i = 0; i < 6; i++)
        b[i] = alloc_ok(f.p, 20 * MiB);
    for (int i = 0; i < 6; i++)
        free_ok(f.p, b[i]);
    alloc_ok(f.p, 22 * MiB);
    s = stats_of(f.p);
    EQ(s.num_gc_releases, 0);
    EQ(s.reserved_bytes[FP_ALL].current, 142 * MiB);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_release_all),
        cmocka_unit_test(test_retry_oversize_largest_first),
        cmocka_unit_test(test_retry_oversize_single),
        cmocka_unit_test(test_oom_when_full),
        cmocka_unit_test(test_backend_error),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_gc_order),
        cmocka_unit_test(test_gc_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
