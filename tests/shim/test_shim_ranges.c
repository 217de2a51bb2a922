/* test_shim_ranges.c - the driver's range queries answer for the block the
 * program was given, not for the pool segment that holds it, in both
 * modes (ctest runs this under the default, virtual memory, and classic).
 *
 * Natively (H200, driver 580) a cuMemAlloc of n bytes answers (its start,
 * n) from any pointer inside it; one byte past the end, or once freed:
 * cuMemGetAddressRange CUDA_ERROR_NOT_FOUND, cuPointerGetAttribute
 * CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes success with zeros.
 * Checked here through the three ways a program reaches the driver (the
 * linked symbols, dlsym of libcuda.so.1, cuGetProcAddress), on blocks that
 * share segments (fpsim_range, the simulated driver's own view, proves
 * they do), for BUFFER_ID (one per allocation, a new one when an address
 * is handed out again), IS_LEGACY_CUDA_IPC_CAPABLE, pinned host blocks,
 * and memory fragpool does not own (the driver's answer, untouched).
 */
#include "shim_test.h"
#include "fpsim.h"
#include <stdlib.h>

#define MIB    ((size_t)1 << 20)
#define NSMALL 64

typedef struct paths {
    fp_PFN_cuMemGetAddressRange_v2 range;
    fp_PFN_cuPointerGetAttribute attr;
    fp_PFN_cuPointerGetAttributes attrs;
    const char *name;
} paths;

static paths way[3];

static int setup(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    way[0] =
        (paths){cuMemGetAddressRange_v2, cuPointerGetAttribute, cuPointerGetAttributes, "linked"};
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return -1;
    way[1] = (paths){(fp_PFN_cuMemGetAddressRange_v2)dlsym(h, "cuMemGetAddressRange_v2"),
                     (fp_PFN_cuPointerGetAttribute)dlsym(h, "cuPointerGetAttribute"),
                     (fp_PFN_cuPointerGetAttributes)dlsym(h, "cuPointerGetAttributes"), "dlsym"};
    void *f[3] = {0};
    static const struct {
        const char *name;
        int ver;
    } procs[] = {{"cuMemGetAddressRange", 3020},
                 {"cuPointerGetAttribute", 4000},
                 {"cuPointerGetAttributes", 7000}};
    for (int i = 0; i < 3; i++) {
        CUdriverProcAddressQueryResult st;
        if (cuGetProcAddress_v2(procs[i].name, &f[i], 12000, 0, &st) != CUDA_SUCCESS)
            return -1;
    }
    way[2] = (paths){(fp_PFN_cuMemGetAddressRange_v2)f[0], (fp_PFN_cuPointerGetAttribute)f[1],
                     (fp_PFN_cuPointerGetAttributes)f[2], "cuGetProcAddress"};
    return 0;
}

