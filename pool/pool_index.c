/* pool_index.c - the free-block index: an ordered set of blocks keyed by
 * (size, address), kept as a treap threaded through the block headers.
 *
 * Invariants: in-order traversal is sorted by (size, addr); every node's
 * priority is >= its children's (max-heap), which keeps the expected depth
 * logarithmic.  Keys are unique because addresses are.  lower_bound gives
 * PyTorch's best fit: the smallest block that fits, lowest address first.
 */
#include "pool_internal.h"

static bool key_less(size_t size, uint64_t addr, const fp_block *b)
{
    return size < b->size || (size == b->size && addr < b->addr);
}

static fp_block *rotate_right(fp_block *t)
{
    fp_block *l = t->left;
    t->left = l->right;
    l->right = t;
    return l;
}

static fp_block *rotate_left(fp_block *t)
{
    fp_block *r = t->right;
    t->right = r->left;
    r->left = t;
    return r;
}

static fp_block *insert_at(fp_block *t, fp_block *b)
{
    if (!t)
        return b;
    if (key_less(b->size, b->addr, t)) {
        t->left = insert_at(t->left, b);
        if (t->left->prio > t->prio)
            t = rotate_right(t);
    } else {
        t->right = insert_at(t->right, b);
        if (t->right->prio > t->prio)
            t = rotate_left(t);
    }
    return t;
}

/* Joins two treaps whose keys are all ordered a < b. */
static fp_block *join(fp_block *a, fp_block *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->prio > b->prio) {
        a->right = join(a->right, b);
        return a;
    }
    b->left = join(a, b->left);
    return b;
}

static fp_block *remove_at(fp_block *t, fp_block *b)
{
    if (t == b)
        return join(b->left, b->right);
    if (key_less(b->size, b->addr, t))
        t->left = remove_at(t->left, b);
    else
        t->right = remove_at(t->right, b);
    return t;
}

void fp_index_insert(fp_index *ix, fp_block *b)
{
    b->left = b->right = NULL;
    ix->root = insert_at(ix->root, b);
    ix->count++;
}

void fp_index_remove(fp_index *ix, fp_block *b)
{
    ix->root = remove_at(ix->root, b);
    b->left = b->right = NULL;
    ix->count--;
}

fp_block *fp_index_lower_bound(const fp_index *ix, size_t size)
{
    fp_block *best = NULL;
    for (fp_block *t = ix->root; t;) {
        if (t->size >= size) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

fp_block *fp_index_max(const fp_index *ix)
{
    fp_block *t = ix->root;
    while (t && t->right)
        t = t->right;
    return t;
}

bool fp_index_contains(const fp_index *ix, const fp_block *b)
{
    for (fp_block *t = ix->root; t;) {
        if (t == b)
            return true;
        t = key_less(b->size, b->addr, t) ? t->left : t->right;
    }
    return false;
}
