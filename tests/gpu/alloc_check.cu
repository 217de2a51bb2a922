// alloc_check.cu - a plain CUDA runtime program that checks every device
// allocation it gets: 10^4 mixed-size allocations through cudaMalloc,
// cudaMallocAsync (on a non-blocking stream) and cudaMallocPitch, each
// filled by a kernel with word i = (i*3+1) ^ salt, verified on the GPU before
// it is freed (and every 8th one also copied back and verified on the host),
// checked for 256-byte alignment and for overlap with every live block, and
// cudaMemGetInfo sanity.  Built twice (static and shared cudart) and run with
// and without LD_PRELOAD=libfragpool.so by scripts/gpu-check.sh.
//
// Usage: alloc_check [n_allocs=10000] [seed=1]
// Prints "CHECK alloc_check OK <n>" and exits 0, or "CHECK alloc_check FAIL ..."
// and exits 1.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK_NAME "alloc_check"
#include "gpu_check.h"

__host__ __device__ static inline uint32_t pattern(size_t i, uint32_t salt)
{
    return (uint32_t)(i * 3u + 1u) ^ salt;
}

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, salt);
}

__global__ void verify_kernel(const uint32_t *p, size_t n, uint32_t salt, unsigned long long *bad)
{
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        local += p[i] != pattern(i, salt);
    if (local)
        atomicAdd(bad, local);
}

static uint64_t rng_state = 1;
static uint64_t rnd()
{
    uint64_t x = rng_state; // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

enum Method { M_MALLOC = 0, M_ASYNC = 1, M_PITCH = 2 };
static const char *const method_name[] = {"cudaMalloc", "cudaMallocAsync", "cudaMallocPitch"};

struct Block {
    void *p = nullptr;
    size_t bytes = 0; // what the program owns: size, or pitch*height
    int method = -1;
    uint32_t salt = 0;
    cudaStream_t stream = 0;
};

static unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 1024 ? 1024 : (b ? b : 1));
}

static size_t random_size()
{
    uint64_t r = rnd() % 100;
    if (r < 55)
        return 1 + rnd() % 65536; // 1 B .. 64 KiB
    if (r < 85)
        return (64u << 10) + rnd() % ((4u << 20) - (64u << 10)); // .. 4 MiB
    if (r < 97)
        return (4u << 20) + rnd() % (28u << 20); // .. 32 MiB
    return (32u << 20) + rnd() % (32u << 20);    // .. 64 MiB
}

