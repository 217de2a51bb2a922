/* tests/simdev/vmm.c: the virtual memory management API of the
 * simulated device (sim_vmm.c) on its own, linked as -lcuda, no fragpool.
 *
 * What is pinned: the granularity; the alignment rules of reserve, create,
 * map, unmap and set-access (CUDA_ERROR_INVALID_VALUE); bad properties and
 * devices; OUT_OF_MEMORY when physical memory runs out, and the capacity
 * coming back at release; copies and memsets into mapped memory with
 * access, refused before cuMemSetAccess and after cuMemUnmap; one handle
 * mapped at two addresses shows the same bytes; a copy across two
 * adjacent mappings; a handle released while mapped lives until the
 * unmap; cuMemGetAccess; cuMemAddressFree with mappings left refused;
 * cuGetProcAddress finds every function.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "fp_cuda.h"
#include "fpsim.h"

#define MiB       ((size_t)1 << 20)
#define G         (2 * MiB)
#define OK(call)  assert_int_equal((call), CUDA_SUCCESS)
#define BAD(call) assert_int_equal((call), CUDA_ERROR_INVALID_VALUE)

static CUmemAllocationProp prop_dev(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemAccessDesc rw(int dev)
{
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return d;
}

static size_t in_use(void)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return (size_t)c.bytes_in_use;
}

static void granularity_and_rules(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev(0);
    size_t g = 0;
    OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    assert_int_equal(g, G);
    OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    assert_int_equal(g, G);
    BAD(cuMemGetAllocationGranularity(NULL, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemAllocationProp bad = p;
    bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    BAD(cuMemGetAllocationGranularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    bad = p;
    bad.location.id = 99;
    assert_int_equal(cuMemGetAllocationGranularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                     CUDA_ERROR_INVALID_DEVICE);

    CUdeviceptr va;
    BAD(cuMemAddressReserve(&va, G + 4096, 0, 0, 0)); /* not a multiple */
    BAD(cuMemAddressReserve(&va, 0, 0, 0, 0));
    BAD(cuMemAddressReserve(&va, G, 3 * G, 0, 0)); /* not a power of two */
    OK(cuMemAddressReserve(&va, 8 * G, 4 * G, 0, 0));
    assert_int_equal(va % (4 * G), 0);

    CUmemGenericAllocationHandle h;
    BAD(cuMemCreate(&h, G + 512, &p, 0));
    BAD(cuMemCreate(&h, G, NULL, 0));
    OK(cuMemCreate(&h, 2 * G, &p, 0));
    BAD(cuMemMap(va + 4096, G, 0, h, 0));      /* misaligned address */
    BAD(cuMemMap(va, G, 4096, h, 0));          /* misaligned offset */
    BAD(cuMemMap(va, 3 * G, 0, h, 0));         /* past the handle */
    BAD(cuMemMap(va + 7 * G, 2 * G, 0, h, 0)); /* past the range */
    BAD(cuMemMap(va, G, 0, (CUmemGenericAllocationHandle)12345, 0));
    OK(cuMemMap(va, 2 * G, 0, h, 0));
    BAD(cuMemMap(va + G, G, 0, h, 0)); /* overlaps */
    CUmemAccessDesc d = rw(0);
    BAD(cuMemSetAccess(va, 3 * G, &d, 1)); /* not all mapped */
    BAD(cuMemUnmap(va, G));                /* half a mapping */
    BAD(cuMemAddressFree(va, 8 * G));      /* still mapped */
    OK(cuMemUnmap(va, 2 * G));
    OK(cuMemRelease(h));
    BAD(cuMemRelease(h));             /* twice */
    BAD(cuMemAddressFree(va, 4 * G)); /* not the whole range */
    OK(cuMemAddressFree(va, 8 * G));
}

