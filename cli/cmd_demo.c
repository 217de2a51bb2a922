/* cmd_demo.c - `fragpool demo`: runs the bundled workload
 * (demo_workload.c) straight on the driver, then under fragpool within a
 * limit where PyTorch's rules (classic segments, set by name: fragpool's
 * default is virtual memory) run out of memory, takes the fix fragpool's
 * OOM message proves, runs it verbatim within the same limit, and ends
 * with one line: memory and time, before and after.  On the real GPU when
 * one answers, else on the simulated device, and says which
 * (docs/advice.md).
 *
 * Invariants: the libraries and the workload are found from this
 * executable's own path (fp_find_paths), so an installed fragpool runs
 * its own, and go into the workload's environment at their full length,
 * never cut (fp_cli_arm_env, cli_common.c); the workload's output is
 * echoed as it comes and at most DEMO_OUT - 1 bytes of it are kept; a
 * step that does not go as the demo expects (no OOM with a proven fix, a
 * fix that does not complete) is one line on stderr and exit status 1.
 */
#include "cli.h"
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* True when the system's driver loads and sees a GPU. */
static int have_gpu(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return 0;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int n = 0;
    int ok = init && count && init(0) == 0 && count(&n) == 0 && n > 0;
    return ok;
}

/* The demo's limit: between what the workload needs under PyTorch's rules
 * (328 MiB, replayed) and with virtual-memory segments (288 MiB). */
#define DEMO_LIMIT_MB 312
#define DEMO_OUT      16384

/* Runs the workload (under fragpool with conf unless conf is NULL), its
 * stdout and stderr echoed as they come and the first DEMO_OUT - 1 bytes
 * kept in out; returns its exit status (1 when it could not run). */
static int run_workload(const fp_paths *p, const char *conf, int simulate, char *out)
{
    int fd[2];
    size_t used = 0;
    out[0] = '\0';
    fflush(stdout);
    if (pipe(fd))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        if (simulate && fp_cli_prepend_env("LD_LIBRARY_PATH", p->simdev))
            _exit(1);
        if (conf && fp_cli_arm_env(p, 0, conf))
            _exit(1);
        execl(p->workload, p->workload, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        if (n <= 0)
            continue;
        fwrite(buf, 1, (size_t)n, stdout);
        size_t k = (size_t)n < DEMO_OUT - 1 - used ? (size_t)n : DEMO_OUT - 1 - used;
        memcpy(out + used, buf, k);
        out[used += k] = '\0';
    }
    fflush(stdout);
    close(fd[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The text after key in out up to the first character of stop, into
 * val[len]; 0 when found. */
static int take_field(const char *out, const char *key, const char *stop, char *val, size_t len)
{
    const char *at = strstr(out, key);
    if (!at)
        return ENOENT;
    at += strlen(key);
    size_t n = strcspn(at, stop);
    if (n >= len)
        return ENOSPC;
    memcpy(val, at, n);
    val[n] = '\0';
    return 0;
}

static void demo_intro(int gpu)
{
    printf("fragpool demo: %s\n", gpu ? "a real GPU answered; running on it"
                                      : "no GPU found; running on fragpool's simulated device");
    printf("workload: variable-shape training steps (activations, gradients, optimizer "
           "temporaries),\nevery buffer written and checked; it fragments a cache with "
           "PyTorch's rules\n\n");
}

/* The last line: memory and time, before and after. */
static void demo_verdict(const char *driver_out, const char *oom_out, const char *fixed_out,
                         const char *conf, int gpu)
{
    char drv[32] = "?", fp[32] = "?", need[32] = "?", live[32] = "?";
    take_field(driver_out, "cuMemAlloc+cuMemFree: ", " ", drv, sizeof drv);
    take_field(fixed_out, "cuMemAlloc+cuMemFree: ", " ", fp, sizeof fp);
    take_field(oom_out, "up to this failure fits in ", " ", need, sizeof need);
    take_field(fixed_out, "peak live: ", " ", live, sizeof live);
    printf("\n== before and after%s\n", gpu ? "" : " (figures from fragpool's simulated device)");
    printf("before: PyTorch's rules ran out of memory within %d MiB; after: FRAGPOOL_CONF=%s "
           "completed within it (its replay needed %s MiB up to the failure; %s MiB live at "
           "peak); time per allocate+free pair: %s us straight on the driver, %s us under "
           "fragpool\n",
           DEMO_LIMIT_MB, conf, need, live, drv, fp);
}

int fp_cmd_demo(int argc, char **argv)
{
    (void)argc, (void)argv;
    fp_paths p;
    if (fp_find_paths(&p))
        return 1;
    if (access(p.workload, X_OK)) {
        fprintf(stderr,
                "fragpool demo: the workload %s is missing; build or install fragpool "
                "again\n",
                p.workload);
        return 1;
    }
    static char driver_out[DEMO_OUT], oom_out[DEMO_OUT], fixed_out[DEMO_OUT];
    char limit[64], conf[1024];
    int gpu = have_gpu();
    demo_intro(gpu);
    printf("== 1. straight on the driver (cuMemAlloc/cuMemFree per buffer)\n");
    if (run_workload(&p, NULL, !gpu, driver_out))
        return 1;
    snprintf(limit, sizeof limit, "max_reserved_mb:%d,summary:off,expandable_segments:False",
             DEMO_LIMIT_MB);
    printf("\n== 2. under fragpool, PyTorch's rules (classic segments, PyTorch's default; "
           "fragpool's is virtual memory), within %d MiB: FRAGPOOL_CONF=%s\n",
           DEMO_LIMIT_MB, limit);
    int rc = run_workload(&p, limit, !gpu, oom_out);
    if (rc != 3 || take_field(oom_out, "fragpool: fix: FRAGPOOL_CONF=", " \n", conf, sizeof conf)) {
        fprintf(stderr,
                "fragpool demo: expected an out-of-memory failure with a proven fix "
                "(exit status %d)\n",
                rc);
        return 1;
    }
    printf("\n== 3. the fix, verbatim: FRAGPOOL_CONF=%s\n", conf);
    if ((rc = run_workload(&p, conf, !gpu, fixed_out)) != 0) {
        fprintf(stderr, "fragpool demo: the fix did not complete (exit status %d)\n", rc);
        return 1;
    }
    demo_verdict(driver_out, oom_out, fixed_out, conf, gpu);
    return 0;
}
