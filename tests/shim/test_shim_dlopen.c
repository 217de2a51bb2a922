/* test_shim_dlopen.c - a client that reaches the driver the way cudart
 * does: dlopen("libcuda.so.1"), one dlsym for cuGetProcAddress_v2, then
 * every function by base name, version and flags.  Run under
 * LD_PRELOAD=libfragpool.so on the simulated device.
 *
 * Memory entry points must come back as fragpool's wrappers, with and
 * without the per-thread default-stream flag; everything else, and any
 * version whose signature fragpool does not implement, must come back as
 * the driver's own function.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <stdio.h>
#include <stdlib.h>

static void *lib;
static fp_PFN_cuGetProcAddress_v2 gpa;

#define PT CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

static void *get(const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CUresult r = gpa(name, &fn, version, flags, &st);
    return r == CUDA_SUCCESS ? fn : NULL;
}

static int setup(void **state)
{
    (void)state;
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib)
        return -1;
    gpa = (fp_PFN_cuGetProcAddress_v2)dlsym(lib, "cuGetProcAddress_v2");
    return gpa ? 0 : -1;
}

static void entry_is_wrapped(void **state)
{
    (void)state;
    assert_true(in_fragpool((void *)gpa));
    assert_true(in_fragpool(get("cuGetProcAddress", 12000, 0)));
    assert_true(in_fragpool(get("cuGetProcAddress", 11030, 0)));
}

static void memory_functions_are_wrapped(void **state)
{
    (void)state;
    const char *names[] = {"cuMemAlloc",   "cuMemFree",       "cuMemAllocPitch",
                           "cuMemGetInfo", "cuMemAllocAsync", "cuMemFreeAsync"};
    int versions[] = {3020, 3020, 3020, 3020, 11020, 11020};
    for (size_t i = 0; i < 6; i++) {
        assert_true(in_fragpool(get(names[i], versions[i], 0)));
        assert_true(in_fragpool(get(names[i], versions[i], PT)));
    }
    /* The per-thread variant is a different function from the default one. */
    assert_ptr_not_equal(get("cuMemAllocAsync", 11020, 0), get("cuMemAllocAsync", 11020, PT));
}

static void others_pass_through(void **state)
{
    (void)state;
    void *cur = get("cuCtxGetCurrent", 4000, 0);
    assert_non_null(cur);
    assert_false(in_fragpool(cur));
    assert_ptr_equal(cur, dlsym(lib, "cuCtxGetCurrent"));
    /* Captures are tracked, and cuCtxSynchronize is watched; streams and
     * events are the program's own. */
    assert_true(in_fragpool(get("cuStreamBeginCapture", 10010, 0)));
    assert_false(in_fragpool(get("cuStreamCreate", 2000, 0)));
    assert_true(in_fragpool(get("cuCtxSynchronize", 2000, 0)));
    assert_false(in_fragpool(get("cuStreamQuery", 2000, 0)));
    /* An older signature of cuMemAlloc is never swapped for the _v2 wrapper. */
    void *v1 = get("cuMemAlloc", 2000, 0);
    assert_false(in_fragpool(v1));
    assert_null(get("cuNoSuchFunction", 12000, 0));
}

static void allocations_use_the_pool(void **state)
{
    (void)state;
    fp_PFN_cuInit init = (fp_PFN_cuInit)get("cuInit", 2000, 0);
    fp_PFN_cuDeviceGet dget = (fp_PFN_cuDeviceGet)get("cuDeviceGet", 2000, 0);
    fp_PFN_cuDevicePrimaryCtxRetain retain =
        (fp_PFN_cuDevicePrimaryCtxRetain)get("cuDevicePrimaryCtxRetain", 7000, 0);
    fp_PFN_cuCtxSetCurrent setcur = (fp_PFN_cuCtxSetCurrent)get("cuCtxSetCurrent", 4000, 0);
    CUdevice dev;
    CUcontext ctx;
    CU(init(0));
    CU(dget(&dev, 0));
    CU(retain(&ctx, dev));
    CU(setcur(ctx));
    int (*stats)(int, fpsim_counts *) = (int (*)(int, fpsim_counts *))dlsym(lib, "fpsim_stats");
    assert_non_null(stats);
    fpsim_counts before, after;
    stats(0, &before);
    for (int pt = 0; pt < 2; pt++) {
        cuuint64_t fl = pt ? PT : 0;
        fp_PFN_cuMemAlloc_v2 alloc = (fp_PFN_cuMemAlloc_v2)get("cuMemAlloc", 3020, fl);
        fp_PFN_cuMemFree_v2 release = (fp_PFN_cuMemFree_v2)get("cuMemFree", 3020, fl);
        fp_PFN_cuMemAllocAsync aalloc = (fp_PFN_cuMemAllocAsync)get("cuMemAllocAsync", 11020, fl);
        fp_PFN_cuMemFreeAsync afree = (fp_PFN_cuMemFreeAsync)get("cuMemFreeAsync", 11020, fl);
        fp_PFN_cuMemcpyHtoD_v2 h2d = (fp_PFN_cuMemcpyHtoD_v2)get("cuMemcpyHtoD", 3020, fl);
        fp_PFN_cuMemcpyDtoH_v2 d2h = (fp_PFN_cuMemcpyDtoH_v2)get("cuMemcpyDtoH", 3020, fl);
        for (int i = 0; i < 5000; i++) {
            CUdeviceptr p, q;
            CU(alloc(&p, 256 + (size_t)i));
            CU(aalloc(&q, 1024, NULL));
            int v = i, back = -1;
            CU(h2d(p, &v, sizeof v));
            CU(d2h(&back, p, sizeof back));
            assert_int_equal(back, i);
            CU(release(p));
            CU(afree(q, NULL));
        }
    }
    stats(0, &after);
    printf("20000 allocations took %llu device allocations\n",
           after.alloc_calls - before.alloc_calls);
    assert_true(after.alloc_calls - before.alloc_calls <= 8);
}

static void meminfo_accepts_null(void **state)
{
    (void)state;
    fp_PFN_cuMemGetInfo_v2 info = (fp_PFN_cuMemGetInfo_v2)get("cuMemGetInfo", 3020, 0);
    size_t fr = 0, tot = 0;
    CU(info(&fr, &tot));
    assert_true(fr <= tot && tot > 0);
    CU(info(NULL, &tot));
    CU(info(&fr, NULL));
    CU(info(NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(entry_is_wrapped),     cmocka_unit_test(memory_functions_are_wrapped),
        cmocka_unit_test(others_pass_through),  cmocka_unit_test(allocations_use_the_pool),
        cmocka_unit_test(meminfo_accepts_null),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
