/* tests/simdev/host.c: pinned host memory on the simulated device
 * (simdev/, libcuda.so.1) on its own, linked as -lcuda.
 *
 * Covers cuMemHostAlloc with each flag, cuMemAllocHost, cuMemFreeHost,
 * cuMemHostGetFlags, cuMemHostGetDevicePointer, cuPointerGetAttribute on
 * pinned pointers, cuMemHostRegister/Unregister, the bad frees, the names
 * cuGetProcAddress gives, and that an async copy out of pinned memory
 * really runs later, on its stream: a test can catch a pinned block being
 * rewritten while a queued copy still reads it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp_cuda.h"

#define OK(call) assert_int_equal((call), CUDA_SUCCESS)

static int setup(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    return 0;
}

static unsigned attr_u(CUpointer_attribute a, const void *p)
{
    unsigned v = 0xdead;
    OK(cuPointerGetAttribute(&v, a, (CUdeviceptr)(uintptr_t)p));
    return v;
}

static void test_alloc_flags(void **state)
{
    (void)state;
    static const unsigned flags[] = {0, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP,
                                     CU_MEMHOSTALLOC_WRITECOMBINED,
                                     CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        void *h = NULL;
        OK(cuMemHostAlloc(&h, 10000, flags[i]));
        assert_true((uintptr_t)h % 4096 == 0);
        memset(h, 0x5a, 10000); /* host memory the program can write */
        unsigned f = 99;
        OK(cuMemHostGetFlags(&f, h)); /* DEVICEMAP added, as the H200's driver */
        assert_int_equal(f, flags[i] | CU_MEMHOSTALLOC_DEVICEMAP);
        OK(cuMemHostGetFlags(&f, (char *)h + 9999)); /* inside: the same */
        assert_int_equal(f, flags[i] | CU_MEMHOSTALLOC_DEVICEMAP);
        CUdeviceptr d = 0;
        OK(cuMemHostGetDevicePointer_v2(&d, (char *)h + 100, 0));
        assert_true(d == (CUdeviceptr)(uintptr_t)h + 100);
        assert_int_equal(attr_u(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (char *)h + 5),
                         CU_MEMORYTYPE_HOST);
        void *hp = NULL;
        OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                 (CUdeviceptr)(uintptr_t)h + 64));
        assert_ptr_equal(hp, (char *)h + 64);
        CUdeviceptr dp = 0;
        OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                 (CUdeviceptr)(uintptr_t)h + 64));
        assert_true(dp == (CUdeviceptr)(uintptr_t)h + 64);
        OK(cuMemFreeHost(h));
    }
    void *h = NULL;
    assert_int_equal(cuMemHostAlloc(&h, 100, 8), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostAlloc(NULL, 100, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostAlloc(&h, 0, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocHost_v2(&h, 4096));
    unsigned f = 99;
    OK(cuMemHostGetFlags(&f, h));
    assert_int_equal(f, CU_MEMHOSTALLOC_DEVICEMAP);
    OK(cuMemFreeHost(h));
}

/* Queries of memory that is not pinned: the driver's errors. */
static void test_queries_refuse(void **state)
{
    (void)state;
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, 4096));
    unsigned f;
    assert_int_equal(cuMemHostGetFlags(&f, (void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
    char local[64];
    assert_int_equal(cuMemHostGetFlags(&f, local), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostGetFlags(NULL, local), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr out;
    assert_int_equal(cuMemHostGetDevicePointer_v2(&out, (void *)(uintptr_t)d, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostGetDevicePointer_v2(&out, local, 0), CUDA_ERROR_INVALID_VALUE);
    void *hp;
    assert_int_equal(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(d));
}

/* Bad frees: each refused with INVALID_VALUE, the allocation untouched. */
static void test_bad_frees(void **state)
{
    (void)state;
    void *h;
    CUdeviceptr d;
    OK(cuMemHostAlloc(&h, 8192, 0));
    OK(cuMemAlloc_v2(&d, 4096));
    memset(h, 7, 8192);
    assert_int_equal(cuMemFreeHost((char *)h + 512), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
    char local[64];
    assert_int_equal(cuMemFreeHost(local), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(((unsigned char *)h)[8191], 7); /* still live */
    OK(cuMemFreeHost(h));
    assert_int_equal(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE); /* double */
    OK(cuMemFreeHost(NULL));
    OK(cuMemFree_v2(d));
}

static void test_register(void **state)
{
    (void)state;
    size_t n = 3 * 4096;
    char *mem = aligned_alloc(4096, n);
    assert_non_null(mem);
    OK(cuMemHostRegister_v2(mem, n, CU_MEMHOSTREGISTER_DEVICEMAP));
    assert_int_equal(cuMemHostRegister_v2(mem + 4096, 4096, 0),
                     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    assert_int_equal(cuMemHostRegister_v2(mem - 4096, 8192, 0),
                     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    assert_int_equal(cuMemHostRegister_v2(NULL, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostRegister_v2(mem, 0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostRegister_v2(mem, n, 0x100), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(attr_u(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, mem + 10), CU_MEMORYTYPE_HOST);
    unsigned f = 0;
    OK(cuMemHostGetFlags(&f, mem + 10));
    assert_int_equal(f, CU_MEMHOSTREGISTER_DEVICEMAP);
    CUdeviceptr d;
    OK(cuMemHostGetDevicePointer_v2(&d, mem + 10, 0));
    assert_true(d == (CUdeviceptr)(uintptr_t)(mem + 10));
    /* A copy reads it; neither free call may take it. */
    CUdeviceptr dev;
    OK(cuMemAlloc_v2(&dev, n));
    memset(mem, 0x33, n);
    OK(cuMemcpyHtoD_v2(dev, mem, n));
    assert_int_equal(((unsigned char *)(uintptr_t)dev)[n - 1], 0x33);
    assert_int_equal(cuMemFreeHost(mem), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemFree_v2((CUdeviceptr)(uintptr_t)mem), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemHostUnregister(mem + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(cuMemHostUnregister(mem));
    assert_int_equal(cuMemHostUnregister(mem), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    assert_int_equal(cuMemHostGetFlags(&f, mem), CUDA_ERROR_INVALID_VALUE);
    mem[0] = 1; /* the caller's memory was never freed */
    free(mem);
    OK(cuMemFree_v2(dev));
}

typedef struct gate {
    atomic_int open;
} gate;

static void gate_fn(void *arg)
{
    gate *g = arg;
    for (int ms = 0; ms < 10000 && !atomic_load(&g->open); ms++)
        usleep(1000);
}

/* An async copy out of pinned memory runs when its stream gets there:
 * bytes written to the pinned block before that are what it copies. */
static void test_async_copy_runs_later(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    unsigned char *h, *back;
    CUdeviceptr d;
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemHostAlloc((void **)&h, n, 0));
    OK(cuMemAllocHost_v2((void **)&back, n));
    OK(cuMemAlloc_v2(&d, n));
    OK(cuMemsetD8_v2(d, 0, n));
    memset(h, 1, n);
    gate g = {0};
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    OK(cuMemcpyHtoDAsync_v2(d, h, n, s));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    assert_int_equal(((unsigned char *)(uintptr_t)d)[0], 0); /* not yet */
    memset(h, 2, n);                                         /* the queued copy sees this */
    atomic_store(&g.open, 1);
    OK(cuMemcpyDtoHAsync_v2(back, d, n, s));
    OK(cuStreamSynchronize(s));
    for (size_t i = 0; i < n; i += 4099)
        assert_int_equal(back[i], 2);
    OK(cuMemFreeHost(h));
    OK(cuMemFreeHost(back));
    OK(cuMemFree_v2(d));
    OK(cuStreamDestroy_v2(s));
}

/* cuMemFreeHost waits for the device, as the driver's does: a copy
 * queued before it has run when it returns. */
static void test_free_host_waits(void **state)
{
    (void)state;
    size_t n = 65536;
    unsigned char *h;
    CUdeviceptr d;
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemHostAlloc((void **)&h, n, 0));
    OK(cuMemAlloc_v2(&d, n));
    memset(h, 9, n);
    gate g = {0};
    OK(cuLaunchHostFunc(s, gate_fn, &g));
    OK(cuMemcpyHtoDAsync_v2(d, h, n, s));
    atomic_store(&g.open, 1);
    OK(cuMemFreeHost(h));
    OK(cuStreamQuery(s));
    assert_int_equal(((unsigned char *)(uintptr_t)d)[n - 1], 9);
    OK(cuMemFree_v2(d));
    OK(cuStreamDestroy_v2(s));
}

/* cuGetProcAddress knows the new names; each is the exported function. */
static void test_proc_address(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int ver;
        void *fn;
    } want[] = {
        {"cuMemHostGetFlags", 2030, (void *)cuMemHostGetFlags},
        {"cuMemHostRegister", 6050, (void *)cuMemHostRegister_v2},
        {"cuMemHostUnregister", 4000, (void *)cuMemHostUnregister},
        {"cuMemHostAlloc", 2020, (void *)cuMemHostAlloc},
        {"cuMemAllocHost", 3020, (void *)cuMemAllocHost_v2},
        {"cuMemFreeHost", 2000, (void *)cuMemFreeHost},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2(want[i].name, &fn, 12000, 0, &st));
        assert_ptr_equal(fn, want[i].fn);
    }
    const char *name = NULL;
    OK(cuGetErrorName(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, &name));
    assert_string_equal(name, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_flags),
        cmocka_unit_test(test_queries_refuse),
        cmocka_unit_test(test_bad_frees),
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_async_copy_runs_later),
        cmocka_unit_test(test_free_host_waits),
        cmocka_unit_test(test_proc_address),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
