/* test_shim_api.c - fragpool's C API (shim/fragpool.h) on the simulated
 * device, in the plain and the sanitizer builds (the Python side's test,
 * tests/python/test_torch_side.py, cannot run there).
 *
 * - The functions are found in the process's global scope, as a
 *   framework's binding finds them (dlsym(RTLD_DEFAULT)), and the version
 *   is FRAGPOOL_API_VERSION.
 * - get_stats: exact allocated bytes and counts after known allocations;
 *   reserved >= allocated; a device with no pool reads as zeros; a short
 *   size fills only that many bytes; bad arguments are EINVAL / ENODEV.
 * - reset_peak: peak drops to current, run_peak stays; reset_accumulated:
 *   totals count from the reset.
 * - set_fraction: an allocation past the cap fails with
 *   CUDA_ERROR_OUT_OF_MEMORY, lifted it succeeds; out of range is EINVAL.
 * - empty_cache: the simulated device's bytes in use fall to the live ones.
 * - record_history + write_snapshot: a snapshot file is written (and a
 *   bad path is an error, not a crash); last_oom counts the OOMs and
 *   carries the text of the latest.
 * - Four threads allocate and free while a fifth reads the stats and
 *   resets the peaks (the sanitizers see the locking).
 */
#include "shim_test.h"
#include "fpsim.h"
#include "fragpool.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define MB ((size_t)1 << 20)

typedef struct api {
    int (*version)(void);
    int (*get_stats)(int, fragpool_stats *, size_t);
    int (*reset_peak)(int);
    int (*reset_accumulated)(int);
    int (*set_fraction)(int, double);
    double (*get_fraction)(int);
    int (*empty_cache)(int);
    int (*record_history)(int, unsigned, int);
    int (*write_snapshot)(const char *);
    uint64_t (*last_oom)(char *, size_t);
} api;

static api A;

static void *must(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f)
        fail_msg("%s is not exported by the preloaded libfragpool.so", name);
    return f;
}

static int setup(void **state)
{
    (void)state;
    *(void **)&A.version = must("fragpool_api_version");
    *(void **)&A.get_stats = must("fragpool_get_stats");
    *(void **)&A.reset_peak = must("fragpool_reset_peak");
    *(void **)&A.reset_accumulated = must("fragpool_reset_accumulated");
    *(void **)&A.set_fraction = must("fragpool_set_fraction");
    *(void **)&A.get_fraction = must("fragpool_get_fraction");
    *(void **)&A.empty_cache = must("fragpool_empty_cache");
    *(void **)&A.record_history = must("fragpool_record_history");
    *(void **)&A.write_snapshot = must("fragpool_write_snapshot");
    *(void **)&A.last_oom = must("fragpool_last_oom");
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    return 0;
}

static fragpool_stats stats(void)
{
    fragpool_stats s;
    assert_int_equal(A.get_stats(0, &s, sizeof s), 0);
    return s;
}

static void version_and_arguments(void **state)
{
    (void)state;
    assert_int_equal(A.version(), FRAGPOOL_API_VERSION);
    fragpool_stats s;
    assert_int_equal(A.get_stats(0, NULL, sizeof s), EINVAL);
    assert_int_equal(A.get_stats(0, &s, 0), EINVAL);
    assert_int_equal(A.get_stats(64, &s, sizeof s), ENODEV);
    assert_int_equal(A.get_stats(-1, &s, sizeof s), ENODEV);
    assert_int_equal(A.get_stats(1, &s, sizeof s), 0); /* no pool there: zeros */
    assert_int_equal(s.pools, 0);
    assert_int_equal(s.allocated_bytes[FRAGPOOL_ALL].current, 0);
    int64_t guard[2] = {-7, -7}; /* a caller that knows only the first field */
    assert_int_equal(A.get_stats(0, (fragpool_stats *)guard, sizeof(int64_t)), 0);
    assert_int_equal(guard[1], -7);
    assert_int_equal(A.set_fraction(0, 1.5), EINVAL);
    assert_int_equal(A.set_fraction(0, -0.5), EINVAL);
    assert_int_equal(A.set_fraction(99, 0.5), ENODEV);
    assert_int_equal(A.reset_peak(99), ENODEV);
    assert_int_equal(A.empty_cache(99), ENODEV);
    assert_int_equal(A.write_snapshot(NULL), EINVAL);
}

