/* test_shim_fork.c - fork while other threads are inside the allocator.
 *
 * Four threads allocate and free without pause while the main thread forks
 * 200 children; each child allocates and frees 100 times through the pools
 * it inherited, then exits.  No child may hang on a lock that a parent
 * thread held at the fork: each must end within 20 s.  Run under every
 * policy, and under TSan in CI.
 */
#define _POSIX_C_SOURCE 200809L
#include "shim_test.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kThreads = 4, kChildren = 200, kChildOps = 100 };

static CUcontext ctx;
static atomic_bool stop;

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    cuCtxSetCurrent(ctx);
    CUdeviceptr live[8] = {0};
    while (!atomic_load(&stop)) {
        int i = rand_r(&seed) % 8;
        if (live[i])
            cuMemFree_v2(live[i]);
        live[i] = 0;
        cuMemAlloc_v2(&live[i], 512 + (size_t)(rand_r(&seed) % (3 << 20)));
    }
    for (int i = 0; i < 8; i++)
        if (live[i])
            cuMemFree_v2(live[i]);
    return NULL;
}

static void child_body(void)
{
    for (int i = 0; i < kChildOps; i++) {
        CUdeviceptr p = 0;
        if (cuMemAlloc_v2(&p, 4096 + (size_t)i * 1000) != CUDA_SUCCESS ||
            cuMemFree_v2(p) != CUDA_SUCCESS)
            _exit(3);
    }
    _exit(0);
}

/* The child's exit status, or -1 when it had to be killed after 20 s. */
static int reap(pid_t pid)
{
    int status = 0;
    for (int ms = 0; ms < 20000; ms++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static void fork_under_load(void **state)
{
    (void)state;
    CUdevice dev;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUdeviceptr warm;
    CU(cuMemAlloc_v2(&warm, 1 << 20)); /* the pool exists before the first fork */
    pthread_t t[kThreads];
    for (int i = 0; i < kThreads; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)), 0);
    int hung = 0, failed = 0;
    for (int c = 0; c < kChildren; c++) {
        pid_t pid = fork();
        if (pid == 0)
            child_body();
        assert_true(pid > 0);
        int rc = reap(pid);
        hung += rc == -1;
        failed += rc != 0 && rc != -1;
    }
    atomic_store(&stop, true);
    for (int i = 0; i < kThreads; i++)
        pthread_join(t[i], NULL);
    CU(cuMemFree_v2(warm));
    print_message("%d children: %d hung, %d failed\n", kChildren, hung, failed);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(fork_under_load)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
