/* test_ref_cores.c - the benchmark's reference cores (ref_core.h) stay
 * correct, so that bench_cores compares fragpool with working allocators:
 * random operation sequences with every invariant checked after every
 * operation and no two live blocks overlapping; "bestfit" places every
 * block exactly where fragpool's pool does (both are exact best fit under
 * PyTorch's rules); "tlsf" shows its documented good fit; bad frees are
 * refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fp_pool.h"
#include "ref_core.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BASE  0x7f0000000000ull
#define SLOTS 300
#define OPS   4000

static uint64_t seed;
static uint64_t rnd(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

/* Sizes around every rule boundary, and log-uniform ones. */
static size_t some_size(void)
{
    static const size_t edge[] = {1,
                                  511,
                                  512,
                                  513,
                                  1 << 20,
                                  (1 << 20) + 1,
                                  10 << 20,
                                  (10 << 20) - 512,
                                  (10 << 20) + 1,
                                  20 << 20,
                                  64 << 20};
    if (rnd() % 4 == 0)
        return edge[rnd() % (sizeof edge / sizeof edge[0])];
    return (size_t)1 << (rnd() % 26) | (rnd() & 0xfff);
}

typedef struct live {
    uint64_t addr;
    size_t size;
} live;

static int by_addr(const void *a, const void *b)
{
    uint64_t x = ((const live *)a)->addr, y = ((const live *)b)->addr;
    return (x > y) - (x < y);
}

static void assert_no_overlap(ref_core *c, const uint64_t *addr, const size_t *req)
{
    live l[SLOTS];
    int n = 0;
    for (int i = 0; i < SLOTS; i++) {
        if (!addr[i])
            continue;
        l[n].addr = addr[i];
        l[n].size = ref_core_block_size(c, addr[i]);
        assert_true(l[n].size >= req[i]);
        assert_int_equal(addr[i] % 512, 0);
        n++;
    }
    qsort(l, (size_t)n, sizeof *l, by_addr);
    for (int i = 1; i < n; i++)
        assert_true(l[i - 1].addr + l[i - 1].size <= l[i].addr);
}

static void random_ops(const ref_index *ops)
{
    ref_core *c;
    char msg[256];
    uint64_t addr[SLOTS] = {0};
    size_t req[SLOTS] = {0};
    assert_int_equal(ref_core_create(ops, BASE, &c), 0);
    seed = 0x9e3779b97f4a7c15ull;
    for (int op = 0; op < OPS; op++) {
        int s = (int)(rnd() % SLOTS);
        if (addr[s]) {
            assert_int_equal(ref_core_free(c, addr[s]), 0);
            addr[s] = 0;
        } else {
            req[s] = some_size();
            assert_int_equal(ref_core_alloc(c, req[s], &addr[s]), 0);
        }
        if (ref_core_check(c, msg, sizeof msg))
            fail_msg("%s after op %d: %s", ops->name, op, msg);
        if (op % 16 == 0)
            assert_no_overlap(c, addr, req);
    }
    for (int s = 0; s < SLOTS; s++)
        if (addr[s])
            assert_int_equal(ref_core_free(c, addr[s]), 0);
    assert_int_equal(ref_core_check(c, msg, sizeof msg), 0);
    ref_core_destroy(c);
}

static void test_bestfit_random(void **state)
{
    (void)state;
    random_ops(&ref_bestfit_index);
}

static void test_tlsf_random(void **state)
{
    (void)state;
    random_ops(&ref_tlsf_index);
}

static uint64_t fp_next;
static int reserve(void *ctx, size_t size, uint64_t *addr)
{
    (void)ctx;
    *addr = fp_next;
    fp_next += (size + FP_ROUND_LARGE - 1) & ~(uint64_t)(FP_ROUND_LARGE - 1);
    return 0;
}

