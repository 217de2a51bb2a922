/* pool_index.c - the free-block index: an ordered set of blocks keyed by
 * (size, address).  Sizes map to segregated bins (bin_of); a two-level
 * bitmap finds the next non-empty bin; each bin is a treap threaded
 * through the block headers.
 *
 * Invariants: bin_of is monotonic in size, so bins partition the order;
 * bit b of used[] is set iff bins[b] is non-empty, and bit w of words iff
 * used[w] != 0; inside a bin, in-order traversal is sorted by (size, addr)
 * and priorities form a max-heap.  lower_bound gives PyTorch's best fit:
 * the smallest block that fits, lowest address first.
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
        if (fp_block_prio(t->left) > fp_block_prio(t))
            t = rotate_right(t);
    } else {
        t->right = insert_at(t->right, b);
        if (fp_block_prio(t->right) > fp_block_prio(t))
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
    if (fp_block_prio(a) > fp_block_prio(b)) {
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

/* 512-byte units below 64 have a bin each; above, 64 bins per octave. */
static unsigned bin_of(size_t size)
{
    size_t units = size >> 9;
    if (units < FP_BIN_SUB)
        return (unsigned)units;
    unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)units);
    unsigned sl = (unsigned)(units >> (fl - 6)) & (FP_BIN_SUB - 1);
    unsigned b = FP_BIN_SUB + (fl - 6) * FP_BIN_SUB + sl;
    return b < FP_NBINS ? b : FP_NBINS - 1;
}

static void mark(fp_index *ix, unsigned b)
{
    ix->used[b / 64] |= 1ull << (b % 64);
    ix->words |= 1ull << (b / 64);
}

static void unmark(fp_index *ix, unsigned b)
{
    ix->used[b / 64] &= ~(1ull << (b % 64));
    if (!ix->used[b / 64])
        ix->words &= ~(1ull << (b / 64));
}

/* The first non-empty bin >= b, or FP_NBINS. */
static unsigned next_bin(const fp_index *ix, unsigned b)
{
    if (b >= FP_NBINS)
        return FP_NBINS;
    unsigned w = b / 64;
    uint64_t m = ix->used[w] & (~0ull << (b % 64));
    if (m)
        return w * 64 + (unsigned)__builtin_ctzll(m);
    uint64_t ws = w + 1 < 64 ? ix->words & (~0ull << (w + 1)) : 0;
    if (!ws)
        return FP_NBINS;
    w = (unsigned)__builtin_ctzll(ws);
    return w * 64 + (unsigned)__builtin_ctzll(ix->used[w]);
}

void fp_index_insert(fp_index *ix, fp_block *b)
{
    unsigned bin = bin_of(b->size);
    b->left = b->right = NULL;
    ix->bins[bin] = insert_at(ix->bins[bin], b);
    mark(ix, bin);
    ix->count++;
}

void fp_index_remove(fp_index *ix, fp_block *b)
{
    unsigned bin = bin_of(b->size);
    ix->bins[bin] = remove_at(ix->bins[bin], b);
    if (!ix->bins[bin])
        unmark(ix, bin);
    b->left = b->right = NULL;
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
    if (!ix->words)
        return NULL;
    unsigned w = 63u - (unsigned)__builtin_clzll(ix->words);
    unsigned bin = w * 64 + 63u - (unsigned)__builtin_clzll(ix->used[w]);
    fp_block *t = ix->bins[bin];
    while (t->right)
        t = t->right;
    return t;
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
