/* ref_tlsf.c - the "tlsf" reference index (ref_core.h): two-level
 * segregated fit after Masmano, Ripoll, Crespo and Real (ECRTS 2004).
 * Sizes are counted in 512 B units u.  Below 32 units each u has a class
 * of its own; above, the first level is the power of two of u and the
 * second splits it into 32 equal steps.  A bitmap per level says which
 * classes hold blocks.  find() rounds the request up to the next step, so
 * that every block of the class it lands in (or of any later one) fits,
 * and takes the head of the first non-empty class: O(1), good fit.
 * Invariants (tlsf_check): every block in a class's list belongs to that
 * class and is free; the lists are doubly linked (left = next, right =
 * prev); a bit is set exactly when its list is non-empty. */
#include "ref_core.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define SL_BITS  5
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 52 /* u < 2^55: every size_t that is a multiple of 512 */

typedef struct tlsf {
    uint64_t fl_map;
    uint32_t sl_map[FL_COUNT];
    ref_block *head[FL_COUNT][SL_COUNT];
} tlsf;

static int msb(uint64_t u)
{
    return 63 - __builtin_clzll(u);
}

static void class_of(uint64_t u, int *fl, int *sl)
{
    if (u < SL_COUNT) {
        *fl = 0;
        *sl = (int)u;
        return;
    }
    int m = msb(u);
    *fl = m - SL_BITS + 1;
    *sl = (int)((u >> (m - SL_BITS)) - SL_COUNT);
}

static void *tlsf_create(void)
{
    return calloc(1, sizeof(tlsf));
}

static void tlsf_destroy(void *idx)
{
    free(idx);
}

static void tlsf_insert(void *idx, ref_block *b)
{
    tlsf *t = idx;
    int fl, sl;
    class_of(b->size >> 9, &fl, &sl);
    ref_block *h = t->head[fl][sl];
    b->left = h;
    b->right = NULL;
    if (h)
        h->right = b;
    t->head[fl][sl] = b;
    t->sl_map[fl] |= 1u << sl;
    t->fl_map |= 1ull << fl;
}

static void tlsf_remove(void *idx, ref_block *b)
{
    tlsf *t = idx;
    int fl, sl;
    class_of(b->size >> 9, &fl, &sl);
    if (b->left)
        b->left->right = b->right;
    if (b->right)
        b->right->left = b->left;
    else
        t->head[fl][sl] = b->left;
    if (!t->head[fl][sl]) {
        t->sl_map[fl] &= ~(1u << sl);
        if (!t->sl_map[fl])
            t->fl_map &= ~(1ull << fl);
    }
    b->left = b->right = NULL;
}

static ref_block *tlsf_find(void *idx, size_t size)
{
    tlsf *t = idx;
    uint64_t u = size >> 9;
    int fl, sl;
    if (u >= SL_COUNT)
        u += (1ull << (msb(u) - SL_BITS)) - 1;
    class_of(u, &fl, &sl);
    if (fl >= FL_COUNT)
        return NULL;
    uint32_t sls = t->sl_map[fl] & (~0u << sl);
    if (!sls) {
        uint64_t fls = fl + 1 < FL_COUNT ? t->fl_map & (~0ull << (fl + 1)) : 0;
        if (!fls)
            return NULL;
        fl = __builtin_ctzll(fls);
        sls = t->sl_map[fl];
    }
    return t->head[fl][__builtin_ctz(sls)];
}

static int tlsf_contains(void *idx, const ref_block *b)
{
    tlsf *t = idx;
    int fl, sl;
    class_of(b->size >> 9, &fl, &sl);
    for (const ref_block *n = t->head[fl][sl]; n; n = n->left)
        if (n == b)
            return 1;
    return 0;
}

static int check_class(tlsf *t, int fl, int sl, size_t *count)
{
    const ref_block *prev = NULL;
    for (const ref_block *n = t->head[fl][sl]; n; prev = n, n = n->left) {
        int f, s;
        class_of(n->size >> 9, &f, &s);
        if (f != fl || s != sl || n->right != prev || !n->is_free)
            return 1;
        (*count)++;
    }
    int bit = (t->sl_map[fl] >> sl) & 1;
    return bit != (t->head[fl][sl] != NULL);
}

static int tlsf_check(void *idx, size_t *count, char *msg, size_t len)
{
    tlsf *t = idx;
    *count = 0;
    for (int fl = 0; fl < FL_COUNT; fl++) {
        for (int sl = 0; sl < (int)SL_COUNT; sl++) {
            if (check_class(t, fl, sl, count)) {
                snprintf(msg, len,
                         "tlsf: class %d/%d holds a block of another class, a used "
                         "block, a broken link, or disagrees with its bitmap",
                         fl, sl);
                return EFAULT;
            }
        }
        if (((t->fl_map >> fl) & 1) != (t->sl_map[fl] != 0)) {
            snprintf(msg, len, "tlsf: first-level bit %d disagrees with its classes", fl);
            return EFAULT;
        }
    }
    return 0;
}

const ref_index ref_tlsf_index = {
    "tlsf",      tlsf_create, tlsf_destroy,  tlsf_insert,
    tlsf_remove, tlsf_find,   tlsf_contains, tlsf_check,
};
