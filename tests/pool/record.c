/* tests/pool/record.c - the pool's record of its requests (pool_record.c):
 * what fp_pool_record_read gives back rebuilds the pool's live blocks
 * exactly, before and after the record drops history, for random
 * allocations and frees; the pool is checked (fp_pool_check, which checks
 * the record too) after every operation.
 *  - off (record_bytes 0): nothing is recorded, reading says ENODATA;
 *  - within the cap: every event, in order, nothing dropped;
 *  - past the cap: at least half the cap of exact history, older events
 *    replaced by the blocks live then (the base), which the read gives as
 *    allocations first; a read up to a point already dropped says ESTALE;
 *  - an OOM notes where the record stood (fp_oom_info.record_at).
 */
#include "pool_test.h"

#define EV 16 /* bytes per event (pool_record.c) */

typedef struct replayed {
    uint64_t id[4096];
    uint64_t size[4096];
    size_t n, events, frees_unknown;
} replayed;

static int slot(replayed *r, uint64_t id)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->id[i] == id)
            return (int)i;
    return -1;
}

/* Applies what the read gives to a plain live set. */
static int apply(void *ud, char op, uint64_t id, uint64_t size)
{
    replayed *r = ud;
    r->events++;
    int i = slot(r, id);
    if (op == 'a') {
        TRUE(i < 0);
        TRUE(r->n < 4096);
        r->id[r->n] = id;
        r->size[r->n++] = size;
    } else if (i < 0) {
        r->frees_unknown++;
    } else {
        r->id[i] = r->id[--r->n];
        r->size[i] = r->size[r->n];
    }
    return 0;
}

typedef struct live_set {
    uint64_t addr[512];
    size_t size[512];
    size_t n;
} live_set;

/* The record, read back whole, holds exactly the pool's live blocks. */
static void read_matches(fp_pool *p, const live_set *l, fp_record_info *info)
{
    replayed *r = calloc(1, sizeof *r);
    TRUE(r != NULL);
    EQ(fp_pool_record_read(p, UINT64_MAX, apply, r, info), 0);
    EQ(r->frees_unknown, 0);
    EQ(r->n, l->n);
    for (size_t i = 0; i < l->n; i++) {
        size_t sz = 0;
        uint64_t seq = 0;
        EQ(fp_pool_lookup(p, l->addr[i], &sz, &seq), 0);
        int k = slot(r, seq);
        TRUE(k >= 0);
        EQ(r->size[k], l->size[i]);
    }
    free(r);
}

static void churn(fp_pool *p, live_set *l, uint64_t *rng, size_t ops)
{
    for (size_t k = 0; k < ops; k++) {
        uint64_t x = rng_next(rng);
        if (l->n && (x % 3 == 0 || l->n == 512)) {
            size_t i = (size_t)(x >> 8) % l->n;
            free_ok(p, l->addr[i]);
            l->addr[i] = l->addr[--l->n];
            l->size[i] = l->size[l->n];
        } else {
            size_t sz = 1 + (size_t)(x >> 16) % (3 * MiB);
            l->addr[l->n] = alloc_ok(p, sz);
            l->size[l->n++] = sz;
        }
    }
}

static void record_off(void **state)
{
    (void)state;
    pool_fixture f;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fixture_open(&f, &o, 64 * GiB);
    free_ok(f.p, alloc_ok(f.p, 1000));
    fp_record_info info;
    replayed r = {0};
    EQ(fp_pool_record_read(f.p, UINT64_MAX, apply, &r, &info), ENODATA);
    EQ(r.events, 0);
    fixture_close(&f);
}

static void within_cap(void **state)
{
    (void)state;
    pool_fixture f;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.record_bytes = 10000 * EV;
    fixture_open(&f, &o, 64 * GiB);
    live_set l = {0};
    uint64_t rng = 7;
    churn(f.p, &l, &rng, 3000);
    fp_record_info info;
    read_matches(f.p, &l, &info);
    EQ(info.total, 3000);
    EQ(info.dropped, 0);
    EQ(info.base_blocks, 0);
    fixture_close(&f);
}

static void past_cap(void **state)
{
    (void)state;
    pool_fixture f;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.record_bytes = 200 * EV; /* 100 events a generation */
    fixture_open(&f, &o, 64 * GiB);
    live_set l = {0};
    uint64_t rng = 11;
    for (int round = 0; round < 40; round++) {
        churn(f.p, &l, &rng, 37); /* checked after every operation */
        fp_record_info info;
        read_matches(f.p, &l, &info);
        EQ(info.total, (uint64_t)(round + 1) * 37);
        if (info.total > 200) {
            TRUE(info.dropped > 0);
            TRUE(info.total - info.dropped >= 100);
            replayed r = {0};
            EQ(fp_pool_record_read(f.p, info.dropped - 1, apply, &r, &info), ESTALE);
        }
    }
    fixture_close(&f);
}

static void oom_notes_position(void **state)
{
    (void)state;
    pool_fixture f;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.record_bytes = 1000 * EV;
    fixture_open(&f, &o, 40 * MiB);
    uint64_t a = alloc_ok(f.p, 20 * MiB), b = alloc_ok(f.p, 20 * MiB);
    free_ok(f.p, a);
    uint64_t c;
    EQ(alloc_try(f.p, 30 * MiB, &c), ENOMEM);
    fp_oom_info oi;
    fp_pool_last_oom(f.p, &oi);
    EQ(oi.record_at, 3);
    free_ok(f.p, b);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_off),
        cmocka_unit_test(within_cap),
        cmocka_unit_test(past_cap),
        cmocka_unit_test(oom_notes_position),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
