/* pool_index.c - the free-block index: an ordered set of blocks keyed by
 * (size, address).  Sizes map to segregated bins (bin_of); a three-level
 * bitmap finds the next non-empty bin; each bin is a treap threaded
 * through the block headers, with parent links so that a removal needs
 * no search.
 *
 * Invariants: bin_of is monotonic in size, so bins partition the order;
 * bit b of used[] is set iff bins[b] is non-empty, bit w of mid[] iff
 * used[w] != 0, and bit m of top iff mid[m] != 0; inside a bin, in-order
 * traversal is sorted by (size, addr), priorities form a max-heap, and
 * every child's parent link points back (a root's is NULL).  lower_bound
 * gives PyTorch's best fit: the smallest block that fits, lowest address
 * first.
 */
#include "pool_internal.h"

static bool key_less(size_t size, uint64_t addr, const fp_block *b)
{
    return size < b->size || (size == b->size && addr < b->addr);
}

/* The link that points at t: its parent's child pointer, or the root. */
static fp_block **link_of(fp_block **root, fp_block *t)
{
    fp_block *up = t->parent;
    if (!up)
        return root;
    return up->left == t ? &up->left : &up->right;
}

/* Lifts child c over its parent, keeping the in-order sequence. */
static void rotate_up(fp_block **root, fp_block *c)
{
    fp_block *t = c->parent, **link = link_of(root, t);
    if (t->left == c) {
        t->left = c->right;
        if (c->right)
            c->right->parent = t;
        c->right = t;
    } else {
        t->right = c->left;
        if (c->left)
            c->left->parent = t;
        c->left = t;
    }
    c->parent = t->parent;
    t->parent = c;
    *link = c;
}

/* A leaf at b's key, then rotations up while its priority beats its
 * parent's. */
static void tree_insert(fp_block **root, fp_block *b)
{
    fp_block *up = NULL, **link = root;
    while (*link) {
        up = *link;
        link = key_less(b->size, b->addr, up) ? &up->left : &up->right;
    }
    b->left = b->right = NULL;
    b->parent = up;
    *link = b;
    uint32_t prio = fp_block_prio(b);
    while (b->parent && prio > fp_block_prio(b->parent))
        rotate_up(root, b);
}

/* Rotates b down below its higher-priority child until it has at most
 * one, then splices it out: no search from the root. */
static void tree_remove(fp_block **root, fp_block *b)
{
    while (b->left && b->right)
        rotate_up(root, fp_block_prio(b->left) > fp_block_prio(b->right) ? b->left : b->right);
    fp_block *c = b->left ? b->left : b->right;
    *link_of(root, b) = c;
    if (c)
        c->parent = b->parent;
    b->left = b->right = b->parent = NULL;
}

/* A bin per 512-byte unit below FP_BIN_EXACT units; above, FP_BIN_SUB
 * bins per power of two. */
static unsigned bin_of(size_t size)
{
    size_t units = size >> 9;
    if (units < FP_BIN_EXACT)
        return (unsigned)units;
    unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)units);
    unsigned sl = (unsigned)(units >> (fl - 8)) & (FP_BIN_SUB - 1);
    unsigned b = FP_BIN_EXACT + (fl - 11) * FP_BIN_SUB + sl;
    return b < FP_NBINS ? b : FP_NBINS - 1;
}

static void mark(fp_index *ix, unsigned b)
{
    unsigned w = b / 64;
    ix->used[w] |= 1ull << (b % 64);
    ix->mid[w / 64] |= 1ull << (w % 64);
    ix->top |= 1ull << (w / 64);
}

static void unmark(fp_index *ix, unsigned b)
{
    unsigned w = b / 64;
    if ((ix->used[w] &= ~(1ull << (b % 64))))
        return;
    if ((ix->mid[w / 64] &= ~(1ull << (w % 64))))
        return;
    ix->top &= ~(1ull << (w / 64));
}

/* The lowest set bit at or above bit i of v, or -1. */
static int bit_from(uint64_t v, unsigned i)
{
    v = i < 64 ? v & (~0ull << i) : 0;
    return v ? __builtin_ctzll(v) : -1;
}

/* The first non-empty bin >= b, or FP_NBINS. */
static unsigned next_bin(const fp_index *ix, unsigned b)
{
    if (b >= FP_NBINS)
        return FP_NBINS;
    unsigned w = b / 64, m = w / 64;
    int i = bit_from(ix->used[w], b % 64);
    if (i >= 0)
        return w * 64 + (unsigned)i;
    i = bit_from(ix->mid[m], w % 64 + 1);
    if (i < 0) {
        int j = bit_from(ix->top, m + 1);
        if (j < 0)
            return FP_NBINS;
        m = (unsigned)j;
        i = __builtin_ctzll(ix->mid[m]);
    }
    w = m * 64 + (unsigned)i;
    return w * 64 + (unsigned)__builtin_ctzll(ix->used[w]);
}

void fp_index_insert(fp_index *ix, fp_block *b)
{
    unsigned bin = bin_of(b->size);
    tree_insert(&ix->bins[bin], b);
    mark(ix, bin);
    ix->count++;
}

void fp_index_remove(fp_index *ix, fp_block *b)
{
    unsigned bin = bin_of(b->size);
    tree_remove(&ix->bins[bin], b);
    if (!ix->bins[bin])
        unmark(ix, bin);
    ix->count--;
}

static fp_block *tree_lower_bound(fp_block *t, size_t size)
{
    fp_block *best = NULL;
    while (t) {
        if (t->size >= size) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

fp_block *fp_index_lower_bound(const fp_index *ix, size_t size)
{
    unsigned bin = bin_of(size);
    fp_block *b = tree_lower_bound(ix->bins[bin], size);
    if (b)
        return b;
    bin = next_bin(ix, bin + 1);
    if (bin == FP_NBINS)
        return NULL;
    for (b = ix->bins[bin]; b->left;)
        b = b->left;
    return b;
}

fp_block *fp_index_max(const fp_index *ix)
{
    if (!ix->top)
        return NULL;
    unsigned m = 63u - (unsigned)__builtin_clzll(ix->top);
    unsigned w = m * 64 + 63u - (unsigned)__builtin_clzll(ix->mid[m]);
    unsigned bin = w * 64 + 63u - (unsigned)__builtin_clzll(ix->used[w]);
    fp_block *t = ix->bins[bin];
    while (t->right)
        t = t->right;
    return t;
}

/* In-order from the largest key down; false from fn stops the walk. */
static bool visit_desc(const fp_block *t, fp_index_fn fn, void *ud)
{
    return !t || (visit_desc(t->right, fn, ud) && fn(t, ud) && visit_desc(t->left, fn, ud));
}

void fp_index_visit_desc(const fp_index *ix, fp_index_fn fn, void *ud)
{
    for (unsigned w = FP_NBINWORDS; w-- > 0;)
        for (uint64_t used = ix->used[w]; used;) {
            unsigned bit = 63u - (unsigned)__builtin_clzll(used);
            used &= ~((uint64_t)1 << bit);
            if (!visit_desc(ix->bins[w * 64 + bit], fn, ud))
                return;
        }
}

bool fp_index_contains(const fp_index *ix, const fp_block *b)
{
    for (fp_block *t = ix->bins[bin_of(b->size)]; t;) {
        if (t == b)
            return true;
        t = key_less(b->size, b->addr, t) ? t->left : t->right;
    }
    return false;
}

const fp_block *fp_index_bin(const fp_index *ix, unsigned bin)
{
    return bin < FP_NBINS ? ix->bins[bin] : NULL;
}
