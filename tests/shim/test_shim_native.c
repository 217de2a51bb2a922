/* test_shim_native.c - a pooled block answers the driver's questions as a
 * cudaMalloc's memory does (docs/shim.md, "What the driver says about a
 * block"), under the default (virtual-memory segments) and under
 * expandable_segments:False; ctest runs it in both, and with two devices
 * (peers) and with a device that offers no RDMA for VMM memory.
 *
 * The simulated driver answers for VMM memory as the real one does
 * (simdev/sim_vmm.c, sim_nodes.c), so each case fails under the default
 * without fragpool's answers:
 *   graph_memset_null_ctx  a memset node added by cuGraphAddNode (v1, v2
 *                          through cuGetProcAddress) with ctx 0 on a
 *                          pooled block, then cuGraphAddMemsetNode,
 *                          cuGraphAddMemcpyNode, cuGraphNodeSetParams and
 *                          cuGraphExecNodeSetParams with ctx 0: each is
 *                          accepted, the launched graph writes the right
 *                          bytes and nothing else;
 *   retain_handle          cuMemRetainAllocationHandle on a pooled block:
 *                          CUDA_ERROR_INVALID_VALUE, no handle;
 *   attributes             ALLOWED_HANDLE_TYPES 0, IS_GPU_DIRECT_RDMA_CAPABLE
 *                          1 (0 under the default where the device offers
 *                          no RDMA for VMM memory: FRAGPOOL_SIM_VMM_RDMA=0),
 *                          IS_HW_DECOMPRESS_CAPABLE 1, MAPPING_* the 2 MiB
 *                          window around the block, CONTEXT the current
 *                          one, the plural call the same; cuMemGetAccess 0;
 *   sync_memops            cuPointerSetAttribute(SYNC_MEMOPS) succeeds;
 *   peers                  (argument "peers", two devices) device 1 reads
 *                          device 0's pooled block after
 *                          cuCtxEnablePeerAccess.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <stdio.h>

#define MIB ((size_t)1 << 20)
#define OFF 4096

static CUcontext init(int ordinal)
{
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, ordinal));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    return ctx;
}

static void expect_words(CUdeviceptr p, size_t n, uint32_t want)
{
    uint32_t *h = malloc(n * 4);
    assert_non_null(h);
    CU(cuMemcpyDtoH_v2(h, p, n * 4));
    for (size_t i = 0; i < n; i++)
        if (h[i] != want)
            fail_msg("word %zu of 0x%llx: 0x%x, want 0x%x", i, (unsigned long long)p, h[i], want);
    free(h);
}

static CUgraphNodeParams memset_params(CUdeviceptr dst, uint32_t value, size_t words)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.u.memset.dst = dst;
    p.u.memset.value = value;
    p.u.memset.elementSize = 4;
    p.u.memset.width = words;
    p.u.memset.height = 1;
    return p; /* ctx 0: the driver takes the memory's */
}

static void run(CUgraph g)
{
    CUgraphExec x;
    CU(cuGraphInstantiateWithFlags(&x, g, 0));
    CU(cuGraphLaunch(x, NULL));
    CU(cuCtxSynchronize());
    CU(cuGraphExecDestroy(x));
}

static void graph_memset_null_ctx(void **state)
{
    (void)state;
    init(0);
    CUdeviceptr b, c;
    CU(cuMemAlloc_v2(&b, MIB));
    CU(cuMemAlloc_v2(&c, MIB));
    CU(cuMemsetD32_v2(b, 0, MIB / 4));
    CU(cuMemsetD32_v2(c, 0, MIB / 4));
    fp_PFN_cuGraphAddNode_v2 add_v2 = NULL;
    CUdriverProcAddressQueryResult st;
    CU(cuGetProcAddress_v2("cuGraphAddNode", (void **)&add_v2, 12030, 0, &st));
    assert_true(in_fragpool((void *)add_v2));
    CUgraph g;
    CUgraphNode n1, n2, n3, n4;
    CU(cuGraphCreate(&g, 0));
    CUgraphNodeParams p = memset_params(b + OFF, 0xabcd1234u, 1000);
    CU(cuGraphAddNode(&n1, g, NULL, 0, &p));
    assert_null(p.u.memset.ctx); /* the caller's parameters stay its own */
    p = memset_params(b + OFF + 4000, 0x11111111u, 24);
    CU(add_v2(&n2, g, &n1, NULL, 1, &p));
    CUDA_MEMSET_NODE_PARAMS m = {b + OFF + 4096, 0, 0x22222222u, 4, 16, 1};
    CU(cuGraphAddMemsetNode(&n3, g, &n2, 1, &m, NULL));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = b + OFF;
    cp.dstDevice = c + OFF;
    cp.WidthInBytes = 4000;
    cp.Height = cp.Depth = 1;
    CU(cuGraphAddMemcpyNode(&n4, g, &n3, 1, &cp, NULL));
    run(g);
    expect_words(b + OFF, 1000, 0xabcd1234u);
    expect_words(b + OFF + 4000, 24, 0x11111111u);
    expect_words(b + OFF + 4096, 16, 0x22222222u);
    expect_words(b, OFF / 4, 0);
    expect_words(c + OFF, 1000, 0xabcd1234u);
    /* the node moved to c, then an executable's copy to b + 64 KiB */
    p = memset_params(c + 2 * OFF, 0x33333333u, 8);
    CU(cuGraphNodeSetParams(n1, &p));
    CUgraphExec x;
    CU(cuGraphInstantiateWithFlags(&x, g, 0));
    p = memset_params(b + 65536, 0x44444444u, 8);
    CU(cuGraphExecNodeSetParams(x, n1, &p));
    CU(cuGraphLaunch(x, NULL));
    CU(cuCtxSynchronize());
    expect_words(c + 2 * OFF, 8, 0);
    expect_words(b + 65536, 8, 0x44444444u);
    CU(cuGraphExecDestroy(x));
    CU(cuGraphDestroy(g));
    CU(cuMemFree_v2(b));
    CU(cuMemFree_v2(c));
}

