/* bench_threads.c - host cost of allocation pairs through the shim on the
 * simulated device, from 1, 2, 4 and 8 threads at once: bench_alloc.cu's
 * work32 loop (32 live blocks per thread, 512 B .. 4 MiB log-uniform, a
 * free then an allocation in a random slot) through cuMemAlloc_v2 and
 * through cuMemAllocAsync on each thread's own stream.  The figure is ns
 * per pair over all pairs: the wall time of the run over every thread's
 * pairs (lower is better; equal at 1 and 2 threads means the total rate
 * did not fall).  Not a test: run it under the shim,
 *   LD_PRELOAD=build/lib/libfragpool.so LD_LIBRARY_PATH=build/lib/simdev \
 *     build/bin/bench_threads [pairs_per_thread=200000] [threads=1,2,4,8]
 *       [entry=both|sync|async]
 */
#include "fp_cuda.h"
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LIVE = 32, DOUBLINGS = 13 };

static CUcontext ctx;
static long pairs;
static int async_mode;
static pthread_barrier_t start;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t random_size(uint64_t *s)
{
    double u = (double)(rnd(s) >> 11) / 9007199254740992.0;
    return (size_t)(512.0 * exp2(u * DOUBLINGS));
}

static int alloc(CUdeviceptr *p, size_t n, CUstream s)
{
    return async_mode ? cuMemAllocAsync(p, n, s) : cuMemAlloc_v2(p, n);
}

static int release(CUdeviceptr p, CUstream s)
{
    return async_mode ? cuMemFreeAsync(p, s) : cuMemFree_v2(p);
}

static void *worker(void *arg)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(uintptr_t)arg + 1;
    CUdeviceptr slot[LIVE];
    CUstream s = NULL;
    int bad = 0;
    cuCtxSetCurrent(ctx);
    if (async_mode && cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
        return (void *)1;
    for (int i = 0; i < LIVE; i++)
        bad |= alloc(&slot[i], random_size(&seed), s);
    pthread_barrier_wait(&start);
    for (long i = 0; i < pairs; i++) {
        int j = (int)(rnd(&seed) % LIVE);
        bad |= release(slot[j], s);
        bad |= alloc(&slot[j], random_size(&seed), s);
    }
    pthread_barrier_wait(&start);
    for (int i = 0; i < LIVE; i++)
        bad |= release(slot[i], s);
    if (s) {
        cuStreamSynchronize(s);
        cuStreamDestroy_v2(s);
    }
    return (void *)(uintptr_t)(bad != 0);
}

static double run(int threads)
{
    pthread_t t[64];
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    pthread_barrier_wait(&start);
    double t0 = now();
    pthread_barrier_wait(&start);
    double ns = (now() - t0) / ((double)pairs * threads);
    int bad = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= r != NULL;
    }
    pthread_barrier_destroy(&start);
    return bad ? -1 : ns;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    pairs = argc > 1 ? atol(argv[1]) : 200000;
    const char *list = argc > 2 ? argv[2] : "1,2,4,8";
    if (pairs < 1 || cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 1;
    const char *entry = argc > 3 ? argv[3] : "both";
    int first = strcmp(entry, "async") == 0, last = strcmp(entry, "sync") == 0 ? 0 : 1;
    for (async_mode = first; async_mode <= last; async_mode++) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", list);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int n = atoi(tok);
            if (n < 1 || n > 64)
                continue;
            double ns = run(n);
            printf("BENCH work32 %s threads=%d %.1f ns/pair\n",
                   async_mode ? "cuMemAllocAsync" : "cuMemAlloc", n, ns);
            fflush(stdout);
        }
    }
    return 0;
}
