/* test_unpickle.c - the snapshot pickle reader (replay/fp_unpickle.c,
 * replay/fp_pkeys.c) on dicts as Python builds them, and on the inputs
 * that once took quadratic time.
 *
 * Checked:
 *  - a key set twice keeps the value set last; each key is held once;
 *    pairs with keys that are not strings stay, after the string keys;
 *  - a snapshot whose one entry dict, shared through the memo by 120,000
 *    entries, sets 'size' 120,000 times (a 1.8 MB pickle): the dict holds
 *    3 keys, the trace loads with the last size (Python's own unpickler
 *    reads it in a hundredth of a second; a scan of every duplicate per
 *    lookup took minutes);
 *  - a dict of 120,000 distinct keys shared by 120,000 entries: every key
 *    found.  The ctest TIMEOUT (60 s, ASan included) fails the test if
 *    either ever turns n^2 again: both run well under a second;
 *  - a string flood: 30,000 keys whose FNV-1a hashes share their low 16
 *    bits (the string table's slot under the former hash): the longest
 *    probe run of the table stays short (fp_pdoc_longest_probe), where
 *    the former hash put all 30,000 in one run, and every key is found.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fp_trace.h"
#include "fp_unpickle.h"

#define MANY 120000u

typedef struct pbuf {
    unsigned char *p;
    size_t n, cap;
} pbuf;

static void put(pbuf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void op(pbuf *b, unsigned char c)
{
    put(b, &c, 1);
}

static void str(pbuf *b, const char *s) /* SHORT_BINUNICODE */
{
    op(b, 0x8c);
    op(b, (unsigned char)strlen(s));
    put(b, s, strlen(s));
}

static void int4(pbuf *b, uint32_t v) /* BININT */
{
    unsigned char le[4] = {v & 255, v >> 8 & 255, v >> 16 & 255, v >> 24 & 255};
    op(b, 'J');
    put(b, le, 4);
}

static void get_memo(pbuf *b, uint32_t i) /* LONG_BINGET */
{
    unsigned char le[4] = {i & 255, i >> 8 & 255, i >> 16 & 255, i >> 24 & 255};
    op(b, 'j');
    put(b, le, 4);
}

static void parse(const pbuf *b, fp_pdoc *d)
{
    char err[256] = "";
    if (fp_unpickle(b->p, b->n, "t.pickle", d, err, sizeof err))
        fail_msg("%s", err);
}

static int64_t int_of(const fp_pv *v)
{
    assert_non_null(v);
    assert_int_equal(v->type, FP_PV_INT);
    return v->neg ? -(int64_t)v->v.u : (int64_t)v->v.u;
}

/* {"a": 1, "b": 2, 5: 9, "a": 3, "b": 4, "a": 5} */
static void last_value_wins(void **state)
{
    (void)state;
    pbuf b = {0};
    put(&b, "\x80\x04}(", 4);
    str(&b, "a"), int4(&b, 1), str(&b, "b"), int4(&b, 2), int4(&b, 5), int4(&b, 9);
    str(&b, "a"), int4(&b, 3), str(&b, "b"), int4(&b, 4);
    op(&b, 'u');
    str(&b, "a"), int4(&b, 5), op(&b, 's');
    op(&b, '.');
    fp_pdoc d;
    parse(&b, &d);
    const fp_pv *root = fp_pdoc_node(&d, d.root);
    assert_int_equal(root->n, 6); /* "a", "b" once each, and 5 */
    assert_int_equal(root->key, 2);
    assert_int_equal(int_of(fp_pdoc_get(&d, root, "a")), 5);
    assert_int_equal(int_of(fp_pdoc_get(&d, root, "b")), 4);
    assert_null(fp_pdoc_get(&d, root, "c"));
    assert_int_equal(int_of(fp_pdoc_node(&d, root->v.items[4])), 5); /* the int key stays */
    assert_int_equal(int_of(fp_pdoc_node(&d, root->v.items[5])), 9);
    fp_pdoc_free(&d);
    free(b.p);
}

/* {"device_traces": [[E, E, ... MANY times]]}: E made once, then memo
 * references; E's keys from fill(). */
static void snapshot_of(pbuf *b, void (*fill)(pbuf *))
{
    put(b, "\x80\x04}", 3);
    str(b, "device_traces");
    put(b, "]](}\x94(", 6); /* traces, device 0, MARK, E (memo 0), MARK */
    fill(b);
    op(b, 'u');
    for (uint32_t i = 1; i < MANY; i++)
        get_memo(b, 0);
    put(b, "eas.", 4); /* APPENDS, APPEND, SETITEM, STOP */
}

static void duplicates(pbuf *b)
{
    str(b, "action"), str(b, "alloc"), str(b, "addr"), int4(b, 4096);
    str(b, "size"), op(b, 0x94); /* memo 1 */
    int4(b, 1);
    for (uint32_t i = 2; i <= MANY; i++)
        get_memo(b, 1), int4(b, i);
}

static void write_file(const char *path, const pbuf *b)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
    assert_int_equal(fclose(f), 0);
}

