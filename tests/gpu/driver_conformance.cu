// driver_conformance.cu - every row of the table in docs/shim.md ("What the
// driver says about a block"): what the driver and the runtime answer for a
// 1 MiB block from cudaMalloc and one from cuMemAlloc, asked at an offset
// of 4096 into it.  Run natively, under fragpool's default and under
// expandable_segments:False by tests/gpu/conformance_check.sh (group
// conformance of scripts/gpu-check.sh), which compares the rows.
//
// Output: one line per row, "ROW <query> <value>", where <query> starts
// with the allocator (cudaMalloc. or cuMemAlloc.) or names a check of its
// own (peer., graph.), and <value> is the same text for the same answer in
// any run: result codes as numbers (rc=N), addresses as offsets from the
// block's start or as properties (aligned, contains), ids as nonzero or 0.
// Then "CHECK driver_conformance OK <rows>" (exit 0); a failing setup call
// prints "CHECK driver_conformance FAIL ..." (exit 1).
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#define CHECK_NAME "driver_conformance"
#include "gpu_check.h"

static const size_t kBlock = 1 << 20, kOff = 4096, k2M = 2 << 20;
static int g_rows = 0;

static void row(const std::string &alloc, const char *query, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::printf("ROW %s%s%s %s\n", alloc.c_str(), alloc.empty() ? "" : ".", query, buf);
    g_rows++;
}

struct Attr {
    CUpointer_attribute a;
    const char *name;
};

