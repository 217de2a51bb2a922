/* tests/pool/front.c - the pool's front end (pool_front.c): one thread
 * changes nothing, a second turns the caches on, a cached block comes back
 * to its thread with its stamp and stream, every cache goes back before the
 * pool grows, and a block in a cache cannot be freed twice.
 */
#include "pool_test.h"

static fp_grant front_alloc(fp_pool *p, fp_tcache *t, size_t size, uint64_t stream, int *same)
{
    fp_grant g;
    EQ(fp_pool_front_alloc(p, t, size, UINT64_MAX, stream, &g, same), 0);
    check_pool(p);
    return g;
}

/* One thread joined: the front end takes nothing, the pool serves all. */
/* The defaults with the front end on (its default is off, issue 43). */
static const fp_pool_opts *front_opts(void)
{
    static fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.thread_cache = 8 * MiB;
    return &o;
}

static void test_one_thread_untouched(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, front_opts(), 64 * MiB);
    fp_tcache *a;
    EQ(fp_pool_front_join(f.p, &a), 0);
    int same;
    fp_grant g = front_alloc(f.p, a, 4096, 0, &same);
    size_t size;
    uint64_t stamp;
    EQ(fp_pool_front_free(f.p, a, g.addr, 0, &size, &stamp), ENOENT);
    free_ok(f.p, g.addr);
    fp_front_counts c;
    fp_pool_front_counts(f.p, &c);
    EQ(c.threads, 1);
    EQ(c.allocs + c.frees + c.flushes, 0);
    fp_pool_front_leave(f.p, a);
    fixture_close(&f);
}

/* Two threads: a free goes to its thread's cache (free in the stats), and
 * that thread's next allocation of the size takes it back, with the free's
 * stamp and stream, the clock past the stamp. */
static void test_second_thread_caches(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, front_opts(), 64 * MiB);
    fp_tcache *a, *b;
    EQ(fp_pool_front_join(f.p, &a), 0);
    EQ(fp_pool_front_join(f.p, &b), 0);
    int same;
    fp_grant g = front_alloc(f.p, a, 5000, 7, &same);
    EQ(same, 0);
    size_t size;
    uint64_t stamp;
    EQ(fp_pool_front_free(f.p, a, g.addr, 7, &size, &stamp), 0);
    EQ(size, g.size);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.allocated_bytes[FP_ALL].current, 0);
    EQ(s.allocations[FP_SMALL].current, 0);
    EQ(s.active_bytes[FP_ALL].current, 0);
    /* b's cache is its own: b gets other memory */
    fp_grant h = front_alloc(f.p, b, 5000, 7, &same);
    TRUE(h.addr != g.addr);
    fp_grant g2 = front_alloc(f.p, a, 4700, 7, &same); /* rounds to the same 5120 */
    EQ(g2.addr, g.addr);
    EQ(g2.freed_at, stamp);
    EQ(same, 1);
    TRUE(fp_pool_clock(f.p) > stamp);
    fp_front_counts c;
    fp_pool_front_counts(f.p, &c);
    EQ(c.threads, 2);
    EQ(c.allocs, 1);
    EQ(c.frees, 1);
    free_ok(f.p, g2.addr);
    free_ok(f.p, h.addr);
    fp_pool_front_leave(f.p, a);
    fp_pool_front_leave(f.p, b);
    fixture_close(&f);
}

/* A cached block goes back to best fit before the pool reserves more:
 * the full device serves another thread's request without a reserve. */
