/* test_shim_devices.c - several devices and contexts under the shim, on
 * two simulated devices (FRAGPOOL_SIM_DEVICES=2).
 *
 * Each context gets its own pool: a block is never handed to another
 * context; a free from another thread, with another context current, goes
 * back to the block's own pool; cuMemGetInfo counts the idle cache of the
 * current device only; destroying a context or resetting a device retires
 * its pool, after which allocation starts afresh and stale pointers go to
 * the driver (which rejects them) without harming anything.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <pthread.h>

static CUcontext prim[2];

static int setup(void **state)
{
    (void)state;
    if (cuInit(0) || fpsim_device_count() < 2)
        return -1;
    for (int d = 0; d < 2; d++) {
        CUdevice dev;
        if (cuDeviceGet(&dev, d) || cuDevicePrimaryCtxRetain(&prim[d], dev))
            return -1;
    }
    return cuCtxSetCurrent(prim[0]) ? -1 : 0;
}

/* Bytes the device has handed out (classic segments or mapped pages). */
static unsigned long long device_bytes(int dev)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(dev, &c), 0);
    return c.bytes_in_use;
}

static void check_bytes(CUdeviceptr p, size_t n, unsigned char v)
{
    unsigned char first = 0, last = 0;
    CU(cuMemsetD8_v2(p, v, n));
    CU(cuMemcpyDtoH_v2(&first, p, 1));
    CU(cuMemcpyDtoH_v2(&last, p + n - 1, 1));
    assert_int_equal(first, v);
    assert_int_equal(last, v);
}

static void pools_per_device(void **state)
{
    (void)state;
    CUdeviceptr a, b;
    unsigned long long d0 = device_bytes(0), d1 = device_bytes(1);
    CU(cuCtxSetCurrent(prim[0]));
    CU(cuMemAlloc_v2(&a, 1 << 20));
    CU(cuCtxSetCurrent(prim[1]));
    CU(cuMemAlloc_v2(&b, 1 << 20));
    assert_true(device_bytes(0) > d0);
    unsigned long long d1_held = device_bytes(1);
    assert_true(d1_held > d1);
    check_bytes(b, 1 << 20, 0x42);
    CU(cuMemFree_v2(a)); /* device 1 current: a still goes to device 0's pool */
    CU(cuMemFree_v2(b));
    CU(cuCtxSynchronize());
    CUdeviceptr c;
    CU(cuMemAlloc_v2(&c, 1 << 20)); /* device 1: reuses b, never a */
    assert_int_equal(c, b);
    assert_int_equal(device_bytes(1), d1_held);
    CU(cuMemFree_v2(c));
    CU(cuCtxSetCurrent(prim[0]));
}

typedef struct cross {
    CUdeviceptr p;
    CUresult r;
} cross;

static void *free_elsewhere(void *arg)
{
    cross *x = arg;
    x->r = cuCtxSetCurrent(prim[1]);
    if (x->r == CUDA_SUCCESS)
        x->r = cuMemFree_v2(x->p);
    return NULL;
}

static void free_from_another_thread(void **state)
{
    (void)state;
    CU(cuCtxSetCurrent(prim[0]));
    cross x = {0};
    CU(cuMemAlloc_v2(&x.p, 3 << 20));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_elsewhere, &x), 0);
    pthread_join(t, NULL);
    CU(x.r);
    assert_int_equal(cuMemFree_v2(x.p), CUDA_ERROR_INVALID_VALUE); /* already freed */
}

static void meminfo_per_device(void **state)
{
    (void)state;
    size_t f0, t0, f1, t1, f0b, t0b;
    CU(cuCtxSetCurrent(prim[0]));
    CU(cuMemGetInfo_v2(&f0, &t0));
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, 40 << 20));
    CU(cuMemFree_v2(p));
    CU(cuCtxSynchronize()); /* now idle in device 0's cache */
    CU(cuMemGetInfo_v2(&f0b, &t0b));
    CU(cuCtxSetCurrent(prim[1]));
    CU(cuMemGetInfo_v2(&f1, &t1));
    assert_true(f0b <= t0b && f1 <= t1);
    assert_int_equal(f0b, f0); /* idle cache counts as free on device 0 */
    CU(cuCtxSetCurrent(prim[0]));
}

static void own_context_own_pool(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext mine;
    CU(cuDeviceGet(&dev, 0));
    CU(cuCtxCreate_v2(&mine, 0, dev));
    CUdeviceptr p, q;
    CU(cuMemAlloc_v2(&p, 2 << 20));
    CU(cuMemFree_v2(p));
    CU(cuCtxSynchronize());
    CU(cuCtxSetCurrent(prim[0]));
    CU(cuMemAlloc_v2(&q, 2 << 20)); /* the primary context never gets p */
    assert_true(q != p);
    CU(cuMemFree_v2(q));
    CU(cuCtxSetCurrent(mine));
    CUdeviceptr live;
    CU(cuMemAlloc_v2(&live, 1 << 20));
    CU(cuCtxDestroy_v2(mine)); /* takes live with it; the pool is retired */
    CU(cuCtxSetCurrent(prim[0]));
    assert_int_not_equal(cuMemFree_v2(live), CUDA_SUCCESS); /* the driver rejects it */
    CU(cuMemAlloc_v2(&q, 1 << 20));
    check_bytes(q, 1 << 20, 7);
    CU(cuMemFree_v2(q));
}

static void device_reset_retires(void **state)
{
    (void)state;
    CUdevice dev;
    CU(cuDeviceGet(&dev, 1));
    CU(cuCtxSetCurrent(prim[1]));
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, 5 << 20));
    CU(cuDevicePrimaryCtxReset_v2(dev));
    CU(cuDevicePrimaryCtxRetain(&prim[1], dev));
    CU(cuCtxSetCurrent(prim[1]));
    CUdeviceptr q;
    CU(cuMemAlloc_v2(&q, 5 << 20)); /* a fresh pool: real memory again */
    check_bytes(q, 5 << 20, 9);
    CU(cuMemFree_v2(q));
    CU(cuCtxSetCurrent(prim[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pools_per_device),     cmocka_unit_test(free_from_another_thread),
        cmocka_unit_test(meminfo_per_device),   cmocka_unit_test(own_context_own_pool),
        cmocka_unit_test(device_reset_retires),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
