// race.cu - the stream-safety race test.  Each trial allocates A (64 MiB),
// fills it with a value v and waits; then launches a SLOW kernel on a
// non-blocking stream that spins ~1.5 ms (on %globaltimer), counts the words
// of A that are not v, and writes ~v back over A.  Right after the launch
// the host frees A and allocates B of the same size, and writes B with
// another pattern on ANOTHER stream.  After a full synchronize:
//   - the slow kernel must have seen only v in A (B's write never landed in
//     A while the kernel ran), and
//   - B must hold exactly B's pattern (the kernel's write-back never landed
//     in B).
// Eight variants, round-robin over the trials (the slow kernel runs on s1, a
// non-blocking stream, unless the variant says otherwise):
//   0 sync_free+stream     cudaFree(A); cudaMalloc(B); cudaMemsetAsync(B) on s2 (non-blocking)
//   1 sync_free+legacy     cudaFree(A); cudaMalloc(B); kernel writes B on the legacy default stream
//   2 async_free+stream    cudaFreeAsync(A,s1); cudaMallocAsync(B,s2); cudaMemsetAsync(B,s2)
//   3 async_free+legacy    cudaFreeAsync(A,s1); cudaMalloc(B); kernel writes B on the legacy stream
//   4 destroyed_stream     slow kernel on a fresh non-blocking stream that is destroyed
//                          (legal, work pending) before cudaFree(A); B as in 0
//   5 per_thread_stream    slow kernel on cudaStreamPerThread; B as in 0
//   6 priority_stream      slow kernel on a non-blocking stream of the highest priority; B as in 0
//   7 blocking_stream      slow kernel on a blocking stream (cudaStreamCreate); B as in 0
// Every 4th round of variants uses 512 KiB instead of the large size, so the
// small pool is exercised too.  A correct allocator may hand out A's memory
// as B only once the slow kernel is done (cudaFree synchronizes the device;
// cudaFreeAsync is stream-ordered), so no trial may see the other's data.
// A sensitivity control (no free: A itself is written on s2 while the slow
// kernel runs) shows that the detector sees a real overlap; if it never
// does, the test proves nothing and says so.
//
// Usage: race [trials=1000] [spin_us=1500] [MiB=64]
// (The program makes no fragpool-specific call: run it plain as the control.)
// Prints "CHECK race OK <ok>/<trials>" (exit 0), "CHECK race FAIL ..." (exit 1)
// or "CHECK race INCONCLUSIVE ..." when the detector is insensitive (exit 2).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_NAME "race"
#include "gpu_check.h"

__device__ __forceinline__ uint64_t global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

// Spins, then counts words != v into *bad, then writes ~v everywhere.
__global__ void slow_kernel(uint32_t *a, size_t n, uint32_t v, uint64_t spin_ns,
                            unsigned long long *bad)
{
    uint64_t t0 = global_ns();
    while (global_ns() - t0 < spin_ns) {
    }
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        local += ((volatile uint32_t *)a)[i] != v;
    if (local)
        atomicAdd(bad, local);
    __syncthreads();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        a[i] = ~v;
}

__global__ void verify_kernel(const uint32_t *p, size_t n, uint32_t v, unsigned long long *bad)
{
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        local += p[i] != v;
    if (local)
        atomicAdd(bad, local);
}

enum { NVAR = 8 };
static const char *const variant_name[NVAR] = {
    "sync_free+stream", "sync_free+legacy",  "async_free+stream", "async_free+legacy",
    "destroyed_stream", "per_thread_stream", "priority_stream",   "blocking_stream"};

