/* tests/simdev/memory.c - device memory of the simulated driver: alloc,
 * copy and memset round trips, pointer attributes, bad frees and bad
 * arguments, the capacity and its OOM, failure injection (fail the Nth
 * allocation), and pitched allocations.
 */
#include "simdev_test.h"

/* ---- memory ---------------------------------------------------------------------- */

static void test_alloc_copy_roundtrip(void **state)
{
    (void)state;
    CUdeviceptr a = 0, b = 0, big = 0, base = 0;
    size_t size = 0;
    unsigned char host[4096], back[4096];
    for (size_t i = 0; i < sizeof host; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    fpsim_counts c0 = stats(0);
    OK(cuMemAlloc_v2(&a, sizeof host));
    OK(cuMemAlloc_v2(&b, sizeof host));
    assert_int_equal(a % 512, 0);
    OK(cuMemAlloc_v2(&big, 3 * MiB));
    assert_int_equal(big % (2 * MiB), 0);
    OK(cuMemcpyHtoD_v2(a, host, sizeof host));
    OK(cuMemcpyDtoD_v2(b, a, sizeof host));
    OK(cuMemcpyDtoH_v2(back, b, sizeof host));
    assert_memory_equal(host, back, sizeof host);
    assert_memory_equal((void *)(uintptr_t)a, host, sizeof host); /* ptr == host */
    OK(cuMemcpy(big + 100, a, sizeof host));                      /* unified */
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)back, big + 100, 16));
    assert_memory_equal(back, host, 16);
    OK(cuMemsetD8_v2(a, 0xab, 10));
    OK(cuMemsetD32_v2(a + 16, 0x01020304u, 4));
    OK(cuMemcpyDtoH_v2(back, a, 32));
    assert_int_equal(back[9], 0xab);
    assert_int_equal(back[10], host[10]);
    unsigned w;
    memcpy(&w, back + 20, 4);
    assert_int_equal(w, 0x01020304u);
    assert_int_equal(cuMemsetD32_v2(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemcpyHtoD_v2(a + 4000, host, 200), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemcpyHtoD_v2(a, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemcpyHtoD_v2(a, NULL, 0));
    OK(cuMemGetAddressRange_v2(&base, &size, big + 12345));
    assert_int_equal(base, big);
    assert_int_equal(size, 3 * MiB);
    OK(cuMemGetAddressRange_v2(NULL, &size, a + 1));
    assert_int_equal(size, sizeof host);
    assert_int_equal(cuMemGetAddressRange_v2(&base, &size, 16), CUDA_ERROR_NOT_FOUND);
    fpsim_counts c1 = stats(0);
    assert_int_equal(c1.live_allocations, c0.live_allocations + 3);
    assert_int_equal(c1.bytes_in_use, c0.bytes_in_use + 2 * 4096 + 4 * MiB);
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));
    OK(cuMemFree_v2(big));
    fpsim_counts c2 = stats(0);
    assert_int_equal(c2.live_allocations, c0.live_allocations);
    assert_int_equal(c2.bytes_in_use, c0.bytes_in_use);
    assert_int_equal(c2.free_calls, c0.free_calls + 3);
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    CUdeviceptr d = 0, m = 0, start = 0, dp = 0;
    void *h = NULL, *hp = NULL;
    CUcontext ctx = NULL;
    unsigned type = 0, managed = 7;
    int ordinal = -1;
    size_t range = 0;
    OK(cuMemAlloc_v2(&d, 1000));
    OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    assert_ptr_equal(ctx, g_ctx0);
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 10));
    assert_int_equal(dp, d + 10);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 999));
    assert_int_equal(start, d);
    OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 999));
    assert_int_equal(range, 1000);
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    assert_int_equal(ordinal, 0);
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    assert_int_equal(managed, 0);
    assert_int_equal(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 1000),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_CONTEXT, d),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocManaged(&m, 64, CU_MEM_ATTACH_GLOBAL));
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
    assert_int_equal(managed, 1);
    assert_int_equal(cuMemAllocManaged(&m, 64, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocHost_v2(&h, 100));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h));
    assert_int_equal(type, CU_MEMORYTYPE_HOST);
    OK(cuMemHostGetDevicePointer_v2(&dp, h, 0));
    assert_int_equal(dp, (CUdeviceptr)(uintptr_t)h);
    /* plural form: unknown pointers read as zero */
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    void *data[2] = {&type, &start};
    OK(cuPointerGetAttributes(2, attrs, data, 8));
    assert_int_equal(type, 0);
    assert_int_equal(start, 0);
    OK(cuPointerGetAttributes(2, attrs, data, d + 5));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    assert_int_equal(start, d);
    assert_int_equal(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h));
    OK(cuMemFree_v2(m));
    OK(cuMemFree_v2(d));
}

