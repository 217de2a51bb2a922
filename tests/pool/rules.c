/* tests/pool/rules.c - the pool's placement rules, each at its boundary.
 *
 * Options and the cap they imply, size rounding (plain and with
 * roundup_power2_divisions), segment sizes, the small and large split
 * rules, best fit with its address tie-break, each max_split rule, and
 * merging (never across segments).  Every expected value is written out,
 * and the rounding tables are also checked against ref_round.  Every pool
 * call is followed by fp_pool_check (pool_test.h).
 */
#include "pool_test.h"

static void test_opts_default(void **state)
{
    (void)state;
    fp_pool_opts o;
    memset(&o, 0xab, sizeof o);
    fp_pool_opts_default(&o);
    EQ(o.max_split_size, SIZE_MAX);
    EQ(o.max_non_split_rounding, 20 * MiB);
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++)
        TRUE(o.roundup_divisions[i] <= 1);
    TRUE(o.gc_threshold == 0.0);
    TRUE(o.memory_fraction == 0.0);
    EQ(o.max_reserved, 0);
    EQ(fp_pool_opts_cap(&o), SIZE_MAX);
}

static void test_opts_cap(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.device_total = 1 * GiB;
    EQ(fp_pool_opts_cap(&o), SIZE_MAX); /* device_total alone is no cap */
    o.max_reserved = 100 * MiB;
    EQ(fp_pool_opts_cap(&o), 100 * MiB);
    o.max_reserved = 0;
    o.memory_fraction = 0.5;
    EQ(fp_pool_opts_cap(&o), 512 * MiB);
    o.memory_fraction = 0.25;
    EQ(fp_pool_opts_cap(&o), 256 * MiB);
    o.memory_fraction = 1.0;
    EQ(fp_pool_opts_cap(&o), 1 * GiB);
    o.memory_fraction = 0.5;
    o.max_reserved = 100 * MiB; /* both: the smaller */
    EQ(fp_pool_opts_cap(&o), 100 * MiB);
    o.max_reserved = 600 * MiB;
    EQ(fp_pool_opts_cap(&o), 512 * MiB);
}

typedef struct sz2 {
    size_t in, out;
} sz2;

static void round_table(const fp_pool_opts *o, const sz2 *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t got = fp_round_size(o, t[i].in);
        if (got != t[i].out)
            fail_msg("fp_round_size(%zu) = %zu, expected %zu", t[i].in, got, t[i].out);
        EQ(ref_round(o, t[i].in), t[i].out); /* the model agrees */
    }
}

static void test_round_plain(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    static const sz2 t[] = {
        {0, 512},
        {1, 512},
        {511, 512},
        {512, 512},
        {513, 1024},
        {1000, 1024},
        {1024, 1024},
        {1025, 1536},
        {4097, 4608},
        {1 * MiB - 1, 1 * MiB},
        {1 * MiB, 1 * MiB},
        {1 * MiB + 1, 1 * MiB + 512},
        {3 * MiB / 2 + 1, 3 * MiB / 2 + 512},
        {10 * MiB - 1, 10 * MiB},
        {10 * MiB + 1, 10 * MiB + 512},
        {1 * GiB + 1, 1 * GiB + 512},
        {64 * GiB + 1, 64 * GiB + 512},
    };
    round_table(&o, t, sizeof t / sizeof t[0]);
    o.roundup_divisions[0] = 1; /* 1 = off */
    o.roundup_divisions[5] = 1;
    round_table(&o, t, sizeof t / sizeof t[0]);
}

