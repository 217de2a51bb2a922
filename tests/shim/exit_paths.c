/* exit_paths.c - a tiny CUDA client (linked -lcuda against the simulated
 * device) that the shim tests run under LD_PRELOAD=libfragpool.so: not a
 * test by itself.  It allocates and frees a few blocks, leaves one live
 * (EP_LIVE_SIZE bytes, so the leak report can be checked), then leaves
 * the process the way argv[1] says:
 *
 *   return                 return 0 from main
 *   exit                   exit(0) from main
 *   thread-exit            exit(0) from another thread while main waits
 *   fork-nocuda            fork a child that exits (exit(0)) without any
 *                          CUDA call; the parent waits, then returns
 *   abort-free-after-exit  an atexit handler registered BEFORE the first
 *                          CUDA call (so it runs after fragpool's) frees
 *                          the live pool block during exit: it must not
 *                          crash, and fragpool must not call the driver
 *   nocuda                 no CUDA call at all (config checks)
 *   workload[-fork]        a deterministic mixed workload for the trace
 *                          test (sync and stream-ordered calls); -fork
 *                          forks a CUDA-free child half-way through
 *   sigusr1-self           sends itself SIGUSR1 after the few blocks, waits
 *                          500 ms (the dump thread writes), then returns
 *   sigusr1-child          forks a child that sleeps 1 s and _exits; the
 *                          parent sends the child SIGUSR1, waits for it,
 *                          waits 300 ms more, then returns (the parent
 *                          must not dump: the signal was not its own)
 *   signal-exit            a SIGALRM handler calls exit(0); a timer fires
 *                          it 0.5-3 ms after the first allocation and free
 *                          (then every 0.3 ms) while main
 *                          allocates and frees in a tight loop: fragpool's
 *                          exit handler runs inside an interrupted call
 *   fork-cuda              before any CUDA call, forks a child that
 *                          allocates and frees through fragpool, then exits
 *                          (exit(0)): the child writes a summary of its own;
 *                          the parent waits, then goes on as "return"
 *
 * stdout gets one "key=value" line per fact the tests check:
 *   main=1, live=<bytes>, child-pid=<pid>, late-free rc=.. driver-frees=..
 *   driver-syncs=.., allocs=.. frees=.. peak-rounded=...
 * Exit status 0; 10+ when a CUDA call failed.
 */
#include "fp_cuda.h"
#include "fpsim.h"
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EP_LIVE_SIZE ((size_t)5767168) /* 5.50 MiB: left live at exit */

static CUdeviceptr live_block;
static CUcontext ctx;

static void need(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "exit_paths: %s failed with %d\n", what, (int)r);
        fflush(stderr);
        _exit(10);
    }
}