static void test_flush_before_growth(void **state)
{
    (void)state;
    pool_fixture f;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.thread_cache = 16 * MiB;
    fixture_open(&f, &o, 20 * MiB);
    fp_tcache *a, *b;
    EQ(fp_pool_front_join(f.p, &a), 0);
    EQ(fp_pool_front_join(f.p, &b), 0);
    int same;
    fp_grant g = front_alloc(f.p, a, 12 * MiB, 0, &same); /* a segment of its own */
    size_t size;
    uint64_t stamp;
    EQ(fp_pool_front_free(f.p, a, g.addr, 0, &size, &stamp), 0);
    fp_pool_stats before = stats_of(f.p);
    fp_grant h = front_alloc(f.p, b, 12 * MiB, 0, &same); /* no room for a second */
    EQ(h.addr, g.addr);
    fp_pool_stats after = stats_of(f.p);
    EQ(after.num_reserve_calls, before.num_reserve_calls);
    EQ(after.num_ooms, 0);
    fp_front_counts c;
    fp_pool_front_counts(f.p, &c);
    EQ(c.flushes, 1);
    EQ(c.returned, g.size);
    free_ok(f.p, h.addr);
    fp_pool_front_leave(f.p, a);
    fp_pool_front_leave(f.p, b);
    fixture_close(&f);
}

/* A block in a cache is freed already: the pool refuses it (invalid), and
 * a block freed through the pool leaves its thread's records. */
static void test_double_free_and_cross_free(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, front_opts(), 64 * MiB);
    fp_tcache *a, *b;
    EQ(fp_pool_front_join(f.p, &a), 0);
    EQ(fp_pool_front_join(f.p, &b), 0);
    int same;
    fp_grant g = front_alloc(f.p, a, 8192, 0, &same);
    fp_grant h = front_alloc(f.p, a, 8192, 0, &same);
    size_t size;
    uint64_t stamp;
    EQ(fp_pool_front_free(f.p, a, g.addr, 0, &size, &stamp), 0);
    EQ(fp_pool_free(f.p, g.addr), EINVAL);
    EQ(fp_pool_front_free(f.p, a, g.addr, 0, &size, &stamp), ENOENT);
    free_ok(f.p, h.addr); /* another thread frees a's block in the pool */
    EQ(fp_pool_front_free(f.p, a, h.addr, 0, &size, &stamp), ENOENT);
    EQ(stats_of(f.p).num_invalid_frees, 1);
    fp_pool_front_leave(f.p, a); /* g goes back */
    EQ(stats_of(f.p).allocated_bytes[FP_ALL].current, 0);
    fp_pool_front_leave(f.p, b);
    fixture_close(&f);
}

/* A block in a thread's cache was freed by the program: no query answers
 * it as live (lookup, owns, find_block), until its thread takes it back. */
static void test_cached_block_not_live(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, front_opts(), 64 * MiB);
    fp_tcache *a, *b;
    EQ(fp_pool_front_join(f.p, &a), 0);
    EQ(fp_pool_front_join(f.p, &b), 0);
    int same;
    fp_grant g = front_alloc(f.p, a, 6000, 0, &same);
    size_t size, req;
    uint64_t stamp, seq;
    fp_found found;
    EQ(fp_pool_lookup(f.p, g.addr, &req, &seq), 0);
    EQ(fp_pool_front_free(f.p, a, g.addr, 0, &size, &stamp), 0);
    EQ(fp_pool_lookup(f.p, g.addr, &req, &seq), EINVAL);
    EQ(fp_pool_owns(f.p, g.addr, &req), 1); /* its segment is the pool's */
    EQ(req, 0);
    EQ(fp_pool_find_block(f.p, g.addr, &found), ENOENT);
    EQ(fp_pool_find_block(f.p, g.addr + 100, &found), ENOENT);
    fp_grant g2 = front_alloc(f.p, a, 6000, 0, &same); /* taken back: live */
    EQ(g2.addr, g.addr);
    EQ(fp_pool_lookup(f.p, g.addr, &req, &seq), 0);
    EQ(fp_pool_owns(f.p, g.addr, &req), 1);
    TRUE(req > 0);
    EQ(fp_pool_find_block(f.p, g.addr + 100, &found), 0);
    EQ(found.addr, g.addr);
    free_ok(f.p, g2.addr);
    fp_pool_front_leave(f.p, a);
    fp_pool_front_leave(f.p, b);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_thread_untouched),
        cmocka_unit_test(test_second_thread_caches),
        cmocka_unit_test(test_flush_before_growth),
        cmocka_unit_test(test_double_free_and_cross_free),
        cmocka_unit_test(test_cached_block_not_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
