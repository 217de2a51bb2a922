// vmm_unmap.cu - virtual-memory segments on a real GPU: pages are never
// unmapped while a kernel may still use them, and peers reach them.
// Run under fragpool with expandable_segments:True (tests/gpu/vmm_check.sh).
//
//   vmm_unmap unmap   A (64 MiB, all 1s) and L (2 MiB) live; a kernel on a
//                     non-blocking stream spins ~200 ms, then sums A into L.
//                     Right after the launch the host frees A and allocates
//                     B (96 MiB), which fits only past L: under
//                     max_reserved_mb:160 fragpool must take A's idle pages
//                     back, and may unmap them only once the kernel is done.
//                     PASS: no error, the kernel's sum is 16 Mi, B holds
//                     what was written.  An early unmap shows as an illegal
//                     address error or a wrong sum.
//   vmm_unmap peer    (2 GPUs) X on GPU 0 (mapped before), then GPU 1 calls
//                     cudaDeviceEnablePeerAccess(0), then Y on GPU 0
//                     (mapped after); a kernel on GPU 1 adds 1 to every word
//                     of X and Y; GPU 0 reads them back.
// Prints "CHECK vmm_unmap OK <mode>" (exit 0), "CHECK vmm_unmap FAIL ..."
// (exit 1), or "CHECK vmm_unmap SKIP ..." (exit 77: fewer than 2 GPUs).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK_NAME "vmm_unmap"
#include "gpu_check.h"

__global__ void spin_then_sum(const unsigned *a, size_t n, unsigned long long *out, long long ns)
{
    long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        long long t = t0;
        while (t - t0 < ns)
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    }
    __syncthreads();
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += a[i];
    atomicAdd(out, s);
}

__global__ void add_one(unsigned *a, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        a[i] += 1;
}

static bool all_equal(const unsigned *d, size_t n, unsigned v)
{
    std::vector<unsigned> h(n);
    if (cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
        return false;
    for (size_t i = 0; i < n; i++)
        if (h[i] != v)
            return false;
    return true;
}

static int unmap_case()
{
    const size_t mib = 1 << 20, na = 64 * mib / 4, nb = 96 * mib / 4;
    unsigned *a, *b;
    unsigned long long *l;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&a, na * 4));
    CK(cudaMalloc(&l, 2 * mib));
    CK(cudaMemset(a, 0, na * 4));
    CK(cudaMemset(l, 0, 8));
    std::vector<unsigned> ones(na, 1);
    CK(cudaMemcpy(a, ones.data(), na * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    spin_then_sum<<<256, 256, 0, s>>>(a, na, l, 200 * 1000 * 1000LL);
    CK(cudaGetLastError());
    CK(cudaFree(a));
    CK(cudaMalloc(&b, nb * 4)); // needs A's pages under the cap
    CK(cudaMemset(b, 0x5a, nb * 4));
    CK(cudaDeviceSynchronize());
    unsigned long long sum = 0;
    CK(cudaMemcpy(&sum, l, 8, cudaMemcpyDeviceToHost));
    if (sum != na) {
        std::printf("CHECK vmm_unmap FAIL unmap: the kernel summed %llu, expected %zu\n", sum, na);
        return 1;
    }
    if (!all_equal(b, nb, 0x5a5a5a5au)) {
        std::printf("CHECK vmm_unmap FAIL unmap: B does not hold its pattern\n");
        return 1;
    }
    CK(cudaFree(b));
    CK(cudaFree(l));
    CK(cudaStreamDestroy(s));
    std::printf("CHECK vmm_unmap OK unmap\n");
    return 0;
}

static int peer_case()
{
    int n = 0, can = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        std::printf("CHECK vmm_unmap SKIP peer: %d GPU\n", n);
        return 77;
    }
    CK(cudaDeviceCanAccessPeer(&can, 1, 0));
    if (!can) {
        std::printf("CHECK vmm_unmap SKIP peer: GPU 1 cannot access GPU 0\n");
        return 77;
    }
    const size_t nw = (6 << 20) / 4;
    unsigned *x, *y;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&x, nw * 4));
    CK(cudaMemset(x, 0, nw * 4));
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&y, nw * 4));
    CK(cudaMemset(y, 0, nw * 4));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
    add_one<<<128, 256>>>(x, nw);
    add_one<<<128, 256>>>(y, nw);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(0));
    if (!all_equal(x, nw, 1) || !all_equal(y, nw, 1)) {
        std::printf("CHECK vmm_unmap FAIL peer: GPU 1's writes are not in GPU 0's memory\n");
        return 1;
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    std::printf("CHECK vmm_unmap OK peer\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "unmap";
    if (!std::strcmp(mode, "peer"))
        return peer_case();
    return unmap_case();
}
