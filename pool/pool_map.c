/* pool_map.c - live blocks by address: an open-addressing hash table with
 * linear probing and backward-shift deletion (no tombstones).  Keys sit in
 * the slots beside the block pointers, so a probe never touches a header.
 *
 * Invariants: count <= capacity / 2; every key sits in the probe run that
 * starts at its hash, with no empty slot in between; a slot is empty iff
 * its block pointer is NULL.
 */
#include "pool_internal.h"
#include <errno.h>
#include <stdlib.h>

static size_t hash_addr(uint64_t a)
{
    a >>= 9; /* blocks are 512-byte aligned */
    a *= 0x9E3779B97F4A7C15ull;
    return (size_t)(a ^ (a >> 29));
}

int fp_map_init(fp_map *m)
{
    m->slots = calloc(1024, sizeof *m->slots);
    m->mask = 1023;
    m->count = 0;
    return m->slots ? 0 : ENOMEM;
}

void fp_map_fini(fp_map *m)
{
    free(m->slots);
    m->slots = NULL;
}

static void place(fp_map_slot *slots, size_t mask, uint64_t key, fp_block *b)
{
    size_t i = hash_addr(key) & mask;
    while (slots[i].b)
        i = (i + 1) & mask;
    slots[i] = (fp_map_slot){key, b};
}

static int grow(fp_map *m)
{
    size_t ncap = (m->mask + 1) * 2;
    fp_map_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return ENOMEM;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].b)
            place(ns, ncap - 1, m->slots[i].key, m->slots[i].b);
    free(m->slots);
    /* Atomic stores: fp_map_prefetch reads these without the lock. */
    __atomic_store_n(&m->slots, ns, __ATOMIC_RELAXED);
    __atomic_store_n(&m->mask, ncap - 1, __ATOMIC_RELAXED);
    return 0;
}

int fp_map_make_room(fp_map *m)
{
    return (m->count + 1) * 2 > m->mask + 1 ? grow(m) : 0;
}

void fp_map_put(fp_map *m, fp_block *b)
{
    place(m->slots, m->mask, b->addr, b);
    m->count++;
}

/* A hint, taken before the pool's lock: start loading the slot where the
 * key's probe will begin.  A stale slots/mask pair only wastes the hint;
 * a prefetch never faults. */
void fp_map_prefetch(const fp_map *m, uint64_t addr)
{
    const fp_map_slot *slots = __atomic_load_n(&m->slots, __ATOMIC_RELAXED);
    size_t mask = __atomic_load_n(&m->mask, __ATOMIC_RELAXED);
    __builtin_prefetch(&slots[hash_addr(addr) & mask]);
}

static size_t find_slot(const fp_map *m, uint64_t addr)
{
    size_t i = hash_addr(addr) & m->mask;
    while (m->slots[i].b && m->slots[i].key != addr)
        i = (i + 1) & m->mask;
    return i;
}

fp_block *fp_map_get(const fp_map *m, uint64_t addr)
{
    return m->slots[find_slot(m, addr)].b;
}

/* Removes slot i and shifts later members of the run back into the hole. */
static void erase_slot(fp_map *m, size_t i)
{
    size_t j = i;
    m->slots[i] = (fp_map_slot){0, NULL};
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].b)
            return;
        size_t home = hash_addr(m->slots[j].key) & m->mask;
        /* Move j into the hole at i unless its home lies in (i, j]. */
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            m->slots[i] = m->slots[j];
            m->slots[j] = (fp_map_slot){0, NULL};
            i = j;
        }
    }
}

fp_block *fp_map_take(fp_map *m, uint64_t addr)
{
    size_t i = find_slot(m, addr);
    fp_block *b = m->slots[i].b;
    if (b) {
        erase_slot(m, i);
        m->count--;
    }
    return b;
}
