/* tests/base/ranges.c - base/fp_ranges: the sorted table of disjoint
 * address ranges, checked after every operation by check_table (sorted,
 * disjoint, none empty or past 2^64, each payload beside its range, the
 * one allocation's layout).
 *
 * Bad input changes nothing: an overlap in each of its shapes is EEXIST,
 * an empty or wrapping range EINVAL, a payload too large to hold ENOMEM,
 * the removal of a range the table does not hold ENOENT, and a lookup
 * outside every range FP_RANGES_NONE.  Then payloads of awkward sizes
 * (none, 3 bytes, 12 bytes) through growth, and 200,000 random inserts,
 * removals and lookups against a plain unsorted reference, in which every
 * answer is found by a linear scan.
 */
#include "fp_ranges.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The payload of most tests: where its range starts, and a tag. */
typedef struct pay {
    uint64_t start;
    uint32_t tag;
} pay;

/* The invariants of fp_ranges.h, from the outside.  With payloads of
 * type pay, also that payload i names r[i]'s start. */
static void check_table(const fp_ranges *t, bool pays)
{
    size_t slot = fp_ranges_slot(t->elem);
    assert_true(slot >= t->elem && slot % _Alignof(fp_range) == 0 && slot - t->elem < 8);
    assert_true(t->n <= t->cap);
    if (t->cap == 0) {
        assert_null(t->v);
        assert_int_equal(t->n, 0);
        return;
    }
    assert_non_null(t->v);
    assert_ptr_equal(t->r, (char *)t->v + t->cap * slot);
    for (size_t i = 0; i < t->n; i++) {
        const fp_range *r = &t->r[i];
        assert_true(r->size > 0);
        assert_true(r->size - 1 <= UINT64_MAX - r->start); /* ends at or below 2^64 */
        if (i + 1 < t->n) {
            assert_true(r->start < t->r[i + 1].start);
            assert_true(r->size <= t->r[i + 1].start - r->start); /* disjoint */
        }
        if (pays)
            assert_int_equal(((const pay *)fp_ranges_val(t, i))->start, r->start);
    }
}

/* A copy of what the table holds, to show that a refusal changed nothing. */
typedef struct snap {
    size_t n, cap;
    fp_range r[16];
    pay p[16];
} snap;

static snap take(const fp_ranges *t)
{
    snap s = {.n = t->n, .cap = t->cap};
    assert_true(t->n <= 16);
    for (size_t i = 0; i < t->n; i++) {
        s.r[i] = t->r[i];
        s.p[i] = *(const pay *)fp_ranges_val(t, i);
    }
    return s;
}

static void same(const fp_ranges *t, const snap *s)
{
    check_table(t, true);
    assert_int_equal(t->n, s->n);
    assert_int_equal(t->cap, s->cap);
    for (size_t i = 0; i < t->n; i++) {
        assert_memory_equal(&t->r[i], &s->r[i], sizeof s->r[i]);
        assert_memory_equal(fp_ranges_val(t, i), &s->p[i], sizeof s->p[i]);
    }
}

static int put(fp_ranges *t, uint64_t start, uint64_t size, uint32_t tag)
{
    pay p = {start, tag};
    int err = fp_ranges_insert(t, start, size, &p);
    check_table(t, true);
    return err;
}

/* The tag of the range holding addr, or -1. */
static long tag_at(const fp_ranges *t, uint64_t addr)
{
    size_t i = fp_ranges_find(t, addr);
    return i == FP_RANGES_NONE ? -1 : (long)((const pay *)fp_ranges_val(t, i))->tag;
}

static void empty_table_answers_nothing(void **state)
{
    (void)state;
    fp_ranges t;
    fp_ranges_init(&t, sizeof(pay));
    check_table(&t, true);
    assert_int_equal(fp_ranges_find(&t, 0), FP_RANGES_NONE);
    assert_int_equal(fp_ranges_find(&t, UINT64_MAX), FP_RANGES_NONE);
    assert_int_equal(fp_ranges_at(&t, 0), FP_RANGES_NONE);
    assert_int_equal(fp_ranges_remove(&t, 0), ENOENT);
    check_table(&t, true);
    fp_ranges_fini(&t);
    check_table(&t, true);
    fp_ranges static_one = {.elem = sizeof(pay)};
    assert_memory_equal(&static_one, &t, sizeof t);
}

