/* test_shim_host.c - pinned host memory under the shim, on the
 * simulated device, whose streams run on worker threads (a queued copy
 * really runs later).
 *
 *  - loops that pin, copy host->device->host on a stream and unpin, with
 *    every flag the pool serves, checking the bytes, the flags the
 *    queries give back, and that the pool serves repeats from its cache;
 *  - the race: a copy queued behind slow work still reads pinned block A
 *    when A is freed; B is allocated, gets A's memory back, and is written
 *    from the host at once: the copy must still see A's bytes;
 *  - bad frees (interior pointer, double free, unknown pointer) and
 *    queries on memory the pool holds but nobody owns;
 *  - what goes to the driver (WRITECOMBINED, host_max_cached_mb,
 *    host_pool:0), and the dlsym and cuGetProcAddress paths;
 *  - a mixed-size workload whose held/requested ratio the summary
 *    reports (checked by test_shim_host_summary in tests/CMakeLists.txt);
 *  - with the argument churn, only 2,000 pin/copy/unpin rounds of sizes
 *    that keep rising, then random ones: the pool gives idle segments
 *    back (test_shim_host_churn_held checks the summary).
 * Run under free_policy:deferred (the default), free_policy:sync, and on
 * a driver without context events.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define KiB ((size_t)1024)
#define MiB ((size_t)1 << 20)

static int pool_on = 1; /* host_pool:1 (the default) */
static size_t max_cached = SIZE_MAX;

static int setup(void **state)
{
    (void)state;
    const char *conf = getenv("FRAGPOOL_CONF");
    pool_on = !(conf && strstr(conf, "host_pool:0"));
    if (conf && strstr(conf, "host_max_cached_mb:1"))
        max_cached = 1 * MiB;
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    return 0;
}

/* Whether p was carved from a pool segment rather than made for it: the
 * simulated driver's own allocation (fpsim_range, which fragpool does not
 * answer) is not the request itself.  The range queries, which fragpool
 * answers for the block, must give the request exactly. */
static int carved(const void *p, size_t n)
{
    unsigned long long drv = 0;
    size_t drv_size = 0;
    assert_int_equal(fpsim_range((uintptr_t)p, &drv, &drv_size), 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    CUdeviceptr mid = (CUdeviceptr)(uintptr_t)p + n / 2;
    CU(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, mid));
    CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, mid));
    assert_true(base == (CUdeviceptr)(uintptr_t)p && size == n);
    return drv != (uintptr_t)p || drv_size != n;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i += 509)
        p[i] = (unsigned char)(seed + i / 509);
    p[n - 1] = (unsigned char)seed;
}

static void check(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i += 509)
        if (p[i] != (unsigned char)(seed + i / 509))
            fail_msg("byte %zu of %zu: %u, want %u", i, n, p[i], (unsigned char)(seed + i / 509));
    assert_int_equal(p[n - 1], (unsigned char)seed);
}

/* The first calls of the shim are ones the driver refuses or ignores:
 * they get the driver's own answers (the shim resolves the driver first). */