int main(int argc, char **argv)
{
    long n_allocs = argc > 1 ? std::atol(argv[1]) : 10000;
    rng_state = argc > 2 ? std::strtoull(argv[2], nullptr, 10) * 0x9E3779B97F4A7C15ULL + 1
                         : 88172645463325252ULL;
    if (n_allocs <= 0)
        n_allocs = 10000;
    auto t_start = std::chrono::steady_clock::now();

    int rt = 0, drv = 0;
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("ALLOC_CHECK device \"%s\" runtime %d driver %d\n", prop.name, rt, drv);

    long failures = 0;
    size_t fr = 0, tot = 0;
    CK(cudaMemGetInfo(&fr, &tot));
    std::printf("MEMINFO start free %zu total %zu\n", fr, tot);
    if (tot == 0 || fr > tot) {
        std::printf("ALLOC_CHECK bad cudaMemGetInfo: free %zu total %zu\n", fr, tot);
        failures++;
    }

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long *dbad = nullptr;
    CK(cudaMalloc(&dbad, sizeof *dbad));
    CK(cudaMemset(dbad, 0, sizeof *dbad));
    CK(cudaDeviceSynchronize());

    const int SLOTS = 256;
    std::vector<Block> live(SLOTS);
    long count[3] = {0, 0, 0}, misaligned = 0, overlaps = 0, host_bad = 0, bad_pitch = 0;
    size_t live_bytes = 0, max_live = 0, total_bytes = 0;
    std::vector<uint32_t> host(1024);

    auto release = [&](Block &b) {
        size_t n = b.bytes / 4;
        if (n)
            verify_kernel<<<grid_for(n), 256, 0, b.stream>>>((const uint32_t *)b.p, n, b.salt,
                                                             dbad);
        CK(cudaGetLastError());
        if (b.method == M_ASYNC)
            CK(cudaFreeAsync(b.p, b.stream));
        else
            CK(cudaFree(b.p));
        live_bytes -= b.bytes;
        b = Block();
    };

    for (long i = 0; i < n_allocs; i++) {
        int slot = (int)(rnd() % SLOTS);
        if (live[slot].p)
            release(live[slot]);
        Block b;
        b.method = (int)(rnd() % 10 < 5 ? M_MALLOC : (rnd() % 4 ? M_ASYNC : M_PITCH));
        b.salt = (uint32_t)(rnd() | 1);
        b.stream = b.method == M_ASYNC ? s : (cudaStream_t)0;
        if (b.method == M_MALLOC) {
            b.bytes = random_size();
            CK(cudaMalloc(&b.p, b.bytes));
        } else if (b.method == M_ASYNC) {
            b.bytes = random_size();
            CK(cudaMallocAsync(&b.p, b.bytes, s));
        } else {
            size_t width = 1 + rnd() % 8192, height = 1 + rnd() % 256, pitch = 0;
            CK(cudaMallocPitch(&b.p, &pitch, width, height));
            if (pitch < width) {
                std::printf("ALLOC_CHECK pitch %zu < width %zu\n", pitch, width);
                bad_pitch++;
            }
            b.bytes = pitch * height;
        }
        count[b.method]++;
        total_bytes += b.bytes;
        uintptr_t a = (uintptr_t)b.p;
        if (a % 256) {
            if (misaligned < 5)
                std::printf("ALLOC_CHECK misaligned %s(%zu) = %p\n", method_name[b.method], b.bytes,
                            b.p);
            misaligned++;
        }
        for (int j = 0; j < SLOTS; j++) {
            const Block &o = live[j];
            uintptr_t oa = (uintptr_t)o.p;
            if (o.p && a < oa + o.bytes && oa < a + b.bytes) {
                if (overlaps < 5)
                    std::printf("ALLOC_CHECK overlap: new %s [%p,+%zu) and live %s [%p,+%zu)\n",
                                method_name[b.method], b.p, b.bytes, method_name[o.method], o.p,
                                o.bytes);
                overlaps++;
            }
        }
        size_t n = b.bytes / 4;
        if (n)
            fill_kernel<<<grid_for(n), 256, 0, b.stream>>>((uint32_t *)b.p, n, b.salt);
        CK(cudaGetLastError());
        if (n && (i % 8 == 0 || b.method == M_PITCH)) {
            // host round trip: the first words and the last word
            size_t m = n < host.size() ? n : host.size();
            CK(cudaMemcpyAsync(host.data(), b.p, m * 4, cudaMemcpyDeviceToHost, b.stream));
            uint32_t last = 0;
            CK(cudaMemcpyAsync(&last, (uint32_t *)b.p + (n - 1), 4, cudaMemcpyDeviceToHost,
                               b.stream));
            CK(cudaStreamSynchronize(b.stream));
            for (size_t k = 0; k < m; k++)
                host_bad += host[k] != pattern(k, b.salt);
            host_bad += last != pattern(n - 1, b.salt);
        }
        live[slot] = b;
        live_bytes += b.bytes;
        if (live_bytes > max_live)
            max_live = live_bytes;
        if (i % 1000 == 999) {
            CK(cudaMemGetInfo(&fr, &tot));
            if (tot == 0 || fr > tot) {
                std::printf("ALLOC_CHECK bad cudaMemGetInfo: free %zu total %zu\n", fr, tot);
                failures++;
            }
        }
    }
    for (int j = 0; j < SLOTS; j++)
        if (live[j].p)
            release(live[j]);
    CK(cudaDeviceSynchronize());
    unsigned long long bad = 0;
    CK(cudaMemcpy(&bad, dbad, sizeof bad, cudaMemcpyDeviceToHost));
    CK(cudaFree(dbad));
    CK(cudaStreamDestroy(s));
    CK(cudaMemGetInfo(&fr, &tot));
    std::printf("MEMINFO end free %zu total %zu\n", fr, tot);
    if (tot == 0 || fr > tot)
        failures++;

    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf(
        "ALLOC_CHECK allocs %ld (cudaMalloc %ld, cudaMallocAsync %ld, cudaMallocPitch %ld), "
        "%.2f GiB total, peak live %.1f MiB, %.2f s\n",
        n_allocs, count[0], count[1], count[2], total_bytes / 1073741824.0, max_live / 1048576.0,
        secs);
    failures += (long)bad + misaligned + overlaps + host_bad + bad_pitch;
    if (failures) {
        std::printf("CHECK alloc_check FAIL bad_words %llu host_bad_words %ld overlaps %ld "
                    "misaligned %ld bad_pitch %ld other %ld\n",
                    bad, host_bad, overlaps, misaligned, bad_pitch,
                    failures - (long)bad - misaligned - overlaps - host_bad - bad_pitch);
        return 1;
    }
    std::printf("CHECK alloc_check OK %ld\n", n_allocs);
    return 0;
}
