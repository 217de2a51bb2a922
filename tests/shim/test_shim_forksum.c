/* test_shim_forksum.c - a forked child's summary counts what the child
 * did, not what it inherited.
 *
 * The client (this program, "client", exec'd under fragpool with a JSON
 * summary per process) makes 15 allocations and frees 3, so 12 blocks are
 * live, then forks.  The child tries 5 allocations and frees 3 of them,
 * then exits.  The simulated device, like the real driver, refuses a
 * forked child the CUDA state it inherited (CUDA_ERROR_NOT_INITIALIZED),
 * so fragpool forwards the child's allocations and the child writes no
 * summary: none may appear that lists the parent's 12 blocks as the
 * child's.  Where a driver lets the child allocate, its summary must say 5
 * allocs, 3 frees and 2 leaks.  The parent's says 15, 3 and 12.  (The
 * counting from the fork itself: test_report's leaks_largest_first and
 * test_pool's stats_since.)
 */
#include "shim_test.h"
#include "child_run.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK (64 << 10)

static int client(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p[15], q[5];
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 2;
    for (int i = 0; i < 15; i++)
        if (cuMemAlloc_v2(&p[i], BLOCK))
            return 3;
    for (int i = 0; i < 3; i++)
        if (cuMemFree_v2(p[i]))
            return 4;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* exits with how many allocations it was given */
        int got = 0;
        for (int i = 0; i < 5; i++) {
            CUresult r = cuMemAlloc_v2(&q[i], BLOCK);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_INITIALIZED)
                _exit(100);
            got += r == CUDA_SUCCESS;
        }
        for (int i = 0; i < 3 && got == 5; i++)
            if (cuMemFree_v2(q[i]))
                _exit(101);
        exit(got); /* the exit handler writes the child's summary, if any */
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return 7;
    printf("child %d %d\n", (int)pid, WEXITSTATUS(st));
    return 0;
}

/* The number after "key": in the first device of a JSON summary. */
static long long number_after(const char *json, const char *key)
{
    const char *at = strstr(json, key);
    assert_non_null(at);
    return strtoll(at + strlen(key), NULL, 10);
}

static void child_counts_its_own(void **state)
{
    (void)state;
    char dir[] = "/tmp/fp-forksum-XXXXXX", conf[256], self[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof conf, "FRAGPOOL_CONF=summary_format:json,summary:%s/s-%%p.json", dir);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL};
    const char *add[] = {conf, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    char *argv[] = {self, (char *)"client", NULL};
    int out = fp_t_temp_fd("/tmp/fp-forksum-out-"), st = 0;
    pid_t pid = fp_t_spawn_wait(self, argv, env, out, -1, 60, &st);
    assert_true(pid > 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int child = 0, got = -1;
    assert_int_equal(sscanf(fp_t_slurp_fd(out), "child %d %d", &child, &got), 2);
    close(out);
    assert_true(got == 0 || got == 5);
    char cpath[512], ppath[512];
    snprintf(cpath, sizeof cpath, "%s/s-%d.json", dir, child);
    snprintf(ppath, sizeof ppath, "%s/s-%d.json", dir, (int)pid);
    bool child_wrote = access(cpath, F_OK) == 0;
    const char *cs = child_wrote ? fp_t_slurp_path(cpath) : NULL, *ps = fp_t_slurp_path(ppath);
    unlink(cpath);
    unlink(ppath);
    rmdir(dir);
    assert_int_equal(child_wrote, got == 5);
    if (cs) {
        assert_int_equal(number_after(cs, "\"allocs\":"), 5);
        assert_int_equal(number_after(cs, "\"frees\":"), 3);
        assert_int_equal(number_after(strstr(cs, "\"leaks\""), "\"count\":"), 2);
        assert_int_equal(number_after(strstr(cs, "\"leaks\""), "\"bytes\":"), 2 * BLOCK);
    }
    assert_int_equal(number_after(ps, "\"allocs\":"), 15);
    assert_int_equal(number_after(ps, "\"frees\":"), 3);
    assert_int_equal(number_after(strstr(ps, "\"leaks\""), "\"count\":"), 12);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "client") == 0)
        return client();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(child_counts_its_own, fp_t_release_held)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
