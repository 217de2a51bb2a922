/* tests/base/hmap.c - base/fp_hmap against a trace-id flood: keys chosen
 * so that the map's former fixed mix sent every one of them to slot 0
 * (the mix was invertible, so such keys are cheap to make).  With homes
 * keyed by the process's secret (base/fp_seed.h) they scatter: the
 * longest run of occupied slots stays short, and every key is found,
 * erased and not found again.
 *
 * Also: the seed is never 0 and the same on every call.
 */
#include "fp_hmap.h"
#include "fp_seed.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#define FLOOD 40000u

/* The inverse of x ^= x >> s. */
static uint64_t unshift(uint64_t y, unsigned s)
{
    uint64_t x = y;
    for (unsigned k = s; k < 64; k += s)
        x ^= y >> k;
    return x;
}

/* The inverse of an odd multiplier mod 2^64 (Newton's iteration). */
static uint64_t inverse(uint64_t a)
{
    uint64_t x = a;
    for (int i = 0; i < 6; i++)
        x *= 2 - a * x;
    return x;
}

/* The key that the former home_of mixed to y: x ^= x >> 31;
 * x *= 0x9E3779B97F4A7C15; x ^= x >> 29, undone step by step. */
static uint64_t former_preimage(uint64_t y)
{
    uint64_t x = unshift(y, 29);
    x *= inverse(0x9E3779B97F4A7C15ull);
    return unshift(x, 31);
}

/* The longest run of occupied slots, wrapping around. */
static size_t longest_run(const fp_hmap *m)
{
    size_t best = 0, run = 0;
    for (size_t i = 0; i < 2 * (m->mask + 1); i++) {
        run = m->slots[i & m->mask].val ? run + 1 : 0;
        best = run > best ? run : best;
    }
    return best > m->mask + 1 ? m->mask + 1 : best;
}

static void seed_is_fixed(void **state)
{
    (void)state;
    uint64_t s = fp_seed();
    assert_true(s != 0);
    assert_true(fp_seed() == s);
}

static void flood_scatters(void **state)
{
    (void)state;
    uint64_t *keys = malloc(FLOOD * sizeof *keys);
    assert_non_null(keys);
    fp_hmap m;
    assert_int_equal(fp_hmap_init(&m, 0), 0);
    for (uint64_t j = 0; j < FLOOD; j++) {
        keys[j] = former_preimage((j + 1) << 24); /* low 24 bits 0: home 0 */
        assert_int_equal(fp_hmap_make_room(&m), 0);
        size_t i = fp_hmap_slot(&m, keys[j]);
        assert_int_equal(fp_hmap_at(&m, i), 0);
        fp_hmap_fill(&m, i, keys[j], j + 1);
    }
    /* Under the former mix one run held all 40,000 keys; a random map at
     * half load has runs of a few dozen. */
    size_t run = longest_run(&m);
    print_message("longest run: %zu slots of %zu\n", run, m.mask + 1);
    assert_true(run < 400);
    for (uint64_t j = 0; j < FLOOD; j++)
        assert_int_equal(fp_hmap_at(&m, fp_hmap_slot(&m, keys[j])), j + 1);
    for (uint64_t j = 0; j < FLOOD; j += 2)
        fp_hmap_erase(&m, fp_hmap_slot(&m, keys[j]));
    for (uint64_t j = 0; j < FLOOD; j++)
        assert_int_equal(fp_hmap_at(&m, fp_hmap_slot(&m, keys[j])), j % 2 ? j + 1 : 0);
    assert_int_equal(m.count, FLOOD / 2);
    fp_hmap_fini(&m);
    free(keys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seed_is_fixed),
        cmocka_unit_test(flood_scatters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
