/* test_shim_fork.c - fork while other threads are inside the allocator.
 *
 * Four threads allocate and free without pause while the main thread forks
 * 200 children; each child frees a block it inherited and allocates and
 * frees 100 times through the pools it inherited (the driver refusing
 * what reaches it), then exits.  No child may hang on a lock that a parent
 * thread held at the fork: each must end within 20 s.  The threads also
 * export each new block (cuIpcGetMemHandle: with ipc_export:fragpool the
 * registry's lock, which every child's free takes).  Run under every
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
        CUipcMemHandle h;
        if (cuMemAlloc_v2(&live[i], 512 + (size_t)(rand_r(&seed) % (3 << 20))) == CUDA_SUCCESS)
            cuIpcGetMemHandle(&h, live[i]);
    }
    for (int i = 0; i < 8; i++)
        if (live[i])
            cuMemFree_v2(live[i]);
    return NULL;
}

/* The driver refuses a fork child the CUDA state it inherited
 * (CUDA_ERROR_NOT_INITIALIZED, the simulated device as the real one), but
 * the free of an inherited block takes the pools' locks all the same. */
static bool ok_in_child(CUresult r)
{
    return r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_INITIALIZED;
}

static void child_body(CUdeviceptr inherited)
{
    if (!ok_in_child(cuMemFree_v2(inherited)))
        _exit(2);
    for (int i = 0; i < kChildOps; i++) {
        CUdeviceptr p = 0;
        CUresult r = cuMemAlloc_v2(&p, 4096 + (size_t)i * 1000);
        if (r == CUDA_SUCCESS)
            r = cuMemFree_v2(p);
        if (!ok_in_child(r))
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
            child_body(warm);
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
