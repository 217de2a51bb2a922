// host_check.cu - pinned host memory on a real GPU, run natively
// and under fragpool by tests/gpu/host_check.sh.
//
//   host_check cost     the host cost of one cudaHostAlloc+cudaFreeHost pair
//                       at 64 KiB, 1 MiB, 64 MiB and 1 GiB (median of N pairs,
//                       after one warm-up pair): "COST size=<B> us=<median>"
//   host_check mixed    a mixed-size workload: 160 buffers of 64 KiB .. 256 MiB
//                       (log-uniform, not powers of two, fixed seed) pinned
//                       at once, written, then freed; prints the requested
//                       bytes and what PyTorch's power-of-two rounding would
//                       pin: "MIXED requested=<B> pow2=<B>"
//   host_check pin      a program that pins with cudaHostAlloc (Default,
//                       Portable, Mapped, WriteCombined) and cudaMallocHost,
//                       copies both ways with a kernel in between, reads
//                       mapped memory from a kernel, and frees a pinned block
//                       while a copy queued behind a slow kernel still reads
//                       it, writing its successor at once; every byte is
//                       checked.  Prints the flags cudaHostGetFlags gives
//                       ("FLAGS asked=<f> got=<f>") and "PIN ok" or "PIN FAIL ...".
// Exit status 0 on success, 1 on a failed check or CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK_NAME "host_check"
#include "gpu_check.h"

static double now_us()
{
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static int cost()
{
    const size_t sizes[] = {64u << 10, 1u << 20, 64u << 20, 1u << 30};
    const int reps[] = {200, 100, 20, 5};
    CK(cudaFree(0));
    for (int k = 0; k < 4; k++) {
        void *p;
        CK(cudaHostAlloc(&p, sizes[k], cudaHostAllocDefault)); // warm-up pair
        CK(cudaFreeHost(p));
        std::vector<double> t;
        for (int i = 0; i < reps[k]; i++) {
            double t0 = now_us();
            CK(cudaHostAlloc(&p, sizes[k], cudaHostAllocDefault));
            CK(cudaFreeHost(p));
            t.push_back(now_us() - t0);
        }
        std::sort(t.begin(), t.end());
        printf("COST size=%zu us=%.2f\n", sizes[k], t[t.size() / 2]);
    }
    return 0;
}

static size_t next_pow2(size_t n)
{
    size_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static int mixed()
{
    CK(cudaFree(0));
    unsigned r = 20261201u;
    std::vector<void *> v;
    size_t req = 0, pow2 = 0;
    for (int i = 0; i < 160; i++) {
        r = r * 1103515245u + 12345u;
        size_t n = (size_t)65536 << ((r >> 16) % 12); // 64 KiB .. 128 MiB
        n += (size_t)(r >> 4) % n;                    // .. 256 MiB, not a power of two
        void *p;
        CK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
        memset(p, i, n);
        v.push_back(p);
        req += n;
        pow2 += next_pow2(n);
    }
    for (void *p : v)
        CK(cudaFreeHost(p));
    printf("MIXED requested=%zu pow2=%zu\n", req, pow2);
    return 0;
}

__global__ void spin(long long ns)
{
    long long t0 = clock64();
    while (clock64() - t0 < ns) {
    }
}

__global__ void add_one(unsigned char *p, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = (unsigned char)(p[i] + 1);
}

static int fails = 0;

static void expect(bool ok, const char *what, size_t a, size_t b)
{
    if (!ok) {
        printf("PIN FAIL %s: %zu vs %zu\n", what, a, b);
        fails++;
    }
}

static void roundtrip(unsigned flags, size_t n, cudaStream_t s, unsigned char *dev)
{
    unsigned char *h, *back;
    if (flags == 99) {
        CK(cudaMallocHost(&h, n));
    } else {
        CK(cudaHostAlloc(&h, n, flags));
    }
    CK(cudaMallocHost(&back, n));
    unsigned got = 12345;
    CK(cudaHostGetFlags(&got, h + n / 2));
    printf("FLAGS asked=%u got=%u\n", flags == 99 ? 0 : flags, got);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 7 + flags);
    CK(cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, s));
    add_one<<<256, 256, 0, s>>>(dev, n);
    CK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i += 1) {
        if (back[i] != (unsigned char)(i * 7 + flags + 1)) {
            expect(false, "roundtrip byte", i, n);
            break;
        }
    }
    if (flags & cudaHostAllocMapped) { // zero-copy: a kernel writes pinned memory
        unsigned char *dp;
        CK(cudaHostGetDevicePointer((void **)&dp, h, 0));
        add_one<<<256, 256, 0, s>>>(dp, n);
        CK(cudaStreamSynchronize(s));
        expect(h[n - 1] == (unsigned char)((n - 1) * 7 + flags + 1), "mapped write", h[n - 1], n);
    }
    CK(cudaFreeHost(back));
    CK(cudaFreeHost(h));
}

// A copy queued behind a slow kernel still reads A when A is freed; B,
// allocated right after (the pool may give A's memory back), is written
// from the host at once.  The copy must deliver A's bytes.
static void race(cudaStream_t s, unsigned char *dev, size_t n, int trial)
{
    unsigned char *a, *b, *back;
    CK(cudaHostAlloc(&a, n, cudaHostAllocDefault));
    CK(cudaMallocHost(&back, n));
    memset(a, 0x10 + trial, n);
    spin<<<1, 1, 0, s>>>(20 * 1000 * 1000); // ~10 ms at ~2 GHz
    CK(cudaMemcpyAsync(dev, a, n, cudaMemcpyHostToDevice, s));
    CK(cudaFreeHost(a));
    CK(cudaHostAlloc(&b, n, cudaHostAllocDefault));
    memset(b, 0xEE, n);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 4093)
        if (back[i] != (unsigned char)(0x10 + trial)) {
            expect(false, "race: the copy saw the successor's bytes", i, n);
            break;
        }
    CK(cudaFreeHost(b));
    CK(cudaFreeHost(back));
}

static int pin()
{
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t n = 3u << 20;
    unsigned char *dev;
    CK(cudaMalloc(&dev, n));
    const unsigned flags[] = {cudaHostAllocDefault,
                              cudaHostAllocPortable,
                              cudaHostAllocMapped,
                              cudaHostAllocWriteCombined,
                              cudaHostAllocPortable | cudaHostAllocMapped,
                              99};
    for (int it = 0; it < 3; it++)
        for (unsigned f : flags)
            roundtrip(f, it == 1 ? 100000 : n, s, dev);
    for (int t = 0; t < 20; t++)
        race(s, dev, t % 2 ? 8192 : n, t);
    CK(cudaFree(dev));
    CK(cudaStreamDestroy(s));
    printf(fails ? "PIN FAIL %d checks\n" : "PIN ok\n", fails);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "cost"))
        return cost();
    if (!strcmp(m, "mixed"))
        return mixed();
    if (!strcmp(m, "pin"))
        return pin();
    fprintf(stderr, "usage: host_check cost|mixed|pin\n");
    return 2;
}