static void test_bad_frees_and_args(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    int local = 0;
    OK(cuMemAlloc_v2(&p, 4096));
    assert_int_equal(cuMemFree_v2(p + 512), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemFree_v2((CUdeviceptr)(uintptr_t)&local), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(p));
    assert_int_equal(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE); /* double */
    OK(cuMemFree_v2(0));
    assert_int_equal(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAlloc_v2(&p, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
}

static void test_capacity_oom(void **state)
{
    (void)state;
    CUdeviceptr a = 0, b = 0;
    size_t free_b = 0, total_b = 0;
    fpsim_counts c0 = stats(0);
    assert_int_equal(fpsim_set_capacity(0, c0.bytes_in_use + 8 * MiB), 0);
    OK(cuMemAlloc_v2(&a, 6 * MiB));
    assert_int_equal(cuMemAlloc_v2(&b, 4 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemGetInfo_v2(&free_b, &total_b));
    assert_int_equal(free_b, 2 * MiB);
    assert_int_equal(total_b, c0.bytes_in_use + 8 * MiB);
    OK(cuMemGetInfo_v2(NULL, &total_b));
    OK(cuMemGetInfo_v2(NULL, NULL));
    OK(cuMemAlloc_v2(&b, 2 * MiB)); /* exactly fills it */
    OK(cuMemGetInfo_v2(&free_b, NULL));
    assert_int_equal(free_b, 0);
    fpsim_counts c1 = stats(0);
    assert_int_equal(c1.alloc_failures, c0.alloc_failures + 1);
    assert_int_equal(c1.alloc_calls, c0.alloc_calls + 3);
    assert_int_equal(fpsim_set_capacity(7, MiB), -1); /* no such device */
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));
    assert_int_equal(fpsim_set_capacity(0, 16384 * MiB), 0);
}

static void test_fail_nth(void **state)
{
    (void)state;
    CUdeviceptr p[4] = {0};
    size_t pitch = 0;
    fpsim_fail_nth(3);
    OK(cuMemAlloc_v2(&p[0], 100));
    OK(cuMemAllocPitch_v2(&p[1], &pitch, 64, 4, 4));
    assert_int_equal(cuMemAlloc_v2(&p[2], 100), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc_v2(&p[2], 100)); /* only once */
    OK(cuMemAllocManaged(&p[3], 100, CU_MEM_ATTACH_GLOBAL));
    for (int i = 0; i < 4; i++)
        OK(cuMemFree_v2(p[i]));
    fpsim_fail_nth(1);
    assert_int_equal(cuMemAllocAsync(&p[0], 100, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    fpsim_fail_nth(0);
}

static void test_pitch(void **state)
{
    (void)state;
    CUdeviceptr p = 0, base = 0;
    size_t pitch = 0, size = 0;
    OK(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 4));
    assert_int_equal(pitch, 512);
    OK(cuMemGetAddressRange_v2(&base, &size, p));
    assert_int_equal(size, 512 * 10);
    OK(cuMemFree_v2(p));
    OK(cuMemAllocPitch_v2(&p, &pitch, 513, 3, 16));
    assert_int_equal(pitch, 1024);
    OK(cuMemFree_v2(p));
    assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, 100, 0, 8), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAllocPitch_v2(&p, NULL, 100, 1, 8), CUDA_ERROR_INVALID_VALUE);
    /* widths past 2^31 - 1, as the H200's driver takes them:
   * 2^31 succeeds with pitch 2^31, 2^40 is out of memory, and a width
   * whose rounding would wrap is out of memory too, not a crash */
    OK(cuMemAllocPitch_v2(&p, &pitch, (size_t)1 << 31, 1, 4));
    assert_int_equal(pitch, (size_t)1 << 31);
    OK(cuMemFree_v2(p));
    assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, (size_t)1 << 40, 1, 4),
                     CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cuMemAllocPitch_v2(&p, &pitch, SIZE_MAX - 10, 1, 4), CUDA_ERROR_OUT_OF_MEMORY);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_copy_roundtrip),
        cmocka_unit_test(test_pointer_attributes),
        cmocka_unit_test(test_bad_frees_and_args),
        cmocka_unit_test(test_capacity_oom),
        cmocka_unit_test(test_fail_nth),
        cmocka_unit_test(test_pitch),
    };
    return cmocka_run_group_tests_name("simdev memory", tests, simdev_setup, NULL);
}