static void counters_and_resets(void **state)
{
    (void)state;
    fragpool_stats s0 = stats();
    CUdeviceptr a, b, c;
    CU(cuMemAlloc_v2(&a, 100 * MB));
    CU(cuMemAlloc_v2(&b, 300 * MB));
    CU(cuMemAlloc_v2(&c, 50 * MB));
    CU(cuMemFree_v2(b));
    fragpool_stats s = stats();
    assert_int_equal(s.pools, 1);
    int64_t base = s0.allocated_bytes[FRAGPOOL_ALL].current;
    assert_int_equal(s.allocated_bytes[FRAGPOOL_ALL].current - base, 150 * MB);
    assert_true(s.allocated_bytes[FRAGPOOL_ALL].peak - base >= (int64_t)(450 * MB));
    assert_true(s.reserved_bytes[FRAGPOOL_ALL].current >= s.allocated_bytes[FRAGPOOL_ALL].current);
    assert_int_equal(s.allocation[FRAGPOOL_ALL].current - s0.allocation[FRAGPOOL_ALL].current, 2);
    assert_int_equal(A.reset_peak(0), 0);
    s = stats();
    assert_int_equal(s.allocated_bytes[FRAGPOOL_ALL].peak, s.allocated_bytes[FRAGPOOL_ALL].current);
    assert_true(s.allocated_bytes[FRAGPOOL_ALL].run_peak - base >= (int64_t)(450 * MB));
    assert_int_equal(A.reset_accumulated(0), 0);
    CUdeviceptr d;
    CU(cuMemAlloc_v2(&d, 2 * MB));
    s = stats();
    assert_int_equal(s.allocated_bytes[FRAGPOOL_ALL].allocated, 2 * MB);
    assert_int_equal(s.allocation[FRAGPOOL_ALL].allocated, 1);
    assert_int_equal(s.allocation[FRAGPOOL_ALL].freed, 0);
    CU(cuMemFree_v2(a));
    CU(cuMemFree_v2(c));
    CU(cuMemFree_v2(d));
}

static void fraction_caps_and_lifts(void **state)
{
    (void)state;
    CUdeviceptr p;
    assert_int_equal(A.set_fraction(0, 0.05), 0); /* 819 MiB of 16 GiB */
    assert_true(A.get_fraction(0) > 0.049 && A.get_fraction(0) < 0.051);
    uint64_t ooms = A.last_oom(NULL, 0);
    assert_int_equal(cuMemAlloc_v2(&p, 2048 * MB), CUDA_ERROR_OUT_OF_MEMORY);
    char text[8192];
    assert_int_equal(A.last_oom(text, sizeof text), ooms + 1);
    assert_non_null(strstr(text, "fragpool: CUDA out of memory. Tried to allocate 2.00 GiB"));
    assert_non_null(strstr(text, "fragpool: fix:"));
    assert_int_equal(A.set_fraction(0, 0), 0);
    CU(cuMemAlloc_v2(&p, 2048 * MB));
    CU(cuMemFree_v2(p));
}

static void empty_cache_gives_back(void **state)
{
    (void)state;
    CUdeviceptr p[8];
    for (int i = 0; i < 8; i++)
        CU(cuMemAlloc_v2(&p[i], 64 * MB));
    for (int i = 0; i < 8; i++)
        CU(cuMemFree_v2(p[i]));
    CU(cuCtxSynchronize());
    fpsim_counts before, after;
    assert_int_equal(fpsim_stats(0, &before), 0);
    assert_int_equal(A.empty_cache(-1), 0);
    assert_int_equal(fpsim_stats(0, &after), 0);
    assert_true(after.bytes_in_use + 512 * MB <= before.bytes_in_use);
}

static void snapshot_written(void **state)
{
    (void)state;
    char dir[] = "/tmp/fp-api-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/snap.pickle", dir);
    assert_int_equal(A.record_history(1, 0, 1), 0);
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, MB));
    assert_int_equal(A.write_snapshot(path), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 100);
    char bad[96];
    snprintf(bad, sizeof bad, "%s/no-such-dir/snap.pickle", dir);
    assert_int_not_equal(A.write_snapshot(bad), 0); /* cannot be made: one line, no crash */
    assert_int_equal(A.record_history(0, 0, 0), 0);
    CU(cuMemFree_v2(p));
    unlink(path);
    rmdir(dir);
}

static atomic_bool stop;

static void *churn(void *ud)
{
    size_t n = (size_t)(uintptr_t)ud;
    CUcontext ctx;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return (void *)1;
    for (int i = 0; i < 2000; i++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, n + (size_t)i * 512) || cuMemFree_v2(p))
            return (void *)1;
    }
    return NULL;
}

static void *reader(void *ud)
{
    (void)ud;
    while (!atomic_load(&stop)) {
        fragpool_stats s;
        if (A.get_stats(0, &s, sizeof s) || A.reset_peak(0))
            return (void *)1;
    }
    return NULL;
}

static void threads_read_while_allocating(void **state)
{
    (void)state;
    pthread_t t[4], r;
    assert_int_equal(pthread_create(&r, NULL, reader, NULL), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(4096 << i)), 0);
    void *rc;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_null(rc);
    }
    atomic_store(&stop, true);
    assert_int_equal(pthread_join(r, &rc), 0);
    assert_null(rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version_and_arguments),   cmocka_unit_test(counters_and_resets),
        cmocka_unit_test(fraction_caps_and_lifts), cmocka_unit_test(empty_cache_gives_back),
        cmocka_unit_test(snapshot_written),        cmocka_unit_test(threads_read_while_allocating),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