static void context(void)
{
    CUdevice dev;
    need(cuInit(0), "cuInit");
    need(cuDeviceGet(&dev, 0), "cuDeviceGet");
    need(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    need(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

/* a (1000 B), b (3 MiB) and the live block c (5.50 MiB) are live at once;
 * a and b are freed: peak allocated = 1024 + 3 MiB + 5.50 MiB. */
static void few_blocks(void)
{
    CUdeviceptr a, b;
    unsigned char in[4096], out[4096];
    need(cuMemAlloc_v2(&a, 1000), "cuMemAlloc a");
    need(cuMemAlloc_v2(&b, 3u << 20), "cuMemAlloc b");
    need(cuMemAlloc_v2(&live_block, EP_LIVE_SIZE), "cuMemAlloc c");
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (unsigned char)(i * 13 + 1);
    need(cuMemcpyHtoD_v2(live_block + EP_LIVE_SIZE - sizeof in, in, sizeof in), "HtoD");
    need(cuMemcpyDtoH_v2(out, live_block + EP_LIVE_SIZE - sizeof in, sizeof out), "DtoH");
    if (memcmp(in, out, sizeof in) != 0) {
        fprintf(stderr, "exit_paths: device memory does not read back\n");
        _exit(11);
    }
    need(cuMemFree_v2(a), "cuMemFree a");
    need(cuMemFree_v2(b), "cuMemFree b");
    printf("live=%zu\n", EP_LIVE_SIZE);
    fflush(stdout);
}

static void *exit_from_thread(void *arg)
{
    (void)arg;
    CUdeviceptr p;
    need(cuCtxSetCurrent(ctx), "cuCtxSetCurrent in thread");
    need(cuMemAlloc_v2(&p, 512), "cuMemAlloc in thread");
    need(cuMemFree_v2(p), "cuMemFree in thread");
    exit(0);
}

/* Runs after fragpool's exit handler (registered later, at the first
 * CUDA call): frees the live pool block while the process exits. */
static void late_free(void)
{
    fpsim_counts before, after;
    if (fpsim_stats(0, &before) != 0)
        _exit(12);
    CUresult r = cuMemFree_v2(live_block);
    if (fpsim_stats(0, &after) != 0)
        _exit(13);
    printf("late-free rc=%d driver-frees=%llu driver-syncs=%llu\n", (int)r,
           after.free_calls - before.free_calls, after.device_syncs - before.device_syncs);
    fflush(stdout);
}

/* LeakSanitizer (sanitizer builds) calls this at exit.  In the forked
 * child its check cannot stop the threads the fork left behind (the
 * simulated device's workers) and says so on stderr, which would look like
 * output of the child: the child turns it off.  The parent keeps it. */
static volatile int in_forked_child;
int __lsan_is_turned_off(void) __attribute__((visibility("default")));
int __lsan_is_turned_off(void)
{
    return in_forked_child;
}

static pid_t fork_nocuda(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        _exit(14);
    if (pid == 0) {
        in_forked_child = 1;
        exit(0); /* runs the atexit handlers, fragpool's too */
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        _exit(15);
    printf("child-pid=%d\n", (int)pid);
    fflush(stdout);
    return pid;
}

/* SIGUSR1 goes to a forked child only; its dump pipe must be its own. */
static void sigusr1_child(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        _exit(20);
    if (pid == 0) {
        in_forked_child = 1;
        struct timespec t = {1, 0};
        while (nanosleep(&t, &t) != 0)
            ;
        _exit(0);
    }
    struct timespec ready = {0, 200000000}, after = {0, 300000000};
    nanosleep(&ready, NULL);
    kill(pid, SIGUSR1);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        _exit(21);
    nanosleep(&after, NULL);
    printf("child-pid=%d\n", (int)pid);
    fflush(stdout);
}

/* ---- exit() from a signal handler ---------------------------------------- */

static uint32_t lcg(uint32_t *s);

static void exit_now(int sig)
{
    (void)sig;
    exit(0);
}

static void signal_exit(void)
{
    struct sigaction sa = {.sa_handler = exit_now};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct timespec ts;
    CUdeviceptr first; /* the pools exist before the timer runs */
    need(cuMemAlloc_v2(&first, 4096), "cuMemAlloc first");
    need(cuMemFree_v2(first), "cuMemFree first");
    clock_gettime(CLOCK_MONOTONIC, &ts);
    struct itimerval it = {.it_interval = {0, 300},
                           .it_value = {0, 500 + (long)(ts.tv_nsec / 1000 % 2500)}};
    setitimer(ITIMER_REAL, &it, NULL);
    uint32_t s = (uint32_t)ts.tv_nsec;
    CUdeviceptr p[8] = {0};
    for (unsigned i = 0;; i++) {
        unsigned k = i % 8;
        if (p[k])
            need(cuMemFree_v2(p[k]), "cuMemFree");
        need(cuMemAlloc_v2(&p[k], 1 + lcg(&s) % (4u << 20)), "cuMemAlloc");
    }
}

static void fork_cuda(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        _exit(40);
    if (pid == 0) {
        in_forked_child = 1;
        CUdeviceptr p;
        context();
        need(cuMemAlloc_v2(&p, 1u << 20), "cuMemAlloc in child");
        need(cuMemFree_v2(p), "cuMemFree in child");
        exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        _exit(41);
    printf("child-pid=%d\n", (int)pid);
    fflush(stdout);
}

/* ---- the trace workload ------------------------------------------------ */

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Sizes whose block is always exactly the rounded request, whatever block
 * the pool picks (so peak allocated does not depend on pending blocks):
 * small requests (<= 1 MiB, rounded to 512 B, 2 MiB segments) and large
 * ones in whole multiples of 2 MiB. */
static size_t workload_size(uint32_t *s)
{
    uint32_t k = lcg(s) % 10;
    if (k < 6)
        return 1 + lcg(s) % (1u << 20);
    if (k < 9)
        return (size_t)(1 + lcg(s) % 4) << 21; /* 2, 4, 6, 8 MiB */
    return (size_t)(5 + lcg(s) % 8) << 21;     /* 10 .. 24 MiB */
}

static size_t round512(size_t n)
{
    return (n + 511) & ~(size_t)511;
}

static void workload(int with_fork)
{
    enum { SLOTS = 24, STEPS = 3000 };
    CUdeviceptr p[SLOTS] = {0};
    size_t sz[SLOTS] = {0};
    int async[SLOTS] = {0};
    CUstream s;
    uint32_t seed = 12345;
    unsigned long allocs = 0, frees = 0;
    size_t live = 0, peak = 0;
    need(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    for (int step = 0; step < STEPS; step++) {
        if (with_fork && step == STEPS / 2)
            fork_nocuda();
        int k = (int)(lcg(&seed) % SLOTS);
        if (p[k]) {
            if (async[k])
                need(cuMemFreeAsync(p[k], s), "cuMemFreeAsync");
            else
                need(cuMemFree_v2(p[k]), "cuMemFree");
            live -= round512(sz[k]);
            p[k] = 0;
            frees++;
            continue;
        }
        sz[k] = workload_size(&seed);
        async[k] = lcg(&seed) % 3 == 0;
        if (async[k]) {
            need(cuMemAllocAsync(&p[k], sz[k], s), "cuMemAllocAsync");
            need(cuMemsetD8Async(p[k], (unsigned char)k, sz[k] < 4096 ? sz[k] : 4096, s),
                 "cuMemsetD8Async");
        } else {
            need(cuMemAlloc_v2(&p[k], sz[k]), "cuMemAlloc");
            need(cuMemsetD8_v2(p[k], (unsigned char)k, sz[k] < 4096 ? sz[k] : 4096), "cuMemsetD8");
        }
        allocs++;
        live += round512(sz[k]);
        if (live > peak)
            peak = live;
    }
    /* Free all but the first three live blocks: those stay live at exit. */
    int kept = 0;
    for (int k = 0; k < SLOTS; k++) {
        if (!p[k] || kept++ < 3)
            continue;
        if (async[k])
            need(cuMemFreeAsync(p[k], s), "cuMemFreeAsync");
        else
            need(cuMemFree_v2(p[k]), "cuMemFree");
        frees++;
    }
    need(cuStreamSynchronize(s), "cuStreamSynchronize");
    printf("allocs=%lu frees=%lu peak-rounded=%zu\n", allocs, frees, peak);
    fflush(stdout);
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "return";
    printf("main=1\n");
    fflush(stdout);
    if (strcmp(mode, "nocuda") == 0)
        return 0;
    if (strcmp(mode, "abort-free-after-exit") == 0 && atexit(late_free) != 0)
        return 16;
    if (strcmp(mode, "fork-cuda") == 0) {
        fork_cuda();
        mode = "return";
    }
    context();
    if (strncmp(mode, "workload", 8) == 0) {
        workload(strcmp(mode, "workload-fork") == 0);
        return 0;
    }
    if (strcmp(mode, "signal-exit") == 0)
        signal_exit();
    few_blocks();
    if (strcmp(mode, "return") == 0 || strcmp(mode, "abort-free-after-exit") == 0)
        return 0;
    if (strcmp(mode, "exit") == 0)
        exit(0);
    if (strcmp(mode, "thread-exit") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, exit_from_thread, NULL) != 0)
            return 17;
        pthread_join(t, NULL); /* never returns: the thread exits the process */
        return 18;
    }
    if (strcmp(mode, "fork-nocuda") == 0) {
        fork_nocuda();
        return 0;
    }
    if (strcmp(mode, "sigusr1-child") == 0) {
        sigusr1_child();
        return 0;
    }
    if (strcmp(mode, "sigusr1-self") == 0) {
        struct timespec ts = {0, 500 * 1000 * 1000};
        kill(getpid(), SIGUSR1);
        nanosleep(&ts, NULL);
        return 0;
    }
    fprintf(stderr, "exit_paths: unknown mode '%s'\n", mode);
    return 19;
}
