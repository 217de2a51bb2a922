/* fp_hmap.h - the one hash map: 64-bit keys to non-zero 64-bit values,
 * open addressing with linear probing and backward-shift deletion (no
 * tombstones).  The pool's live blocks (address -> header) and the
 * replay's live ids (id -> address) both use it.
 *
 * Invariants:
 *  - a slot is empty iff its value is 0, so every key is allowed and a
 *    value never is 0;
 *  - count <= capacity / 2 after fp_hmap_make_room (the caller makes room
 *    before each insertion, or sizes the map for all of them at init);
 *  - every key sits in the probe run that starts at its home slot, with no
 *    empty slot in between (erasure shifts the run back into the hole);
 *  - a key's home is keyed by a per-process secret (fp_seed.h): no input
 *    can aim its keys at one run, and slot order differs from run to run,
 *    so nothing printed may follow it.
 */
#ifndef FP_HMAP_H
#define FP_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct fp_hmap_entry {
    uint64_t key;
    uint64_t val; /* 0: the slot is empty                    */
} fp_hmap_entry;

typedef struct fp_hmap {
    fp_hmap_entry *slots;
    size_t mask; /* capacity - 1 (capacity a power of two)  */
    size_t count;
    uint64_t seed; /* keys the homes (fp_seed.h), set by init  */
} fp_hmap;

/* Room for n entries without growing (at least 1024 slots).  0 or ENOMEM
 * (then fp_hmap_fini is still safe). */
int fp_hmap_init(fp_hmap *m, size_t n);
void fp_hmap_fini(fp_hmap *m);
/* Grows when one more entry would pass half the capacity: 0 or ENOMEM.
 * Slot indexes taken before it are stale after it. */
int fp_hmap_make_room(fp_hmap *m);

/* The slot of key: where it is, or the empty slot where it would go. */
size_t fp_hmap_slot(const fp_hmap *m, uint64_t key);
/* The value in slot i, 0 when empty. */
static inline uint64_t fp_hmap_at(const fp_hmap *m, size_t i)
{
    return m->slots[i].val;
}
/* Fills empty slot i (from fp_hmap_slot of key) with key -> val (val != 0). */
void fp_hmap_fill(fp_hmap *m, size_t i, uint64_t key, uint64_t val);
/* Empties slot i, keeping the probe runs whole. */
void fp_hmap_erase(fp_hmap *m, size_t i);

/* A hint taken without the owner's lock: start loading the slot where the
 * probe for key begins.  Safe while another thread grows the map (the
 * pointer and mask are read and written atomically; a stale pair only
 * wastes the hint). */
void fp_hmap_prefetch(const fp_hmap *m, uint64_t key);

#endif
