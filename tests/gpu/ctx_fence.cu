// ctx_fence.cu - what a context-wide fence costs and guarantees on this GPU.
//
// fragpool's deferred reuse seals frees with cuCtxRecordEvent (one event
// that captures the work of every stream of the context) and, when a block
// is handed out before that work is done, orders all later work of the
// context after it with cuCtxWaitEvent.  This program measures both calls,
// next to the per-stream calls they replace, with 0 and 64 idle
// non-blocking streams and with 64 busy ones, and checks the semantics
// fragpool relies on:
//   covers     an event from cuCtxRecordEvent is not complete while a kernel
//              runs on a non-blocking stream, nor while one runs on a
//              stream destroyed with its work still queued;
//   orders     after cuCtxWaitEvent, work on a pre-existing non-blocking
//              stream, on a stream created after the call, on the legacy
//              stream, on the per-thread stream, a synchronous memset and a
//              synchronous copy all run after the captured kernel (which
//              reads the buffer last): it sees only the old values;
//   host       cuCtxWaitEvent does not block the calling thread.
// Prints one "COST name streams ns" line per figure (median of 2000) and
// "CHECK ctx_fence OK" or "CHECK ctx_fence FAIL <what>".
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_NAME "ctx_fence"
#include "gpu_check.h"

__device__ __forceinline__ uint64_t global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins for ns, then counts the words of buf that are not v.
__global__ void spin_then_check(const unsigned *buf, size_t n, unsigned v, uint64_t ns,
                                unsigned long long *bad)
{
    uint64_t t0 = global_ns();
    while (global_ns() - t0 < ns) {
    }
    unsigned long long b = 0;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        b += buf[i] != v;
    if (b)
        atomicAdd(bad, b);
}

__global__ void fill(unsigned *buf, size_t n, unsigned v)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        buf[i] = v;
}

__global__ void spin(uint64_t ns)
{
    uint64_t t0 = global_ns();
    while (global_ns() - t0 < ns) {
    }
}

