/* cmd_run.c - `fragpool run` and `fragpool demo`.
 *
 * run: puts libfragpool.so first in LD_PRELOAD (and with --simulate, the
 * simulated libcuda.so.1 first in LD_LIBRARY_PATH) and executes the
 * command.  PyTorch keeps a cache of its own in front of fragpool; a
 * Python command (python*, or a script whose #! line runs python) gets
 * PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that its tensors reach fragpool,
 * said in one line.  FRAGPOOL_PYTORCH_CACHE=off|keep tells the shim the
 * same for a process that turns out to be PyTorch only when it runs (a
 * shell script, a C++ program: docs/shim.md, "PyTorch").
 * --keep-framework-cache leaves PyTorch's cache on.
 *
 * demo: runs the bundled workload straight on the driver, then under
 * fragpool within a limit where PyTorch's rules (classic segments, set by
 * name: fragpool's default is virtual memory) run out of memory, takes
 * the fix fragpool's OOM message proves, runs it verbatim within the same
 * limit, and ends with one line: memory and time, before and after.  On
 * the real GPU when one answers, else on the simulated device, and says
 * which (docs/advice.md).
 *
 * Invariants: environment values are built at their full length, never
 * cut; a usage error prints one line and the usage, exits with status 2
 * and runs nothing; the libraries are found from this executable's own
 * path (fp_find_paths), so an installed fragpool runs its own.
 */
#include "cli.h"
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FP_NO_CACHE_VAR    "PYTORCH_NO_CUDA_MEMORY_CACHING"
#define FP_CACHE_HANDSHAKE "FRAGPOOL_PYTORCH_CACHE"

static const char run_usage[] =
    "usage: fragpool run [--simulate] [--conf K:V,...] [--keep-framework-cache] -- CMD...\n"
    "  --simulate               on fragpool's simulated device instead of the GPU\n"
    "  --conf K:V,...           FRAGPOOL_CONF for CMD (fragpool config lists the keys)\n"
    "  --keep-framework-cache   leave PyTorch's own caching allocator on\n";

typedef struct run_opts {
    int simulate;     /* --simulate                        */
    int keep_cache;   /* --keep-framework-cache            */
    const char *conf; /* --conf's value, or NULL           */
    char **cmd;       /* the command and its arguments     */
} run_opts;

/* name=value:old (or name=value when old is unset or empty), whole. */
static int prepend_env(const char *name, const char *value)
{
    const char *old = getenv(name);
    size_t n = strlen(value), m = old && *old ? strlen(old) : 0;
    char *buf = malloc(n + m + 2);
    if (!buf)
        return ENOMEM;
    memcpy(buf, value, n);
    buf[n] = '\0';
    if (m) {
        buf[n] = ':';
        memcpy(buf + n + 1, old, m + 1);
    }
    int rc = setenv(name, buf, 1) ? errno : 0;
    free(buf);
    return rc;
}

/* Puts libfragpool.so (and the simulated driver) into the environment. */
static int arm_env(const fp_paths *p, int simulate, const char *conf)
{
    int rc = prepend_env("LD_PRELOAD", p->lib);
    if (!rc && simulate)
        rc = prepend_env("LD_LIBRARY_PATH", p->simdev);
    if (!rc && conf && setenv("FRAGPOOL_CONF", conf, 1))
        rc = errno;
    if (rc)
        fprintf(stderr, "fragpool: cannot set the environment: %s\n", strerror(rc));
    return rc;
}

/* ---- before the program starts ------------------------------------------ */

static void say_line(void *ud, const char *line)
{
    (void)ud;
    fprintf(stderr, "%s\n", line);
}

/* --conf's problems, each in one line (with a "did you mean" for a typo'd
 * key); true when there was one: the program is not started. */
static bool conf_has_problems(const char *conf)
{
    fp_conf c;
    fp_conf_default(&c);
    return conf && fp_conf_parse_as(conf, "--conf", 0, &c, say_line, NULL) > 0;
}

/* Without --simulate: one line when this machine has no CUDA driver, since
 * the program would only say it cannot open libcuda.so.1. */
static void driver_hint(int simulate)
{
    void *lib = simulate ? NULL : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib || simulate) {
        if (lib)
            dlclose(lib);
        return;
    }
    fprintf(stderr, "fragpool run: no CUDA driver here (libcuda.so.1 cannot be loaded), so the "
                    "program will find no GPU; add --simulate to run it on fragpool's simulated "
                    "device\n");
}

/* ---- is it Python? ---------------------------------------------------- */

/* python, python3, python3.12, given as a path or a bare name. */
static int is_python_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    if (strncmp(b, "python", 6) != 0)
        return 0;
    for (b += 6; *b; b++)
        if (!isdigit((unsigned char)*b) && *b != '.')
            return 0;
    return 1;
}

