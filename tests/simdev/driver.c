/* tests/simdev/driver.c - the simulated driver's entry points: what works
 * before cuInit (and what does not), the two devices and their attributes,
 * error strings, cuGetProcAddress (versions, flags, unknown symbols), two
 * devices' contexts, and a thread with no current context.
 */
#include "simdev_test.h"

/* ---- before cuInit ------------------------------------------------------------ */

static void test_before_init(void **state)
{
    (void)state;
    CUdeviceptr p = 0;
    int v = 0;
    void *fn = NULL;
    assert_int_equal(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cuDeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED);
    OK(cuDriverGetVersion(&v));
    assert_int_equal(v, 13000);
    OK(cuGetProcAddress_v2("cuInit", &fn, 12000, 0, NULL)); /* pre-init ok */
    assert_ptr_equal(fn, dlsym(RTLD_DEFAULT, "cuInit"));
    assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

/* ---- devices -------------------------------------------------------------------- */

static void test_devices(void **state)
{
    (void)state;
    int n = 0, v = 0;
    char name[64];
    size_t total = 0;
    CUdevice d = -1;
    CUuuid u0, u1;
    OK(cuDeviceGetCount(&n));
    assert_int_equal(n, 2);
    assert_int_equal(fpsim_device_count(), 2);
    OK(cuDeviceGet(&d, 1));
    assert_int_equal(d, 1);
    assert_int_equal(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuDeviceGetName(name, sizeof name, 0));
    assert_string_equal(name, "fragpool simulated device");
    OK(cuDeviceGetName(name, 9, 0));
    assert_string_equal(name, "fragpool");
    OK(cuDeviceTotalMem_v2(&total, 1));
    assert_int_equal(total, (size_t)16384 * MiB);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    assert_int_equal(v, 9);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
    assert_int_equal(v, 0);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0));
    assert_int_equal(v, 512);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1));
    assert_true(v > 0);
    assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5),
                     CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceGetUuid(&u0, 0));
    OK(cuDeviceGetUuid_v2(&u1, 1));
    assert_memory_not_equal(u0.bytes, u1.bytes, 16);
}

static void test_error_strings(void **state)
{
    (void)state;
    const char *s = NULL;
    OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
    OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    assert_string_equal(s, "invalid argument");
    OK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, &s));
    assert_int_equal(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_null(s);
    assert_int_equal(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- cuGetProcAddress -------------------------------------------------------------- */

static void *sim_sym(const char *name)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    void *p = dlsym(lib, name);
    dlclose(lib);
    return p;
}

static void expect_proc(const char *sym, int ver, cuuint64_t flags, const char *want)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    OK(cuGetProcAddress_v2(sym, &fn, ver, flags, &st));
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
    assert_non_null(sim_sym(want));
    assert_ptr_equal(fn, sim_sym(want));
}

