/* bench_cores.c - fragpool's pool beside two reference cores on the CPU
 * (docs/PERFORMANCE.md, "Pool on the CPU"): ns per free+alloc pair against
 * the number of live blocks, for fp_pool (pool/), "bestfit" (an ordered
 * set of (size, address), as PyTorch's caching allocator keeps) and "tlsf"
 * (two-level segregated fit), both in ref_core.h.  Every core runs the
 * same op sequence (the generator is reseeded for each run): fill <live>
 * blocks, a warm-up of pairs/4, then <pairs> timed pairs, each freeing a
 * random live block and allocating a new one into its slot, sizes
 * log-uniform from 512 B to 64 MiB, on an unlimited simulated backend.
 * All three take one uncontended mutex per call and are called through a
 * function pointer.  The runs of the three cores alternate, their order
 * rotated per repetition, so drift of the host hits all of them alike.
 *
 * Not a test (tests/bench/test_ref_cores.c is).  Usage:
 *   bench_cores [--pairs N] [--reps R] [--lives 100,1000,...] [--json PATH]
 * Prints a table; --json writes the same numbers for scripts/perf/.
 */
#include "fp_pool.h"
#include "ref_core.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BASE_ADDR 0x100000000000ull
#define NSIZES    65536
#define NCORES    3
#define MAXLIVES  8
#define MAXREPS   50

static const char *core_names[NCORES] = {"fragpool", "bestfit", "tlsf"};
static uint32_t size_table[NSIZES];
static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- the cores behind one interface ---------------------------------- */
typedef struct core {
    void *h;
    int (*alloc)(void *h, size_t size, uint64_t *addr);
    int (*free)(void *h, uint64_t addr);
} core;

static uint64_t fp_next;
static int fp_reserve(void *ctx, size_t size, uint64_t *addr)
{
    (void)ctx;
    *addr = fp_next;
    fp_next += (size + FP_ROUND_LARGE - 1) & ~(uint64_t)(FP_ROUND_LARGE - 1);
    return 0;
}

static int fp_release(void *ctx, uint64_t addr, size_t size)
{
    (void)ctx, (void)addr, (void)size;
    return 0;
}

static int fp_alloc_fn(void *h, size_t size, uint64_t *addr)
{
    return fp_pool_alloc(h, size, addr);
}

static int fp_free_fn(void *h, uint64_t addr)
{
    return fp_pool_free(h, addr);
}

static int ref_alloc_fn(void *h, size_t size, uint64_t *addr)
{
    return ref_core_alloc(h, size, addr);
}

static int ref_free_fn(void *h, uint64_t addr)
{
    return ref_core_free(h, addr);
}

static int open_core(int kind, core *c)
{
    if (kind == 0) {
        fp_pool_opts o;
        fp_pool_opts_default(&o);
        fp_backend be = {.reserve = fp_reserve, .release = fp_release};
        fp_next = BASE_ADDR;
        c->alloc = fp_alloc_fn;
        c->free = fp_free_fn;
        return fp_pool_create(&o, &be, (fp_pool **)&c->h);
    }
    c->alloc = ref_alloc_fn;
    c->free = ref_free_fn;
    return ref_core_create(kind == 1 ? &ref_bestfit_index : &ref_tlsf_index, BASE_ADDR,
                           (ref_core **)&c->h);
}

/* Peak reserved bytes, then the core is gone. */
static size_t close_core(int kind, core *c)
{
    size_t peak;
    if (kind == 0) {
        fp_pool_stats st;
        fp_pool_get_stats(c->h, &st);
        peak = (size_t)st.reserved_bytes[FP_ALL].peak;
        fp_pool_destroy(c->h, 1);
    } else {
        peak = ref_core_peak_reserved(c->h);
        ref_core_destroy(c->h);
    }
    return peak;
}

/* ---- one run ----------------------------------------------------------- */
static size_t random_slot(size_t live)
{
    return (size_t)(((rng() >> 32) * (uint64_t)live) >> 32);
}

static int churn(core *c, uint64_t *addr, size_t live, size_t pairs)
{
    int bad = 0;
    for (size_t i = 0; i < pairs; i++) {
        size_t s = random_slot(live);
        bad |= c->free(c->h, addr[s]);
        bad |= c->alloc(c->h, size_table[rng() % NSIZES], &addr[s]);
    }
    return bad;
}

typedef struct result {
    double ns[MAXREPS];
    size_t peak_reserved;
} result;

static double run(int kind, size_t live, size_t pairs, size_t *peak)
{
    core c;
    uint64_t *addr = malloc(live * sizeof *addr);
    if (!addr || open_core(kind, &c)) {
        fprintf(stderr, "bench_cores: cannot set up %s (out of memory)\n", core_names[kind]);
        exit(1);
    }
    rng_state = 88172645463325252ull;
    int bad = 0;
    for (size_t i = 0; i < live; i++)
        bad |= c.alloc(c.h, size_table[rng() % NSIZES], &addr[i]);
    bad |= churn(&c, addr, live, pairs / 4);
    double t0 = now_ns();
    bad |= churn(&c, addr, live, pairs);
    double ns = (now_ns() - t0) / (double)pairs;
    *peak = close_core(kind, &c);
    free(addr);
    if (bad) {
        fprintf(stderr, "bench_cores: %s failed an alloc or free\n", core_names[kind]);
        exit(1);
    }
    return ns;
}

