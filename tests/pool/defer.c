/* tests/pool/defer.c - what deferred reuse needs from the pool: the clock
 * and free stamps of fp_pool_alloc_grant/fp_pool_free_at (merge keeps the
 * newest stamp, a split its block's), and unsafe_from (a block freed too
 * recently is passed over; EAGAIN with nothing released when no segment can
 * be had), and fp_pool_free_seen (the free and what a recorder needs of it
 * in one locked step).  Every pool call is followed by fp_pool_check.
 */
#include "pool_test.h"

/* The clock ticks once per allocation; a free is stamped with it; a new
 * segment was never freed; merging keeps the newest stamp and a split
 * keeps its block's; every grant's freed_at is older than its clock. */
static void test_grant_stamps(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    fp_grant a = grant_ok(f.p, 1000, UINT64_MAX);
    EQ(a.now, 1);
    EQ(a.freed_at, FP_NEVER_FREED);
    EQ(a.size, 1024);
    fp_grant b = grant_ok(f.p, 1000, UINT64_MAX); /* the fresh remainder */
    EQ(b.now, 2);
    EQ(b.freed_at, FP_NEVER_FREED);
    EQ(free_stamped(f.p, a.addr), 2);             /* freed at clock 2 */
    fp_grant c = grant_ok(f.p, 1000, UINT64_MAX); /* best fit: a's block */
    EQ(c.addr, a.addr);
    EQ(c.freed_at, 2);
    EQ(c.now, 3);
    /* merge: c freed at 3, then b (its upper neighbour) at 4 after one more
     * allocation: the merged block is stamped 4, the newest */
    EQ(free_stamped(f.p, c.addr), 3);
    fp_grant d = grant_ok(f.p, 4096, UINT64_MAX);
    EQ(d.freed_at, FP_NEVER_FREED); /* beyond b: never used */
    EQ(free_stamped(f.p, b.addr), 4);
    fp_grant e = grant_ok(f.p, 1500, UINT64_MAX); /* a split of the merged 2 KiB */
    EQ(e.addr, a.addr);
    EQ(e.freed_at, 4);
    TRUE(e.freed_at < e.now);
    fp_grant g = grant_ok(f.p, 500, UINT64_MAX); /* the split's remainder keeps 4 */
    EQ(g.addr, a.addr + 1536);
    EQ(g.freed_at, 4);
    /* a free that merges with an older free neighbour below takes its own
     * time too (the lower block absorbs it) */
    free_stamped(f.p, e.addr);
    grant_ok(f.p, 8 * MiB, UINT64_MAX);
    uint64_t t = free_stamped(f.p, g.addr);
    fp_grant h = grant_ok(f.p, 2048, UINT64_MAX);
    EQ(h.addr, a.addr);
    EQ(h.freed_at, t);
    size_t sz = 0;
    EQ(fp_pool_free_at(f.p, h.addr + 512, &t, &sz), EINVAL); /* not a block */
    EQ(stats_of(f.p).num_invalid_frees, 1);
    EQ(fp_pool_free_at(f.p, 0x1000, &t, &sz), ENOENT); /* not the pool's */
    EQ(stats_of(f.p).num_invalid_frees, 1);
    EQ(fp_pool_free_at(f.p, h.addr, &t, &sz), 0);
    EQ(sz, 2048);
    check_pool(f.p);
    fixture_close(&f);
}

/* unsafe_from: a block freed at or after it is passed over for a new
 * segment; when no segment can be had, EAGAIN with nothing released, no
 * retry, no OOM counted and nothing synchronized. */
static void test_grant_unsafe_from(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, 24 * MiB);
    fp_grant a = grant_ok(f.p, 4 * MiB, UINT64_MAX); /* a 20 MiB segment */
    uint64_t t = free_stamped(f.p, a.addr);          /* the segment is whole again */
    fp_grant b = grant_ok(f.p, 4 * MiB, t + 1);      /* freed before t + 1: taken */
    EQ(b.addr, a.addr);
    EQ(b.freed_at, t);
    t = free_stamped(f.p, b.addr);
    uint64_t rel = f.m.release_calls, syncs = f.m.sync_calls, res = f.m.reserve_ok;
    fp_grant c = {0};
    EQ(fp_pool_alloc_grant(f.p, 4 * MiB, t, &c), EAGAIN); /* 20 + 20 > 24 */
    check_pool(f.p);
    EQ(f.m.release_calls, rel);
    EQ(f.m.sync_calls, syncs);
    EQ(f.m.reserve_ok, res);
    fp_pool_stats s = stats_of(f.p);
    EQ(s.num_ooms, 0);
    EQ(s.num_alloc_retries, 0);
    fixture_close(&f);
    fixture_open(&f, NULL, 64 * MiB);
    a = grant_ok(f.p, 4 * MiB, UINT64_MAX);
    t = free_stamped(f.p, a.addr);
    c = grant_ok(f.p, 4 * MiB, t); /* too fresh: a second segment instead */
    TRUE(c.addr != a.addr);
    EQ(c.freed_at, FP_NEVER_FREED);
    EQ(f.m.reserve_ok, 2);
    EQ(stats_of(f.p).segments[FP_ALL].current, 2);
    fixture_close(&f);
}

/* What fp_pool_free_seen's callback saw, and whether the pool's lock was
 * held then. */
typedef struct seen_log {
    fp_pool *p;
    int calls;
    int locked;
    fp_freed f;
} seen_log;

static void seen(void *ud, const fp_freed *f)
{
    seen_log *l = ud;
    l->calls++;
    l->locked = !fp_pool_lock_free(l->p);
    l->f = *f;
}

/* fp_pool_free_seen: the block's whole size, requested bytes, allocation
 * number (fp_pool_lookup's, taken before the free) and stamp, handed back
 * and to the callback under the pool's lock; a failed free calls nothing
 * and keeps fp_pool_free_at's codes. */
static void test_free_seen(void **state)
{
    (void)state;
    pool_fixture f;
    fixture_open(&f, NULL, SIZE_MAX);
    grant_ok(f.p, 700, UINT64_MAX);
    fp_grant a = grant_ok(f.p, 1000, UINT64_MAX);
    size_t req = 0;
    uint64_t seq = 0;
    EQ(fp_pool_lookup(f.p, a.addr, &req, &seq), 0);
    seen_log l = {.p = f.p};
    fp_freed out;
    EQ(fp_pool_free_seen(f.p, a.addr, &out, seen, &l), 0);
    check_pool(f.p);
    EQ(l.calls, 1);
    TRUE(l.locked);
    EQ(out.requested, 1000);
    EQ(out.requested, req);
    EQ(out.seq, seq);
    EQ(out.size, 1024);
    EQ(out.freed_at, 2);
    EQ(l.f.size, out.size);
    EQ(l.f.seq, out.seq);
    EQ(l.f.freed_at, out.freed_at);
    TRUE(fp_pool_lock_free(f.p));
    EQ(fp_pool_free_seen(f.p, a.addr, &out, seen, &l), EINVAL); /* freed already */
    EQ(fp_pool_free_seen(f.p, 0x1000, &out, seen, &l), ENOENT); /* not the pool's */
    EQ(l.calls, 1);
    EQ(stats_of(f.p).num_invalid_frees, 1);
    fp_grant b = grant_ok(f.p, 1000, UINT64_MAX);
    EQ(fp_pool_free_seen(f.p, b.addr, &out, NULL, NULL), 0); /* no callback */
    EQ(out.requested, 1000);
    check_pool(f.p);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grant_stamps),
        cmocka_unit_test(test_grant_unsafe_from),
        cmocka_unit_test(test_free_seen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
