/* child_run.h - helpers shared by the shim tests that run a client program
 * in a child process (test_shim_exit, test_shim_trace, test_shim_sigusr1):
 * the child's environment, fork/execve with a deadline, reading back what
 * it wrote, and keeping the buffers a case reads until its teardown.
 *
 * Header-only and all static inline, so each test program gets its own
 * copy (and its own held-buffer list) and the helpers it does not use cost
 * nothing.  The fp_t_slurp_* and fp_t_hold helpers and fp_t_spawn_wait use
 * cmocka assertions: call them from a test case only.  fp_t_read_* assert
 * nothing and may be used anywhere, a child process included.
 */
#ifndef FP_TEST_CHILD_RUN_H
#define FP_TEST_CHILD_RUN_H

#include <fcntl.h>
#include <glob.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

extern char **environ;

/* ---- buffers held until the teardown ------------------------------------ */

/* Every buffer a case reads is held here and freed by the teardown
 * (fp_t_release_held), so a failing case (cmocka longjmps out of it) leaks
 * nothing either. */
typedef struct fp_t_held_set {
    void *p[256];
    size_t n;
} fp_t_held_set;

static inline fp_t_held_set *fp_t_held(void)
{
    static fp_t_held_set set;
    return &set;
}

/* Holds p (which must not be NULL) until the teardown; returns p. */
static inline void *fp_t_hold(void *p)
{
    fp_t_held_set *h = fp_t_held();
    assert_non_null(p);
    assert_true(h->n < sizeof h->p / sizeof *h->p);
    h->p[h->n++] = p;
    return p;
}

/* A cmocka teardown: frees every held buffer. */
static inline int fp_t_release_held(void **state)
{
    (void)state;
    fp_t_held_set *h = fp_t_held();
    while (h->n)
        free(h->p[--h->n]);
    return 0;
}

/* ---- reading files -------------------------------------------------------- */

/* The whole of fd (from offset 0 to its end), NUL-terminated, in memory
 * the caller frees; NULL when it cannot be read whole. */
static inline char *fp_t_read_fd(int fd)
{
    off_t n = lseek(fd, 0, SEEK_END);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s || pread(fd, s, (size_t)n, 0) != n) {
        free(s);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

/* The whole file at path, as fp_t_read_fd; NULL when it cannot be opened
 * or read. */
static inline char *fp_t_read_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    char *s = fp_t_read_fd(fd);
    close(fd);
    return s;
}

/* The whole of fd, held until the teardown; fails the case when it cannot
 * be read. */
static inline char *fp_t_slurp_fd(int fd)
{
    return fp_t_hold(fp_t_read_fd(fd));
}

/* The whole file at path, held until the teardown; NULL when it cannot be
 * opened or read (the caller fails the case with its own message). */
static inline char *fp_t_slurp_path(const char *path)
{
    char *s = fp_t_read_path(path);
    return s ? fp_t_hold(s) : NULL;
}

/* How many times needle occurs in hay, without overlaps. */
static inline int fp_t_count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* An empty temporary file, already unlinked, open for reading and writing:
 * somewhere for a child's stdout or stderr.  prefix is a path such as
 * "/tmp/fp-exit-io-"; mkstemp adds six characters. */
static inline int fp_t_temp_fd(const char *prefix)
{
    char name[256];
    snprintf(name, sizeof name, "%sXXXXXX", prefix);
    int fd = mkstemp(name);
    assert_true(fd >= 0);
    unlink(name);
    return fd;
}

/* Unlinks /tmp/STEM-<this pid>-*: what a failed case left behind. */
static inline void fp_t_remove_own_tmp(const char *stem)
{
    char pat[128];
    glob_t g;
    snprintf(pat, sizeof pat, "/tmp/%s-%d-*", stem, (int)getpid());
    if (glob(pat, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
        globfree(&g);
    }
}

/* ---- the child's environment ---------------------------------------------- */

/* "TSAN_OPTIONS=..." for the child: ThreadSanitizer sleeps 1 s at exit
 * when threads remain (the simulated device's workers); these runs need
 * not.  Keeps this process's own TSAN_OPTIONS otherwise. */
static inline const char *fp_t_child_tsan_options(void)
{
    static char tsan_opts[1024];
    const char *cur = getenv("TSAN_OPTIONS");
    snprintf(tsan_opts, sizeof tsan_opts, "TSAN_OPTIONS=%s%satexit_sleep_ms=0", cur ? cur : "",
             cur && *cur ? ":" : "");
    return tsan_opts;
}

/* An environment for the child, NULL-terminated, in memory the caller
 * frees (the strings are borrowed, not copied); NULL when out of memory.
 * It is this process's environment less TSAN_OPTIONS and every variable
 * that starts with one of the strings in drop (NULL-terminated, may be
 * NULL; e.g. "FRAGPOOL_CONF="), then fp_t_child_tsan_options(), then the
 * strings in add (NULL-terminated, may be NULL), in that order. */
static inline char **fp_t_child_env(const char *const *drop, const char *const *add)
{
    size_t n = 0, nadd = 0, k = 0;
    while (environ[n])
        n++;
    while (add && add[nadd])
        nadd++;
    char **env = calloc(n + nadd + 2, sizeof *env);
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int keep = strncmp(environ[i], "TSAN_OPTIONS=", 13) != 0;
        for (size_t j = 0; keep && drop && drop[j]; j++)
            keep = strncmp(environ[i], drop[j], strlen(drop[j])) != 0;
        if (keep)
            env[k++] = environ[i];
    }
    env[k++] = (char *)fp_t_child_tsan_options();
    for (size_t i = 0; i < nadd; i++)
        env[k++] = (char *)add[i];
    env[k] = NULL;
    return env;
}

/* ---- running the child ------------------------------------------------------ */

/* Runs path with argv and env in a child process, its stdout on out_fd and
 * its stderr on err_fd where these are >= 0 (this process's own where not),
 * and waits for it, polling waitpid every 2 ms.  Returns the child's pid
 * once it has exited, its wait status in *status; or, when it still runs
 * more than timeout_s seconds after the start, kills it (SIGKILL), reaps
 * it and returns -1: the caller fails the case with its own message.  A
 * failed fork or waitpid fails the case. */
static inline pid_t fp_t_spawn_wait(const char *path, char *const argv[], char *const env[],
                                    int out_fd, int err_fd, int timeout_s, int *status)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (out_fd >= 0)
            dup2(out_fd, 1);
        if (err_fd >= 0)
            dup2(err_fd, 2);
        execve(path, argv, env);
        _exit(127);
    }
    struct timespec t0, now, nap = {0, 2000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            *status = st;
            return -1;
        }
        nanosleep(&nap, NULL);
    }
    assert_int_equal(w, pid);
    *status = st;
    return pid;
}

#endif
