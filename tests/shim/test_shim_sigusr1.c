/* test_shim_sigusr1.c - dump_on_sigusr1:1 under load: SIGUSR1 summary
 * dumps while 8 threads allocate and free.
 *
 * The test re-executes itself ("test_shim_sigusr1 child") under the shim
 * with FRAGPOOL_CONF=dump_on_sigusr1:1,debug_check:1,
 * summary:/tmp/fp-sigusr1-<test pid>-%p.txt.  The child starts 8 threads
 * that allocate, write, read back (content checks) and free blocks of
 * mixed sizes, while its main thread sends itself SIGUSR1 50 times
 * (kill(getpid(), SIGUSR1), 20 ms apart, about 1 s); it then stops and
 * joins the threads, waits for the 50th dump to be complete, and exits.
 * The parent enforces a deadline (waitpid polling, then SIGKILL and a
 * failure: a deadlock between the dump thread and the allocating threads
 * shows up as a timeout; alarm() backs this up in both processes) and
 * then checks:
 *  - the child exited 0 (every thread finished, every content check held);
 *  - the child wrote nothing on stderr;
 *  - PATH.1 ... PATH.50 exist, there is no PATH.51, and each holds one
 *    complete text summary ("fragpool memory summary, device ID 0" once,
 *    mode "simulated device, SIGUSR1 dump", the run block, the closing rule line);
 *  - PATH itself holds the exit summary (mode "simulated device": the driver fragpool simulates), complete.
 * And: a child that closes descriptors 3..1023 and opens its own log and
 * pipe gets neither written to nor read by the dumps, one dump per signal.
 */
#include "shim_test.h"
#include "child_run.h"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS          8
#define NSIGNALS          50
#define CHILD_ALARM_S     30
#define PARENT_DEADLINE_S 40
#define PARENT_ALARM_S    55
#define RULE              "|===========================================================================|"

/* 1 when text is one whole text summary of one device: header once, the
 * run block, and the closing rule as its last line. */
static int complete_summary(const char *text)
{
    size_t n = strlen(text), m = strlen(RULE "\n");
    return fp_t_count_of(text, "fragpool memory summary, device ID 0") == 1 &&
           fp_t_count_of(text, "| fragpool run ") == 1 && n > m &&
           strcmp(text + n - m, RULE "\n") == 0;
}

/* ---- the child: 8 allocating threads, 50 signals ------------------------- */

static CUcontext ctx;
static atomic_int stop;

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u;
    enum { SLOTS = 16 };
    CUdeviceptr live[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    unsigned val[SLOTS] = {0};
    if (cuCtxSetCurrent(ctx))
        return (void *)1;
    while (!atomic_load(&stop)) {
        int k = (int)(rand_r(&seed) % SLOTS);
        if (live[k]) {
            unsigned first = 0, last = 0;
            if (cuMemcpyDtoH_v2(&first, live[k], 4) ||
                cuMemcpyDtoH_v2(&last, live[k] + size[k] - 4, 4))
                return (void *)2;
            if (first != val[k] || last != val[k])
                return (void *)3;
            if (cuMemFree_v2(live[k]))
                return (void *)4;
            live[k] = 0;
        } else {
            size[k] = 4 * (1 + rand_r(&seed) % (rand_r(&seed) % 4 ? 2000 : 800000));
            val[k] = (unsigned)rand_r(&seed);
            if (cuMemAlloc_v2(&live[k], size[k]) || cuMemsetD32_v2(live[k], val[k], size[k] / 4))
                return (void *)5;
        }
    }
    for (int k = 0; k < SLOTS; k++)
        if (live[k] && cuMemFree_v2(live[k]))
            return (void *)6;
    return NULL;
}

static int child_main(void)
{
    alarm(CHILD_ALARM_S); /* a deadlock ends the child by SIGALRM */
    CUdevice dev;
    CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 20;
    /* The first allocation sets the shim up, SIGUSR1 handler included. */
    if (cuMemAlloc_v2(&p, 4096) || cuMemFree_v2(p))
        return 21;
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)))
            return 22;
    struct timespec gap = {0, 20 * 1000 * 1000};
    for (int i = 0; i < NSIGNALS; i++) {
        if (kill(getpid(), SIGUSR1))
            return 23;
        nanosleep(&gap, NULL);
    }
    atomic_store(&stop, 1);
    int rc = 0;
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r && !rc)
            rc = 30 + (int)(uintptr_t)r;
    }
    if (rc)
        return rc;
    /* Wait for the last dump to be written out whole (the dump thread
     * writes them in order), then exit: the exit summary goes to PATH. */
    const char *conf = getenv("FRAGPOOL_CONF");
    const char *at = conf ? strstr(conf, "summary:") : NULL;
    if (!at)
        return 24;
    char pat[512], last[600];
    snprintf(pat, sizeof pat, "%s", at + 8);
    pat[strcspn(pat, ",")] = '\0';
    char *pp = strstr(pat, "%p");
    if (!pp)
        return 25;
    *pp = '\0';
    snprintf(last, sizeof last, "%s%d%s.%d", pat, (int)getpid(), pp + 2, NSIGNALS);
    struct timespec nap = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 2000; i++) { /* 10 s at most */
        char *text = fp_t_read_path(last);
        int done = text && complete_summary(text);
        free(text);
        if (done)
            return 0;
        nanosleep(&nap, NULL);
    }
    return 26; /* the 50th dump never came */
}

