/* ref_map.h - live blocks by address for the reference cores: open
 * addressing, linear probing, backward-shift deletion, grown at half full.
 * Invariant: every key sits in the run of occupied slots that starts at
 * its home slot (so a lookup stops at the first empty slot). */
#ifndef REF_MAP_H
#define REF_MAP_H

#include "ref_core.h"

typedef struct ref_map {
    uint64_t *keys; /* 0 = empty (address 0 is never handed out) */
    ref_block **vals;
    size_t mask, used;
} ref_map;

int ref_map_init(ref_map *m);
void ref_map_fini(ref_map *m);
int ref_map_put(ref_map *m, ref_block *b);
ref_block *ref_map_get(const ref_map *m, uint64_t addr);
ref_block *ref_map_take(ref_map *m, uint64_t addr);

#endif
