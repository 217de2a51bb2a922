// memcheck_oob.cu - the programs compute-sanitizer's memcheck must judge
// the same with and without fragpool, and a CUDA C++ workload
// for the memory_viz snapshot check.
//
// Usage: memcheck_oob MODE
//   oob    writes one element past a 1000-float cudaMalloc (a planted bug)
//   uaf    writes into a 1000-float cudaMalloc after cudaFree (a planted bug)
//   ok     the same kernels, in bounds and before the free (no error)
//   churn  2000 allocations of mixed sizes, each written by a kernel, most
//          freed, a few left live (no error; the snapshot check's program)
// Prints "memcheck_oob MODE done" and exits 0 (memcheck counts the errors;
// the program itself ignores what the planted bugs do).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void write_at(float *p, int i, float v)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        p[i] = v;
}

__global__ void fill(float *p, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = (float)i;
}

static void one(const char *mode)
{
    float *a = nullptr;
    cudaMalloc(&a, 1000 * sizeof(float));
    if (!strcmp(mode, "oob")) {
        write_at<<<1, 1>>>(a, 1000, 1.0f); // one past the end
        cudaDeviceSynchronize();
        cudaFree(a);
    } else if (!strcmp(mode, "uaf")) {
        cudaFree(a);
        write_at<<<1, 1>>>(a, 10, 1.0f); // after the free
        cudaDeviceSynchronize();
    } else {
        write_at<<<1, 1>>>(a, 999, 1.0f); // the last element: fine
        cudaDeviceSynchronize();
        cudaFree(a);
    }
}

static void churn()
{
    std::vector<float *> live;
    unsigned s = 12345;
    for (int i = 0; i < 2000; i++) {
        s = s * 1103515245u + 12345u;
        size_t n = 256u << ((s >> 16) % 14); // 1 KiB .. 8 MiB of floats
        float *p = nullptr;
        if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) {
            std::printf("memcheck_oob churn: cudaMalloc of %zu floats failed\n", n);
            std::exit(1);
        }
        fill<<<(unsigned)((n + 255) / 256), 256>>>(p, n);
        live.push_back(p);
        if (live.size() > 24) {
            size_t k = (s >> 8) % live.size();
            cudaFree(live[k]);
            live.erase(live.begin() + (long)k);
        }
    }
    cudaDeviceSynchronize();
    for (size_t k = 4; k < live.size(); k++) // 4 stay live: the leak report's
        cudaFree(live[k]);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    if (!strcmp(mode, "churn"))
        churn();
    else if (!strcmp(mode, "oob") || !strcmp(mode, "uaf") || !strcmp(mode, "ok"))
        one(mode);
    else {
        std::printf("usage: memcheck_oob oob|uaf|ok|churn\n");
        return 2;
    }
    std::printf("memcheck_oob %s done\n", mode);
    return 0;
}
