/* ref_map.c - the reference cores' map of live blocks (ref_map.h). */
#include "ref_map.h"
#include <errno.h>
#include <stdlib.h>

static size_t home(const ref_map *m, uint64_t key)
{
    return (size_t)(((key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
}

static int alloc_slots(ref_map *m, size_t n)
{
    m->keys = calloc(n, sizeof *m->keys);
    m->vals = calloc(n, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        return ENOMEM;
    }
    m->mask = n - 1;
    m->used = 0;
    return 0;
}

int ref_map_init(ref_map *m)
{
    return alloc_slots(m, 1024);
}

void ref_map_fini(ref_map *m)
{
    free(m->keys);
    free(m->vals);
}

static void place(ref_map *m, ref_block *b)
{
    size_t i = home(m, b->addr);
    while (m->keys[i])
        i = (i + 1) & m->mask;
    m->keys[i] = b->addr;
    m->vals[i] = b;
    m->used++;
}

static int grow(ref_map *m)
{
    ref_map old = *m;
    if (alloc_slots(m, (old.mask + 1) * 2)) {
        *m = old;
        return ENOMEM;
    }
    for (size_t i = 0; i <= old.mask; i++)
        if (old.keys[i])
            place(m, old.vals[i]);
    ref_map_fini(&old);
    return 0;
}

int ref_map_put(ref_map *m, ref_block *b)
{
    if ((m->used + 1) * 2 > m->mask + 1 && grow(m))
        return ENOMEM;
    place(m, b);
    return 0;
}

static size_t slot_of(const ref_map *m, uint64_t addr)
{
    size_t i = home(m, addr);
    while (m->keys[i] && m->keys[i] != addr)
        i = (i + 1) & m->mask;
    return i;
}

ref_block *ref_map_get(const ref_map *m, uint64_t addr)
{
    size_t i = slot_of(m, addr);
    return m->keys[i] ? m->vals[i] : NULL;
}

/* Backward shift: later keys of the run move into the hole when their
 * home slot does not lie cyclically in (hole, their slot]. */
ref_block *ref_map_take(ref_map *m, uint64_t addr)
{
    size_t i = slot_of(m, addr);
    if (!m->keys[i])
        return NULL;
    ref_block *b = m->vals[i];
    size_t hole = i;
    for (size_t j = (i + 1) & m->mask; m->keys[j]; j = (j + 1) & m->mask) {
        size_t h = home(m, m->keys[j]);
        int stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays)
            continue;
        m->keys[hole] = m->keys[j];
        m->vals[hole] = m->vals[j];
        hole = j;
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    m->used--;
    return b;
}