static void find_answers_inside_only(void **state)
{
    (void)state;
    fp_ranges t = {.elem = sizeof(pay)};
    assert_int_equal(put(&t, 200, 100, 2), 0); /* [200, 300) */
    assert_int_equal(put(&t, 100, 50, 1), 0);  /* [100, 150): before it */
    assert_int_equal(put(&t, 300, 1, 3), 0);   /* [300, 301): touching it */
    const struct {
        uint64_t addr;
        long tag;
    } cases[] = {{0, -1},  {99, -1}, {100, 1}, {149, 1},  {150, -1},       {199, -1},
                 {200, 2}, {299, 2}, {300, 3}, {301, -1}, {UINT64_MAX, -1}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        assert_int_equal(tag_at(&t, cases[k].addr), cases[k].tag);
    assert_int_equal(fp_ranges_at(&t, 200), 1);
    assert_int_equal(fp_ranges_at(&t, 201), FP_RANGES_NONE); /* inside is not a start */
    assert_int_equal(fp_ranges_at(&t, 150), FP_RANGES_NONE);
    fp_ranges_fini(&t);
}

static void overlap_is_refused_in_every_shape(void **state)
{
    (void)state;
    fp_ranges t = {.elem = sizeof(pay)};
    assert_int_equal(put(&t, 1000, 100, 1), 0); /* [1000, 1100) */
    assert_int_equal(put(&t, 2000, 100, 2), 0); /* [2000, 2100) */
    snap s = take(&t);
    const struct {
        uint64_t start, size;
    } bad[] = {
        {1000, 100},  /* the same range          */
        {1000, 1},    /* the same start, shorter */
        {1050, 10},   /* inside                  */
        {900, 300},   /* around                  */
        {900, 101},   /* over the start          */
        {1099, 2},    /* over the end            */
        {1099, 1000}, /* over both ranges        */
        {1100, 901},  /* the gap and one byte    */
        {0, UINT64_MAX},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        assert_int_equal(put(&t, bad[k].start, bad[k].size, 9), EEXIST);
        same(&t, &s);
    }
    assert_int_equal(put(&t, 1100, 900, 3), 0); /* the gap exactly: touching both */
    assert_int_equal(put(&t, 900, 100, 4), 0);  /* touching from below */
    assert_int_equal(t.n, 4);
    assert_int_equal(tag_at(&t, 1999), 3);
    assert_int_equal(tag_at(&t, 999), 4);
    fp_ranges_fini(&t);
}

static void empty_wrapping_and_huge_are_refused(void **state)
{
    (void)state;
    fp_ranges t = {.elem = sizeof(pay)};
    assert_int_equal(put(&t, 500, 10, 1), 0);
    snap s = take(&t);
    assert_int_equal(put(&t, 600, 0, 9), EINVAL);        /* empty */
    assert_int_equal(put(&t, 505, 0, 9), EINVAL);        /* empty, inside one */
    assert_int_equal(put(&t, UINT64_MAX, 2, 9), EINVAL); /* past 2^64 */
    assert_int_equal(put(&t, 2, UINT64_MAX, 9), EINVAL); /* past 2^64 by one */
    same(&t, &s);
    /* The edges themselves are addresses like any other. */
    assert_int_equal(put(&t, 0, 1, 2), 0);
    assert_int_equal(put(&t, UINT64_MAX - 9, 10, 3), 0); /* ends at 2^64 exactly */
    assert_int_equal(tag_at(&t, 0), 2);
    assert_int_equal(tag_at(&t, UINT64_MAX), 3);
    assert_int_equal(tag_at(&t, UINT64_MAX - 10), -1);
    assert_int_equal(put(&t, UINT64_MAX, 1, 9), EEXIST);
    fp_ranges_fini(&t);

    /* A payload no allocation can hold: ENOMEM, the table as it was. */
    fp_ranges big = {.elem = SIZE_MAX / 2};
    char byte = 0;
    assert_int_equal(fp_ranges_insert(&big, 0, 1, &byte), ENOMEM);
    assert_int_equal(big.n, 0);
    assert_null(big.v);
    fp_ranges huge = {.elem = SIZE_MAX - 3};
    assert_int_equal(fp_ranges_insert(&huge, 0, 1, &byte), ENOMEM);
    assert_null(huge.v);
}

static void removing_what_is_not_held_changes_nothing(void **state)
{
    (void)state;
    fp_ranges t = {.elem = sizeof(pay)};
    assert_int_equal(put(&t, 100, 10, 1), 0);
    assert_int_equal(put(&t, 200, 10, 2), 0);
    snap s = take(&t);
    const uint64_t not_starts[] = {0, 99, 101, 109, 110, 150, 201, 210, UINT64_MAX};
    for (size_t k = 0; k < sizeof not_starts / sizeof *not_starts; k++) {
        assert_int_equal(fp_ranges_remove(&t, not_starts[k]), ENOENT);
        same(&t, &s);
    }
    assert_int_equal(fp_ranges_remove(&t, 100), 0);
    check_table(&t, true);
    assert_int_equal(fp_ranges_remove(&t, 100), ENOENT); /* twice */
    check_table(&t, true);
    assert_int_equal(t.n, 1);
    assert_int_equal(tag_at(&t, 105), -1);
    assert_int_equal(tag_at(&t, 205), 2);
    fp_ranges_fini(&t);
}

/* Erasing while walking from the end, as the simulator's context end does. */
static void erase_from_the_end(void **state)
{
    (void)state;
    fp_ranges t = {.elem = sizeof(pay)};
    for (uint32_t k = 0; k < 200; k++)
        assert_int_equal(put(&t, (uint64_t)k * 4096, 4096, k), 0); /* side by side */
    for (size_t i = t.n; i-- > 0;) {
        if (((const pay *)fp_ranges_val(&t, i))->tag % 3 == 0) {
            fp_ranges_erase(&t, i);
            check_table(&t, true);
        }
    }
    assert_int_equal(t.n, 200 - 67);
    for (size_t i = 0; i < t.n; i++)
        assert_int_not_equal(((const pay *)fp_ranges_val(&t, i))->tag % 3, 0);
    assert_int_equal(tag_at(&t, 3 * 4096 + 5), -1);
    assert_int_equal(tag_at(&t, 4 * 4096 + 5), 4);
    fp_ranges_fini(&t);
}

/* Payloads of no bytes, 3 bytes and 12 bytes keep their ranges through
 * growth from the first capacity to several times it. */
static void odd_payloads_survive_growth(void **state)
{
    (void)state;
    typedef struct twelve {
        uint32_t a, b, c;
    } twelve;
    fp_ranges none = {.elem = 0}, three = {.elem = 3}, twl;
    fp_ranges_init(&twl, sizeof(twelve));
    const size_t n = 1000;
    for (size_t k = 0; k < n; k++) {
        uint64_t start = ((k * 7919) % n) * 64; /* every slot, out of order */
        unsigned char b3[3] = {(unsigned char)(start >> 6), (unsigned char)(start >> 14), 0xA5};
        twelve w = {(uint32_t)start, (uint32_t)~start, 0x5A5A5A5A};
        assert_int_equal(fp_ranges_insert(&none, start, 64, NULL), 0);
        assert_int_equal(fp_ranges_insert(&three, start, 64, b3), 0);
        assert_int_equal(fp_ranges_insert(&twl, start, 64, &w), 0);
        check_table(&none, false);
        check_table(&three, false);
        check_table(&twl, false);
    }
    assert_true(twl.cap >= n);
    for (size_t i = 0; i < n; i++) {
        uint64_t start = (uint64_t)i * 64;
        assert_int_equal(three.r[i].start, start);
        const unsigned char *b3 = fp_ranges_val(&three, i);
        assert_int_equal(b3[0], (unsigned char)(start >> 6));
        assert_int_equal(b3[1], (unsigned char)(start >> 14));
        assert_int_equal(b3[2], 0xA5);
        const twelve *w = fp_ranges_val(&twl, i);
        assert_int_equal(w->a, (uint32_t)start);
        assert_int_equal(w->b, (uint32_t)~start);
        assert_int_equal(w->c, 0x5A5A5A5A);
        assert_int_equal(fp_ranges_find(&none, start + 63), i);
    }
    fp_ranges_fini(&none);
    fp_ranges_fini(&three);
    fp_ranges_fini(&twl);
    check_table(&twl, false);
}

/* ---- random operations against a reference ----------------------------------- */

typedef struct ref {
    fp_range r[512];
    uint32_t tag[512];
    size_t n, most;
    /* What the run went through: each outcome of each operation. */
    long inserted, overlapped, invalid, removed, unknown, hits, misses;
} ref;

static bool ref_overlaps(const ref *m, uint64_t start, uint64_t size)
{
    for (size_t k = 0; k < m->n; k++) {
        uint64_t lo = start > m->r[k].start ? start : m->r[k].start;
        uint64_t end_a = start + (size - 1), end_b = m->r[k].start + (m->r[k].size - 1);
        uint64_t hi = end_a < end_b ? end_a : end_b; /* last bytes: no overflow */
        if (lo <= hi)
            return true;
    }
    return false;
}

/* The reference's answer: the index in m of the range holding addr, or -1. */
static long ref_find(const ref *m, uint64_t addr)
{
    for (size_t k = 0; k < m->n; k++)
        if (addr >= m->r[k].start && addr - m->r[k].start < m->r[k].size)
            return (long)k;
    return -1;
}

static uint64_t rng(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* An address near one of a few places: 0, the top of the space, or a
 * crowded middle where ranges meet and overlap often. */
static uint64_t r_addr(uint64_t *s)
{
    uint64_t x = rng(s);
    switch (x % 8) {
    case 0: return x >> 56;                   /* near 0 */
    case 1: return UINT64_MAX - (x >> 56);    /* near 2^64 */
    default: return (1ull << 40) + (x >> 52); /* the middle: 4096 bytes */
    }
}

static uint64_t r_size(uint64_t *s)
{
    uint64_t x = rng(s);
    switch (x % 16) {
    case 0: return 0;              /* refused: empty */
    case 1: return UINT64_MAX / 2; /* refused: overlaps or wraps */
    default: return 1 + (x >> 58); /* 1..64 */
    }
}

static void ref_insert(fp_ranges *t, ref *m, uint64_t *s, uint32_t tag)
{
    uint64_t start = r_addr(s), size = r_size(s);
    int want = 0;
    if (size == 0 || size - 1 > UINT64_MAX - start)
        want = EINVAL;
    else if (ref_overlaps(m, start, size))
        want = EEXIST;
    else if (m->n == sizeof m->r / sizeof *m->r)
        return; /* the reference is full */
    assert_int_equal(put(t, start, size, tag), want);
    m->overlapped += want == EEXIST;
    m->invalid += want == EINVAL;
    if (want == 0) {
        m->inserted++;
        m->r[m->n] = (fp_range){start, size};
        m->tag[m->n++] = tag;
        m->most = m->n > m->most ? m->n : m->most;
    }
}

static void ref_remove(fp_ranges *t, ref *m, uint64_t *s)
{
    /* Half the time a start the reference holds, else any address. */
    uint64_t x = rng(s);
    uint64_t start = m->n && x % 2 ? m->r[x / 2 % m->n].start : r_addr(s);
    long k = -1;
    for (size_t j = 0; j < m->n; j++)
        if (m->r[j].start == start)
            k = (long)j;
    assert_int_equal(fp_ranges_remove(t, start), k < 0 ? ENOENT : 0);
    check_table(t, true);
    m->unknown += k < 0;
    if (k >= 0) {
        m->removed++;
        m->r[k] = m->r[m->n - 1];
        m->tag[k] = m->tag[--m->n];
    }
}

static void ref_lookup(const fp_ranges *t, ref *m, uint64_t *s)
{
    uint64_t addr = r_addr(s);
    long k = ref_find(m, addr);
    size_t i = fp_ranges_find(t, addr);
    m->hits += k >= 0;
    m->misses += k < 0;
    if (k < 0) {
        assert_int_equal(i, FP_RANGES_NONE);
        return;
    }
    assert_int_not_equal(i, FP_RANGES_NONE);
    assert_memory_equal(&t->r[i], &m->r[k], sizeof m->r[k]);
    assert_int_equal(((const pay *)fp_ranges_val(t, i))->tag, m->tag[k]);
    assert_int_equal(fp_ranges_at(t, m->r[k].start), i);
    check_table(t, true);
}

static void random_against_reference(void **state)
{
    (void)state;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    fp_ranges t = {.elem = sizeof(pay)};
    ref *m = calloc(1, sizeof *m);
    assert_non_null(m);
    for (uint32_t op = 0; op < 200000; op++) {
        uint64_t x = rng(&seed) % 10;
        if (x < 4)
            ref_insert(&t, m, &seed, op);
        else if (x < 7)
            ref_remove(&t, m, &seed);
        else
            ref_lookup(&t, m, &seed);
        assert_int_equal(t.n, m->n);
    }
    /* The run went through every outcome, and past the first capacity (64). */
    assert_true(m->most > 64);
    long seen[] = {m->inserted, m->overlapped, m->invalid, m->removed,
                   m->unknown,  m->hits,       m->misses};
    for (size_t k = 0; k < sizeof seen / sizeof *seen; k++)
        assert_true(seen[k] > 1000);
    fp_ranges_fini(&t);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_table_answers_nothing),
        cmocka_unit_test(find_answers_inside_only),
        cmocka_unit_test(overlap_is_refused_in_every_shape),
        cmocka_unit_test(empty_wrapping_and_huge_are_refused),
        cmocka_unit_test(removing_what_is_not_held_changes_nothing),
        cmocka_unit_test(erase_from_the_end),
        cmocka_unit_test(odd_payloads_survive_growth),
        cmocka_unit_test(random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