/* Child mode "stderr": 3 signals, no other threads; waits until its stderr
 * (a regular file) holds the 3 dumps whole, then exits. */
static int child_stderr_main(void)
{
    alarm(CHILD_ALARM_S);
    CUdevice dev;
    CUdeviceptr p, keep;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuMemAlloc_v2(&p, 4096) || cuMemAlloc_v2(&keep, 3u << 20) ||
        cuMemFree_v2(p))
        return 20;
    for (int i = 0; i < 3; i++) {
        if (kill(getpid(), SIGUSR1))
            return 23;
        struct timespec nap = {0, 5 * 1000 * 1000};
        for (int tries = 0;; tries++) {
            off_t n = lseek(2, 0, SEEK_END);
            char *text = n > 0 ? malloc((size_t)n + 1) : NULL;
            int done = 0;
            if (text && pread(2, text, (size_t)n, 0) == n) {
                text[n] = '\0';
                size_t m = strlen(RULE "\n");
                done = fp_t_count_of(text, "fragpool memory summary") == i + 1 &&
                       fp_t_count_of(text, "| fragpool run ") == i + 1 && (size_t)n > m &&
                       strcmp(text + n - m, RULE "\n") == 0;
            }
            free(text);
            if (done)
                break;
            if (tries == 2000)
                return 26;
            nanosleep(&nap, NULL);
        }
    }
    return 0;
}

/* "daemon": closes descriptors 3..1023 as daemons do, then makes a pipe
 * of its own (non-blocking) and opens its log (FP_T_LOG names it), sends
 * itself SIGUSR1 five times, 200 ms apart, writing a line to the log and a
 * byte into its pipe after each.  Exit 0 when the log holds only its five
 * lines and the pipe its five bytes (fragpool wrote into neither and read
 * neither away); 2 and 3 when not. */
static int child_daemon_main(void)
{
    const char *log_path = getenv("FP_T_LOG");
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    int pp[2]; /* first: it gets the lowest numbers, where a pipe made before main was */
    if (pipe2(pp, O_NONBLOCK) != 0)
        return 1;
    int log = log_path ? open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (log < 0)
        return 1;
    CUdevice dev;
    CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuMemAlloc_v2(&p, 1 << 20) || cuMemFree_v2(p))
        return 1;
    for (int i = 0; i < 5; i++) {
        struct timespec t = {0, 200000000};
        kill(getpid(), SIGUSR1);
        while (nanosleep(&t, &t) != 0)
            ;
        char c = (char)('a' + i);
        if (write(log, "line\n", 5) != 5 || write(pp[1], &c, 1) != 1)
            return 1;
    }
    char got[8] = {0};
    if (read(pp[0], got, 5) != 5 || memcmp(got, "abcde", 5) != 0)
        return 3;
    close(log);
    char *text = fp_t_read_path(log_path);
    int ok = text && strcmp(text, "line\nline\nline\nline\nline\n") == 0;
    free(text);
    return ok ? 0 : 2;
}

/* ---- the parent: run the child, check the files ---------------------------- */

/* Re-executes this program as "test_shim_sigusr1 MODE" with
 * FRAGPOOL_CONF=conf; returns its pid, its stderr in errtext (caller frees). */
static pid_t run_child(const char *mode, const char *conf, char **errtext)
{
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL}; /* and TSAN_OPTIONS= */
    char confvar[512];
    snprintf(confvar, sizeof confvar, "FRAGPOOL_CONF=%s", conf);
    const char *const add[] = {confvar, NULL};
    char **env = fp_t_child_env(drop, add);
    assert_non_null(env);
    int errfd = fp_t_temp_fd("/tmp/fp-sigusr1-err-");

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = '\0';
    char *argv[] = {self, (char *)mode, NULL};
    int st = 0;
    pid_t pid = fp_t_spawn_wait(self, argv, env, -1, errfd, PARENT_DEADLINE_S, &st);
    free(env);
    if (pid < 0)
        fail_msg("the child still runs after %d s: deadlock", PARENT_DEADLINE_S);
    char *text = fp_t_read_fd(errfd);
    assert_non_null(text);
    close(errfd);
    if (WIFSIGNALED(st))
        fail_msg("the child died of signal %d (SIGALRM is %d: deadlock); stderr:\n%s", WTERMSIG(st),
                 SIGALRM, text);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the child exited with status %d; stderr:\n%s", WEXITSTATUS(st), text);
    *errtext = text;
    return pid;
}