static void many_duplicate_keys(void **state)
{
    (void)state;
    pbuf b = {0};
    snapshot_of(&b, duplicates);
    fp_pdoc d;
    parse(&b, &d);
    const fp_pv *root = fp_pdoc_node(&d, d.root);
    const fp_pv *dev = fp_pdoc_item(&d, fp_pdoc_get(&d, root, "device_traces"), 0);
    assert_non_null(dev);
    assert_int_equal(dev->n, MANY);
    const fp_pv *e = fp_pdoc_item(&d, dev, MANY - 1);
    assert_int_equal(e->n, 6); /* action, addr, size: each once */
    assert_int_equal(int_of(fp_pdoc_get(&d, e, "size")), MANY);
    fp_pdoc_free(&d);

    char path[64];
    snprintf(path, sizeof path, "/tmp/fp-unpickle-%d.pickle", (int)getpid());
    write_file(path, &b);
    fp_trace t;
    char err[512] = "";
    int rc = fp_trace_load(path, &t, err, sizeof err);
    unlink(path);
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(t.n, 2 * MANY - 1); /* each alloc at 4096 closes the one before */
    assert_int_equal(t.ev[0].op, 'a');
    assert_int_equal(t.ev[0].size, MANY);
    fp_trace_free(&t);
    free(b.p);
}

static void distinct(pbuf *b)
{
    str(b, "action"), str(b, "alloc"), str(b, "addr"), int4(b, 4096), str(b, "size");
    int4(b, 512);
    char key[16];
    for (uint32_t i = 0; i < MANY; i++) {
        snprintf(key, sizeof key, "k%06u", i);
        str(b, key), int4(b, i);
    }
}

static void big_shared_dict(void **state)
{
    (void)state;
    pbuf b = {0};
    snapshot_of(&b, distinct);
    fp_pdoc d;
    parse(&b, &d);
    const fp_pv *root = fp_pdoc_node(&d, d.root);
    const fp_pv *dev = fp_pdoc_item(&d, fp_pdoc_get(&d, root, "device_traces"), 0);
    char key[16];
    for (uint32_t k = 0; k < MANY; k += 7) { /* every entry, a key of each */
        const fp_pv *e = fp_pdoc_item(&d, dev, k);
        snprintf(key, sizeof key, "k%06u", k);
        assert_int_equal(int_of(fp_pdoc_get(&d, e, key)), k);
        assert_int_equal(int_of(fp_pdoc_get(&d, e, "size")), 512);
        assert_null(fp_pdoc_get(&d, e, "k"));
    }
    fp_pdoc_free(&d);
    free(b.p);
}

#define FLOOD 30000u

/* FNV-1a, 64 bits: the string table's former hash. */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Printable 10-byte keys whose FNV-1a hash is 0 in its low 16 bits: a
 * counter makes 8 bytes, the ninth is searched for, the tenth solved
 * (the low 16 bits of FNV-1a depend on the low 16 bits of the state
 * alone, and the prime is odd). */
static size_t flood_keys(char (*keys)[11], size_t want)
{
    size_t n = 0;
    for (uint64_t c = 0; n < want; c++) {
        char k[11];
        snprintf(k, sizeof k, "q%07llx", (unsigned long long)c);
        uint64_t h8 = fnv1a((const unsigned char *)k, 8);
        for (unsigned b9 = 0x30; b9 < 0x7b && n < want; b9++) {
            uint64_t h9 = (h8 ^ b9) * 0x100000001b3ull;
            unsigned b10 = (unsigned)(h9 & 0xff);
            if ((h9 >> 8 & 0xff) || b10 < 0x21 || b10 > 0x7e)
                continue;
            k[8] = (char)b9, k[9] = (char)b10, k[10] = '\0';
            assert_true((fnv1a((const unsigned char *)k, 10) & 0xffff) == 0);
            memcpy(keys[n++], k, 11);
        }
    }
    return n;
}

static char (*flood)[11];

static void colliding(pbuf *b)
{
    str(b, "action"), str(b, "alloc"), str(b, "addr"), int4(b, 4096), str(b, "size");
    int4(b, 512);
    for (uint32_t i = 0; i < FLOOD; i++)
        str(b, flood[i]), int4(b, i);
}

static void string_flood(void **state)
{
    (void)state;
    flood = malloc(FLOOD * sizeof *flood);
    assert_non_null(flood);
    assert_int_equal(flood_keys(flood, FLOOD), FLOOD);
    pbuf b = {0};
    snapshot_of(&b, colliding);
    fp_pdoc d;
    parse(&b, &d);
    size_t run = fp_pdoc_longest_probe(&d);
    print_message("longest probe run: %zu slots of %zu\n", run, d.nstrs);
    assert_true(d.nstrs == 65536); /* so the former slot was the low 16 bits */
    assert_true(run < 400);        /* the former hash: 30,000 */
    const fp_pv *root = fp_pdoc_node(&d, d.root);
    const fp_pv *e =
        fp_pdoc_item(&d, fp_pdoc_item(&d, fp_pdoc_get(&d, root, "device_traces"), 0), 5);
    for (uint32_t k = 0; k < FLOOD; k += 3)
        assert_int_equal(int_of(fp_pdoc_get(&d, e, flood[k])), k);
    assert_int_equal(int_of(fp_pdoc_get(&d, e, "size")), 512);
    fp_pdoc_free(&d);
    free(b.p);
    free(flood);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(last_value_wins),
        cmocka_unit_test(many_duplicate_keys),
        cmocka_unit_test(big_shared_dict),
        cmocka_unit_test(string_flood),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
