/* demo_workload.c - the demo's unmodified CUDA program.  It reaches the
 * driver the way the CUDA runtime does (dlopen libcuda.so.1, then
 * cuGetProcAddress_v2 by name and version) and runs variable-shape
 * "training steps": long-lived weights, per-layer activations whose size
 * follows a sequence length drawn anew each step, gradients allocated while
 * activations are freed in reverse, and small temporaries.  That pattern
 * fragments a cache.  Every buffer is filled and read back.  Out of memory,
 * it exits with status 3, as a training script that dies of it would.
 */
#include "fp_cuda.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LAYERS 12
#define STEPS  30

static struct {
    fp_PFN_cuInit init;
    fp_PFN_cuDeviceGet device_get;
    fp_PFN_cuDeviceGetName name;
    fp_PFN_cuDevicePrimaryCtxRetain retain;
    fp_PFN_cuCtxSetCurrent set_current;
    fp_PFN_cuMemAlloc_v2 alloc;
    fp_PFN_cuMemFree_v2 free;
    fp_PFN_cuMemsetD8_v2 memset8;
    fp_PFN_cuMemcpyDtoH_v2 d2h;
} cu;

static double alloc_seconds;
static unsigned long long nallocs, nfrees;
static size_t live_bytes, peak_live; /* requested bytes live, and their peak */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib)
        return fprintf(stderr, "demo: cannot load libcuda.so.1\n"), -1;
    fp_PFN_cuGetProcAddress_v2 gpa = (fp_PFN_cuGetProcAddress_v2)dlsym(lib, "cuGetProcAddress_v2");
    if (!gpa)
        return -1;
    CUdriverProcAddressQueryResult st;
    struct {
        const char *name;
        int ver;
        void **slot;
    } fns[] = {
        {"cuInit", 2000, (void **)&cu.init},
        {"cuDeviceGet", 2000, (void **)&cu.device_get},
        {"cuDeviceGetName", 2000, (void **)&cu.name},
        {"cuDevicePrimaryCtxRetain", 7000, (void **)&cu.retain},
        {"cuCtxSetCurrent", 4000, (void **)&cu.set_current},
        {"cuMemAlloc", 3020, (void **)&cu.alloc},
        {"cuMemFree", 3020, (void **)&cu.free},
        {"cuMemsetD8", 3020, (void **)&cu.memset8},
        {"cuMemcpyDtoH", 3020, (void **)&cu.d2h},
    };
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++)
        if (gpa(fns[i].name, fns[i].slot, fns[i].ver, 0, &st) != CUDA_SUCCESS)
            return fprintf(stderr, "demo: driver lacks %s\n", fns[i].name), -1;
    return 0;
}

static CUdeviceptr take(size_t bytes, unsigned char fill)
{
    CUdeviceptr p = 0;
    double t = now();
    CUresult r = cu.alloc(&p, bytes);
    alloc_seconds += now() - t;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) { /* as a training script dies of it */
        fprintf(stderr, "demo: out of memory: cuMemAlloc(%zu) failed\n", bytes);
        exit(3);
    }
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "demo: cuMemAlloc(%zu) failed with %d\n", bytes, (int)r);
        exit(1);
    }
    nallocs++;
    live_bytes += bytes;
    if (live_bytes > peak_live)
        peak_live = live_bytes;
    if (cu.memset8(p, fill, bytes) != CUDA_SUCCESS)
        exit(1);
    return p;
}

static void give(CUdeviceptr p, size_t bytes, unsigned char fill)
{
    unsigned char first = 0, last = 0;
    if (cu.d2h(&first, p, 1) || cu.d2h(&last, p + bytes - 1, 1) || first != fill || last != fill) {
        fprintf(stderr, "demo: buffer at 0x%llx lost its contents\n", (unsigned long long)p);
        exit(1);
    }
    double t = now();
    CUresult r = cu.free(p);
    alloc_seconds += now() - t;
    if (r != CUDA_SUCCESS)
        exit(1);
    nfrees++;
    live_bytes -= bytes;
}

static void step(unsigned *seed)
{
    size_t batch = 16, seq = 256 + 64 * (rand_r(seed) % 13);
    size_t act = batch * seq * 512 * 2;
    CUdeviceptr a[LAYERS], tmp[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        a[l] = take(act + (size_t)l * 4096, (unsigned char)l);
        size_t tsize = 4096 + rand_r(seed) % 65536;
        tmp[l] = take(tsize, 0x5a);
        give(tmp[l], tsize, 0x5a);
    }
    for (int l = LAYERS - 1; l >= 0; l--) {
        CUdeviceptr g = take(act / 2 + 512, 0xee);
        give(a[l], act + (size_t)l * 4096, (unsigned char)l);
        give(g, act / 2 + 512, 0xee);
    }
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    char name[128] = "?";
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with stderr through a pipe */
    if (load() || cu.init(0) || cu.device_get(&dev, 0) || cu.retain(&ctx, dev) ||
        cu.set_current(ctx))
        return 1;
    cu.name(name, sizeof name, dev);
    printf("device: %s\n", name);
    size_t wsize[4] = {64 << 20, 16 << 20, 4 << 20, 1 << 20};
    CUdeviceptr w[4];
    for (int i = 0; i < 4; i++)
        w[i] = take(wsize[i], 0x11);
    unsigned seed = 1234;
    double t0 = now();
    for (int s = 0; s < STEPS; s++)
        step(&seed);
    double total = now() - t0;
    for (int i = 0; i < 4; i++)
        give(w[i], wsize[i], 0x11);
    printf("%d steps in %.1f ms; %llu allocations, %llu frees, every buffer checked\n", STEPS,
           total * 1e3, nallocs, nfrees);
    printf("host time in cuMemAlloc+cuMemFree: %.2f us per pair\n",
           alloc_seconds * 1e6 / (double)(nallocs ? nallocs : 1));
    printf("peak live: %.2f MiB requested at once\n", (double)peak_live / (1 << 20));
    fflush(stdout);
    return 0;
}