/* ---- output ------------------------------------------------------------ */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double s[MAXREPS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void print_table(const size_t *lives, int nl, result r[][NCORES], int reps)
{
    printf("%-10s %12s %12s %12s %14s %14s\n", "live", "fragpool", "bestfit", "tlsf", "fp/bestfit",
           "fp/tlsf");
    for (int i = 0; i < nl; i++) {
        double m[NCORES];
        for (int k = 0; k < NCORES; k++)
            m[k] = median(r[i][k].ns, reps);
        printf("%-10zu %12.1f %12.1f %12.1f %14.2f %14.2f\n", lives[i], m[0], m[1], m[2],
               m[0] / m[1], m[0] / m[2]);
    }
    printf("(ns per free+alloc pair, median of %d runs)\n", reps);
}

static int write_json(const char *path, const size_t *lives, int nl, result r[][NCORES], int reps,
                      size_t pairs)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_cores: cannot write %s: %s; the table above is all there is\n", path,
                strerror(errno));
        return 1;
    }
    fprintf(f,
            "{\"pairs\": %zu, \"reps\": %d, \"sizes\": \"log-uniform 512 B..64 MiB\",\n"
            " \"rows\": [",
            pairs, reps);
    for (int i = 0; i < nl; i++) {
        for (int k = 0; k < NCORES; k++) {
            double lo = r[i][k].ns[0];
            for (int j = 1; j < reps; j++)
                lo = r[i][k].ns[j] < lo ? r[i][k].ns[j] : lo;
            fprintf(f,
                    "%s\n  {\"live\": %zu, \"core\": \"%s\", \"ns_median\": %.2f, "
                    "\"ns_min\": %.2f, \"peak_reserved\": %zu, \"ns_each\": [",
                    i || k ? "," : "", lives[i], core_names[k], median(r[i][k].ns, reps), lo,
                    r[i][k].peak_reserved);
            for (int j = 0; j < reps; j++)
                fprintf(f, "%s%.2f", j ? ", " : "", r[i][k].ns[j]);
            fprintf(f, "]}");
        }
    }
    fprintf(f, "\n]}\n");
    return fclose(f) ? 1 : 0;
}

/* ---- arguments --------------------------------------------------------- */
static int parse_count(const char *opt, const char *s, size_t lo, size_t hi, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr,
                "bench_cores: %s wants a number from %zu to %zu, not '%s'; "
                "nothing was run\n",
                opt, lo, hi, s ? s : "");
        return 1;
    }
    *out = (size_t)v;
    return 0;
}

static int parse_lives(const char *s, size_t *lives, int *nl)
{
    char buf[256];
    if (!s || strlen(s) >= sizeof buf) {
        fprintf(stderr, "bench_cores: --lives wants a list like 100,1000; nothing was run\n");
        return 1;
    }
    strcpy(buf, s);
    *nl = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*nl == MAXLIVES) {
            fprintf(stderr, "bench_cores: --lives takes at most %d counts; nothing was run\n",
                    MAXLIVES);
            return 1;
        }
        if (parse_count("--lives", tok, 1, 10000000, &lives[(*nl)++]))
            return 1;
    }
    return *nl ? 0 : parse_count("--lives", "", 1, 1, &lives[0]);
}

int main(int argc, char **argv)
{
    size_t pairs = 1000000, reps = 3, lives[MAXLIVES] = {100, 1000, 10000, 100000};
    int nl = 4;
    const char *json = NULL;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad;
        if (!strcmp(argv[i], "--pairs"))
            bad = parse_count("--pairs", v, 1, 1000000000, &pairs);
        else if (!strcmp(argv[i], "--reps"))
            bad = parse_count("--reps", v, 1, MAXREPS, &reps);
        else if (!strcmp(argv[i], "--lives"))
            bad = parse_lives(v, lives, &nl);
        else if (!strcmp(argv[i], "--json") && v)
            bad = (json = v) == NULL;
        else {
            fprintf(stderr,
                    "bench_cores: unknown argument '%s' (usage: bench_cores [--pairs N] "
                    "[--reps R] [--lives A,B,...] [--json PATH]); nothing was run\n",
                    argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    rng_state = 1;
    for (size_t i = 0; i < NSIZES; i++) {
        double u = (double)(rng() >> 11) / 9007199254740992.0;
        size_table[i] = (uint32_t)exp(log(512.0) + u * (log(64.0 * FP_MIB) - log(512.0)));
    }
    static result r[MAXLIVES][NCORES];
    for (int i = 0; i < nl; i++)
        for (size_t j = 0; j < reps; j++)
            for (int n = 0; n < NCORES; n++) {
                int k = (int)((n + j) % NCORES);
                r[i][k].ns[j] = run(k, lives[i], pairs, &r[i][k].peak_reserved);
            }
    print_table(lives, nl, r, (int)reps);
    return json ? write_json(json, lives, nl, r, (int)reps, pairs) : 0;
}
