/* ref_bestfit.c - the "bestfit" reference index (ref_core.h): an ordered
 * set of free blocks keyed by (size, address), the structure PyTorch's
 * caching allocator keeps in a std::set, here a height-balanced (AVL)
 * binary search tree.  find() is the set's lower_bound(size): the smallest
 * block that fits, ties to the lowest address (exact best fit).
 * Invariants (bf_check): in-order keys strictly increase; every node's
 * height is 1 + the larger child height and the two differ by at most 1. */
#include "ref_core.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct bf_tree {
    ref_block *root;
} bf_tree;

static int key_less(const ref_block *a, const ref_block *b)
{
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

static int32_t height(const ref_block *n)
{
    return n ? n->height : 0;
}

static void fix_height(ref_block *n)
{
    int32_t l = height(n->left), r = height(n->right);
    n->height = 1 + (l > r ? l : r);
}

static ref_block *rotate_right(ref_block *n)
{
    ref_block *l = n->left;
    n->left = l->right;
    l->right = n;
    fix_height(n);
    fix_height(l);
    return l;
}

static ref_block *rotate_left(ref_block *n)
{
    ref_block *r = n->right;
    n->right = r->left;
    r->left = n;
    fix_height(n);
    fix_height(r);
    return r;
}

static ref_block *rebalance(ref_block *n)
{
    fix_height(n);
    int32_t diff = height(n->left) - height(n->right);
    if (diff > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (diff < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

static ref_block *insert_at(ref_block *n, ref_block *b)
{
    if (!n) {
        b->left = b->right = NULL;
        b->height = 1;
        return b;
    }
    if (key_less(b, n))
        n->left = insert_at(n->left, b);
    else
        n->right = insert_at(n->right, b);
    return rebalance(n);
}

static ref_block *take_min(ref_block *n, ref_block **min)
{
    if (!n->left) {
        *min = n;
        return n->right;
    }
    n->left = take_min(n->left, min);
    return rebalance(n);
}

static ref_block *remove_at(ref_block *n, ref_block *b)
{
    if (!n)
        return NULL;
    if (n == b) {
        ref_block *m, *r = n->right;
        if (!r)
            return n->left;
        r = take_min(r, &m);
        m->left = n->left;
        m->right = r;
        return rebalance(m);
    }
    if (key_less(b, n))
        n->left = remove_at(n->left, b);
    else
        n->right = remove_at(n->right, b);
    return rebalance(n);
}

static void *bf_create(void)
{
    return calloc(1, sizeof(bf_tree));
}

static void bf_destroy(void *idx)
{
    free(idx);
}

static void bf_insert(void *idx, ref_block *b)
{
    bf_tree *t = idx;
    t->root = insert_at(t->root, b);
}

static void bf_remove(void *idx, ref_block *b)
{
    bf_tree *t = idx;
    t->root = remove_at(t->root, b);
}

static ref_block *bf_find(void *idx, size_t size)
{
    ref_block *best = NULL;
    for (ref_block *n = ((bf_tree *)idx)->root; n;) {
        if (n->size >= size) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

static int bf_contains(void *idx, const ref_block *b)
{
    for (ref_block *n = ((bf_tree *)idx)->root; n; n = key_less(b, n) ? n->left : n->right)
        if (n == b)
            return 1;
    return 0;
}

/* In-order walk: keys increase, heights and balance hold; *prev is the
 * last node seen. */
static int walk(const ref_block *n, const ref_block **prev, size_t *count)
{
    if (!n)
        return 0;
    if (walk(n->left, prev, count))
        return 1;
    if (*prev && !key_less(*prev, n))
        return 1;
    int32_t l = height(n->left), r = height(n->right);
    if (n->height != 1 + (l > r ? l : r) || l - r > 1 || r - l > 1 || !n->is_free)
        return 1;
    *prev = n;
    (*count)++;
    return walk(n->right, prev, count);
}

static int bf_check(void *idx, size_t *count, char *msg, size_t len)
{
    const ref_block *prev = NULL;
    *count = 0;
    if (walk(((bf_tree *)idx)->root, &prev, count)) {
        snprintf(msg, len,
                 "bestfit: tree out of order, unbalanced or holding a used block "
                 "(after %zu good nodes)",
                 *count);
        return EFAULT;
    }
    return 0;
}

const ref_index ref_bestfit_index = {
    "bestfit", bf_create, bf_destroy, bf_insert, bf_remove, bf_find, bf_contains, bf_check,
};