static double now_ns()
{
    return std::chrono::duration<double, std::nano>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

template <class F> static double median_ns(F f, int n = 2000)
{
    std::vector<double> t(n);
    for (int i = 0; i < n; i++) {
        double a = now_ns();
        f();
        t[i] = now_ns() - a;
    }
    std::sort(t.begin(), t.end());
    return t[n / 2];
}

static CUcontext ctx;
static bool failed;

static void costs(const char *label)
{
    CUevent ev, done;
    CK_DRV(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK_DRV(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    CK_DRV(cuEventRecord(done, 0));
    CK_DRV(cuEventSynchronize(done));
    std::printf("COST eventRecord_legacy %s %.0f\n", label,
                median_ns([&] { cuEventRecord(ev, CU_STREAM_LEGACY); }));
    std::printf("COST ctxRecordEvent %s %.0f\n", label,
                median_ns([&] { cuCtxRecordEvent(ctx, ev); }));
    std::printf("COST eventQuery_done %s %.0f\n", label, median_ns([&] { cuEventQuery(done); }));
    std::printf("COST ctxWaitEvent_done %s %.0f\n", label,
                median_ns([&] { cuCtxWaitEvent(ctx, done); }));
    int immediate = 0;
    std::printf("COST ctxRecord+Query %s %.0f\n", label, median_ns([&] {
                    cuCtxRecordEvent(ctx, ev);
                    immediate += cuEventQuery(ev) == CUDA_SUCCESS;
                }));
    std::printf("COST ctxRecord+Wait %s %.0f\n", label, median_ns([&] {
                    cuCtxRecordEvent(ctx, ev);
                    cuCtxWaitEvent(ctx, ev);
                }));
    std::printf("COST ctxSynchronize %s %.0f\n", label, median_ns([&] { cuCtxSynchronize(); }));
    std::printf("INFO query_immediately_done %s %d/2000\n", label, immediate);
    CUdeviceptr p;
    CK_DRV(cuMemAllocAsync(&p, 1 << 20, CU_STREAM_LEGACY));
    CK_DRV(cuMemFreeAsync(p, CU_STREAM_LEGACY));
    std::printf("COST mallocAsync+freeAsync_1MiB %s %.0f\n", label, median_ns([&] {
                    cuMemAllocAsync(&p, 1 << 20, CU_STREAM_LEGACY);
                    cuMemFreeAsync(p, CU_STREAM_LEGACY);
                }));
    CK_DRV(cuCtxSynchronize());
    cuEventDestroy(ev);
    cuEventDestroy(done);
}

static std::vector<CUstream> make_streams(int n)
{
    std::vector<CUstream> s(n);
    for (auto &x : s)
        CK_DRV(cuStreamCreate(&x, CU_STREAM_NON_BLOCKING));
    return s;
}

static void expect(bool ok, const char *what)
{
    std::printf("SEM %s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok)
        failed = true;
}

// covers: a kernel on a non-blocking stream (live, or destroyed with its
// work queued) keeps a context event incomplete.
static void check_covers()
{
    CUevent ev;
    CK_DRV(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CUstream s;
    CK_DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    spin<<<1, 1, 0, (cudaStream_t)s>>>(200000000ull);
    CK_DRV(cuCtxRecordEvent(ctx, ev));
    expect(cuEventQuery(ev) == CUDA_ERROR_NOT_READY, "covers_nonblocking");
    CK_DRV(cuCtxSynchronize());
    expect(cuEventQuery(ev) == CUDA_SUCCESS, "complete_after_sync");
    spin<<<1, 1, 0, (cudaStream_t)s>>>(200000000ull);
    CK_DRV(cuStreamDestroy(s));
    CK_DRV(cuCtxRecordEvent(ctx, ev));
    expect(cuEventQuery(ev) == CUDA_ERROR_NOT_READY, "covers_destroyed_stream");
    CK_DRV(cuCtxSynchronize());
    cuEventDestroy(ev);
}

enum consumer { PRE_STREAM, NEW_STREAM, LEGACY, PER_THREAD, SYNC_MEMSET, SYNC_COPY, NCONSUMERS };
static const char *consumer_name[] = {"pre_stream", "new_stream",  "legacy",
                                      "per_thread", "sync_memset", "sync_copy"};

// orders: the slow kernel reads buf last; the consumer overwrites buf after
// cuCtxWaitEvent; the kernel must see only the old value.
static void check_orders()
{
    const size_t n = 16 << 20; // 64 MiB of words
    CUdeviceptr buf;
    unsigned long long *bad;
    CK_DRV(cuMemAlloc(&buf, n * 4));
    CK_DRV(cuMemAlloc((CUdeviceptr *)&bad, 8));
    std::vector<unsigned> host(n, 7u);
    CUstream s1, s2;
    CK_DRV(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK_DRV(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent ev;
    CK_DRV(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    double worst_wait_ns = 0;
    for (int c = 0; c < NCONSUMERS; c++) {
        CK_DRV(cuMemsetD32(buf, 1u, n));
        CK_DRV(cuMemsetD32((CUdeviceptr)bad, 0, 2));
        CK_DRV(cuCtxSynchronize());
        spin_then_check<<<264, 256, 0, (cudaStream_t)s1>>>((const unsigned *)buf, n, 1u,
                                                           100000000ull, bad);
        CK_DRV(cuCtxRecordEvent(ctx, ev));
        double t0 = now_ns();
        CK_DRV(cuCtxWaitEvent(ctx, ev));
        worst_wait_ns = std::max(worst_wait_ns, now_ns() - t0);
        CUstream s3 = nullptr;
        switch (c) {
        case PRE_STREAM: fill<<<264, 256, 0, (cudaStream_t)s2>>>((unsigned *)buf, n, 2u); break;
        case NEW_STREAM:
            CK_DRV(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
            fill<<<264, 256, 0, (cudaStream_t)s3>>>((unsigned *)buf, n, 2u);
            break;
        case LEGACY: fill<<<264, 256, 0, 0>>>((unsigned *)buf, n, 2u); break;
        case PER_THREAD: fill<<<264, 256, 0, cudaStreamPerThread>>>((unsigned *)buf, n, 2u); break;
        case SYNC_MEMSET: CK_DRV(cuMemsetD32(buf, 2u, n)); break;
        case SYNC_COPY: CK_DRV(cuMemcpyHtoD(buf, host.data(), n * 4)); break;
        }
        CK_DRV(cuCtxSynchronize());
        unsigned long long b = 0;
        CK_DRV(cuMemcpyDtoH(&b, (CUdeviceptr)bad, 8));
        char what[64];
        std::snprintf(what, sizeof what, "orders_%s", consumer_name[c]);
        expect(b == 0, what);
        if (s3)
            cuStreamDestroy(s3);
    }
    expect(worst_wait_ns < 5e6, "wait_does_not_block_host");
    std::printf("INFO worst_ctxWaitEvent_ns %.0f\n", worst_wait_ns);
    cuEventDestroy(ev);
    cuStreamDestroy(s1);
    cuStreamDestroy(s2);
    cuMemFree(buf);
    cuMemFree((CUdeviceptr)bad);
}

int main()
{
    cudaFree(0);
    CK_DRV(cuCtxGetCurrent(&ctx));
    int ver = 0;
    cuDriverGetVersion(&ver);
    std::printf("INFO driver %d\n", ver);
    costs("0");
    auto idle = make_streams(64);
    costs("64idle");
    for (auto s : idle)
        spin<<<1, 1, 0, (cudaStream_t)s>>>(3000000000ull);
    costs("64busy");
    CK_DRV(cuCtxSynchronize());
    for (auto s : idle)
        cuStreamDestroy(s);
    check_covers();
    check_orders();
    std::printf(failed ? "CHECK ctx_fence FAIL semantics\n" : "CHECK ctx_fence OK\n");
    return failed;
}
