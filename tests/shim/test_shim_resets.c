/* test_shim_resets.c - contexts that end under the shim.
 *
 * - More contexts over a run than the shim has pool slots: 70 primary-
 *   context resets, then 1000 allocations, all served by a pool (the slot
 *   of a retired context is taken again), not passed to the driver one by
 *   one.
 * - Churn: 4 threads each make, use and destroy 500 contexts at once, so
 *   that retired slots are rebuilt while other threads' frees walk every
 *   pool.  Every block is written and read back; the sanitizer builds see
 *   any use of a pool after it was destroyed.
 * - The plain names (cuCtxDestroy, cuDevicePrimaryCtxReset,
 *   cuDevicePrimaryCtxRelease), reached by link, by dlsym and through
 *   cuGetProcAddress with an old cudaVersion, end the pool with the
 *   context: the next allocation is memory the driver knows, and frees of
 *   the new context's blocks are accepted.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <pthread.h>

static void reset_many_times(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    for (int i = 0; i < 70; i++) {
        CUdeviceptr p;
        CU(cuDevicePrimaryCtxRetain(&ctx, dev));
        CU(cuCtxSetCurrent(ctx));
        CU(cuMemAlloc_v2(&p, 4096));
        CU(cuMemFree_v2(p));
        CU(cuDevicePrimaryCtxReset_v2(dev));
    }
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    fpsim_counts before, after;
    assert_int_equal(fpsim_stats(0, &before), 0);
    for (int i = 0; i < 1000; i++) {
        CUdeviceptr p;
        CU(cuMemAlloc_v2(&p, 4096 + (size_t)i));
        CU(cuMemFree_v2(p));
    }
    assert_int_equal(fpsim_stats(0, &after), 0);
    assert_true(after.alloc_calls - before.alloc_calls <= 1); /* one segment */
}

/* ---- churn ---------------------------------------------------------------- */

#define CHURN_THREADS  4
#define CHURN_CONTEXTS 500

/* Writes v over [p, p + n) and reads back its first and last bytes;
 * 0 when both are v. */
static int write_read(CUdeviceptr p, size_t n, unsigned char v)
{
    unsigned char a = 0, b = 0;
    if (cuMemsetD8_v2(p, v, n) || cuMemcpyDtoH_v2(&a, p, 1) || cuMemcpyDtoH_v2(&b, p + n - 1, 1))
        return -1;
    return a == v && b == v ? 0 : -1;
}

static void *churn(void *arg)
{
    uintptr_t id = (uintptr_t)arg, bad = 0;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0))
        return (void *)1;
    for (int i = 0; i < CHURN_CONTEXTS; i++) {
        CUcontext ctx;
        CUdeviceptr p[3];
        if (cuCtxCreate_v2(&ctx, 0, dev))
            return (void *)1;
        for (int k = 0; k < 3; k++) {
            size_t n = 512u << (k * 4 + (i + (int)id) % 4);
            if (cuMemAlloc_v2(&p[k], n) || write_read(p[k], n, (unsigned char)(i + k)))
                bad++;
        }
        for (int k = 0; k < 3; k++)
            bad += cuMemFree_v2(p[k]) != CUDA_SUCCESS;
        bad += cuCtxDestroy_v2(ctx) != CUDA_SUCCESS;
    }
    return (void *)bad;
}

static void contexts_churn_in_threads(void **state)
{
    (void)state;
    CU(cuInit(0));
    pthread_t t[CHURN_THREADS];
    for (uintptr_t i = 0; i < CHURN_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)i), 0);
    for (int i = 0; i < CHURN_THREADS; i++) {
        void *bad;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        assert_int_equal((uintptr_t)bad, 0);
    }
}

/* ---- the plain names -------------------------------------------------- */

typedef CUresult (*ctx_fn)(CUcontext);
typedef CUresult (*dev_fn)(CUdevice);

/* A block of the current context: memory the driver knows, that frees. */
static void allocation_is_driver_memory(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, 1 << 20));
    assert_int_equal(write_read(p, 1 << 20, 0x5a), 0);
    CU(cuMemFree_v2(p));
}

/* Allocates in a new context, ends it with destroy, and checks the next
 * context's memory. */
static void destroy_by(ctx_fn destroy)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CU(cuDeviceGet(&dev, 0));
    CU(cuCtxCreate_v2(&ctx, 0, dev));
    CU(cuMemAlloc_v2(&p, 1 << 20));
    CU(cuMemFree_v2(p)); /* cached: the pool holds its segment */
    CU(destroy(ctx));
    CU(cuCtxCreate_v2(&ctx, 0, dev));
    allocation_is_driver_memory();
    CU(cuCtxDestroy_v2(ctx));
}

/* The same with the primary context, ended by reset or by its release. */
static void end_primary_by(dev_fn end)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuMemAlloc_v2(&p, 1 << 20));
    CU(cuMemFree_v2(p));
    unsigned flags;
    int active = 1;
    while (active) { /* a release ends it only when it was the last */
        CU(end(dev));
        CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    }
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    allocation_is_driver_memory();
    CU(cuDevicePrimaryCtxRelease_v2(dev));
}

static void *driver_symbol(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *fn = dlsym(h, name);
    dlclose(h);
    assert_true(in_fragpool(fn));
    return fn;
}

/* name as cuGetProcAddress gives it for an old cudaVersion: the plain
 * function, not its _v2. */
static void *old_proc(const char *name, int version)
{
    void *fn = NULL;
    CU(cuGetProcAddress(name, &fn, version, 0));
    assert_true(in_fragpool(fn));
    return fn;
}

static void plain_names_end_the_pool(void **state)
{
    (void)state;
    CU(cuInit(0));
    destroy_by(cuCtxDestroy);
    destroy_by((ctx_fn)driver_symbol("cuCtxDestroy"));
    destroy_by((ctx_fn)old_proc("cuCtxDestroy", 3000));
    end_primary_by(cuDevicePrimaryCtxReset);
    end_primary_by((dev_fn)driver_symbol("cuDevicePrimaryCtxReset"));
    end_primary_by((dev_fn)old_proc("cuDevicePrimaryCtxReset", 10000));
    end_primary_by(cuDevicePrimaryCtxRelease);
    end_primary_by((dev_fn)driver_symbol("cuDevicePrimaryCtxRelease"));
    end_primary_by((dev_fn)old_proc("cuDevicePrimaryCtxRelease", 10000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(reset_many_times),
                                       cmocka_unit_test(contexts_churn_in_threads),
                                       cmocka_unit_test(plain_names_end_the_pool)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