static void dumps_under_load(void **state)
{
    (void)state;
    alarm(PARENT_ALARM_S); /* backstop: SIGALRM ends (fails) this test */
    int me = (int)getpid();
    char conf[512], *errtext;
    snprintf(conf, sizeof conf,
             "dump_on_sigusr1:1,debug_check:1,summary:/tmp/fp-sigusr1-%d-%%p.txt", me);
    pid_t pid = run_child("child", conf, &errtext);
    /* one line, at the first dump: which file the %p named */
    assert_int_equal(fp_t_count_of(errtext, "\n"), 1);
    assert_non_null(strstr(errtext, "fragpool: summary: writing /tmp/fp-sigusr1-"));
    free(errtext);

    char base[256], path[300];
    snprintf(base, sizeof base, "/tmp/fp-sigusr1-%d-%d.txt", me, (int)pid);
    for (int i = 1; i <= NSIGNALS + 1; i++) {
        snprintf(path, sizeof path, "%s.%d", base, i);
        char *text = fp_t_read_path(path);
        if (i == NSIGNALS + 1) {
            if (text)
                fail_msg("%s: more dumps than signals", path);
            break;
        }
        if (!text)
            fail_msg("%s: missing (dump %d of %d)", path, i, NSIGNALS);
        if (!complete_summary(text) || !strstr(text, "simulated device, SIGUSR1 dump"))
            fail_msg("%s: not one complete dump:\n%s", path, text);
        free(text);
        unlink(path);
    }
    char *text = fp_t_read_path(base);
    if (!text)
        fail_msg("%s: no exit summary", base);
    if (!complete_summary(text) || !strstr(text, "| Mode                  | simulated device "))
        fail_msg("%s: not one complete exit summary:\n%s", base, text);
    free(text);
    unlink(base);
    alarm(0);
}

/* Without a summary file the dumps go to stderr: with summary:off only
 * they do (the exit summary stays off), with summary:stderr the exit
 * summary follows them. */
static void dumps_on_stderr(void **state)
{
    (void)state;
    alarm(PARENT_ALARM_S);
    char *err;
    run_child("stderr", "dump_on_sigusr1:1,summary:off", &err);
    assert_int_equal(fp_t_count_of(err, "fragpool memory summary, device ID 0"), 3);
    assert_int_equal(
        fp_t_count_of(err, "| Mode                  | simulated device, SIGUSR1 dump "), 3);
    assert_int_equal(fp_t_count_of(err, "| Mode                  | simulated device "),
                     0); /* no exit summary */
    free(err);
    run_child("stderr", "dump_on_sigusr1:1,summary:stderr", &err);
    assert_int_equal(fp_t_count_of(err, "fragpool memory summary, device ID 0"), 4);
    assert_int_equal(
        fp_t_count_of(err, "| Mode                  | simulated device, SIGUSR1 dump "), 3);
    assert_int_equal(fp_t_count_of(err, "| Mode                  | simulated device "), 1);
    size_t n = strlen(err), m = strlen(RULE "\n");
    assert_true(n > m);
    assert_string_equal(err + n - m, RULE "\n");
    free(err);
    alarm(0);
}

/* A program that closes descriptors it did not open and opens its own:
 * the dumps neither write into them nor read from them, and there is one
 * dump per signal. */
static void dumps_leave_program_fds(void **state)
{
    (void)state;
    alarm(PARENT_ALARM_S);
    int me = (int)getpid();
    char conf[512], log[256], *err, path[300];
    snprintf(log, sizeof log, "FP_T_LOG=/tmp/fp-sigusr1-%d-log", me);
    setenv("FP_T_LOG", log + 9, 1);
    snprintf(conf, sizeof conf, "dump_on_sigusr1:1,summary:/tmp/fp-sigusr1-%d-d%%p.txt", me);
    pid_t pid = run_child("daemon", conf, &err);   /* fails the case unless it exits 0 */
    assert_int_equal(fp_t_count_of(err, "\n"), 1); /* the file %p named, said once */
    assert_non_null(strstr(err, "fragpool: summary: writing /tmp/fp-sigusr1-"));
    free(err);
    for (int i = 1; i <= 6; i++) {
        snprintf(path, sizeof path, "/tmp/fp-sigusr1-%d-d%d.txt.%d", me, (int)pid, i);
        if ((access(path, F_OK) == 0) != (i <= 5))
            fail_msg("%s: %s", path, i <= 5 ? "missing" : "more dumps than signals");
    }
    unsetenv("FP_T_LOG");
    fp_t_remove_own_tmp("fp-sigusr1");
    alarm(0);
}

/* Group teardown: removes what a failed case left behind. */
static int remove_leftovers(void **state)
{
    (void)state;
    fp_t_remove_own_tmp("fp-sigusr1");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child_main();
    if (argc > 1 && strcmp(argv[1], "stderr") == 0)
        return child_stderr_main();
    if (argc > 1 && strcmp(argv[1], "daemon") == 0)
        return child_daemon_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dumps_under_load),
        cmocka_unit_test(dumps_on_stderr),
        cmocka_unit_test(dumps_leave_program_fds),
    };
    return cmocka_run_group_tests(tests, NULL, remove_leftovers);
}
