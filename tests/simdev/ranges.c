/* tests/simdev/ranges.c - address-range queries of the simulated device
 * (sim_mem.c), pinned to what the native driver answers (H200, driver
 * 580.159.04): cuMemGetAddressRange, cuPointerGetAttribute and
 * cuPointerGetAttributes on cuMemAlloc, cuMemAllocAsync and VMM memory
 * (own and imported mappings), one past the end, freed and never
 * allocated addresses, reserved but unmapped VMM space; BUFFER_ID and
 * IS_LEGACY_CUDA_IPC_CAPABLE.
 */
#include "simdev_test.h"

#define G         (2 * MiB)
#define BAD(call) assert_int_equal((call), CUDA_ERROR_INVALID_VALUE)

typedef struct plural {
    CUresult rc;
    CUdeviceptr start;
    size_t size;
    CUcontext ctx;
} plural;

static plural ask_plural(CUdeviceptr p)
{
    CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_CONTEXT};
    plural r = {.start = 1, .size = 1, .ctx = (CUcontext)(uintptr_t)1};
    void *d[3] = {&r.start, &r.size, &r.ctx};
    r.rc = cuPointerGetAttributes(3, at, d, p);
    return r;
}

/* p answers the range (base, size) to cuMemGetAddressRange. */
static void range_is(CUdeviceptr p, CUdeviceptr base, size_t size)
{
    CUdeviceptr b = 0;
    size_t s = 0;
    OK(cuMemGetAddressRange_v2(&b, &s, p));
    assert_int_equal(b, base);
    assert_int_equal(s, size);
}

