/* tests/simdev/pool.c - each device's default stream-ordered pool of the
 * simulated device (sim_pool.c): the handles, the attributes and the
 * sequence measured natively (H200, driver 580.159.04): used is the exact
 * sum of the requested bytes and drops at the free call, before the
 * stream runs the free; reserved >= used, in 32 MiB steps; the highs and
 * their reset; RELEASE_THRESHOLD, a synchronize and cuMemPoolTrimTo;
 * invalid values; graph allocations made during capture not counted;
 * each device's pool on its own; cuGetProcAddress.
 */
#include "simdev_test.h"

#define BAD(call) assert_int_equal((call), CUDA_ERROR_INVALID_VALUE)
#define CHUNK     ((uint64_t)32 << 20)

static CUmemoryPool g_pool0;

static uint64_t get(CUmemPool_attribute a)
{
    uint64_t v = 0xdeadbeef;
    OK(cuMemPoolGetAttribute(g_pool0, a, &v));
    return v;
}

static uint64_t used(void)
{
    return get(CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
}
static uint64_t used_high(void)
{
    return get(CU_MEMPOOL_ATTR_USED_MEM_HIGH);
}
static uint64_t reserved(void)
{
    return get(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}
static uint64_t reserved_high(void)
{
    return get(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
}

static CUresult set(CUmemPool_attribute a, uint64_t v)
{
    return cuMemPoolSetAttribute(g_pool0, a, &v);
}

static void handles(void **state)
{
    (void)state;
    CUmemoryPool p0, p1, cur;
    OK(cuDeviceGetDefaultMemPool(&p0, 0));
    OK(cuDeviceGetDefaultMemPool(&p1, 1));
    assert_non_null(p0);
    assert_true(p0 != p1);
    OK(cuDeviceGetDefaultMemPool(&cur, 0));
    assert_ptr_equal(cur, p0); /* fixed */
    OK(cuDeviceGetMemPool(&cur, 0));
    assert_ptr_equal(cur, p0);
    OK(cuDeviceSetMemPool(0, p0));
    BAD(cuDeviceSetMemPool(0, p1)); /* another device's pool */
    BAD(cuDeviceSetMemPool(0, (CUmemoryPool)(uintptr_t)0x1234));
    BAD(cuDeviceSetMemPool(0, NULL));
    OK(cuDeviceGetMemPool(&cur, 0));
    assert_ptr_equal(cur, p0);
    BAD(cuDeviceGetDefaultMemPool(NULL, 0));
    assert_int_equal(cuDeviceGetDefaultMemPool(&cur, 9), CUDA_ERROR_INVALID_DEVICE);
    g_pool0 = p0;
}

/* The native sequence on a fresh device. */
static void native_sequence(void **state)
{
    (void)state;
    assert_int_equal(used(), 0);
    assert_int_equal(reserved(), 0);
    assert_int_equal(get(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0);
    CUstream s;
    CUdeviceptr x, y, z;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocAsync(&x, 1000, s));
    assert_int_equal(used(), 1000);
    assert_int_equal(reserved(), CHUNK);
    OK(cuMemAllocAsync(&y, 3 * MiB + 5, s));
    assert_int_equal(used(), 3146733);
    assert_int_equal(reserved(), CHUNK);
    OK(cuMemAllocAsync(&z, 1, s));
    assert_int_equal(used(), 3146734);
    /* The free counts at the call: the stream is held by a gate, so the
   * free has certainly not run yet. */
    gate g = {0};
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    OK(cuMemFreeAsync(y, s));
    assert_int_equal(used(), 1001);
    assert_int_equal(used_high(), 3146734);
    assert_true(reserved() >= used());
    atomic_store(&g.open, 1);
    OK(cuStreamSynchronize(s));
    assert_int_equal(used(), 1001);
    assert_int_equal(reserved(), CHUNK); /* the chunk still holds x, z */

    /* The highs: reset with 0 only. */
    OK(set(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0));
    assert_int_equal(used_high(), 1001);
    BAD(set(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 1));
    assert_int_equal(used_high(), 1001);
    OK(set(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0));
    assert_int_equal(reserved_high(), CHUNK);
    BAD(set(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 5));
    BAD(set(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 0)); /* read-only */
    BAD(set(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 0));

    /* The threshold keeps freed memory past a synchronize; a trim gives
   * back all but the chunk that holds live bytes. */
    OK(set(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, UINT64_MAX));
    assert_int_equal(get(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), UINT64_MAX);
    CUdeviceptr big;
    OK(cuMemAllocAsync(&big, 64 * MiB, s));
    assert_int_equal(used(), 1001 + 64 * MiB);
    assert_int_equal(used_high(), 1001 + 64 * MiB);
    OK(cuMemFreeAsync(big, s));
    OK(cuStreamSynchronize(s));
    assert_int_equal(used(), 1001);
    assert_int_equal(reserved(), 3 * CHUNK);
    assert_int_equal(reserved_high(), 3 * CHUNK);
    OK(cuMemPoolTrimTo(g_pool0, 0));
    assert_int_equal(reserved(), CHUNK);
    assert_int_equal(reserved_high(), 3 * CHUNK);

    /* Threshold 0 again: everything idle goes at the next synchronize. */
    OK(set(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0));
    OK(cuMemFreeAsync(x, s));
    OK(cuMemFreeAsync(z, s));
    assert_int_equal(used(), 0);
    OK(cuStreamSynchronize(s));
    assert_int_equal(reserved(), 0);
    OK(cuStreamDestroy_v2(s));
}

static void release_and_trim(void **state)
{
    (void)state;
    CUstream s;
    CUdeviceptr a, b;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(set(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 40 * MiB));
    OK(cuMemAllocAsync(&a, 100 * MiB, s)); /* 4 chunks */
    assert_int_equal(reserved(), 4 * CHUNK);
    OK(cuMemFreeAsync(a, s));
    OK(cuCtxSynchronize()); /* down to the threshold's chunk */
    assert_int_equal(reserved(), CHUNK);
    OK(cuMemPoolTrimTo(g_pool0, 0));
    assert_int_equal(reserved(), 0);
    /* A trim keeps minBytesToKeep, never less than live bytes need. */
    OK(set(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, UINT64_MAX));
    OK(cuMemAllocAsync(&a, 100 * MiB, s));
    OK(cuMemAllocAsync(&b, 10, s));
    OK(cuMemFreeAsync(a, s));
    CUevent e;
    OK(cuEventCreate(&e, 0));
    OK(cuEventRecord(e, s));
    OK(cuEventSynchronize(e));
    assert_int_equal(reserved(), 4 * CHUNK); /* under the threshold */
    OK(cuMemPoolTrimTo(g_pool0, 70 * MiB));
    assert_int_equal(reserved(), 3 * CHUNK);
    OK(cuMemPoolTrimTo(g_pool0, 0));
    assert_int_equal(reserved(), CHUNK); /* b lives */
    OK(set(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0));
    OK(cuMemFree_v2(b)); /* cuMemFree counts too */
    assert_int_equal(used(), 0);
    OK(cuEventSynchronize(e));
    assert_int_equal(reserved(), 0);
    OK(cuEventDestroy_v2(e));
    OK(cuStreamDestroy_v2(s));
}

static void invalid_values(void **state)
{
    (void)state;
    uint64_t v = 0;
    int on = -1;
    CUmemoryPool junk = (CUmemoryPool)(uintptr_t)0x5678;
    BAD(cuMemPoolGetAttribute(g_pool0, (CUmemPool_attribute)99, &v));
    BAD(cuMemPoolSetAttribute(g_pool0, (CUmemPool_attribute)99, &v));
    BAD(cuMemPoolGetAttribute(g_pool0, (CUmemPool_attribute)0, &v));
    BAD(cuMemPoolGetAttribute(g_pool0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, NULL));
    BAD(cuMemPoolSetAttribute(g_pool0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, NULL));
    BAD(cuMemPoolGetAttribute(junk, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    BAD(cuMemPoolGetAttribute(NULL, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    BAD(cuMemPoolSetAttribute(junk, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    BAD(cuMemPoolTrimTo(junk, 0));
    for (int a = 1; a <= 3; a++) { /* REUSE_*: 1 by default, 0/1 */
        OK(cuMemPoolGetAttribute(g_pool0, (CUmemPool_attribute)a, &on));
        assert_int_equal(on, 1);
        int off = 0;
        OK(cuMemPoolSetAttribute(g_pool0, (CUmemPool_attribute)a, &off));
        OK(cuMemPoolGetAttribute(g_pool0, (CUmemPool_attribute)a, &on));
        assert_int_equal(on, 0);
        int one = 1;
        OK(cuMemPoolSetAttribute(g_pool0, (CUmemPool_attribute)a, &one));
        OK(cuMemPoolGetAttribute(g_pool0, (CUmemPool_attribute)a, &on));
        assert_int_equal(on, 1);
    }
}

static void graph_allocations_not_counted(void **state)
{
    (void)state;
    CUstream s;
    CUdeviceptr a, g;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocAsync(&a, 5000, s));
    uint64_t u = used();
    assert_int_equal(u, 5000);
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuMemAllocAsync(&g, 8 * MiB, s));
    assert_int_equal(used(), u);
    OK(cuMemFreeAsync(g, s));
    OK(cuMemFreeAsync(a, s)); /* a graph node only */
    assert_int_equal(used(), u);
    CUgraph graph;
    OK(cuStreamEndCapture(s, &graph));
    OK(cuGraphDestroy(graph));
    assert_int_equal(used(), u);
    OK(cuMemFreeAsync(a, s));
    assert_int_equal(used(), 0);
    OK(cuStreamSynchronize(s));
    OK(cuStreamDestroy_v2(s));
}

static void each_device_its_own(void **state)
{
    (void)state;
    CUcontext c1;
    CUmemoryPool p1;
    CUdeviceptr a;
    OK(cuDevicePrimaryCtxRetain(&c1, 1));
    OK(cuCtxPushCurrent_v2(c1));
    OK(cuDeviceGetDefaultMemPool(&p1, 1));
    OK(cuMemAllocAsync(&a, 777, NULL));
    uint64_t v = 0;
    OK(cuMemPoolGetAttribute(p1, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    assert_int_equal(v, 777);
    assert_int_equal(used(), 0); /* device 0's pool */
    OK(cuMemFreeAsync(a, NULL));
    OK(cuMemPoolGetAttribute(p1, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    assert_int_equal(v, 0);
    OK(cuCtxSynchronize());
    OK(cuCtxPopCurrent_v2(&c1));
    OK(cuDevicePrimaryCtxRelease_v2(1));
}

static void found_by_get_proc_address(void **state)
{
    (void)state;
    static const char *const names[] = {"cuDeviceGetDefaultMemPool", "cuDeviceGetMemPool",
                                        "cuDeviceSetMemPool",        "cuMemPoolGetAttribute",
                                        "cuMemPoolSetAttribute",     "cuMemPoolTrimTo"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2(names[i], &fn, 11020, 0, &st));
        assert_non_null(fn);
        assert_int_equal(cuGetProcAddress_v2(names[i], &fn, 11010, 0, &st), CUDA_ERROR_NOT_FOUND);
        assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    }
}

int main(void)
{
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handles),
        cmocka_unit_test(native_sequence), /* needs a fresh device 0 */
        cmocka_unit_test(release_and_trim),
        cmocka_unit_test(invalid_values),
        cmocka_unit_test(graph_allocations_not_counted),
        cmocka_unit_test(each_device_its_own),
        cmocka_unit_test(found_by_get_proc_address),
    };
    return cmocka_run_group_tests(tests, simdev_setup, NULL);
}