static void test_proc_address(void **state)
{
    (void)state;
    const cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    expect_proc("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect_proc("cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemAlloc_v2");
    expect_proc("cuMemAlloc", 12000, PT, "cuMemAlloc_v2"); /* no ptsz form */
    expect_proc("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect_proc("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect_proc("cuCtxSynchronize", 12080, 0, "cuCtxSynchronize");
    expect_proc("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2");
    expect_proc("cuStreamSynchronize", 12000, 0, "cuStreamSynchronize");
    expect_proc("cuStreamSynchronize", 12000, PT, "cuStreamSynchronize_ptsz");
    expect_proc("cuStreamSynchronize", 6050, PT, "cuStreamSynchronize"); /* ptsz: 7000 */
    expect_proc("cuMemcpyHtoD", 12000, PT, "cuMemcpyHtoD_v2_ptds");
    expect_proc("cuMemcpyHtoDAsync", 12000, PT, "cuMemcpyHtoDAsync_v2_ptsz");
    expect_proc("cuMemAllocAsync", 11020, PT, "cuMemAllocAsync_ptsz");
    expect_proc("cuMemFreeAsync", 12000, 0, "cuMemFreeAsync");
    expect_proc("cuLaunchHostFunc", 12000, PT, "cuLaunchHostFunc_ptsz");
    expect_proc("cuEventRecord", 12000, PT, "cuEventRecord_ptsz");
    expect_proc("cuMemsetD8Async", 12000, PT, "cuMemsetD8Async_ptsz");
    expect_proc("cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture");
    expect_proc("cuStreamBeginCapture", 12000, PT, "cuStreamBeginCapture_v2_ptsz");
    expect_proc("cuStreamGetCaptureInfo", 11030, 0, "cuStreamGetCaptureInfo_v2");
    expect_proc("cuStreamGetCaptureInfo", 12030, PT, "cuStreamGetCaptureInfo_v3_ptsz");
    expect_proc("cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2");
    expect_proc("cuDevicePrimaryCtxRelease", 10020, 0, "cuDevicePrimaryCtxRelease");

    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    assert_int_equal(cuGetProcAddress_v2("cuMemAlloc", &fn, 2000, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    fn = (void *)1;
    assert_int_equal(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 12000, 0, &st),
                     CUDA_ERROR_NOT_FOUND);
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    assert_int_equal(cuGetProcAddress_v2("cuMemAlloc_v2", &fn, 12000, 0, &st),
                     CUDA_ERROR_NOT_FOUND); /* base names only */
    assert_int_equal(cuGetProcAddress("cuGetExportTable", &fn, 12000, 0), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(cuGetProcAddress_v2("cuInit", &fn, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetProcAddress_v2("cuInit", &fn, 13010, 0, &st),
                     CUDA_ERROR_INVALID_VALUE); /* newer than driver */
    assert_int_equal(cuGetProcAddress_v2(NULL, &fn, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetProcAddress_v2("cuInit", NULL, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    assert_null(sim_sym("cuGetExportTable"));
    assert_null(sim_sym("sim_setup")); /* nothing internal */

    /* the pointers work */
    fp_PFN_cuMemAlloc_v2 alloc = NULL;
    fp_PFN_cuMemFree_v2 release = NULL;
    OK(cuGetProcAddress("cuMemAlloc", (void **)&alloc, 12000, 0));
    OK(cuGetProcAddress("cuMemFree", (void **)&release, 12000, 0));
    CUdeviceptr p = 0;
    OK(alloc(&p, 64));
    OK(release(p));
}

/* ---- contexts ------------------------------------------------------------------------ */

static void test_contexts_two_devices(void **state)
{
    (void)state;
    CUcontext p1 = NULL, cur = NULL, made = NULL, popped = NULL;
    CUdevice dev = -1;
    CUdeviceptr a = 0, b = 0;
    unsigned flags = 9;
    int active = 9, ordinal = -1;
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    assert_int_equal(active, 0);
    OK(cuDevicePrimaryCtxRetain(&p1, 1));
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    assert_int_equal(active, 1);
    OK(cuCtxPushCurrent_v2(p1));
    OK(cuCtxGetDevice(&dev));
    assert_int_equal(dev, 1);
    fpsim_counts d1 = stats(1);
    OK(cuMemAlloc_v2(&a, 4096));
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a));
    assert_int_equal(ordinal, 1);
    assert_int_equal(stats(1).live_allocations, d1.live_allocations + 1);
    /* a created context on device 1: pushed, owns its memory */
    OK(cuCtxCreate_v2(&made, 0, 1));
    OK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, made);
    OK(cuMemAlloc_v2(&b, 4096));
    OK(cuCtxGetDevice_v2(&dev, made));
    assert_int_equal(dev, 1);
    OK(cuCtxDestroy_v2(made)); /* frees b, pops itself */
    assert_int_equal(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuCtxPushCurrent_v2(made), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxDestroy_v2(made), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxDestroy_v2(p1), CUDA_ERROR_INVALID_CONTEXT); /* primary */
    OK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, p1);
    OK(cuCtxSynchronize());
    OK(cuCtxSynchronize_v2(g_ctx0));
    OK(cuCtxPopCurrent_v2(&popped));
    assert_ptr_equal(popped, p1);
    OK(cuCtxGetDevice(&dev));
    assert_int_equal(dev, 0);
    /* releasing the last reference destroys the primary context's memory */
    OK(cuDevicePrimaryCtxRelease_v2(1));
    assert_int_equal(stats(1).live_allocations, d1.live_allocations);
    assert_int_equal(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxGetDevice_v2(&dev, p1), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxSetFlags_v2(1, CU_CTX_SCHED_BLOCKING_SYNC));
    assert_int_equal(cuDevicePrimaryCtxSetFlags_v2(1, 3), CUDA_ERROR_INVALID_VALUE);
    OK(cuDevicePrimaryCtxReset_v2(1));
    /* the stack */
    OK(cuCtxPushCurrent_v2(g_ctx0));
    OK(cuCtxPopCurrent_v2(NULL));
    assert_int_equal(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxSetCurrent((CUcontext)&flags), CUDA_ERROR_INVALID_CONTEXT);
}

static void *no_context_thread(void *arg)
{
    CUresult *rc = arg;
    CUdeviceptr p = 0;
    CUstream s = NULL;
    CUcontext c = (CUcontext)1;
    rc[0] = cuMemAlloc_v2(&p, 16);
    rc[1] = cuStreamCreate(&s, 0);
    rc[2] = cuCtxGetCurrent(&c);
    rc[3] = c == NULL ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
    rc[4] = cuStreamSynchronize(NULL);
    return NULL;
}

static void test_no_context(void **state)
{
    (void)state;
    CUresult rc[5];
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, no_context_thread, rc), 0);
    pthread_join(t, NULL);
    assert_int_equal(rc[0], CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(rc[1], CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(rc[2], CUDA_SUCCESS);
    assert_int_equal(rc[3], CUDA_SUCCESS);
    assert_int_equal(rc[4], CUDA_ERROR_INVALID_CONTEXT);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),      cmocka_unit_test(test_error_strings),
        cmocka_unit_test(test_proc_address), cmocka_unit_test(test_contexts_two_devices),
        cmocka_unit_test(test_no_context),
    };
    const struct CMUnitTest pre[] = {cmocka_unit_test(test_before_init)};
    int failed = cmocka_run_group_tests_name("simdev before cuInit", pre, NULL, NULL);
    failed += cmocka_run_group_tests_name("simdev driver", tests, simdev_setup, NULL);
    return failed;
}