static void test_round_divisions(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.roundup_divisions[0] = 4;  /* [0, 2M): also below 1 MiB */
    o.roundup_divisions[1] = 8;  /* [2M, 4M)                  */
    o.roundup_divisions[5] = 2;  /* [32M, 64M)                */
    o.roundup_divisions[14] = 1; /* [16G, 32G): off            */
    o.roundup_divisions[15] = 4; /* [32G, ...)                */
    static const sz2 t[] = {
        {1, 512},
        {2047, 2048},
        {2048, 2048},
        {2049, 2560},
        {3000, 3072},
        {4097, 5120},
        {900 * KiB, 1 * MiB},
        {1 * MiB, 1 * MiB},
        {1 * MiB + 1, 1 * MiB + 256 * KiB},
        {5 * MiB / 4, 5 * MiB / 4},
        {3 * MiB / 2, 3 * MiB / 2},
        {3 * MiB / 2 + 1, 7 * MiB / 4},
        {2 * MiB - 1, 2 * MiB},
        {2 * MiB, 2 * MiB},
        {2 * MiB + 1, 2 * MiB + 256 * KiB},
        {3 * MiB + 1, 3 * MiB + 256 * KiB},
        {4 * MiB - 1, 4 * MiB},
        {4 * MiB + 1, 4 * MiB + 512},
        {32 * MiB, 32 * MiB},
        {33 * MiB, 48 * MiB},
        {40 * MiB, 48 * MiB},
        {48 * MiB, 48 * MiB},
        {48 * MiB + 1, 64 * MiB},
        {64 * MiB + 1, 64 * MiB + 512},
        {16 * GiB + 1, 16 * GiB + 512},
        {32 * GiB + 1, 40 * GiB},
        {64 * GiB, 64 * GiB},
        {100 * GiB, 112 * GiB},
    };
    round_table(&o, t, sizeof t / sizeof t[0]);

    /* "only above 512 x N": with 16 divisions, sizes <= 8 KiB keep 512 B. */
    fp_pool_opts_default(&o);
    o.roundup_divisions[0] = 16;
    static const sz2 u[] = {
        {4097, 4608}, {8191, 8192},   {8192, 8192},
        {8193, 8704}, {16385, 17408}, {1 * MiB + 1, 1 * MiB + 64 * KiB},
    };
    round_table(&o, u, sizeof u / sizeof u[0]);
}

static void test_segment_size(void **state)
{
    (void)state;
    static const sz2 t[] = {
        {512, 2 * MiB},
        {1 * MiB, 2 * MiB},
        {1 * MiB + 1, 20 * MiB},
        {1 * MiB + 512, 20 * MiB},
        {2 * MiB, 20 * MiB},
        {10 * MiB - 1, 20 * MiB},
        {10 * MiB - 512, 20 * MiB},
        {10 * MiB, 10 * MiB},
        {10 * MiB + 1, 12 * MiB},
        {10 * MiB + 512, 12 * MiB},
        {19 * MiB, 20 * MiB},
        {20 * MiB, 20 * MiB},
        {21 * MiB, 22 * MiB},
        {22 * MiB, 22 * MiB},
        {1 * GiB + 512, 1 * GiB + 2 * MiB},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t got = fp_pool_segment_size(t[i].in);
        if (got != t[i].out)
            fail_msg("fp_pool_segment_size(%zu) = %zu, expected %zu", t[i].in, got, t[i].out);
        EQ(ref_segment_size(t[i].in), t[i].out);
    }
    EQ(fp_pool_is_small(512), 1);
    EQ(fp_pool_is_small(1 * MiB - 512), 1);
    EQ(fp_pool_is_small(1 * MiB), 1);
    EQ(fp_pool_is_small(1 * MiB + 1), 0);
    EQ(fp_pool_is_small(1 * MiB + 512), 0);
    EQ(fp_pool_is_small(20 * MiB), 0);
}

/* ======================================================================= */
/* split, best fit, max_split, merge                                       */
/* ======================================================================= */

