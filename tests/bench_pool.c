/* bench_pool.c - CPU benchmark of the pool: nanoseconds per alloc+free
 * pair with 100, 10,000 and 100,000 live blocks, sizes drawn log-uniform
 * from 512 B to 64 MiB, on an unlimited simulated backend.  Each pair
 * frees a random live block, so at 100,000 blocks the pool's metadata
 * (~12 MiB) is cold and the cost is bound by memory latency; the bench
 * also prints this machine's latency of one dependent random load at a few
 * working-set sizes, to put the numbers of different machines side by
 * side.  Each size runs with the record of requests off and at the
 * shim's default (record_mb:16), to show what recording costs.  Not a
 * test: run build/bin/bench_pool by hand.  docs/PERFORMANCE.md holds the
 * current numbers (scripts/bench.sh); docs/pool.md, "Measured: the pool on
 * the CPU", the earlier ones of record.
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

/* Sizes come from a table drawn once and slots from the generator inline,
 * so the timed loop streams no arrays of its own through the caches. */
#define NSIZES 65536
static uint32_t size_table[NSIZES];

static size_t random_slot(size_t live)
{
    return (size_t)(((rng() >> 32) * (uint64_t)live) >> 32);
}

static void churn(fp_pool *p, uint64_t *addr, size_t live, size_t pairs)
{
    for (size_t i = 0; i < pairs; i++) {
        size_t s = random_slot(live);
        fp_pool_free(p, addr[s]);
        fp_pool_alloc(p, size_table[rng() % NSIZES], &addr[s]);
    }
}

static double run(size_t live, size_t pairs, size_t record_bytes)
{
    fp_pool_opts o;
    fp_pool_opts_default(&o);
    o.record_bytes = record_bytes;
    fp_backend be = {.reserve = reserve, .release = release};
    fp_pool *p;
    if (fp_pool_create(&o, &be, &p))
        exit(1);
    uint64_t *addr = malloc(live * sizeof *addr);
    for (size_t i = 0; i < live; i++)
        fp_pool_alloc(p, random_size(), &addr[i]);
    churn(p, addr, live, pairs / 4); /* warm up to a steady state */
    double t0 = now_ns();
    churn(p, addr, live, pairs);
    double ns = (now_ns() - t0) / (double)pairs;
    fp_pool_destroy(p, 1);
    free(addr);
    return ns;
}

/* ns per load of a pointer chase through a random cycle over bytes. */
static double chase_ns(size_t bytes)
{
    size_t n = bytes / 64, *next = aligned_alloc(64, n * 64), *order = malloc(n * sizeof *order);
    if (!next || !order)
        exit(1);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rng() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        next[order[i] * 8] = order[(i + 1) % n] * 8;
    size_t at = 0, loads = 4000000;
    for (size_t i = 0; i < n; i++)
        at = next[at];
    double t0 = now_ns();
    for (size_t i = 0; i < loads; i++)
        at = next[at];
    double ns = (now_ns() - t0) / (double)loads;
    free(next);
    free(order);
    return at == (size_t)-1 ? 0 : ns; /* keeps the chase from being elided */
}

int main(int argc, char **argv)
{
    size_t pairs = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    size_t lives[] = {100, 10000, 100000};
    for (size_t i = 0; i < NSIZES; i++)
        size_table[i] = (uint32_t)random_size();
    /* the record of requests (record_mb, docs/advice.md): off, and the
     * shim's default of 16 MiB, interleaved, best of 3 each */
    printf("%-12s %s\n", "live blocks",
           "ns per alloc+free pair (best of 3): record off, record_mb:16");
    for (int i = 0; i < 3; i++) {
        double best[2] = {1e18, 1e18};
        for (int r = 0; r < 6; r++) {
            double ns = run(lives[i], pairs, r % 2 ? (size_t)16 << 20 : 0);
            best[r % 2] = ns < best[r % 2] ? ns : best[r % 2];
        }
        printf("%-12zu %.1f  %.1f  (%+.1f ns)\n", lives[i], best[0], best[1], best[1] - best[0]);
    }
    printf("\n%-12s %s\n", "working set", "ns per dependent random load (this machine)");
    for (size_t mib = 1; mib <= 64; mib *= 4)
        printf("%3zu MiB      %.1f\n", mib, chase_ns(mib << 20));
    return 0;
}
