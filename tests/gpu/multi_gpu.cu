// multi_gpu.cu - allocations on every GPU of the machine under fragpool:
// each device gets its own pool; a buffer freed while another device is
// current goes back to its own pool; peer copies between pool buffers
// give the right bytes.  Prints "CHECK multi_gpu OK <devices>" or FAIL,
// or "CHECK multi_gpu SKIP" with fewer than 2 GPUs (exit 77).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK_NAME "multi_gpu"
#include "gpu_check.h"

__global__ void fill(unsigned *p, size_t n, unsigned salt)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = (unsigned)i * 2654435761u ^ salt;
}

static bool check(const unsigned *p, size_t n, unsigned salt)
{
    std::vector<unsigned> h(n);
    if (cudaMemcpy(h.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost) != cudaSuccess)
        return false;
    for (size_t i = 0; i < n; i++)
        if (h[i] != ((unsigned)i * 2654435761u ^ salt))
            return false;
    return true;
}

int main()
{
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) {
        std::printf("CHECK multi_gpu SKIP %d GPU\n", ndev);
        return 77;
    }
    const size_t n = 3u << 20; /* 12 MiB of words */
    std::vector<unsigned *> buf(ndev);
    for (int round = 0; round < 50; round++) {
        for (int d = 0; d < ndev; d++) {
            CK(cudaSetDevice(d));
            CK(cudaMalloc(&buf[d], n * sizeof(unsigned)));
            fill<<<(unsigned)((n + 255) / 256), 256>>>(buf[d], n, (unsigned)(d * 1000 + round));
            CK(cudaGetLastError());
        }
        for (int d = 0; d < ndev; d++) {
            CK(cudaSetDevice(d));
            if (!check(buf[d], n, (unsigned)(d * 1000 + round))) {
                std::printf("CHECK multi_gpu FAIL device %d round %d: wrong contents\n", d, round);
                return 1;
            }
        }
        /* device 0's buffer receives device 1's bytes by a peer copy */
        CK(cudaSetDevice(0));
        CK(cudaMemcpyPeer(buf[0], 0, buf[1], 1, n * sizeof(unsigned)));
        if (!check(buf[0], n, (unsigned)(1000 + round))) {
            std::printf("CHECK multi_gpu FAIL peer copy round %d\n", round);
            return 1;
        }
        /* free every buffer with the *next* device current */
        for (int d = 0; d < ndev; d++) {
            CK(cudaSetDevice((d + 1) % ndev));
            CK(cudaFree(buf[d]));
        }
    }
    for (int d = 0; d < ndev; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
    }
    std::printf("CHECK multi_gpu OK %d devices, 50 rounds\n", ndev);
    return 0;
}