static void first_calls_driver_answers(void **state)
{
    (void)state;
    void *p;
    CU(cuMemFreeHost(NULL));
    assert_int_equal(cuMemHostAlloc(&p, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

static const unsigned kFlags[] = {0, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP,
                                  CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP};

static void pin_copy_unpin_loops(void **state)
{
    (void)state;
    assert_true(in_fragpool((void *)cuMemHostAlloc));
    static const size_t sizes[] = {4 * KiB, 100 * KiB, 1 * MiB, 1 * MiB + 4096, 3 * MiB, 64};
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CU(cuMemAlloc_v2(&d, 3 * MiB + 4096));
    void *seen[8] = {0};
    int repeats = 0;
    for (unsigned it = 0; it < 120; it++) {
        size_t n = sizes[it % 6];
        unsigned fl = kFlags[it % 4];
        unsigned char *src, *dst;
        CU(cuMemHostAlloc((void **)&src, n, fl));
        CU(cuMemAllocHost_v2((void **)&dst, n));
        unsigned f = 99;
        CU(cuMemHostGetFlags(&f, src + n / 2));
        /* as asked (not the segment's), DEVICEMAP added as the driver does */
        assert_int_equal(f, fl | CU_MEMHOSTALLOC_DEVICEMAP);
        CU(cuMemHostGetFlags(&f, dst));
        assert_int_equal(f, CU_MEMHOSTALLOC_DEVICEMAP);
        CUdeviceptr dp;
        CU(cuMemHostGetDevicePointer_v2(&dp, src + 1, 0));
        assert_true(dp == (CUdeviceptr)(uintptr_t)src + 1);
        unsigned mt = 0;
        CU(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 (CUdeviceptr)(uintptr_t)src));
        assert_int_equal(mt, CU_MEMORYTYPE_HOST);
        fill(src, n, it);
        memset(dst, 0, n);
        CU(cuMemcpyHtoDAsync_v2(d, src, n, s));
        CU(cuMemcpyDtoHAsync_v2(dst, d, n, s));
        CU(cuStreamSynchronize(s));
        check(dst, n, it);
        if (pool_on && n <= max_cached)
            assert_true(carved(src, n) || carved(dst, n) || n > 1 * MiB);
        repeats += seen[it % 6] == src;
        seen[it % 6] = src;
        CU(cuMemFreeHost(dst));
        CU(cuMemFreeHost(src));
    }
    if (pool_on) /* the cache gave the same memory back for the same size */
        assert_true(repeats > 50);
    CU(cuMemFree_v2(d));
    CU(cuStreamDestroy_v2(s));
}

/* Holds its stream until released (at most 10 s). */
typedef struct gate {
    atomic_int open;
} gate;

static void gate_fn(void *arg)
{
    gate *g = arg;
    for (int ms = 0; ms < 10000 && !atomic_load(&g->open); ms++)
        usleep(1000);
}

static void *open_later(void *arg)
{
    usleep(100 * 1000);
    atomic_store(&((gate *)arg)->open, 1);
    return NULL;
}

/* One trial of the race; returns whether B got A's memory. */
static int race_trial(CUstream slow, CUdeviceptr d, size_t n, unsigned seed)
{
    unsigned char *a, *b, *back;
    CU(cuMemHostAlloc((void **)&a, n, kFlags[seed % 4]));
    CU(cuMemAllocHost_v2((void **)&back, n));
    fill(a, n, seed);
    gate g = {0};
    CU(cuLaunchHostFunc(slow, gate_fn, &g));
    CU(cuMemcpyHtoDAsync_v2(d, a, n, slow)); /* reads A once the gate opens */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_later, &g), 0);
    CU(cuMemFreeHost(a));
    CU(cuMemHostAlloc((void **)&b, n, 0));
    memset(b, 0xEE, n); /* the host writes B at once */
    CU(cuStreamSynchronize(slow));
    pthread_join(t, NULL);
    CU(cuMemcpyDtoH_v2(back, d, n));
    check(back, n, seed);              /* the copy read A's bytes, not B's */
    int same = b < a + n && a < b + n; /* B lies on A's memory */
    CU(cuMemFreeHost(b));
    CU(cuMemFreeHost(back));
    return same;
}