static void test_small_split_boundary(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 1 * MiB); /* small: 2 MiB segment, split 1M + 1M */
    const expect_block l0[] = {{1 * MiB, 1}, {1 * MiB, 0}};
    expect_seg(f.p, a, 2 * MiB, 1, l0, 2);
    uint64_t b = alloc_ok(f.p, 1 * MiB - 512); /* remainder 512: split */
    EQ(b, a + 1 * MiB);
    const expect_block l1[] = {{1 * MiB, 1}, {1 * MiB - 512, 1}, {512, 0}};
    expect_seg(f.p, a, 2 * MiB, 1, l1, 3);
    uint64_t c = alloc_ok(f.p, 1); /* remainder 0: the 512 B block as it is */
    EQ(c, a + 2 * MiB - 512);
    const expect_block l2[] = {{1 * MiB, 1}, {1 * MiB - 512, 1}, {512, 1}};
    expect_seg(f.p, a, 2 * MiB, 1, l2, 3);
    free_ok(f.p, b);
    uint64_t d = alloc_ok(f.p, 1 * MiB - 1000); /* rounds to 1M - 512: exact fit */
    EQ(d, b);
    expect_seg(f.p, a, 2 * MiB, 1, l2, 3);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_SMALL].current, 2 * MiB);
    EQ(s.requested_bytes[FP_SMALL].current, 2 * MiB - 1000 + 1);
    EQ(f.m.reserve_ok, 1);
    fixture_close(&f);
}

static void test_large_split_boundary(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 19 * MiB); /* segment 20M, remainder 1M: no split */
    const expect_block whole[] = {{20 * MiB, 1}};
    expect_seg(f.p, a, 20 * MiB, 0, whole, 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current, 20 * MiB);
    EQ(s.requested_bytes[FP_LARGE].current, 19 * MiB);

    uint64_t b = alloc_ok(f.p, 19 * MiB - 512); /* remainder 1M + 512: split */
    const expect_block split[] = {{19 * MiB - 512, 1}, {1 * MiB + 512, 0}};
    expect_seg(f.p, b, 20 * MiB, 0, split, 2);

    free_ok(f.p, a); /* the same two cases from a cached block */
    uint64_t c = alloc_ok(f.p, 19 * MiB);
    EQ(c, a);
    expect_seg(f.p, a, 20 * MiB, 0, whole, 1);
    free_ok(f.p, c);
    uint64_t d = alloc_ok(f.p, 19 * MiB - 512);
    EQ(d, a);
    expect_seg(f.p, a, 20 * MiB, 0, split, 2);
    EQ(f.m.reserve_ok, 2);

    uint64_t e = alloc_ok(f.p, 2 * MiB); /* 20 MiB segment, split 2M + 18M */
    const expect_block l3[] = {{2 * MiB, 1}, {18 * MiB, 0}};
    expect_seg(f.p, e, 20 * MiB, 0, l3, 2);
    EQ(f.m.reserve_ok, 3);

    /* two free 1M+512 blocks (in a's and b's segments) fit exactly: the
     * lower address wins, and the rest of the pool is untouched */
    uint64_t g = alloc_ok(f.p, 1 * MiB + 1);
    EQ(g, a + 19 * MiB - 512);
    expect_seg(f.p, b, 20 * MiB, 0, split, 2);
    s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current, 2 * (19 * MiB - 512) + 1 * MiB + 512 + 2 * MiB);
    EQ(f.m.reserve_ok, 3);
    fixture_close(&f);
}

