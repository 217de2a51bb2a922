/* tests/simdev/process.c - the simulated driver across processes: a fork
 * child of an initialized process is refused every call, as with the real
 * driver, and never hangs (one that forked first starts afresh); the
 * configuration from the environment
 * (read once, so checked in exec'd children); and exit while destroyed
 * streams still drain.
 *
 * Child modes of this program (exec'd through /proc/self/exe):
 * "env-check DEVICES CAPACITY_MB FAIL_NTH" (test_env_config),
 * "destroy-exit" (test_destroy_many_and_exit) and "fork-fresh"
 * (test_fork_before_init).
 */
#include "simdev_test.h"

#include <signal.h>

/* ---- fork ----------------------------------------------------------------------------- */

/* A fork child of a process that initialized cannot use CUDA, as with the
 * real driver: every call fails with CUDA_ERROR_NOT_INITIALIZED at once,
 * though the parent's streams (whose workers the child does not have)
 * still have work queued and a context event waits for them.  Exits 0 when
 * every call refused. */
static int fork_child_refused(CUcontext c, CUstream s, CUevent e, CUdeviceptr d)
{
    CUresult want = CUDA_ERROR_NOT_INITIALIZED;
    /* first what a fence does: all later work waits for the event */
    if (cuCtxWaitEvent(c, e) != want || cuMemsetD8_v2(d, 1, 64) != want || cuInit(0) != want ||
        cuCtxGetCurrent(&c) != want || cuMemAlloc_v2(&d, 4096) != want ||
        cuStreamSynchronize(s) != want || cuEventSynchronize(e) != want ||
        cuCtxSynchronize() != want || cuStreamCreate(&s, 0) != want)
        return 1;
    return 0;
}

/* The child's exit status, or -1 when it was still running after 10 s. */
static int reap_within(pid_t pid)
{
    int status = 0;
    for (int ms = 0; ms < 10000; ms++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        sleep_ms(1);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* 20 forks while two streams have slow work queued: no child hangs. */
static void test_fork_child(void **state)
{
    (void)state;
    CUstream s[2];
    CUevent e = NULL;
    CUcontext c = NULL;
    CUdeviceptr d = 0;
    static slow_write w[2][20];
    OK(cuCtxGetCurrent(&c));
    OK(cuMemAlloc_v2(&d, 64));
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    for (int k = 0; k < 2; k++)
        OK(cuStreamCreate(&s[k], CU_STREAM_NON_BLOCKING));
    int hung = 0, failed = 0;
    for (int i = 0; i < 20; i++) {
        for (int k = 0; k < 2; k++) {
            w[k][i] = (slow_write){.ms = 20};
            OK(cuLaunchHostFunc(s[k], slow_write_fn, &w[k][i]));
        }
        OK(cuCtxRecordEvent(c, e)); /* waits for both streams */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(fork_child_refused(c, s[0], e, d));
        int rc = reap_within(pid);
        hung += rc == -1;
        failed += rc != 0 && rc != -1;
    }
    print_message("20 forks: %d hung, %d failed\n", hung, failed);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
    OK(cuCtxSynchronize());
    OK(cuMemFree_v2(d));
    OK(cuEventDestroy_v2(e));
    for (int k = 0; k < 2; k++)
        OK(cuStreamDestroy_v2(s[k]));
}

/* A child of a process that never called cuInit starts afresh. */
static void test_fork_before_init(void **state)
{
    (void)state;
    /* this process initialized in the group setup: ask an exec'd child */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_simdev_process", "fork-fresh", (char *)NULL);
        _exit(127);
    }
    assert_int_equal(reap_within(pid), 0);
}

/* Child mode "fork-fresh": forks before any CUDA call; its child works. */
static int fork_fresh(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        CUcontext c = NULL;
        CUdevice dev = 0;
        CUdeviceptr d = 0;
        _exit(cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
              cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS ||
              cuCtxSetCurrent(c) != CUDA_SUCCESS || cuMemAlloc_v2(&d, 64) != CUDA_SUCCESS ||
              cuMemFree_v2(d) != CUDA_SUCCESS);
    }
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

/* ---- configuration from the environment (read once, so in a child) ------------------ */

/* Child side: "env-check DEVICES CAPACITY_MB FAIL_NTH" are the expected
 * values; exits 0 when the driver agrees. */
static int env_child(char **argv)
{
    int want_dev = atoi(argv[2]);
    size_t cap_mb = strtoull(argv[3], NULL, 10), total = 0;
    unsigned nth = (unsigned)atoi(argv[4]);
    int n = -1;
    CUcontext c = NULL;
    CUresult rc = cuInit(0);
    if (want_dev == 0)
        return rc == CUDA_ERROR_NO_DEVICE ? 0 : 1;
    if (rc != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS || n != want_dev)
        return 2;
    if (cuDeviceTotalMem_v2(&total, want_dev - 1) != CUDA_SUCCESS || total != cap_mb * MiB)
        return 3;
    if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS)
        return 4;
    for (unsigned i = 1; i <= nth + 1; i++) {
        CUdeviceptr p = 0;
        if ((cuMemAlloc_v2(&p, 16) == CUDA_ERROR_OUT_OF_MEMORY) != (i == nth))
            return 5;
    }
    return 0;
}

/* Reads the child's stderr from fd into err, then reaps it: its exit
 * status, or 100 when it did not exit normally. */