/* cmd as execvp finds it: itself when it holds a '/', else the first
 * executable of that name on PATH.  0, or ENOENT. */
static int resolve_cmd(const char *cmd, char *out, size_t len)
{
    if (strchr(cmd, '/'))
        return snprintf(out, len, "%s", cmd) < (int)len ? 0 : ENAMETOOLONG;
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        int m = snprintf(out, len, "%.*s%s%s", (int)n, p, n ? "/" : "", cmd);
        if (m > 0 && (size_t)m < len && access(out, X_OK) == 0)
            return 0;
        p += n + (p[n] == ':');
    }
    return ENOENT;
}

/* The program a "#!" line starts: its interpreter, or for env the first
 * word after it that is neither an option nor NAME=VALUE. */
static int shebang_runs_python(char *line)
{
    char *save = NULL, *w = strtok_r(line + 2, " \t\r\n", &save);
    if (!w || is_python_name(w))
        return w != NULL;
    const char *b = strrchr(w, '/');
    if (strcmp(b ? b + 1 : w, "env") != 0)
        return 0;
    while ((w = strtok_r(NULL, " \t\r\n", &save)) && (w[0] == '-' || strchr(w, '=')))
        ;
    return w && is_python_name(w);
}

/* 1 when the file at path is a script whose first line runs python. */
static int script_runs_python(const char *path)
{
    char line[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n < 3 || line[0] != '#' || line[1] != '!')
        return 0;
    line[n] = '\0';
    line[strcspn(line, "\n")] = '\0';
    return shebang_runs_python(line);
}

static int is_python_command(const char *cmd)
{
    char path[PATH_MAX];
    return is_python_name(cmd) ||
           (resolve_cmd(cmd, path, sizeof path) == 0 && script_runs_python(path));
}

/* PyTorch's own cache off for a Python command, unless kept or already
 * decided by the user; the shim is told either way. */
static int framework_cache(const run_opts *o)
{
    if (setenv(FP_CACHE_HANDSHAKE, o->keep_cache ? "keep" : "off", 1))
        return errno;
    if (o->keep_cache || getenv(FP_NO_CACHE_VAR) || !is_python_command(o->cmd[0]))
        return 0;
    if (setenv(FP_NO_CACHE_VAR, "1", 1))
        return errno;
    fprintf(stderr,
            "fragpool run: %s is a Python program: setting " FP_NO_CACHE_VAR "=1 "
            "so that PyTorch's tensors come to fragpool, not to PyTorch's own cache "
            "(--keep-framework-cache keeps it)\n",
            o->cmd[0]);
    return 0;
}

/* ---- fragpool run ---------------------------------------------------------- */

static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "fragpool run: %s%s%s%s; nothing was run\n%s", what, arg ? " '" : "",
            arg ? arg : "", arg ? "'" : "", run_usage);
    return 2;
}

/* 0 with o filled; 2 after a usage error; -1 for --help. */
static int parse_run(int argc, char **argv, run_opts *o)
{
    int i = 1;
    memset(o, 0, sizeof *o);
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--simulate"))
            o->simulate = 1;
        else if (!strcmp(a, "--keep-framework-cache"))
            o->keep_cache = 1;
        else if (!strcmp(a, "--conf") && i + 1 < argc && strcmp(argv[i + 1], "--"))
            o->conf = argv[++i];
        else if (!strcmp(a, "--conf"))
            return usage_error("--conf needs a value such as max_split_size_mb:512", NULL);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return -1;
        else
            return usage_error("unknown option", a);
    }
    if (i >= argc)
        return usage_error("no command given", NULL);
    o->cmd = argv + i;
    return 0;
}

int fp_cmd_run(int argc, char **argv)
{
    run_opts o;
    fp_paths p;
    int rc = parse_run(argc, argv, &o);
    if (rc) {
        if (rc < 0)
            fputs(run_usage, stdout);
        return rc < 0 ? 0 : rc;
    }
    if (conf_has_problems(o.conf)) {
        fprintf(stderr, "fragpool run: --conf has the problems above; nothing was run\n");
        return 2;
    }
    driver_hint(o.simulate);
    if (fp_find_paths(&p) || arm_env(&p, o.simulate, o.conf))
        return 1;
    if ((rc = framework_cache(&o)) != 0) {
        fprintf(stderr, "fragpool: cannot set the environment: %s\n", strerror(rc));
        return 1;
    }
    execvp(o.cmd[0], o.cmd);
    fprintf(stderr, "fragpool run: cannot execute '%s': %s\n", o.cmd[0], strerror(errno));
    return 127;
}

/* ---- fragpool demo --------------------------------------------------------- */

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
        if (simulate && prepend_env("LD_LIBRARY_PATH", p->simdev))
            _exit(1);
        if (conf && arm_env(p, 0, conf))
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
