/* bench_pool.c - CPU benchmark of the pool: nanoseconds per alloc+free
 * pair with 100, 10,000 and 100,000 live blocks, sizes drawn log-uniform
 * from 512 B to 64 MiB, on an unlimited simulated backend.  Not a test:
 * run build/bin/bench_pool and record the numbers in docs/benchmarks.md.
 */
#include "fp_pool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t next_addr = 0x100000000000ull;

static int reserve(void *ctx, size_t size, uint64_t *addr)
{
    (void)ctx;
    *addr = next_addr;
    next_addr += (size + FP_ROUND_LARGE - 1) & ~(uint64_t)(FP_ROUND_LARGE - 1);
    return 0;
}

static int release(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t random_size(void)
{
    double lo = log(512.0), hi = log(64.0 * 1024 * 1024);
    double u = (double)(rng() >> 11) / 9007199254740992.0;
    return (size_t)exp(lo + u * (hi - lo));
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double run(size_t live, size_t pairs)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    fp_backend be = {.reserve = reserve, .release = release};
    fp_pool *p;
    if (fp_pool_create(&o, &be, &p))
        exit(1);
    uint64_t *addr = malloc(live * sizeof *addr);
    size_t *sizes = malloc(pairs * sizeof *sizes);
    size_t *slots = malloc(pairs * sizeof *slots);
    for (size_t i = 0; i < live; i++)
        fp_pool_alloc(p, random_size(), &addr[i]);
    for (size_t i = 0; i < pairs; i++) {
        sizes[i] = random_size();
        slots[i] = rng() % live;
    }
    for (size_t i = 0; i < pairs / 4; i++) { /* warm up to a steady state */
        fp_pool_free(p, addr[slots[i]]);
        fp_pool_alloc(p, sizes[i], &addr[slots[i]]);
    }
    double t0 = now_ns();
    for (size_t i = 0; i < pairs; i++) {
        fp_pool_free(p, addr[slots[i]]);
        fp_pool_alloc(p, sizes[i], &addr[slots[i]]);
    }
    double ns = (now_ns() - t0) / (double)pairs;
    fp_pool_destroy(p, 1);
    free(addr);
    free(sizes);
    free(slots);
    return ns;
}

int main(int argc, char **argv)
{
    size_t pairs = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    size_t lives[] = {100, 10000, 100000};
    printf("%-12s %s\n", "live blocks", "ns per alloc+free pair (best of 3)");
    for (int i = 0; i < 3; i++) {
        double best = 1e18;
        for (int r = 0; r < 3; r++) {
            double ns = run(lives[i], pairs);
            best = ns < best ? ns : best;
        }
        printf("%-12zu %.1f\n", lives[i], best);
    }
    return 0;
}
