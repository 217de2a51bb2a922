/* pool_map.c - live blocks by address, on base/'s fp_hmap (open addressing,
 * backward-shift deletion): the map's values are the block headers.
 *
 * Invariants: a live block is in the map under its address, and nothing
 * else is; fp_map_make_room before each put, so a put never fails.
 */
#include "pool_internal.h"

_Static_assert(sizeof(uintptr_t) <= sizeof(uint64_t), "a header pointer fits a value");

int fp_map_init(fp_map *m)
{
    return fp_hmap_init(m, 0);
}

void fp_map_fini(fp_map *m)
{
    fp_hmap_fini(m);
}

int fp_map_make_room(fp_map *m)
{
    return fp_hmap_make_room(m);
}

void fp_map_put(fp_map *m, fp_block *b)
{
    fp_hmap_fill(m, fp_hmap_slot(m, b->addr), b->addr, (uint64_t)(uintptr_t)b);
}

void fp_map_prefetch(const fp_map *m, uint64_t addr)
{
    fp_hmap_prefetch(m, addr);
}

fp_block *fp_map_get(const fp_map *m, uint64_t addr)
{
    return (fp_block *)(uintptr_t)fp_hmap_at(m, fp_hmap_slot(m, addr));
}

fp_block *fp_map_take(fp_map *m, uint64_t addr)
{
    size_t i = fp_hmap_slot(m, addr);
    fp_block *b = (fp_block *)(uintptr_t)fp_hmap_at(m, i);
    if (b)
        fp_hmap_erase(m, i);
    return b;
}
