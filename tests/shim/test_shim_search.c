/* test_shim_search.c - the OOM search is bounded and holds up no one
 * (docs/advice.md, "Bounds"), on the simulated device (256 MiB).
 *
 * Run by ctest twice:
 *   (none), advice_budget_ms:4000: thread A makes 50,000 alloc/free pairs
 *        and fills the device until an OOM, whose search replays the
 *        record for up to 4 s.  Once A's "cause:" line is out (the search
 *        has begun), the main thread, on a context of its own:
 *         - gets an OOM of its own at once, with "search in progress";
 *         - forks a child that exits at once, and waits for it;
 *         - signals A, whose handler allocates 1 TiB on the main thread's
 *           context: the reentrant OOM returns CUDA_ERROR_OUT_OF_MEMORY
 *           with one line, not a deadlock on A's own search;
 *        each while A's failing call has not returned yet (the structural
 *        property: before, each waited for the whole search, or forever).
 *   cut, advice_budget_ms:1: the same OOM after 20,000 pairs is returned
 *        with "the search was cut short at its bound, advice_budget_ms:1".
 */
#include "shim_test.h"
#include "fpsim.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static CUdevice dev;
static CUcontext ctx_a, ctx_main;
static int err_fd = -1, saved_fd = -1;
static atomic_bool a_returned;
static CUresult a_result;
static atomic_int handler_done, handler_result; /* lock-free: safe in a handler */

/* stderr into a temp file for the whole case. */
static void capture_begin(void)
{
    char name[] = "/tmp/fp-search-stderr-XXXXXX";
    err_fd = mkstemp(name);
    assert_true(err_fd >= 0);
    unlink(name);
    fflush(stderr);
    saved_fd = dup(2);
    assert_int_equal(dup2(err_fd, 2), 2);
}

/* What stderr holds so far (caller frees). */
static char *captured(void)
{
    off_t n = lseek(err_fd, 0, SEEK_END);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(pread(err_fd, s, (size_t)n, 0), n);
    s[n] = '\0';
    return s;
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    char *s = captured();
    close(err_fd);
    printf("%s", s);
    return s;
}

static void has(const char *text, const char *part)
{
    if (!strstr(text, part))
        fail_msg("stderr lacks \"%s\":\n%s", part, text);
}

/* pairs alloc/free pairs, then 30 MiB blocks until the OOM; its result. */
static CUresult churn_then_oom(long pairs)
{
    CUdeviceptr p, v[16];
    for (long i = 0; i < pairs; i++) {
        if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
            return CUDA_ERROR_UNKNOWN;
    }
    int k = 0;
    CUresult r = CUDA_SUCCESS;
    while (k < 16 && (r = cuMemAlloc_v2(&v[k], 30 * MiB)) == CUDA_SUCCESS)
        k++;
    return r;
}

static void *thread_a(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(ctx_a);
    a_result = churn_then_oom(50000);
    atomic_store(&a_returned, true);
    return NULL;
}

/* A's handler: an OOM on A's thread while A reports its own. */
static void on_sigusr2(int sig)
{
    (void)sig;
    int saved = errno;
    CUdeviceptr p;
    cuCtxPushCurrent_v2(ctx_main);
    atomic_store(&handler_result, (int)cuMemAlloc_v2(&p, (size_t)1 << 40));
    CUcontext popped;
    cuCtxPopCurrent_v2(&popped);
    atomic_store(&handler_done, 1);
    errno = saved;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void wait_for(const char *part)
{
    for (double t0 = now_s(); now_s() - t0 < 300;) {
        char *s = captured();
        int found = strstr(s, part) != NULL;
        free(s);
        if (found)
            return;
        usleep(1000);
    }
    fail_msg("no \"%s\" on stderr after 300 s", part);
}

static void not_held_up(const char *what)
{
    if (atomic_load(&a_returned))
        fail_msg("%s waited for the search of another thread's OOM", what);
}

static void others_go_on(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_handler = on_sigusr2};
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR2, &sa, NULL), 0);
    capture_begin();
    pthread_t a;
    assert_int_equal(pthread_create(&a, NULL, thread_a, NULL), 0);
    wait_for("fragpool: cause: "); /* A's search has begun */

    CUdeviceptr p;
    assert_int_equal(cuMemAlloc_v2(&p, 30 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    not_held_up("a second OOM");

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    not_held_up("fork");

    assert_int_equal(pthread_kill(a, SIGUSR2), 0);
    for (double t0 = now_s(); !atomic_load(&handler_done) && now_s() - t0 < 300;)
        usleep(1000);
    if (!atomic_load(&handler_done))
        fail_msg("the OOM in A's signal handler has not returned after 300 s (a deadlock)");
    assert_int_equal(atomic_load(&handler_result), CUDA_ERROR_OUT_OF_MEMORY);

    pthread_join(a, NULL);
    char *err = capture_end();
    assert_int_equal(a_result, CUDA_ERROR_OUT_OF_MEMORY);
    has(err, "fragpool: fix: none proven \xe2\x80\x94 search in progress");
    has(err, "while this thread was reporting another (a signal handler that allocates?): no "
             "search; returning CUDA_ERROR_OUT_OF_MEMORY\n");
    free(err);
}

static void cut_short(void **state)
{
    (void)state;
    CU(cuCtxSetCurrent(ctx_a));
    capture_begin();
    CUresult r = churn_then_oom(20000);
    char *err = capture_end();
    assert_int_equal(r, CUDA_ERROR_OUT_OF_MEMORY);
    has(err, "fragpool: fix: none proven \xe2\x80\x94 the search was cut short at its bound, "
             "advice_budget_ms:1, before any setting was proven");
    free(err);
}

static int setup(void **state)
{
    (void)state;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || fpsim_set_capacity(0, 256 * MiB))
        return -1;
    if (cuCtxCreate_v2(&ctx_main, 0, dev) || cuCtxCreate_v2(&ctx_a, 0, dev))
        return -1;
    return cuCtxSetCurrent(ctx_main) ? -1 : 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest normal[] = {cmocka_unit_test(others_go_on)};
    const struct CMUnitTest cut[] = {cmocka_unit_test(cut_short)};
    if (argc > 1 && strcmp(argv[1], "cut") == 0)
        return cmocka_run_group_tests_name("cut", cut, setup, NULL);
    return cmocka_run_group_tests(normal, setup, NULL);
}