static void race_slow_copy(void **state)
{
    (void)state;
    CUstream slow;
    CU(cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CU(cuMemAlloc_v2(&d, 2 * MiB));
    int reused = 0;
    static const size_t sizes[] = {8 * KiB, 300 * KiB, 2 * MiB};
    for (unsigned t = 0; t < 6; t++)
        reused += race_trial(slow, d, sizes[t % 3], t + 11);
    if (pool_on) /* else the driver decides */
        assert_true(reused >= 3);
    CU(cuMemFree_v2(d));
    CU(cuStreamDestroy_v2(slow));
}

static void bad_frees_and_dead_queries(void **state)
{
    (void)state;
    unsigned char *a;
    CU(cuMemHostAlloc((void **)&a, 8192, 0));
    memset(a, 3, 8192);
    assert_int_equal(cuMemFreeHost(a + 512), CUDA_ERROR_INVALID_VALUE); /* interior */
    assert_int_equal(a[8191], 3);
    char local[64];
    assert_int_equal(cuMemFreeHost(local), CUDA_ERROR_INVALID_VALUE); /* the driver's */
    CU(cuMemFreeHost(NULL));
    CU(cuMemFreeHost(a));
    assert_int_equal(cuMemFreeHost(a), CUDA_ERROR_INVALID_VALUE); /* double */
    /* Memory of a freed block: the pool still holds it, nobody owns it. */
    unsigned f;
    CUdeviceptr dp;
    unsigned mt;
    assert_int_equal(cuMemHostGetFlags(&f, a + 10), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostGetDevicePointer_v2(&dp, a + 10, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           (CUdeviceptr)(uintptr_t)(a + 10)),
                     CUDA_ERROR_INVALID_VALUE);
    /* Arguments the driver refuses are refused as it does. */
    void *p;
    assert_int_equal(cuMemHostAlloc(&p, 0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostAlloc(NULL, 64, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostAlloc(&p, 64, 0x100), CUDA_ERROR_INVALID_VALUE);
}

/* What the pool does not serve goes to the driver, whole. */
static void passed_to_driver(void **state)
{
    (void)state;
    unsigned char *w, *x, *y;
    CU(cuMemHostAlloc((void **)&w, 5000, CU_MEMHOSTALLOC_WRITECOMBINED));
    assert_false(carved(w, 5000));
    unsigned f;
    CU(cuMemHostGetFlags(&f, w));
    assert_int_equal(f, CU_MEMHOSTALLOC_WRITECOMBINED | CU_MEMHOSTALLOC_DEVICEMAP);
    CU(cuMemHostAlloc((void **)&x, 5000, 0));
    CU(cuMemHostAlloc((void **)&y, 2 * MiB + 100, 0)); /* a segment of 2 MiB + 4 KiB */
    assert_int_equal(carved(x, 5000), pool_on);
    assert_int_equal(carved(y, 2 * MiB + 100), pool_on && max_cached == SIZE_MAX);
    CU(cuMemFreeHost(w));
    CU(cuMemFreeHost(x));
    CU(cuMemFreeHost(y));
}

/* dlsym on libcuda and cuGetProcAddress hand out fragpool's functions,
 * and what they allocate is the pool's. */
static void lookup_paths(void **state)
{
    (void)state;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    assert_non_null(h);
    static const char *const names[] = {"cuMemHostAlloc",
                                        "cuMemAllocHost_v2",
                                        "cuMemFreeHost",
                                        "cuMemHostGetFlags",
                                        "cuMemHostGetDevicePointer_v2",
                                        "cuPointerGetAttribute"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!in_fragpool(dlsym(h, names[i])))
            fail_msg("dlsym(libcuda, %s) is not fragpool's", names[i]);
    static const struct {
        const char *name;
        int ver;
    } procs[] = {{"cuMemHostAlloc", 2020},
                 {"cuMemAllocHost", 3020},
                 {"cuMemFreeHost", 2000},
                 {"cuMemHostGetFlags", 2030},
                 {"cuMemHostGetDevicePointer", 3020},
                 {"cuPointerGetAttribute", 4000}};
    void *fns[6];
    for (size_t i = 0; i < 6; i++) {
        CUdriverProcAddressQueryResult st;
        CU(cuGetProcAddress_v2(procs[i].name, &fns[i], 12000, 0, &st));
        if (!in_fragpool(fns[i]))
            fail_msg("cuGetProcAddress(%s) is not fragpool's", procs[i].name);
    }
    fp_PFN_cuMemHostAlloc alloc = (fp_PFN_cuMemHostAlloc)fns[0];
    fp_PFN_cuMemAllocHost_v2 alloc_host = (fp_PFN_cuMemAllocHost_v2)fns[1];
    fp_PFN_cuMemFreeHost free_host = (fp_PFN_cuMemFreeHost)fns[2];
    void *a, *b;
    CU(alloc(&a, 1000, 0));
    CU(alloc_host(&b, 1000));
    assert_int_equal(carved(a, 1000) || carved(b, 1000), pool_on);
    CU(free_host(a));
    CU(free_host(b));
    dlclose(h);
}

/* Mixed sizes, all live at once, then freed: what the pool holds against
 * what was asked is in the summary (test_shim_host_summary). */
static void mixed_sizes(void **state)
{
    (void)state;
    enum { N = 120 };
    void *p[N];
    unsigned r = 12345;
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        r = r * 1103515245u + 12345u;
        size_t n = (size_t)4096 << (r >> 16) % 11; /* 4 KiB .. 4 MiB */
        n += (r >> 8) % n;                         /* not a power of two */
        CU(cuMemHostAlloc(&p[i], n, 0));
        memset(p[i], i, n);
        total += n;
    }
    assert_true(total > 40 * MiB);
    for (int i = 0; i < N; i++)
        CU(cuMemFreeHost(p[i]));
}

/* The churn that made the pool keep 250x the live bytes: 2,000 rounds of
 * two buffers of 4 KiB .. 4 MiB in 4 KiB steps (so at most 8 MiB pinned at
 * once), each pinned, copied to the device and back (the last 256 KiB at
 * most, a copy reading the end of the block), and unpinned.  With
 * rising, the sizes walk up the range a step at a time with a
 * pseudo-random jitter of one step, so most requests are larger than
 * every cached block (the case that pinned a new segment each time); else
 * they are drawn pseudo-randomly from the whole range.  What the pool held
 * is in the summary: test_shim_host_churn_held requires at most 8x the
 * peak pinned live bytes. */
static void churn(bool rising)
{
    enum { ROUNDS = 2000, STEPS = 1024 };
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CU(cuMemAlloc_v2(&d, 4 * MiB));
    unsigned r = rising ? 20261201u : 4242u;
    for (unsigned it = 0; it < ROUNDS; it++) {
        size_t n[2];
        for (unsigned k = 0; k < 2; k++) {
            r = r * 1103515245u + 12345u;
            unsigned step = rising ? (2 * it + k + (r >> 16) % 2) % STEPS : (r >> 12) % STEPS;
            n[k] = 4 * KiB * (1 + step); /* 4 KiB .. 4 MiB */
        }
        size_t m = n[0] < n[1] ? n[0] : n[1];
        size_t c = m < 256 * KiB ? m : 256 * KiB; /* the last c bytes of both */
        unsigned char *a, *b;
        CU(cuMemHostAlloc((void **)&a, n[0], kFlags[it % 4]));
        CU(cuMemAllocHost_v2((void **)&b, n[1]));
        a += n[0] - c;
        fill(a, c, it);
        fill(b + n[1] - c, c, it + 1);
        CU(cuMemcpyHtoDAsync_v2(d, a, c, s));
        CU(cuMemcpyDtoHAsync_v2(b + n[1] - c, d, c, s));
        CU(cuStreamSynchronize(s));
        assert_memory_equal(a, b + n[1] - c, c);
        a -= n[0] - c;
        CU(cuMemFreeHost(a));
        CU(cuMemFreeHost(b));
    }
    CU(cuMemFree_v2(d));
    CU(cuStreamDestroy_v2(s));
}

static void churn_rising_sizes(void **state)
{
    (void)state;
    churn(true);
}

static void churn_random_sizes(void **state)
{
    (void)state;
    churn(false);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest churns[] = {cmocka_unit_test(churn_rising_sizes),
                                        cmocka_unit_test(churn_random_sizes)};
    if (argc > 1 && strcmp(argv[1], "churn") == 0)
        return cmocka_run_group_tests(churns, setup, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_calls_driver_answers),
        cmocka_unit_test(pin_copy_unpin_loops),
        cmocka_unit_test(race_slow_copy),
        cmocka_unit_test(bad_frees_and_dead_queries),
        cmocka_unit_test(passed_to_driver),
        cmocka_unit_test(lookup_paths),
        cmocka_unit_test(mixed_sizes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
