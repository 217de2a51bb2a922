/* host_costs.c - what the pieces of fragpool's hot path cost on this host:
 * the CPU primitives it uses (time-stamp counter, an uncontended mutex) and
 * the driver calls that deferred reuse makes (cuCtxGetCurrent on every
 * call, cuEventRecord to seal a fence, cuEventQuery to poll one,
 * cuCtxSynchronize before the pool grows), each timed alone on an idle
 * GPU.  Plain C: it loads libcuda.so.1 with dlopen, so it builds without
 * the CUDA toolkit and cannot rot; scripts/gpu-check.sh runs it (not under
 * the shim) so the numbers in docs/gpu.md, "Measured: host cost and
 * training on an H200", can be added up against the measured cost of a
 * cuMemAlloc+cuMemFree pair.  Also cuEventQuery on an event that has not
 * completed, which costs far more than on one that has.
 *
 * Prints "COST <name> <ns per call>" lines, then "CHECK host_costs OK".
 */
#include "fp_cuda.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#define TIME(name, n, body)                                                                        \
    do {                                                                                           \
        double t0_ = now_ns();                                                                     \
        for (long i_ = 0; i_ < (n); i_++) {                                                        \
            body;                                                                                  \
        }                                                                                          \
        printf("COST %-28s %8.1f\n", name, (now_ns() - t0_) / (double)(n));                        \
    } while (0)

static void *sym(void *h, const char *name)
{
    void *f = dlsym(h, name);
    if (!f) {
        printf("CHECK host_costs FAIL: no %s in libcuda.so.1\n", name);
        exit(1);
    }
    return f;
}

static void *idle_thread(void *arg)
{
    return arg;
}

/* Timed with a second thread started first: glibc takes a mutex without
 * atomics while a process has only one thread, and CUDA programs never do. */
static void nap(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void cpu_costs(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, idle_thread, NULL) == 0)
        pthread_join(t, NULL);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    struct timespec ts;
    volatile unsigned long long sink = 0;
    TIME("clock_gettime", 1000000, clock_gettime(CLOCK_MONOTONIC, &ts));
#if defined(__x86_64__)
    TIME("rdtsc", 1000000, sink += __builtin_ia32_rdtsc());
#endif
    TIME("mutex_lock_unlock", 1000000, pthread_mutex_lock(&m); pthread_mutex_unlock(&m));
    (void)sink;
}

int main(void)
{
    cpu_costs();
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("CHECK host_costs SKIP: no libcuda.so.1 (%s)\n", dlerror());
        return 0;
    }
    fp_PFN_cuInit init = (fp_PFN_cuInit)sym(h, "cuInit");
    fp_PFN_cuDeviceGet dev_get = (fp_PFN_cuDeviceGet)sym(h, "cuDeviceGet");
    fp_PFN_cuDevicePrimaryCtxRetain retain =
        (fp_PFN_cuDevicePrimaryCtxRetain)sym(h, "cuDevicePrimaryCtxRetain");
    fp_PFN_cuCtxSetCurrent set_cur = (fp_PFN_cuCtxSetCurrent)sym(h, "cuCtxSetCurrent");
    fp_PFN_cuCtxGetCurrent get_cur = (fp_PFN_cuCtxGetCurrent)sym(h, "cuCtxGetCurrent");
    fp_PFN_cuCtxSynchronize ctx_sync = (fp_PFN_cuCtxSynchronize)sym(h, "cuCtxSynchronize");
    fp_PFN_cuEventCreate ev_create = (fp_PFN_cuEventCreate)sym(h, "cuEventCreate");
    fp_PFN_cuEventRecord ev_record = (fp_PFN_cuEventRecord)sym(h, "cuEventRecord");
    fp_PFN_cuEventQuery ev_query = (fp_PFN_cuEventQuery)sym(h, "cuEventQuery");
    fp_PFN_cuStreamQuery st_query = (fp_PFN_cuStreamQuery)sym(h, "cuStreamQuery");
    fp_PFN_cuLaunchHostFunc host_func = (fp_PFN_cuLaunchHostFunc)sym(h, "cuLaunchHostFunc");
    CUdevice dev;
    CUcontext ctx, cur;
    CUevent ev;
    if (init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set_cur(ctx) ||
        ev_create(&ev, CU_EVENT_DISABLE_TIMING)) {
        printf("CHECK host_costs FAIL: no CUDA context\n");
        return 1;
    }
    TIME("cuCtxGetCurrent", 1000000, get_cur(&cur));
    TIME("cuCtxSynchronize_idle", 100000, ctx_sync());
    TIME("cuStreamQuery_legacy_idle", 100000, st_query(CU_STREAM_LEGACY));
    TIME("cuEventRecord_legacy", 100000, ev_record(ev, CU_STREAM_LEGACY));
    ctx_sync();
    TIME("cuEventQuery_done", 100000, ev_query(ev));
    TIME("cuEventRecord+Query_idle", 100000, ev_record(ev, CU_STREAM_LEGACY); ev_query(ev));
    /* An event behind 50 ms of host-function work: every query says
     * CUDA_ERROR_NOT_READY (checked at the end). */
    CUresult busy = host_func(CU_STREAM_LEGACY, nap, NULL);
    if (!busy)
        busy = ev_record(ev, CU_STREAM_LEGACY);
    if (!busy) {
        TIME("cuEventQuery_not_ready", 10000, ev_query(ev));
        if (ev_query(ev) != CUDA_ERROR_NOT_READY)
            printf("COST note: the event completed during the not-ready loop\n");
    }
    ctx_sync();
    printf("CHECK host_costs OK\n");
    return 0;
}