/* p answers RANGE_START_ADDR / RANGE_SIZE (base, size), both forms. */
static void attr_range_is(CUdeviceptr p, CUdeviceptr base, size_t size)
{
    CUdeviceptr b = 0;
    size_t s = 0;
    OK(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
    OK(cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
    assert_int_equal(b, base);
    assert_int_equal(s, size);
    plural r = ask_plural(p);
    OK(r.rc);
    assert_int_equal(r.start, base);
    assert_int_equal(r.size, size);
}

/* No allocation at p: NOT_FOUND, the singular INVALID_VALUE, the plural
 * zeros and NULL. */
static void nothing_at(CUdeviceptr p)
{
    CUdeviceptr b = 0;
    size_t s = 0;
    unsigned long long id = 0;
    int ipc = 0;
    assert_int_equal(cuMemGetAddressRange_v2(&b, &s, p), CUDA_ERROR_NOT_FOUND);
    BAD(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
    BAD(cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
    BAD(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    BAD(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    plural r = ask_plural(p);
    OK(r.rc);
    assert_int_equal(r.start, 0);
    assert_int_equal(r.size, 0);
    assert_null(r.ctx);
}

static int legacy_ipc(CUdeviceptr p)
{
    int v = -1;
    OK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    return v;
}

static unsigned long long buffer_id(CUdeviceptr p)
{
    unsigned long long id = 0;
    OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    return id;
}

static void device_memory(void **state)
{
    (void)state;
    CUdeviceptr a, b;
    OK(cuMemAlloc_v2(&a, 1000));
    OK(cuMemAlloc_v2(&b, 3 * MiB + 5));
    range_is(a, a, 1000);
    range_is(a + 100, a, 1000);
    range_is(b + 3 * MiB + 4, b, 3 * MiB + 5);
    attr_range_is(a + 100, a, 1000);
    OK(cuMemGetAddressRange_v2(NULL, NULL, a + 1));
    plural r = ask_plural(a + 7);
    assert_ptr_equal(r.ctx, g_ctx0);
    nothing_at(a + 1000); /* one past the end */
    nothing_at(b + 3 * MiB + 5);
    nothing_at((CUdeviceptr)0x1000); /* never allocated */
    assert_int_equal(legacy_ipc(a), 1);
    unsigned long long ia = buffer_id(a), ib = buffer_id(b + 9);
    assert_true(ib > ia);
    assert_int_equal(buffer_id(a + 999), ia);
    unsigned long long v = 0;
    BAD(cuPointerGetAttribute(&v, (CUpointer_attribute)999, a));
    CUpointer_attribute bad = (CUpointer_attribute)999;
    void *d = &v;
    BAD(cuPointerGetAttributes(1, &bad, &d, a));
    OK(cuMemFree_v2(a));
    nothing_at(a); /* freed */
    nothing_at(a + 100);
    CUdeviceptr c;
    OK(cuMemAlloc_v2(&c, 64));
    assert_true(buffer_id(c) > ib); /* monotonic */
    OK(cuMemFree_v2(c));
    OK(cuMemFree_v2(b));
}

static void async_memory(void **state)
{
    (void)state;
    CUstream s;
    CUdeviceptr a;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocAsync(&a, 3 * MiB + 5, s));
    range_is(a + 100, a, 3 * MiB + 5);
    attr_range_is(a, a, 3 * MiB + 5);
    assert_int_equal(legacy_ipc(a), 0);
    nothing_at(a + 3 * MiB + 5);
    OK(cuMemFreeAsync(a, s));
    OK(cuStreamSynchronize(s));
    nothing_at(a);
    OK(cuStreamDestroy_v2(s));
}

static CUmemAllocationProp prop_dev0(CUmemAllocationHandleType types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = types;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

/* The answers for a reservation of 4 G at va with h1 mapped at va (one
 * granule) and h2 at va + G (two granules). */
static void vmm_answers(CUdeviceptr va)
{
    range_is(va + 100, va, G); /* the mapping */
    range_is(va + G + 5, va + G, 2 * G);
    range_is(va + 3 * G - 1, va + G, 2 * G);
    attr_range_is(va + 100, va, 4 * G); /* the reservation */
    attr_range_is(va + G + 5, va, 4 * G);
    assert_int_equal(legacy_ipc(va), 0);
    /* Reserved, not mapped. */
    CUdeviceptr b = 0;
    size_t s = 0;
    assert_int_equal(cuMemGetAddressRange_v2(&b, &s, va + 3 * G), CUDA_ERROR_NOT_FOUND);
    BAD(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 3 * G));
    BAD(cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 3 * G + 8));
    plural r = ask_plural(va + 3 * G + 8);
    OK(r.rc);
    assert_int_equal(r.start, va);
    assert_int_equal(r.size, 4 * G);
}

static void map_two(CUdeviceptr va, CUmemGenericAllocationHandle h1,
                    CUmemGenericAllocationHandle h2)
{
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemMap(va, G, 0, h1, 0));
    OK(cuMemMap(va + G, 2 * G, 0, h2, 0));
    OK(cuMemSetAccess(va, 3 * G, &d, 1));
}

static void vmm_memory(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev0(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h1, h2, i1, i2;
    CUdeviceptr va, vb;
    OK(cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    OK(cuMemCreate(&h1, G, &p, 0));
    OK(cuMemCreate(&h2, 2 * G, &p, 0));
    map_two(va, h1, h2);
    vmm_answers(va);

    /* The same handles imported again (in this process): the same answers
   * in the importer's reservation. */
    int f1 = -1, f2 = -1;
    OK(cuMemExportToShareableHandle(&f1, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    OK(cuMemExportToShareableHandle(&f2, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    OK(cuMemImportFromShareableHandle(&i1, (void *)(intptr_t)f1,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    OK(cuMemImportFromShareableHandle(&i2, (void *)(intptr_t)f2,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(f1);
    close(f2);
    OK(cuMemAddressReserve(&vb, 4 * G, 0, 0, 0));
    map_two(vb, i1, i2);
    vmm_answers(vb);
    OK(cuMemsetD32_v2(va + G, 0x12345678u, 16));
    uint32_t w = 0;
    OK(cuMemcpyDtoH_v2(&w, vb + G + 60, 4));
    assert_int_equal(w, 0x12345678u);

    OK(cuMemUnmap(vb, 3 * G));
    OK(cuMemUnmap(va, 3 * G));
    nothing_at((CUdeviceptr)0x2000);
    OK(cuMemRelease(i1));
    OK(cuMemRelease(i2));
    OK(cuMemRelease(h1));
    OK(cuMemRelease(h2));
    OK(cuMemAddressFree(va, 4 * G));
    OK(cuMemAddressFree(vb, 4 * G));
    nothing_at(va + 100); /* the reservation is gone */
}

int main(void)
{
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_memory),
        cmocka_unit_test(async_memory),
        cmocka_unit_test(vmm_memory),
    };
    return cmocka_run_group_tests(tests, simdev_setup, NULL);
}