static int release(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

/* Same sequence through fp_pool and "bestfit": the same address for every
 * allocation and the same peak reserved. */
static void test_bestfit_matches_fragpool(void **state)
{
    (void)state;
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fp_backend be = {.reserve = reserve, .release = release};
    fp_pool *p;
    ref_core *c;
    fp_next = BASE;
    assert_int_equal(fp_pool_create(&o, &be, &p), 0);
    assert_int_equal(ref_core_create(&ref_bestfit_index, BASE, &c), 0);
    uint64_t a[SLOTS] = {0}, b[SLOTS] = {0};
    seed = 12345;
    for (int op = 0; op < OPS; op++) {
        int s = (int)(rnd() % SLOTS);
        if (a[s]) {
            assert_int_equal(fp_pool_free(p, a[s]), 0);
            assert_int_equal(ref_core_free(c, b[s]), 0);
            a[s] = b[s] = 0;
        } else {
            size_t n = some_size();
            assert_int_equal(fp_pool_alloc(p, n, &a[s]), 0);
            assert_int_equal(ref_core_alloc(c, n, &b[s]), 0);
            if (a[s] != b[s])
                fail_msg("op %d, %zu B: fragpool %#llx, bestfit %#llx", op, n,
                         (unsigned long long)a[s], (unsigned long long)b[s]);
        }
    }
    fp_pool_stats st;
    fp_pool_get_stats(p, &st);
    assert_int_equal((size_t)st.reserved_bytes[FP_ALL].peak, ref_core_peak_reserved(c));
    assert_true(ref_core_peak_reserved(c) > 0);
    fp_pool_destroy(p, 1);
    ref_core_destroy(c);
}

/* Free blocks of 65 and 67 units (512 B): a request of 65 units gets the
 * 65-unit block from best fit, the 67-unit one from TLSF (its class,
 * 64-65, may hold blocks too small for 65 units after rounding up). */
static uint64_t fit_of(const ref_index *ops)
{
    ref_core *c;
    uint64_t x, y, s1, s2, got;
    assert_int_equal(ref_core_create(ops, BASE, &c), 0);
    assert_int_equal(ref_core_alloc(c, 65 * 512, &x), 0);
    assert_int_equal(ref_core_alloc(c, 512, &s1), 0);
    assert_int_equal(ref_core_alloc(c, 67 * 512, &y), 0);
    assert_int_equal(ref_core_alloc(c, 512, &s2), 0);
    assert_int_equal(ref_core_free(c, x), 0);
    assert_int_equal(ref_core_free(c, y), 0);
    assert_int_equal(ref_core_alloc(c, 65 * 512, &got), 0);
    int which = got == x ? 1 : got == y ? 2 : 0;
    ref_core_destroy(c);
    return (uint64_t)which;
}

static void test_good_fit_vs_best_fit(void **state)
{
    (void)state;
    assert_int_equal(fit_of(&ref_bestfit_index), 1);
    assert_int_equal(fit_of(&ref_tlsf_index), 2);
}

static void test_bad_frees(void **state)
{
    (void)state;
    const ref_index *all[] = {&ref_bestfit_index, &ref_tlsf_index};
    for (int k = 0; k < 2; k++) {
        ref_core *c;
        uint64_t a;
        char msg[128];
        assert_int_equal(ref_core_create(all[k], BASE, &c), 0);
        assert_int_equal(ref_core_free(c, BASE), EINVAL);
        assert_int_equal(ref_core_alloc(c, 4096, &a), 0);
        assert_int_equal(ref_core_free(c, a + 512), EINVAL);
        assert_int_equal(ref_core_free(c, a), 0);
        assert_int_equal(ref_core_free(c, a), EINVAL);
        assert_int_equal(ref_core_check(c, msg, sizeof msg), 0);
        ref_core_destroy(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bestfit_random),
        cmocka_unit_test(test_tlsf_random),
        cmocka_unit_test(test_bestfit_matches_fragpool),
        cmocka_unit_test(test_good_fit_vs_best_fit),
        cmocka_unit_test(test_bad_frees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
