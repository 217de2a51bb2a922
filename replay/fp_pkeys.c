/* fp_pkeys.c - the keys of an unpickled document (fp_unpickle.h): string
 * ids, dicts made as Python makes them, and lookups by key.
 *
 * After parsing, fp_pdoc_index gives every string node an id, the index of
 * the first string node with the same bytes (a hash table of the bytes:
 * each string is hashed once, and compared in full only with a string of
 * the same hash and length).  The hash is keyed by the process's secret
 * (fp_seed.h), eight bytes a step: strings crafted to share a slot under
 * a fixed hash (FNV-1a's low bits depend on the low bits alone) land
 * apart, so probe runs stay short whatever the input.  Then each dict is rebuilt in place: its
 * pairs with string keys come first, one per key id holding the value set
 * last (Python's d[k] = v), sorted by key id; pairs with other keys (a
 * snapshot has none) follow as read.  A lookup hashes its key once, finds
 * the id, and bisects the dict.
 *
 * Invariants: the work is O(bytes + pairs log pairs) whatever the input:
 * many duplicate keys, one big dict shared through the memo by many
 * entries, or long keys repeated through the memo; a string's bytes are
 * compared only while its id is found, never while sorting or looking up
 * a dict; on ENOMEM nothing is half done that the caller would read
 * (fp_unpickle frees the document).
 */
#include "fp_unpickle.h"
#include "fp_seed.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct fp_pstr {
    uint64_t hash;
    uint32_t node; /* a string node, UINT32_MAX for an empty slot */
};

/* The bytes p[0..n), eight at a time (little-endian, the tail padded
 * with zeros), each step a keyed bijective mix, then the length. */
static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t seed = fp_seed(), h = seed;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        for (size_t k = 0; k < 8 && i + k < n; k++)
            w |= (uint64_t)p[i + k] << (8 * k);
        h = fp_mix_keyed(h ^ w, seed);
    }
    return fp_mix_keyed(h ^ n, ~seed);
}

/* The slot of the string p[0..n) with hash h: its id's slot, or the empty
 * slot where it would go. */
static size_t find_slot(const fp_pdoc *d, const unsigned char *p, size_t n, uint64_t h)
{
    size_t mask = d->nstrs - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        const struct fp_pstr *e = &d->strs[i];
        if (e->node == UINT32_MAX)
            return i;
        const fp_pv *s = &d->node[e->node];
        if (e->hash == h && s->v.s.len == n && !memcmp(d->data + s->v.s.off, p, n))
            return i;
    }
}

static int intern_strings(fp_pdoc *d)
{
    size_t count = 0, cap = 16;
    for (size_t i = 0; i < d->n; i++)
        count += d->node[i].type == FP_PV_STR;
    while (cap < 2 * count)
        cap *= 2;
    d->strs = malloc(cap * sizeof *d->strs);
    if (!d->strs)
        return ENOMEM;
    d->nstrs = cap;
    for (size_t i = 0; i < cap; i++)
        d->strs[i] = (struct fp_pstr){0, UINT32_MAX};
    for (size_t i = 0; i < d->n; i++) {
        fp_pv *s = &d->node[i];
        if (s->type != FP_PV_STR)
            continue;
        const unsigned char *p = d->data + s->v.s.off;
        uint64_t h = hash_bytes(p, s->v.s.len);
        size_t k = find_slot(d, p, s->v.s.len, h);
        if (d->strs[k].node == UINT32_MAX)
            d->strs[k] = (struct fp_pstr){h, (uint32_t)i};
        s->key = d->strs[k].node;
    }
    return 0;
}

typedef struct key_at {
    uint32_t key, pair; /* the key's id, the pair's position as read */
} key_at;

static int key_at_cmp(const void *a, const void *b)
{
    const key_at *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->pair < y->pair ? -1 : x->pair > y->pair;
}

/* One dict rebuilt in place; tmp holds at least its pairs, out twice. */
static void build_dict(fp_pdoc *d, fp_pv *v, key_at *tmp, uint32_t *out)
{
    uint32_t pairs = v->n / 2, nstr = 0, nout = 0;
    for (uint32_t j = 0; j < pairs; j++) {
        const fp_pv *k = &d->node[v->v.items[2 * j]];
        if (k->type == FP_PV_STR)
            tmp[nstr++] = (key_at){k->key, j};
    }
    qsort(tmp, nstr, sizeof *tmp, key_at_cmp);
    for (uint32_t j = 0; j < nstr; j++) {
        if (j + 1 < nstr && tmp[j + 1].key == tmp[j].key)
            continue; /* set again later: the last value wins */
        out[nout++] = v->v.items[2 * tmp[j].pair];
        out[nout++] = v->v.items[2 * tmp[j].pair + 1];
    }
    v->key = nout / 2;
    for (uint32_t j = 0; j < pairs; j++)
        if (d->node[v->v.items[2 * j]].type != FP_PV_STR) {
            out[nout++] = v->v.items[2 * j];
            out[nout++] = v->v.items[2 * j + 1];
        }
    memcpy(v->v.items, out, nout * sizeof *out);
    v->n = nout;
}

static int build_dicts(fp_pdoc *d)
{
    uint32_t most = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->node[i].type == FP_PV_DICT && d->node[i].n / 2 > most)
            most = d->node[i].n / 2;
    key_at *tmp = malloc(((size_t)most + 1) * sizeof *tmp);
    uint32_t *out = malloc(((size_t)most + 1) * 2 * sizeof *out);
    int rc = tmp && out ? 0 : ENOMEM;
    for (size_t i = 0; !rc && i < d->n; i++)
        if (d->node[i].type == FP_PV_DICT)
            build_dict(d, &d->node[i], tmp, out);
    free(tmp);
    free(out);
    return rc;
}

int fp_pdoc_index(fp_pdoc *d)
{
    int rc = intern_strings(d);
    return rc ? rc : build_dicts(d);
}

size_t fp_pdoc_longest_probe(const fp_pdoc *d)
{
    size_t best = 0, run = 0;
    for (size_t i = 0; i < 2 * d->nstrs; i++) {
        run = d->strs[i & (d->nstrs - 1)].node != UINT32_MAX ? run + 1 : 0;
        best = run > best ? run : best;
    }
    return best < d->nstrs ? best : d->nstrs;
}

void fp_pdoc_index_free(fp_pdoc *d)
{
    free(d->strs);
    d->strs = NULL;
    d->nstrs = 0;
}

const fp_pv *fp_pdoc_get(const fp_pdoc *d, const fp_pv *v, const char *key)
{
    if (!v || v->type != FP_PV_DICT || !d->nstrs)
        return NULL;
    size_t n = strlen(key);
    const unsigned char *p = (const unsigned char *)key;
    const struct fp_pstr *e = &d->strs[find_slot(d, p, n, hash_bytes(p, n))];
    if (e->node == UINT32_MAX)
        return NULL; /* no string of the document has these bytes */
    uint32_t lo = 0, hi = v->key;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t id = d->node[v->v.items[2 * mid]].key;
        if (id == e->node)
            return &d->node[v->v.items[2 * mid + 1]];
        if (id < e->node)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
