/* fp_seed.c - the per-process secret of fp_seed.h.
 *
 * Invariant: the first caller draws it and publishes it with one
 * compare-and-swap; a racing caller's draw is dropped, so every caller
 * sees one value.
 */
#include "fp_seed.h"

#include <stdbool.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t seed;

/* The kernel's random bytes; the clock, pid and an address where the
 * call fails (an old kernel, a seccomp filter). */
static uint64_t draw(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) == (ssize_t)sizeof s && s)
        return s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s = fp_mix_keyed((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30), (uint64_t)getpid());
    s = fp_mix_keyed(s, (uint64_t)(uintptr_t)&s);
    return s ? s : 0x9E3779B97F4A7C15ull;
}

uint64_t fp_seed(void)
{
    uint64_t s = __atomic_load_n(&seed, __ATOMIC_ACQUIRE);
    if (s)
        return s;
    uint64_t expect = 0, mine = draw();
    if (__atomic_compare_exchange_n(&seed, &expect, mine, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return mine;
    return expect;
}