static const Attr kAttrs[] = {
    {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT"},
    {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE"},
    {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, "DEVICE_POINTER"},
    {CU_POINTER_ATTRIBUTE_HOST_POINTER, "HOST_POINTER"},
    {CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, "SYNC_MEMOPS"},
    {CU_POINTER_ATTRIBUTE_BUFFER_ID, "BUFFER_ID"},
    {CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED"},
    {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL"},
    {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, "IS_LEGACY_CUDA_IPC_CAPABLE"},
    {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR"},
    {CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE"},
    {CU_POINTER_ATTRIBUTE_MAPPED, "MAPPED"},
    {CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, "ALLOWED_HANDLE_TYPES"},
    {CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, "IS_GPU_DIRECT_RDMA_CAPABLE"},
    {CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, "ACCESS_FLAGS"},
    {CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, "MEMPOOL_HANDLE"},
    {CU_POINTER_ATTRIBUTE_MAPPING_SIZE, "MAPPING_SIZE"},
    {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, "MAPPING_BASE_ADDR"},
    {CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, "MEMORY_BLOCK_ID"},
    {CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, "IS_HW_DECOMPRESS_CAPABLE"},
};

// A value as the same text in every run: addresses relative to the block.
static std::string norm(CUpointer_attribute a, unsigned long long v, CUdeviceptr base,
                        CUdeviceptr q, CUcontext ctx)
{
    char b[96];
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        return v == (unsigned long long)(uintptr_t)ctx ? "current" : v ? "other" : "null";
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!v)
            return "0";
        std::snprintf(b, sizeof b, "base%+lld", (long long)(v - base));
        return b;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return v ? "nonzero" : "0";
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        std::snprintf(b, sizeof b, "aligned2M=%d contains=%d", (int)(v % k2M == 0),
                      (int)(v <= base && base - v < (unsigned long long)1 << 40));
        return b;
    default: std::snprintf(b, sizeof b, "%llu", v); return b;
    }
    (void)q;
}

static void attributes(const std::string &al, CUdeviceptr base, CUcontext ctx)
{
    CUdeviceptr q = base + kOff;
    for (const Attr &at : kAttrs) {
        unsigned long long v = 0;
        CUresult r = cuPointerGetAttribute(&v, at.a, q);
        row(al, (std::string("attr.") + at.name).c_str(), "rc=%d %s", (int)r,
            r == CUDA_SUCCESS ? norm(at.a, v, base, q, ctx).c_str() : "-");
    }
    const size_t n = sizeof kAttrs / sizeof kAttrs[0];
    CUpointer_attribute as[n];
    unsigned long long vs[n];
    void *data[n];
    for (size_t i = 0; i < n; i++) {
        as[i] = kAttrs[i].a;
        vs[i] = 0;
        data[i] = &vs[i];
    }
    CUresult r = cuPointerGetAttributes((unsigned)n, as, data, q);
    row(al, "attrs.rc", "rc=%d", (int)r);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        row(al, (std::string("attrs.") + kAttrs[i].name).c_str(), "%s",
            norm(as[i], vs[i], base, q, ctx).c_str());
    cudaPointerAttributes pa;
    std::memset(&pa, 0, sizeof pa);
    cudaError_t e = cudaPointerGetAttributes(&pa, (void *)q);
    row(al, "cudaPointerGetAttributes", "rc=%d type=%d device=%d dev=base%+lld", (int)e,
        (int)pa.type, pa.device, (long long)((CUdeviceptr)pa.devicePointer - base));
}

static void ranges_and_vmm(const std::string &al, CUdeviceptr base, int ndev)
{
    CUdeviceptr q = base + kOff, rb = 0;
    size_t rs = 0;
    CUresult r = cuMemGetAddressRange(&rb, &rs, q);
    row(al, "cuMemGetAddressRange", "rc=%d base%+lld %zu", (int)r, (long long)(rb - base), rs);
    CUmemGenericAllocationHandle h = 0;
    r = cuMemRetainAllocationHandle(&h, (void *)q);
    row(al, "cuMemRetainAllocationHandle", "rc=%d handle=%s", (int)r, h ? "nonzero" : "0");
    if (r == CUDA_SUCCESS) {
        CUmemAllocationProp p;
        std::memset(&p, 0, sizeof p);
        CUresult r2 = cuMemGetAllocationPropertiesFromHandle(&p, h);
        row(al, "cuMemGetAllocationPropertiesFromHandle", "rc=%d types=%d rdma=%d", (int)r2,
            (int)p.requestedHandleTypes, (int)p.allocFlags.gpuDirectRDMACapable);
        cuMemRelease(h);
    } else {
        row(al, "cuMemGetAllocationPropertiesFromHandle", "no-handle");
    }
    for (int d = 0; d < ndev && d < 2; d++) {
        CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, d};
        unsigned long long flags = 0;
        r = cuMemGetAccess(&flags, &loc, q);
        char name[40];
        std::snprintf(name, sizeof name, "cuMemGetAccess.dev%d", d);
        row(al, name, "rc=%d flags=%llu", (int)r, flags);
    }
    int fd = -1;
    r = cuMemGetHandleForAddressRange(&fd, base, kBlock, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    row(al, "cuMemGetHandleForAddressRange.dmabuf", "rc=%d", (int)r);
    if (r == CUDA_SUCCESS)
        close(fd);
    unsigned one = 1, back = 0;
    r = cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, q);
    CUresult r2 = cuPointerGetAttribute(&back, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, q);
    row(al, "cuPointerSetAttribute.SYNC_MEMOPS", "rc=%d readback rc=%d v=%u", (int)r, (int)r2,
        back);
    cudaIpcMemHandle_t ih;
    row(al, "cudaIpcGetMemHandle", "rc=%d", (int)cudaIpcGetMemHandle(&ih, (void *)base));
}

static void textures(const std::string &al, CUdeviceptr base)
{
    cudaResourceDesc rd;
    cudaTextureDesc td;
    std::memset(&rd, 0, sizeof rd);
    std::memset(&td, 0, sizeof td);
    rd.resType = cudaResourceTypeLinear;
    rd.res.linear.devPtr = (void *)(base + kOff);
    rd.res.linear.desc = cudaCreateChannelDesc<float>();
    rd.res.linear.sizeInBytes = 65536;
    cudaTextureObject_t t = 0;
    cudaError_t e = cudaCreateTextureObject(&t, &rd, &td, nullptr);
    row(al, "texture.linear", "rc=%d", (int)e);
    if (e == cudaSuccess)
        cudaDestroyTextureObject(t);
    rd.resType = cudaResourceTypePitch2D;
    rd.res.pitch2D.devPtr = (void *)(base + kOff);
    rd.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    rd.res.pitch2D.width = 256;
    rd.res.pitch2D.height = 64;
    rd.res.pitch2D.pitchInBytes = 1024;
    e = cudaCreateTextureObject(&t, &rd, &td, nullptr);
    row(al, "texture.pitch2d", "rc=%d", (int)e);
    if (e == cudaSuccess)
        cudaDestroyTextureObject(t);
    // surfaces take arrays only: no row for linear memory (docs/shim.md)
}

// ---- graphs: memset and memcpy nodes with a null context ------------------

static bool words_are(CUdeviceptr p, size_t n, unsigned v)
{
    unsigned h[256];
    if (n > 256 || cuMemcpyDtoH(h, p, n * 4) != CUDA_SUCCESS)
        return false;
    for (size_t i = 0; i < n; i++)
        if (h[i] != v)
            return false;
    return true;
}

static CUgraphNodeParams memset_params(CUdeviceptr dst, unsigned v)
{
    CUgraphNodeParams p;
    std::memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset.dst = dst;
    p.memset.value = v;
    p.memset.elementSize = 4;
    p.memset.width = 64;
    p.memset.height = 1;
    return p; // ctx 0
}

static const char *launch(CUgraph g, CUdeviceptr p, unsigned v)
{
    CUgraphExec x;
    if (cuGraphInstantiate(&x, g, 0) != CUDA_SUCCESS)
        return "instantiate-failed";
    bool ok = cuGraphLaunch(x, 0) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS &&
              words_are(p, 64, v);
    cuGraphExecDestroy(x);
    return ok ? "bytes-ok" : "bytes-wrong";
}

static void graphs(const std::string &al, CUdeviceptr base)
{
    CUdeviceptr q = base + kOff;
    CUgraph g;
    CUgraphNode n = nullptr, n2 = nullptr;
    CK_DRV(cuGraphCreate(&g, 0));
    CUgraphNodeParams p = memset_params(q, 0x1234abcdu);
    CUresult r = cuGraphAddNode(&n, g, nullptr, nullptr, 0, &p);
    row(al, "graph.cuGraphAddNode.memset.ctx0", "rc=%d %s", (int)r,
        r == CUDA_SUCCESS ? launch(g, q, 0x1234abcdu) : "-");
    p = memset_params(q + 256, 0x55u);
    r = n ? cuGraphNodeSetParams(n, &p) : CUDA_ERROR_INVALID_VALUE;
    row(al, "graph.cuGraphNodeSetParams.memset.ctx0", "rc=%d", (int)r);
    CUgraphExec x;
    if (n && cuGraphInstantiate(&x, g, 0) == CUDA_SUCCESS) {
        p = memset_params(q + 512, 0x66u);
        r = cuGraphExecNodeSetParams(x, n, &p);
        row(al, "graph.cuGraphExecNodeSetParams.memset.ctx0", "rc=%d", (int)r);
        cuGraphExecDestroy(x);
    } else {
        row(al, "graph.cuGraphExecNodeSetParams.memset.ctx0", "no-node");
    }
    CK_DRV(cuGraphDestroy(g));
    CK_DRV(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS m = {q, 0, 0x77u, 4, 64, 1};
    r = cuGraphAddMemsetNode(&n2, g, nullptr, 0, &m, nullptr);
    row(al, "graph.cuGraphAddMemsetNode.ctx0", "rc=%d %s", (int)r,
        r == CUDA_SUCCESS ? launch(g, q, 0x77u) : "-");
    CK_DRV(cuGraphDestroy(g));
    CK_DRV(cuGraphCreate(&g, 0));
    CUDA_MEMCPY3D c;
    std::memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = q;
    c.dstDevice = q + 8192;
    c.WidthInBytes = 256;
    c.Height = c.Depth = 1;
    r = cuGraphAddMemcpyNode(&n2, g, nullptr, 0, &c, nullptr);
    row(al, "graph.cuGraphAddMemcpyNode.ctx0", "rc=%d %s", (int)r,
        r == CUDA_SUCCESS ? launch(g, q + 8192, 0x77u) : "-");
    CK_DRV(cuGraphDestroy(g));
    // the runtime's forms
    cudaGraph_t rg;
    cudaGraphNode_t rn;
    CK(cudaGraphCreate(&rg, 0));
    cudaMemsetParams ms;
    std::memset(&ms, 0, sizeof ms);
    ms.dst = (void *)q;
    ms.value = 0x88u;
    ms.elementSize = 4;
    ms.width = 64;
    ms.height = 1;
    cudaError_t e = cudaGraphAddMemsetNode(&rn, rg, nullptr, 0, &ms);
    row(al, "graph.cudaGraphAddMemsetNode", "rc=%d", (int)e);
    cudaGraphNodeParams gp = {};
    gp.type = cudaGraphNodeTypeMemset;
    gp.memset.dst = ms.dst;
    gp.memset.value = ms.value;
    gp.memset.elementSize = ms.elementSize;
    gp.memset.width = ms.width;
    gp.memset.height = ms.height;
    e = cudaGraphAddNode(&rn, rg, nullptr, nullptr, 0, &gp);
    row(al, "graph.cudaGraphAddNode.memset", "rc=%d", (int)e);
    CK(cudaGraphDestroy(rg));
    cudaGetLastError();
}

// ---- peers: device 1 reads device 0's block ----------------------------------

__global__ void sum_words(const unsigned *p, size_t n, unsigned long long *out)
{
    unsigned long long s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += p[i];
    atomicAdd(out, s);
}

static void peer(void *block0, int ndev)
{
    int can = 0;
    if (ndev < 2 || cudaDeviceCanAccessPeer(&can, 1, 0) != cudaSuccess || !can) {
        row("", "peer.dev1_reads_dev0", "skip-one-gpu");
        return;
    }
    CK(cudaMemset(block0, 1, kBlock));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
    cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
    unsigned long long *out;
    CK(cudaMalloc(&out, sizeof *out));
    CK(cudaMemset(out, 0, sizeof *out));
    sum_words<<<1, 256>>>((const unsigned *)block0, kBlock / 4, out);
    cudaError_t k = cudaDeviceSynchronize();
    unsigned long long s = 0;
    if (k == cudaSuccess)
        CK(cudaMemcpy(&s, out, sizeof s, cudaMemcpyDeviceToHost));
    row("", "peer.dev1_reads_dev0", "enable=%d kernel=%d sum_ok=%d", (int)e, (int)k,
        (int)(s == (unsigned long long)0x01010101u * (kBlock / 4)));
    CK(cudaFree(out));
    CK(cudaSetDevice(0));
}

static void one(const std::string &al, CUdeviceptr base, CUcontext ctx, int ndev)
{
    attributes(al, base, ctx);
    ranges_and_vmm(al, base, ndev);
    textures(al, base);
    graphs(al, base);
}

int main()
{
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CUcontext ctx;
    CK_DRV(cuCtxGetCurrent(&ctx));
    void *a = nullptr;
    CK(cudaMalloc(&a, kBlock));
    one("cudaMalloc", (CUdeviceptr)a, ctx, ndev);
    CUdeviceptr b = 0;
    CK_DRV(cuMemAlloc(&b, kBlock));
    one("cuMemAlloc", b, ctx, ndev);
    peer(a, ndev);
    CK_DRV(cuMemFree(b));
    CK(cudaFree(a));
    std::printf("CHECK driver_conformance OK %d rows\n", g_rows);
    return 0;
}