static void test_best_fit_small(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a1 = alloc_ok(f.p, 512);
    uint64_t h1 = alloc_ok(f.p, 1024);
    uint64_t a2 = alloc_ok(f.p, 512);
    uint64_t h2 = alloc_ok(f.p, 2048);
    uint64_t a3 = alloc_ok(f.p, 512);
    uint64_t h3 = alloc_ok(f.p, 1024);
    uint64_t a4 = alloc_ok(f.p, 512);
    EQ(h1, a1 + 512);
    EQ(a2, a1 + 1536);
    EQ(h2, a1 + 2048);
    EQ(a3, a1 + 4096);
    EQ(h3, a1 + 4608);
    EQ(a4, a1 + 5632);
    free_ok(f.p, h3); /* holes: h1 1024, h2 2048, h3 1024, and the tail */
    free_ok(f.p, h2);
    free_ok(f.p, h1);
    EQ(alloc_ok(f.p, 1000), h1);       /* 1024: two exact holes, lower address */
    EQ(alloc_ok(f.p, 1024), h3);       /* the other exact hole                  */
    EQ(alloc_ok(f.p, 1536), h2);       /* best fit 2048, split                  */
    EQ(alloc_ok(f.p, 100), h2 + 1536); /* the 512 B remainder before the tail   */
    EQ(alloc_ok(f.p, 600), a1 + 6144); /* only the tail fits                    */
    EQ(f.m.reserve_ok, 1);
    fixture_close(&f);

    /* tie across segments: two free 1 MiB blocks, lower address wins */
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t s1a = alloc_ok(f.p, 1 * MiB);
    uint64_t s1b = alloc_ok(f.p, 1 * MiB);
    uint64_t s2a = alloc_ok(f.p, 1 * MiB);
    uint64_t s2b = alloc_ok(f.p, 1 * MiB);
    EQ(s1b, s1a + 1 * MiB);
    EQ(s2b, s2a + 1 * MiB);
    TRUE(s2a > s1a);
    free_ok(f.p, s2b);
    free_ok(f.p, s1b);
    EQ(alloc_ok(f.p, 1 * MiB), s1b);
    EQ(alloc_ok(f.p, 1 * MiB), s2b);
    EQ(f.m.reserve_ok, 2);
    fixture_close(&f);
}

static void test_best_fit_large(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a12 = alloc_ok(f.p, 12 * MiB);
    uint64_t b14 = alloc_ok(f.p, 14 * MiB);
    uint64_t c16 = alloc_ok(f.p, 16 * MiB);
    uint64_t d12 = alloc_ok(f.p, 12 * MiB);
    TRUE(a12 < b14 && b14 < c16 && c16 < d12);
    free_ok(f.p, c16); /* free out of address order */
    free_ok(f.p, d12);
    free_ok(f.p, b14);
    free_ok(f.p, a12);
    EQ(alloc_ok(f.p, 13 * MiB), b14);       /* smallest that fits; rem 1M kept */
    EQ(alloc_ok(f.p, 12 * MiB), a12);       /* tie of two 12M: lower address   */
    EQ(alloc_ok(f.p, 12 * MiB - 512), d12); /* rem 512 in the large pool: kept */
    EQ(alloc_ok(f.p, 15 * MiB), c16);
    EQ(f.m.reserve_ok, 4);
    const expect_block whole14[] = {{14 * MiB, 1}};
    expect_seg(f.p, b14, 14 * MiB, 0, whole14, 1);
    const expect_block whole12[] = {{12 * MiB, 1}};
    expect_seg(f.p, d12, 12 * MiB, 0, whole12, 1);
    const expect_block whole16[] = {{16 * MiB, 1}};
    expect_seg(f.p, c16, 16 * MiB, 0, whole16, 1);

    /* a large request never takes a small-pool block, nor the reverse */
    uint64_t sm = alloc_ok(f.p, 1 * MiB);
    free_ok(f.p, sm); /* a free 2 MiB small segment */
    uint64_t lg = alloc_ok(f.p, 1 * MiB + 512);
    TRUE(lg < sm || lg >= sm + 2 * MiB);
    EQ(f.m.reserve_ok, 6);
    uint64_t l2 = alloc_ok(f.p, 2 * MiB); /* from lg's segment */
    EQ(l2, lg + 1 * MiB + 512);
    free_ok(f.p, l2);
    EQ(alloc_ok(f.p, 512), sm); /* small request: the small segment */
    EQ(f.m.reserve_ok, 6);
    fixture_close(&f);
}