static int collect_child(pid_t pid, int fd, char *err, size_t errlen)
{
    size_t len = 0;
    for (ssize_t n; len + 1 < errlen && (n = read(fd, err + len, errlen - 1 - len)) > 0;)
        len += (size_t)n;
    err[len] = '\0';
    close(fd);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

/* Runs the env-check child with env set (NAME=VALUE or NAME= to unset) and
 * returns its exit status; its stderr goes to err. */
static int run_env_child(const char *const env[3], const char *want[3], char *err, size_t errlen)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 3; i++) {
            char name[64];
            const char *eq = strchr(env[i], '=');
            snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
            if (eq[1] != '\0')
                setenv(name, eq + 1, 1);
            else
                unsetenv(name);
        }
        dup2(fds[1], 2);
        execl("/proc/self/exe", "test_simdev_process", "env-check", want[0], want[1], want[2],
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    return collect_child(pid, fds[0], err, errlen);
}

static void test_env_config(void **state)
{
    (void)state;
    char err[1024];
    const char *set[3] = {"FRAGPOOL_SIM_DEVICES=3", "FRAGPOOL_SIM_CAPACITY_MB=64",
                          "FRAGPOOL_SIM_FAIL_NTH=2"};
    const char *want[3] = {"3", "64", "2"};
    assert_int_equal(run_env_child(set, want, err, sizeof err), 0);
    assert_string_equal(err, "");
    const char *bad[3] = {"FRAGPOOL_SIM_DEVICES=abc", "FRAGPOOL_SIM_CAPACITY_MB=0",
                          "FRAGPOOL_SIM_FAIL_NTH=-1"};
    const char *defaults[3] = {"1", "16384", "0"};
    assert_int_equal(run_env_child(bad, defaults, err, sizeof err), 0);
    assert_non_null(strstr(err, "FRAGPOOL_SIM_DEVICES=\"abc\" is not valid"));
    assert_non_null(strstr(err, "FRAGPOOL_SIM_CAPACITY_MB=\"0\""));
    assert_non_null(strstr(err, "FRAGPOOL_SIM_FAIL_NTH=\"-1\""));
    const char *none[3] = {"FRAGPOOL_SIM_DEVICES=0",
                           "FRAGPOOL_SIM_CAPACITY_MB=", "FRAGPOOL_SIM_FAIL_NTH="};
    const char *want_none[3] = {"0", "0", "0"};
    assert_int_equal(run_env_child(none, want_none, err, sizeof err), 0);
}

/* ---- exit with destroyed streams still draining (in a child) ---------------------- */

enum { kExitStreams = 32 };

/* Child side of "destroy-exit": destroys many streams with work queued
 * and returns while most of it is still running.  Exits 0 when every call
 * worked; the parent checks that exit is clean (no sanitizer report). */
static int destroy_exit_child(void)
{
    static slow_write w[kExitStreams];
    CUcontext c = NULL;
    CUdeviceptr d = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != 0 ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS ||
        cuMemAlloc_v2(&d, kExitStreams * 4096) != CUDA_SUCCESS)
        return 1;
    for (int i = 0; i < kExitStreams; i++) {
        CUstream s = NULL;
        CUevent e = NULL;
        CUdeviceptr a = 0, mine = d + (CUdeviceptr)i * 4096;
        w[i] = (slow_write){.ms = 10 * i};
        if (cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0) != 0 ||
            cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
            cuMemAllocAsync(&a, 1000, s) != CUDA_SUCCESS ||
            cuLaunchHostFunc(s, slow_write_fn, &w[i]) != CUDA_SUCCESS ||
            cuMemsetD8Async(mine, (unsigned char)i, 4096, s) != CUDA_SUCCESS ||
            cuMemcpyDtoDAsync_v2(a, mine, 1000, s) != CUDA_SUCCESS ||
            cuMemFreeAsync(a, s) != CUDA_SUCCESS || cuEventRecord(e, s) != CUDA_SUCCESS ||
            cuStreamDestroy_v2(s) != CUDA_SUCCESS ||
            cuEventDestroy_v2(e) != CUDA_SUCCESS) /* with its record queued */
            return 2;
    }
    fpsim_counts ct;
    if (fpsim_stats(0, &ct) != 0 || ct.streams_draining == 0 ||
        atomic_load(&w[kExitStreams - 1].done))
        return 3; /* nothing left in flight to test */
    sleep_ms(50); /* let some of it finish first */
    return 0;
}

static void test_destroy_many_and_exit(void **state)
{
    (void)state;
    char err[4096];
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        execl("/proc/self/exe", "test_simdev_process", "destroy-exit", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    int rc = collect_child(pid, fds[0], err, sizeof err);
    if (rc != 0 || err[0] != '\0')
        fprintf(stderr, "destroy-exit child: status %d, stderr:\n%s\n", rc, err);
    assert_int_equal(rc, 0);
    assert_string_equal(err, "");
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "env-check") == 0)
        return env_child(argv);
    if (argc == 2 && strcmp(argv[1], "destroy-exit") == 0)
        return destroy_exit_child();
    if (argc == 2 && strcmp(argv[1], "fork-fresh") == 0)
        return fork_fresh();
    simdev_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_child),
        cmocka_unit_test(test_fork_before_init),
        cmocka_unit_test(test_env_config),
        cmocka_unit_test(test_destroy_many_and_exit),
    };
    return cmocka_run_group_tests_name("simdev process", tests, simdev_setup, NULL);
}