static void retain_handle(void **state)
{
    (void)state;
    init(0);
    CUdeviceptr b;
    CU(cuMemAlloc_v2(&b, MIB));
    CUmemGenericAllocationHandle h = 0;
    assert_int_equal(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(b + OFF)),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(h, 0);
    CU(cuMemFree_v2(b));
    /* freed: nobody's memory, no handle either */
    assert_int_equal(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(b + OFF)),
                     CUDA_ERROR_INVALID_VALUE);
}

static int rdma_expected(void)
{
    const char *r = getenv("FRAGPOOL_SIM_VMM_RDMA");
    return fp_test_classic() || !r || strcmp(r, "0") != 0;
}

static void attributes(void **state)
{
    (void)state;
    CUcontext ctx = init(0);
    CUdeviceptr b, q;
    CU(cuMemAlloc_v2(&b, MIB));
    q = b + OFF;
    unsigned long long types = 99, id = 0;
    unsigned rdma = 99, dec = 99;
    size_t msize = 0;
    CUdeviceptr mbase = 0;
    CUcontext c = NULL;
    CU(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, q));
    CU(cuPointerGetAttribute(&rdma, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, q));
    CU(cuPointerGetAttribute(&dec, CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, q));
    CU(cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, q));
    CU(cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, q));
    CU(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, q));
    assert_int_equal(types, 0);
    assert_int_equal(rdma, rdma_expected());
    assert_int_equal(dec, 1);
    assert_ptr_equal(c, ctx);
    CUdeviceptr lo = b & ~(CUdeviceptr)(2 * MIB - 1);
    CUdeviceptr hi = (b + MIB + 2 * MIB - 1) & ~(CUdeviceptr)(2 * MIB - 1);
    assert_int_equal(mbase, lo);
    assert_int_equal(msize, hi - lo);
    CUpointer_attribute at[5] = {CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                 CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_MAPPING_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    unsigned long long t2 = 99;
    unsigned r2 = 99, d2 = 99;
    size_t s2 = 0;
    void *data[5] = {&t2, &r2, &d2, &s2, &id};
    CU(cuPointerGetAttributes(5, at, data, q));
    assert_int_equal(t2, types);
    assert_int_equal(r2, rdma);
    assert_int_equal(d2, dec);
    assert_int_equal(s2, msize);
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    unsigned long long flags = 99;
    CU(cuMemGetAccess(&flags, &loc, q));
    assert_int_equal(flags, 0);
    CU(cuMemFree_v2(b));
}

static void sync_memops(void **state)
{
    (void)state;
    init(0);
    CUdeviceptr b;
    CU(cuMemAlloc_v2(&b, MIB));
    unsigned one = 1;
    CU(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, b + OFF));
    /* any other attribute is the driver's to refuse */
    assert_int_equal(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_BUFFER_ID, b + OFF),
                     CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree_v2(b));
}

/* Device 1 reads device 0's pooled block once peer access is on (the
 * simulated driver refuses a device without access to VMM memory, as a
 * kernel of it would fault). */
static void peers(void **state)
{
    (void)state;
    CUcontext c0 = init(0);
    CUdeviceptr b;
    CU(cuMemAlloc_v2(&b, MIB));
    CU(cuMemsetD32_v2(b, 0x5eed5eedu, MIB / 4));
    CUcontext c1 = init(1);
    CU(cuCtxEnablePeerAccess(c0, 0));
    CU(cuCtxSetCurrent(c1));
    expect_words(b + OFF, 1024, 0x5eed5eedu);
    CUdeviceptr own;
    CU(cuMemAlloc_v2(&own, MIB));
    CU(cuMemcpyDtoD_v2(own, b, MIB)); /* a device-1 copy out of it */
    expect_words(own + MIB - 4096, 1024, 0x5eed5eedu);
    CU(cuMemFree_v2(own));
    CU(cuCtxSetCurrent(c0));
    CU(cuMemFree_v2(b));
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "peers") == 0) {
        const struct CMUnitTest p[] = {cmocka_unit_test(peers)};
        return cmocka_run_group_tests(p, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(graph_memset_null_ctx),
        cmocka_unit_test(retain_handle),
        cmocka_unit_test(attributes),
        cmocka_unit_test(sync_memops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