static void test_max_split_refuse(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t big = alloc_ok(f.p, 40 * MiB);
    free_ok(f.p, big); /* cached oversize block */
    uint64_t x = alloc_ok(f.p, 5 * MiB);
    TRUE(x != big);
    EQ(f.m.reserve_ok, 2);
    const expect_block free40[] = {{40 * MiB, 0}};
    expect_seg(f.p, big, 40 * MiB, 0, free40, 1);
    uint64_t y = alloc_ok(f.p, 30 * MiB); /* < max_split: still refused */
    TRUE(y != big);
    EQ(f.m.reserve_ok, 3);
    uint64_t z = alloc_ok(f.p, 32 * MiB - 512); /* just under max_split */
    TRUE(z != big);
    EQ(f.m.reserve_ok, 4);
    expect_seg(f.p, big, 40 * MiB, 0, free40, 1);
    uint64_t w = alloc_ok(f.p, 32 * MiB); /* == max_split: takes it, unsplit */
    EQ(w, big);
    const expect_block used40[] = {{40 * MiB, 1}};
    expect_seg(f.p, big, 40 * MiB, 0, used40, 1);
    EQ(f.m.reserve_ok, 4);
    fixture_close(&f);
}

static void test_max_split_slack(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t b60 = alloc_ok(f.p, 60 * MiB);
    free_ok(f.p, b60);
    uint64_t x = alloc_ok(f.p, 40 * MiB); /* 60 >= 40 + 20: refused */
    TRUE(x != b60);
    EQ(f.m.reserve_ok, 2);
    fp_pool_stats s0 = stats_of(f.p);
    uint64_t y = alloc_ok(f.p, 40 * MiB + 512); /* 60 < 60M + 512: taken whole */
    EQ(y, b60);
    EQ(f.m.reserve_ok, 2);
    const expect_block used60[] = {{60 * MiB, 1}};
    expect_seg(f.p, b60, 60 * MiB, 0, used60, 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_LARGE].current, s0.allocated_bytes[FP_LARGE].current + 60 * MiB);
    EQ(s.requested_bytes[FP_LARGE].current, s0.requested_bytes[FP_LARGE].current + 40 * MiB + 512);
    EQ(s.num_cache_hits, s0.num_cache_hits + 1);

    free_ok(f.p, x); /* 40M block: request == max_split takes it, not split */
    uint64_t z = alloc_ok(f.p, 32 * MiB);
    EQ(z, x);
    const expect_block used40[] = {{40 * MiB, 1}};
    expect_seg(f.p, x, 40 * MiB, 0, used40, 1);
    fixture_close(&f);

    /* a smaller max_non_split_rounding */
    o.max_non_split_rounding = 4 * MiB;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t b40 = alloc_ok(f.p, 40 * MiB);
    free_ok(f.p, b40);
    uint64_t u = alloc_ok(f.p, 36 * MiB); /* 40 >= 36 + 4 */
    TRUE(u != b40);
    uint64_t v = alloc_ok(f.p, 36 * MiB + 512); /* 40 < 40M + 512 */
    EQ(v, b40);
    EQ(f.m.reserve_ok, 2);
    fixture_close(&f);
}

static void test_max_split_no_split(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    /* A request >= max_split never splits, whatever the remainder. */
    uint64_t a = alloc_ok(f.p, 50 * MiB);
    free_ok(f.p, a);
    uint64_t b = alloc_ok(f.p, 34 * MiB); /* 50 < 54: taken, remainder 16M kept */
    EQ(b, a);
    const expect_block l[] = {{50 * MiB, 1}};
    expect_seg(f.p, a, 50 * MiB, 0, l, 1);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_ALL].current, 50 * MiB);
    EQ(s.requested_bytes[FP_ALL].current, 34 * MiB);
    EQ(s.oversize_allocations.current, 1);
    EQ(idle_bytes(f.p), 0);
    fixture_close(&f);
}

/* The split rule looks at the request only: a request under max_split whose
 * new segment is >= max_split (30.5M -> 32M) is split like any other
 * (PyTorch's should_split). */
