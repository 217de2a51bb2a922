/* test_shim_linked.c - a client linked against libcuda (the driver API),
 * run under LD_PRELOAD=libfragpool.so on the simulated device.
 *
 * It checks that the pool serves the allocations (the device sees only a
 * handful of segments), that results are unchanged, that bad frees get
 * CUDA_ERROR_INVALID_VALUE while the pool stays intact (debug_check:1 runs
 * the checker after every pool operation), OOM and recovery, concurrency,
 * fork, and that dlsym(RTLD_NEXT) still resolves relative to its caller.
 */
#include "shim_test.h"
#include "fpsim.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int fp_probe_next(void);     /* tests/shim/probe_a.c */
int fp_probe_b_loaded(void); /* tests/shim/probe_b.c */

static CUcontext ctx;

static int setup(void **state)
{
    (void)state;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    return 0;
}

static void preloaded(void **state)
{
    (void)state;
    assert_true(in_fragpool((void *)cuMemAlloc_v2));
    assert_true(in_fragpool((void *)cuMemFree_v2));
    assert_false(in_fragpool((void *)cuCtxGetCurrent));
}

/* Bytes the device has handed out (segments or mapped pages). */
static unsigned long long device_bytes(void)
{
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    return c.bytes_in_use;
}

static void fill_and_check(CUdeviceptr p, size_t n, unsigned char seed)
{
    unsigned char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(seed + i * 7);
    CU(cuMemcpyHtoD_v2(p, h, n));
    CU(cuMemcpyDtoH_v2(back, p, n));
    assert_memory_equal(h, back, n);
    free(h);
    free(back);
}

static void pool_serves_many(void **state)
{
    (void)state;
    enum { N = 10000 };
    static CUdeviceptr p[N];
    size_t live = 0;
    unsigned long long grew[2];
    for (int round = 0; round < 2; round++) {
        unsigned long long before = device_bytes();
        for (int i = 0; i < N; i++) {
            size_t n = 512 + (size_t)(i % 97) * 64;
            CU(cuMemAlloc_v2(&p[i], n));
            live += round ? 0 : n;
        }
        for (int i = 0; i < N; i += 997)
            fill_and_check(p[i], 512, (unsigned char)i);
        for (int i = 0; i < N; i++)
            CU(cuMemFree_v2(p[i]));
        grew[round] = device_bytes() - before;
    }
    printf("10000 live allocations (%zu bytes) took %llu bytes of the device, "
           "the next 10000 took %llu more\n",
           live, grew[0], grew[1]);
    /* 2 MiB small-pool segments (or pages), plus a few for rounding waste. */
    assert_true(grew[0] >= live && grew[0] <= live + (8u << 20));
    assert_int_equal(grew[1], 0);
}

static void bad_frees(void **state)
{
    (void)state;
    CUdeviceptr p;
    CU(cuMemAlloc_v2(&p, 4096));
    assert_int_equal(cuMemFree_v2(p + 512), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree_v2(p));
    assert_int_equal(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    /* Never seen by the pool: the driver answers. */
    assert_int_equal(cuMemFree_v2((CUdeviceptr)0x10), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr q;
    CU(cuMemAlloc_v2(&q, 4096));
    fill_and_check(q, 4096, 3);
    CU(cuMemFree_v2(q));
}

static void oom_then_recover(void **state)
{
    (void)state;
    fpsim_counts c;
    assert_int_equal(fpsim_stats(0, &c), 0);
    fpsim_set_capacity(0, (size_t)c.bytes_in_use + 200u * 1024 * 1024);
    CUdeviceptr p[8];
    int n = 0;
    CUresult r = CUDA_SUCCESS;
    while (n < 8 && (r = cuMemAlloc_v2(&p[n], 64u << 20)) == CUDA_SUCCESS)
        n++;
    assert_int_equal(r, CUDA_ERROR_OUT_OF_MEMORY);
    assert_true(n >= 2);
    CU(cuMemFree_v2(p[0]));
    CUdeviceptr again;
    CU(cuMemAlloc_v2(&again, 64u << 20));
    fill_and_check(again, 1 << 20, 9);
    CU(cuMemFree_v2(again));
    for (int i = 1; i < n; i++)
        CU(cuMemFree_v2(p[i]));
    fpsim_set_capacity(0, (size_t)16 << 30);
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    CUdeviceptr live[32] = {0};
    unsigned vals[32] = {0};
    size_t sizes[32] = {0};
    if (cuCtxSetCurrent(ctx))
        return (void *)1;
    for (int it = 0; it < 2000; it++) {
        int k = (int)(rand_r(&seed) % 32);
        if (live[k]) {
            unsigned got = 0;
            if (cuMemcpyDtoH_v2(&got, live[k] + sizes[k] - 4, 4) || got != vals[k])
                return (void *)2;
            if (cuMemFree_v2(live[k]))
                return (void *)3;
            live[k] = 0;
        } else {
            sizes[k] = 4 * (1 + rand_r(&seed) % 300000);
            vals[k] = rand_r(&seed);
            if (cuMemAlloc_v2(&live[k], sizes[k]) || cuMemsetD32_v2(live[k], vals[k], sizes[k] / 4))
                return (void *)4;
        }
    }
    for (int k = 0; k < 32; k++)
        if (live[k] && cuMemFree_v2(live[k]))
            return (void *)5;
    return NULL;
}

static void eight_threads(void **state)
{
    (void)state;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < 8; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_null(rc);
    }
}

static void fork_child_without_cuda(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        exit(0);
    }
    close(fds[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* No summary from a child that used no CUDA.  (Sanitizer runtimes may
     * print notes of their own about the child's threads.) */
    assert_null(strstr(buf, "fragpool"));
}

static void rtld_next_resolves_from_caller(void **state)
{
    (void)state;
    assert_int_equal(fp_probe_b_loaded(), 1);
    assert_int_equal(fp_probe_next(), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(preloaded),
        cmocka_unit_test(pool_serves_many),
        cmocka_unit_test(bad_frees),
        cmocka_unit_test(oom_then_recover),
        cmocka_unit_test(eight_threads),
        cmocka_unit_test(fork_child_without_cuda),
        cmocka_unit_test(rtld_next_resolves_from_caller),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