int main(int argc, char **argv)
{
    int trials = argc > 1 ? std::atoi(argv[1]) : 1000;
    long spin_us = argc > 2 ? std::atol(argv[2]) : 1500;
    size_t mib = argc > 3 ? (size_t)std::atol(argv[3]) : 64;
    if (trials <= 0)
        trials = 1000;
    if (spin_us <= 0)
        spin_us = 1500;
    if (mib == 0)
        mib = 64;
    const int sens_trials = 40;
    const size_t big = mib << 20, small = 512u << 10;
    const uint64_t spin_ns = (uint64_t)spin_us * 1000;
    auto t_start = std::chrono::steady_clock::now();

    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const unsigned slow_grid = (unsigned)prop.multiProcessorCount * 2, grid = 1024;
    std::printf("RACE device \"%s\" trials %d spin %ld us size %zu MiB (every 4th round 512 KiB)\n",
                prop.name, trials, spin_us, mib);

    cudaStream_t s1, s2, sprio, sblock;
    int prio_lo = 0, prio_hi = 0;
    CK(cudaDeviceGetStreamPriorityRange(&prio_lo, &prio_hi));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithPriority(&sprio, cudaStreamNonBlocking, prio_hi));
    CK(cudaStreamCreate(&sblock));
    // per-trial counters: [t] what the slow kernel saw in A, [trials+t] bad words of B
    const int nslots = 2 * trials + sens_trials;
    unsigned long long *dbad = nullptr;
    CK(cudaMalloc(&dbad, nslots * sizeof *dbad));
    CK(cudaMemset(dbad, 0, nslots * sizeof *dbad));
    CK(cudaDeviceSynchronize());

    std::vector<int> reused(trials, 0);
    for (int t = 0; t < trials; t++) {
        const int var = t % NVAR;
        const size_t bytes = (t / NVAR) % 4 == 3 ? small : big, n = bytes / 4;
        const uint32_t v = 0x10000000u | (uint32_t)t;  // never 0x5A5A5A5A, ~v never either
        const uint32_t pb = 0xB0000000u | (uint32_t)t; // B's kernel pattern
        const bool async_a = var == 2 || var == 3;
        cudaStream_t ks = s1, fresh = nullptr; // where the slow kernel runs
        if (var == 4) {
            CK(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
            ks = fresh;
        } else if (var == 5) {
            ks = cudaStreamPerThread;
        } else if (var == 6) {
            ks = sprio;
        } else if (var == 7) {
            ks = sblock;
        }
        uint32_t *a = nullptr, *b = nullptr;
        if (async_a)
            CK(cudaMallocAsync((void **)&a, bytes, s1));
        else
            CK(cudaMalloc((void **)&a, bytes));
        fill_kernel<<<grid, 256, 0, async_a ? s1 : ks>>>(a, n, v);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        slow_kernel<<<slow_grid, 256, 0, ks>>>(a, n, v, spin_ns, dbad + t);
        CK(cudaGetLastError());
        if (fresh)
            CK(cudaStreamDestroy(fresh)); // legal with work pending: it completes
        if (async_a)
            CK(cudaFreeAsync(a, s1));
        else
            CK(cudaFree(a));
        if (var == 2)
            CK(cudaMallocAsync((void **)&b, bytes, s2));
        else
            CK(cudaMalloc((void **)&b, bytes));
        cudaStream_t bs;
        uint32_t expect_b;
        if (var == 1 || var == 3) {
            bs = (cudaStream_t)0; // the legacy default stream: no order with s1
            expect_b = pb;
            fill_kernel<<<grid, 256, 0, bs>>>(b, n, pb);
            CK(cudaGetLastError());
        } else {
            bs = s2;
            expect_b = 0x5A5A5A5Au;
            CK(cudaMemsetAsync(b, 0x5A, bytes, s2));
        }
        CK(cudaDeviceSynchronize());
        verify_kernel<<<grid, 256, 0, bs>>>(b, n, expect_b, dbad + trials + t);
        CK(cudaGetLastError());
        reused[t] = (uintptr_t)b < (uintptr_t)a + bytes && (uintptr_t)a < (uintptr_t)b + bytes;
        if (var == 2)
            CK(cudaFreeAsync(b, s2));
        else
            CK(cudaFree(b));
        CK(cudaDeviceSynchronize());
    }

    // Sensitivity: the same detector with a real overlap (A written on s2
    // while the slow kernel runs on s1).
    {
        const size_t bytes = big, n = bytes / 4;
        uint32_t *a = nullptr;
        CK(cudaMalloc((void **)&a, bytes));
        for (int t = 0; t < sens_trials; t++) {
            const uint32_t v = 0x20000000u | (uint32_t)t;
            fill_kernel<<<grid, 256, 0, s1>>>(a, n, v);
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(s1));
            slow_kernel<<<slow_grid, 256, 0, s1>>>(a, n, v, spin_ns, dbad + 2 * trials + t);
            CK(cudaGetLastError());
            CK(cudaMemsetAsync(a, 0x5A, bytes, s2));
            CK(cudaDeviceSynchronize());
        }
        CK(cudaFree(a));
    }

    std::vector<unsigned long long> bad(nslots);
    CK(cudaMemcpy(bad.data(), dbad, nslots * sizeof *dbad, cudaMemcpyDeviceToHost));
    CK(cudaFree(dbad));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    CK(cudaStreamDestroy(sprio));
    CK(cudaStreamDestroy(sblock));

    int corrupted = 0, per_var[NVAR] = {0}, per_var_n[NVAR] = {0}, per_var_reused[NVAR] = {0},
        sens = 0, shown = 0;
    for (int t = 0; t < trials; t++) {
        int var = t % NVAR;
        per_var_n[var]++;
        per_var_reused[var] += reused[t];
        if (bad[t] || bad[trials + t]) {
            corrupted++;
            per_var[var]++;
            if (shown++ < 10)
                std::printf(
                    "RACE corrupted trial %d (%s): slow kernel saw %llu foreign words in A, "
                    "B has %llu wrong words, B %s A\n",
                    t, variant_name[var], bad[t], bad[trials + t],
                    reused[t] ? "overlapped" : "did not overlap");
        }
    }
    for (int t = 0; t < sens_trials; t++)
        sens += bad[2 * trials + t] != 0;
    for (int v = 0; v < NVAR; v++)
        std::printf("RACE variant %s trials %d corrupted %d B_overlapped_A %d\n", variant_name[v],
                    per_var_n[v], per_var[v], per_var_reused[v]);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf("RACE sensitivity detected %d/%d (real overlap, no free; want > 0)\n", sens,
                sens_trials);
    std::printf("RACE time %.2f s\n", secs);
    if (corrupted) {
        std::printf("CHECK race FAIL corrupted %d/%d\n", corrupted, trials);
        return 1;
    }
    if (sens == 0) {
        std::printf(
            "CHECK race INCONCLUSIVE %d/%d clean but the detector never saw a real overlap\n",
            trials, trials);
        return 2;
    }
    std::printf("CHECK race OK %d/%d\n", trials, trials);
    return 0;
}