/* Every way answers (base, size) for p, and the attributes agree. */
static void expect_block(CUdeviceptr p, CUdeviceptr base, size_t size)
{
    for (int w = 0; w < 3; w++) {
        CUdeviceptr b = 0, rs = 0, pb = 0;
        size_t n = 0, rn = 0, pn = 0;
        CU(way[w].range(&b, &n, p));
        CU(way[w].attr(&rs, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
        CU(way[w].attr(&rn, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
        CUcontext c = NULL;
        CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                     CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_CONTEXT};
        void *data[3] = {&pb, &pn, &c};
        CU(way[w].attrs(3, at, data, p));
        if (b != base || n != size || rs != base || rn != size || pb != base || pn != size || !c)
            fail_msg("%s: 0x%llx: range +%lld %zu, attr +%lld %zu, plural +%lld %zu ctx %p; want "
                     "+%lld %zu",
                     way[w].name, (unsigned long long)p, (long long)(b - p), n, (long long)(rs - p),
                     rn, (long long)(pb - p), pn, (void *)c, (long long)(base - p), size);
        CU(way[w].range(NULL, NULL, p)); /* as the driver: both outputs optional */
    }
}

/* p belongs to no allocation: the answers for memory nobody was given. */
static void expect_nobodys(CUdeviceptr p)
{
    for (int w = 0; w < 3; w++) {
        CUdeviceptr b = 7, pb = 7;
        size_t n = 7, pn = 7;
        assert_int_equal(way[w].range(&b, &n, p), CUDA_ERROR_NOT_FOUND);
        assert_int_equal(way[w].attr(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p),
                         CUDA_ERROR_INVALID_VALUE);
        assert_int_equal(way[w].attr(&n, CU_POINTER_ATTRIBUTE_BUFFER_ID, p),
                         CUDA_ERROR_INVALID_VALUE);
        CUcontext c = (CUcontext)&b;
        CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                     CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_CONTEXT};
        void *data[3] = {&pb, &pn, &c};
        CU(way[w].attrs(3, at, data, p));
        if (pb || pn || c)
            fail_msg("%s: plural on 0x%llx gave %llu %zu %p, want zeros", way[w].name,
                     (unsigned long long)p, (unsigned long long)pb, pn, (void *)c);
    }
}

static unsigned long long buffer_id(CUdeviceptr p)
{
    unsigned long long id = 0;
    CU(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    return id;
}

static int cmp_ull(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

/* Small and large blocks, many sharing a segment: each answers for itself
 * from its start, its middle and its last byte; one past its end answers
 * for nothing (unless another block starts there). */
static void blocks_inside_segments(void **state)
{
    (void)state;
    static const size_t big[] = {1, 4099, MIB + 5, 3 * MIB + 5, 25 * MIB};
    CUdeviceptr s[NSMALL], l[5];
    unsigned long long ids[NSMALL + 5];
    int shared = 0;
    for (int i = 0; i < NSMALL; i++)
        CU(cuMemAlloc_v2(&s[i], 1000));
    for (int i = 0; i < 5; i++)
        CU(cuMemAlloc_v2(&l[i], big[i]));
    for (int i = 0; i < NSMALL + 5; i++) {
        CUdeviceptr p = i < NSMALL ? s[i] : l[i - NSMALL];
        size_t n = i < NSMALL ? 1000 : big[i - NSMALL];
        unsigned long long db = 0;
        size_t dn = 0;
        assert_int_equal(fpsim_range(p, &db, &dn), 0);
        shared += db != p || dn != n; /* the driver's allocation is bigger */
        expect_block(p, p, n);
        expect_block(p + n / 2, p, n);
        expect_block(p + n - 1, p, n);
        ids[i] = buffer_id(p + n / 2);
        unsigned ipc = 9;
        CU(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
        assert_int_equal(ipc, 1); /* ipc_export:fragpool exports every block */
    }
    assert_true(shared >= NSMALL); /* the checks above saw blocks inside segments */
    qsort(ids, NSMALL + 5, sizeof *ids, cmp_ull);
    for (int i = 1; i < NSMALL + 5; i++)
        assert_true(ids[i] != ids[i - 1]);
    for (int i = 0; i < NSMALL; i += 2) /* one past the end: s[i + 1], or nothing */
        if (s[i] + 1000 != s[i + 1])
            expect_nobodys(s[i] + 1000);
    for (int i = 0; i < NSMALL; i++)
        CU(cuMemFree_v2(s[i]));
    for (int i = 0; i < 5; i++)
        CU(cuMemFree_v2(l[i]));
    expect_nobodys(s[0]); /* freed, still inside a cached segment */
    expect_nobodys(l[4] + 12345);
}

/* A block handed out again at an address gets a new BUFFER_ID, as a new
 * cudaMalloc does natively (UCX keys its registration cache by it). */
static void buffer_id_per_allocation(void **state)
{
    (void)state;
    CUdeviceptr a, b;
    CU(cuMemAlloc_v2(&a, 4096));
    unsigned long long first = buffer_id(a);
    CU(cuMemFree_v2(a));
    CU(cuCtxSynchronize()); /* deferred reuse: a's memory is reusable now */
    CU(cuMemAlloc_v2(&b, 4096));
    if (b == a)
        assert_true(buffer_id(b) != first);
    CU(cuMemFree_v2(b));
}

/* Stream-ordered blocks answer the same way. */
static void async_blocks(void **state)
{
    (void)state;
    CUstream st;
    CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    CU(cuMemAllocAsync(&a, 1000, st));
    CU(cuMemAllocAsync(&b, 3 * MIB + 5, st));
    expect_block(a + 10, a, 1000);
    expect_block(b + 3 * MIB, b, 3 * MIB + 5);
    CU(cuMemFreeAsync(a, st));
    CU(cuMemFreeAsync(b, st));
    CU(cuStreamSynchronize(st));
    CU(cuStreamDestroy_v2(st));
}

/* Pinned host blocks of the host pool answer for themselves too. */
static void host_blocks(void **state)
{
    (void)state;
    void *a, *b;
    CU(cuMemHostAlloc(&a, 5000, 0));
    CU(cuMemHostAlloc(&b, 5000, 0));
    for (int i = 0; i < 3; i++) {
        CUdeviceptr p = (CUdeviceptr)(uintptr_t)b, rs = 0;
        size_t rn = 0;
        CU(way[i].attr(&rs, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 4999));
        CU(way[i].attr(&rn, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 4999));
        assert_true(rs == p && rn == 5000);
    }
    CU(cuMemFreeHost(a));
    CU(cuMemFreeHost(b));
}

/* Memory fragpool does not own: the driver's answers, untouched. */
static void not_pool_memory(void **state)
{
    (void)state;
    CUdeviceptr m, b = 0;
    size_t n = 0;
    CU(cuMemAllocManaged(&m, 3000, CU_MEM_ATTACH_GLOBAL));
    CU(cuMemGetAddressRange_v2(&b, &n, m + 100));
    assert_true(b == m && n == 3000);
    CU(cuMemFree_v2(m));
    assert_int_equal(cuMemGetAddressRange_v2(&b, &n, 0x1000), CUDA_ERROR_NOT_FOUND);
    /* a bad attribute on a pool block: the driver's own error */
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, 1000));
    unsigned long long v;
    assert_int_equal(cuPointerGetAttribute(&v, (CUpointer_attribute)999, p),
                     CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree_v2(p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocks_inside_segments), cmocka_unit_test(buffer_id_per_allocation),
        cmocka_unit_test(async_blocks),           cmocka_unit_test(host_blocks),
        cmocka_unit_test(not_pool_memory),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
