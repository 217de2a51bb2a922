/* fp_seed.h - the per-process secret that keys fragpool's hash tables
 * (fp_hmap, the pickle reader's string table), and the keyed mix they
 * share.
 *
 * Keys of those tables come from input (trace ids, pickle strings), so a
 * fixed hash lets crafted input put every key in one probe run and turn
 * each insert linear.  With a secret drawn once per process, input cannot
 * aim at a slot: probe runs stay short whatever the keys.
 *
 * Invariants: fp_seed() is never 0, the same for the whole process (every
 * thread, every call), and drawn without blocking (the kernel's random
 * source, or, where that fails, the clock, the pid and an address mixed);
 * nothing that fragpool prints or writes may depend on it (only slot
 * order does, and no output follows slot order).
 */
#ifndef FP_SEED_H
#define FP_SEED_H

#include <stdint.h>

uint64_t fp_seed(void);

/* A bijective mix of x keyed by seed: every bit of the result depends on
 * every bit of x and of seed. */
static inline uint64_t fp_mix_keyed(uint64_t x, uint64_t seed)
{
    x ^= seed;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= (seed << 32) | (seed >> 32);
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif
