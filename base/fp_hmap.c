/* fp_hmap.c - the open-addressing map of fp_hmap.h.
 *
 * Invariants (fp_hmap.h): empty iff val == 0; no empty slot between a
 * key's home and its slot; count <= capacity / 2 after make_room.  slots
 * and mask are stored with atomic builtins so fp_hmap_prefetch may read
 * them without a lock.  A key's home is a mix keyed by the process's
 * secret (fp_seed.h), fixed for the map's life: ids chosen to collide
 * under any fixed mix land apart.
 */
#include "fp_hmap.h"

#include "fp_assert.h"
#include "fp_seed.h"
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Mixes all key bits into the low ones (keys may be 512-byte aligned
 * addresses or small consecutive ids), keyed by the map's seed so that
 * input cannot choose keys that share a home. */
static size_t home_of(const fp_hmap *m, uint64_t key, size_t mask)
{
    return (size_t)fp_mix_keyed(key, m->seed) & mask;
}

static int alloc_slots(fp_hmap *m, size_t cap)
{
    fp_hmap_entry *s = calloc(cap, sizeof *s);
    if (!s)
        return ENOMEM;
    __atomic_store_n(&m->slots, s, __ATOMIC_RELAXED);
    __atomic_store_n(&m->mask, cap - 1, __ATOMIC_RELAXED);
    return 0;
}

int fp_hmap_init(fp_hmap *m, size_t n)
{
    size_t cap = 1024;
    while (cap / 2 < n && cap < SIZE_MAX / 4 / sizeof(fp_hmap_entry))
        cap *= 2;
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
    m->seed = fp_seed();
    return alloc_slots(m, cap);
}

void fp_hmap_fini(fp_hmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

size_t fp_hmap_slot(const fp_hmap *m, uint64_t key)
{
    size_t i = home_of(m, key, m->mask);
    while (m->slots[i].val && m->slots[i].key != key)
        i = (i + 1) & m->mask;
    return i;
}

void fp_hmap_fill(fp_hmap *m, size_t i, uint64_t key, uint64_t val)
{
    fp_assert(val && !m->slots[i].val, "fill an empty slot with a non-zero value");
    m->slots[i] = (fp_hmap_entry){key, val};
    m->count++;
}

static int grow(fp_hmap *m)
{
    fp_hmap old = *m;
    if (old.mask + 1 > SIZE_MAX / 2 / sizeof(fp_hmap_entry) || alloc_slots(m, (old.mask + 1) * 2))
        return ENOMEM;
    m->count = 0;
    for (size_t i = 0; i <= old.mask; i++)
        if (old.slots[i].val)
            fp_hmap_fill(m, fp_hmap_slot(m, old.slots[i].key), old.slots[i].key, old.slots[i].val);
    free(old.slots);
    return 0;
}

int fp_hmap_make_room(fp_hmap *m)
{
    return (m->count + 1) * 2 > m->mask + 1 ? grow(m) : 0;
}

void fp_hmap_erase(fp_hmap *m, size_t i)
{
    m->slots[i] = (fp_hmap_entry){0, 0};
    m->count--;
    for (size_t j = (i + 1) & m->mask; m->slots[j].val; j = (j + 1) & m->mask) {
        size_t home = home_of(m, m->slots[j].key, m->mask);
        /* j stays unless its home lies outside (i, j], cyclically. */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            m->slots[i] = m->slots[j];
            m->slots[j] = (fp_hmap_entry){0, 0};
            i = j;
        }
    }
}

void fp_hmap_prefetch(const fp_hmap *m, uint64_t key)
{
    const fp_hmap_entry *slots = __atomic_load_n(&m->slots, __ATOMIC_RELAXED);
    size_t mask = __atomic_load_n(&m->mask, __ATOMIC_RELAXED);
    __builtin_prefetch(&slots[home_of(m, key, mask)]);
}
