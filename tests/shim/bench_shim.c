/* bench_shim.c - host cost of cuMemAlloc_v2 + cuMemFree_v2 through the
 * shim on the simulated device: fixed sizes, and random sizes from 512 B
 * to 64 MiB with 128 live blocks.  Not a test: run it under the shim,
 *   LD_PRELOAD=build/lib/libfragpool.so LD_LIBRARY_PATH=build/lib/simdev \
 *     build/bin/bench_shim
 * and compare with the same run on a real GPU (tests/gpu/bench_alloc.cu).
 */
#include "fp_cuda.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double fixed(size_t size, int iters)
{
    CUdeviceptr p;
    for (int i = 0; i < 1000; i++) {
        cuMemAlloc_v2(&p, size);
        cuMemFree_v2(p);
    }
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        cuMemAlloc_v2(&p, size);
        cuMemFree_v2(p);
    }
    return (now() - t0) / iters;
}

static double random_live(int iters)
{
    enum { LIVE = 128 };
    CUdeviceptr live[LIVE];
    unsigned seed = 7;
    double lo = log(512.0), hi = log(64.0 * 1024 * 1024);
    size_t *sizes = malloc((size_t)iters * sizeof *sizes);
    for (int i = 0; i < iters; i++)
        sizes[i] = (size_t)exp(lo + (hi - lo) * (rand_r(&seed) / (double)RAND_MAX));
    for (int i = 0; i < LIVE; i++)
        cuMemAlloc_v2(&live[i], sizes[i]);
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        int k = i % LIVE;
        cuMemFree_v2(live[k]);
        cuMemAlloc_v2(&live[k], sizes[i]);
    }
    double ns = (now() - t0) / iters;
    for (int i = 0; i < LIVE; i++)
        cuMemFree_v2(live[i]);
    free(sizes);
    return ns;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 1;
    size_t sizes[] = {512, 1 << 20, 8 << 20, 64 << 20};
    for (int i = 0; i < 4; i++)
        printf("BENCH fixed %zu %.1f ns/pair\n", sizes[i], fixed(sizes[i], 200000));
    printf("BENCH random-128-live %.1f ns/pair\n", random_live(200000));
    return 0;
}
