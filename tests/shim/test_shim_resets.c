/* test_shim_resets.c - more contexts over a run than the shim has pool
 * slots.  70 primary-context resets, each after an allocation, then 1000
 * allocations: every one must still be served by a pool (the slot of a
 * retired context is taken again), not passed to the driver one by one.
 */
#include "shim_test.h"
#include "fpsim.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(reset_many_times)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