static void test_max_split_fresh_segment(void **state)
{
    (void)state;
    fp_pool_opts o = opts_max_split(32 * MiB);
    pool_fixture f;
    fixture_open(&f, &o, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 30 * MiB + 512);
    const expect_block l[] = {{30 * MiB + 512, 1}, {2 * MiB - 512, 0}};
    expect_seg(f.p, a, 32 * MiB, 0, l, 2);
    free_ok(f.p, a); /* merges back to a free 32M block: oversize now */
    const expect_block fr[] = {{32 * MiB, 0}};
    expect_seg(f.p, a, 32 * MiB, 0, fr, 1);
    uint64_t b = alloc_ok(f.p, 2 * MiB); /* < max_split: refuses it */
    TRUE(b != a);
    EQ(f.m.reserve_ok, 2);
    fixture_close(&f);
}

static void test_merge(void **state)
{
    (void)state;
    const size_t tail = 2 * MiB - 1536;
    pool_fixture f;
    for (int mode = 0; mode < 3; mode++) {
        fixture_open(&f, NULL, SIZE_MAX);
        uint64_t a = alloc_ok(f.p, 512), b = alloc_ok(f.p, 512), c = alloc_ok(f.p, 512);
        EQ(b, a + 512);
        EQ(c, a + 1024);
        if (mode == 0) { /* with the previous block */
            free_ok(f.p, a);
            free_ok(f.p, b);
            const expect_block l[] = {{1024, 0}, {512, 1}, {tail, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, l, 3);
        } else if (mode == 1) { /* with the next block */
            free_ok(f.p, b);
            free_ok(f.p, a);
            const expect_block l[] = {{1024, 0}, {512, 1}, {tail, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, l, 3);
        } else { /* with both */
            free_ok(f.p, a);
            free_ok(f.p, c); /* merges with the tail */
            const expect_block l[] = {{512, 0}, {512, 1}, {tail + 512, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, l, 3);
            free_ok(f.p, b);
            const expect_block w[] = {{2 * MiB, 0}};
            expect_seg(f.p, a, 2 * MiB, 1, w, 1);
            fp_pool_stats s = stats_of(f.p);
            EQ(s.inactive_split[FP_ALL].current, 0);
            EQ(s.inactive_split_bytes[FP_ALL].current, 0);
            EQ(s.largest_free, 2 * MiB);
        }
        fixture_close(&f);
    }

    /* the same in the large pool, and a merged block is reused whole */
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a = alloc_ok(f.p, 4 * MiB), b = alloc_ok(f.p, 4 * MiB), c = alloc_ok(f.p, 4 * MiB);
    EQ(b, a + 4 * MiB);
    EQ(c, a + 8 * MiB);
    free_ok(f.p, c);
    free_ok(f.p, a);
    const expect_block l[] = {{4 * MiB, 0}, {4 * MiB, 1}, {12 * MiB, 0}};
    expect_seg(f.p, a, 20 * MiB, 0, l, 3);
    free_ok(f.p, b);
    const expect_block w[] = {{20 * MiB, 0}};
    expect_seg(f.p, a, 20 * MiB, 0, w, 1);
    EQ(alloc_ok(f.p, 20 * MiB), a);
    EQ(f.m.reserve_ok, 1);
    fixture_close(&f);
}

static void test_no_merge_across_segments(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    uint64_t a1 = alloc_ok(f.p, 1 * MiB), a2 = alloc_ok(f.p, 1 * MiB);
    uint64_t b1 = alloc_ok(f.p, 1 * MiB), b2 = alloc_ok(f.p, 1 * MiB);
    EQ(b1, a1 + 2 * MiB); /* the mock hands out adjacent segments */
    free_ok(f.p, a2);
    free_ok(f.p, b1); /* a2 and b1 touch, but lie in two segments */
    free_ok(f.p, a1);
    free_ok(f.p, b2);
    const expect_block w2[] = {{2 * MiB, 0}};
    expect_seg(f.p, a1, 2 * MiB, 1, w2, 1);
    expect_seg(f.p, b1, 2 * MiB, 1, w2, 1);
    EQ(stats_of(f.p).largest_free, 2 * MiB);

    uint64_t c1 = alloc_ok(f.p, 20 * MiB), c2 = alloc_ok(f.p, 20 * MiB);
    EQ(c2, c1 + 20 * MiB);
    free_ok(f.p, c1);
    free_ok(f.p, c2);
    EQ(stats_of(f.p).largest_free, 20 * MiB);
    uint64_t d = alloc_ok(f.p, 30 * MiB); /* 40M of adjacent free space: unused */
    TRUE(d >= c2 + 20 * MiB);
    EQ(f.m.reserve_ok, 5);
    const expect_block w20[] = {{20 * MiB, 0}};
    expect_seg(f.p, c1, 20 * MiB, 0, w20, 1);
    expect_seg(f.p, c2, 20 * MiB, 0, w20, 1);
    fixture_close(&f);
}

/* exact_segment_round (the pinned host pool): a large request's segment
 * is its own size rounded to the unit; small requests keep 2 MiB
 * segments; a freed large block serves a smaller large request by best
 * fit and split.  Its own backend: segments of any multiple of 4 KiB. */
typedef struct exact_be {
    uint64_t next;
    size_t sizes[16];
    int n;
} exact_be;

static int exact_reserve(void *ctx, size_t size, uint64_t *addr)
{
    exact_be *e = ctx;
    if (size % 4096 || e->n == 16)
        return EINVAL;
    e->sizes[e->n++] = size;
    *addr = e->next;
    e->next += (size + 2 * MiB) & ~(uint64_t)(2 * MiB - 1);
    return 0;
}

static int exact_release(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx;
    (void)addr;
    (void)size;
    return 0;
}

static void test_exact_segment_round(void **state)
{
    (void)state;
    exact_be e = {.next = 1ull << 40};
    fp_backend be = {.ctx = &e, .reserve = exact_reserve, .release = exact_release};
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.exact_segment_round = 4096;
    fp_pool *p;
    EQ(fp_pool_create(&o, &be, &p), 0);
    uint64_t a, b, c, d;
    EQ(fp_pool_alloc(p, 1 * MiB + 1, &a), 0);  /* 1 MiB + 512 -> + 4 KiB */
    EQ(fp_pool_alloc(p, 10 * MiB + 1, &b), 0); /* PyTorch: 12 MiB        */
    EQ(fp_pool_alloc(p, 100, &c), 0);          /* small: 2 MiB as ever   */
    EQ(e.n, 3);
    EQ(e.sizes[0], 1 * MiB + 4096);
    EQ(e.sizes[1], 10 * MiB + 4096);
    EQ(e.sizes[2], 2 * MiB);
    EQ(fp_pool_free(p, b), 0);
    EQ(fp_pool_alloc(p, 5 * MiB, &d), 0); /* best fit in b, split  */
    EQ(d, b);
    EQ(e.n, 3);
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    EQ(st.reserved_bytes[FP_ALL].current, 13 * MiB + 8192);
    char msg[256];
    EQ(fp_pool_check(p, msg, sizeof msg), 0);
    fp_pool_destroy(p, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opts_default),
        cmocka_unit_test(test_opts_cap),
        cmocka_unit_test(test_round_plain),
        cmocka_unit_test(test_round_divisions),
        cmocka_unit_test(test_segment_size),
        cmocka_unit_test(test_exact_segment_round),
        cmocka_unit_test(test_small_split_boundary),
        cmocka_unit_test(test_large_split_boundary),
        cmocka_unit_test(test_best_fit_small),
        cmocka_unit_test(test_best_fit_large),
        cmocka_unit_test(test_max_split_refuse),
        cmocka_unit_test(test_max_split_slack),
        cmocka_unit_test(test_max_split_no_split),
        cmocka_unit_test(test_max_split_fresh_segment),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_no_merge_across_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