static void physical_capacity(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev(0);
    size_t base = in_use();
    assert_int_equal(fpsim_set_capacity(0, base + 8 * G), 0);
    CUmemGenericAllocationHandle a, b;
    OK(cuMemCreate(&a, 6 * G, &p, 0));
    assert_int_equal(in_use(), base + 6 * G);
    assert_int_equal(cuMemCreate(&b, 4 * G, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    size_t free_b = 0, total = 0;
    OK(cuMemGetInfo_v2(&free_b, &total));
    assert_int_equal(free_b, 2 * G);
    OK(cuMemRelease(a));
    assert_int_equal(in_use(), base);
    OK(cuMemCreate(&b, 8 * G, &p, 0));
    OK(cuMemRelease(b));
    assert_int_equal(fpsim_set_capacity(0, (size_t)16 << 30), 0);
}

static void access_and_copies(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev(0);
    CUdeviceptr va;
    CUmemGenericAllocationHandle h1, h2;
    OK(cuMemAddressReserve(&va, 8 * G, 0, 0, 0));
    OK(cuMemCreate(&h1, G, &p, 0));
    OK(cuMemCreate(&h2, G, &p, 0));
    OK(cuMemMap(va, G, 0, h1, 0));
    OK(cuMemMap(va + G, G, 0, h2, 0));
    char *buf = malloc(2 * G), *back = malloc(2 * G);
    assert_non_null(buf);
    assert_non_null(back);
    for (size_t i = 0; i < 2 * G; i++)
        buf[i] = (char)(i * 7);
    BAD(cuMemcpyHtoD_v2(va, buf, 64)); /* no access yet */
    unsigned long long flags = 1;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    OK(cuMemGetAccess(&flags, &loc, va));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CUmemAccessDesc d = rw(0);
    OK(cuMemSetAccess(va, 2 * G, &d, 1));
    OK(cuMemGetAccess(&flags, &loc, va + G));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemcpyHtoD_v2(va, buf, 2 * G)); /* across two mappings */
    OK(cuMemcpyDtoH_v2(back, va, 2 * G));
    assert_memory_equal(buf, back, 2 * G);
    OK(cuMemsetD8_v2(va + G - 8, 0xab, 16));
    OK(cuMemcpyDtoH_v2(back, va + G - 8, 16));
    for (int i = 0; i < 16; i++)
        assert_int_equal((unsigned char)back[i], 0xab);
    BAD(cuMemcpyHtoD_v2(va + G, buf, G + 64)); /* runs into unmapped space */
    CUdeviceptr base = 0;
    size_t size = 0;
    OK(cuMemGetAddressRange_v2(&base, &size, va + 100));
    assert_int_equal(base, va);

    /* The same handle at a second address shows the same bytes. */
    OK(cuMemUnmap(va + G, G));
    BAD(cuMemcpyDtoH_v2(back, va + G, 64)); /* unmapped again */
    OK(cuMemMap(va + 4 * G, G, 0, h2, 0));
    OK(cuMemSetAccess(va + 4 * G, G, &d, 1));
    OK(cuMemcpyDtoH_v2(back, va + 4 * G, 64));
    assert_int_equal((unsigned char)back[0], 0xab); /* the memset above */
    assert_memory_equal(back + 8, buf + G + 8, 56);

    /* Released while mapped: it lives until the unmap. */
    size_t before = in_use();
    OK(cuMemRelease(h2));
    assert_int_equal(in_use(), before);
    OK(cuMemcpyDtoH_v2(back, va + 4 * G, 64));
    OK(cuMemUnmap(va + 4 * G, G));
    assert_int_equal(in_use(), before - G);
    OK(cuMemUnmap(va, G));
    OK(cuMemRelease(h1));
    OK(cuMemAddressFree(va, 8 * G));
    free(buf);
    free(back);
}

static void found_by_get_proc_address(void **state)
{
    (void)state;
    static const char *const names[] = {"cuMemGetAllocationGranularity",
                                        "cuMemAddressReserve",
                                        "cuMemAddressFree",
                                        "cuMemCreate",
                                        "cuMemRelease",
                                        "cuMemMap",
                                        "cuMemUnmap",
                                        "cuMemSetAccess",
                                        "cuMemGetAccess"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2(names[i], &fn, 12000, 0, &st));
        assert_non_null(fn);
    }
}

static int setup(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext c;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&c, dev))
        return -1;
    return cuCtxSetCurrent(c) == CUDA_SUCCESS ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(granularity_and_rules),
        cmocka_unit_test(physical_capacity),
        cmocka_unit_test(access_and_copies),
        cmocka_unit_test(found_by_get_proc_address),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
