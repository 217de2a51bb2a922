/* cmd_run.c - `fragpool run`: puts libfragpool.so first in LD_PRELOAD
 * (and with --simulate, the simulated libcuda.so.1 first in
 * LD_LIBRARY_PATH), fragpool's Python side first in PYTHONPATH (its
 * sitecustomize, python/), and executes the command.  PyTorch keeps a
 * cache of its own in front of fragpool; the command gets PyTorch's
 * cudaMallocAsync backend in its allocator settings, which hands every
 * tensor to fragpool (docs/pytorch.md), said in one line for a Python
 * command (python*, or a script whose #! line runs python).
 * FRAGPOOL_PYTORCH_CACHE=async|off|keep tells the shim what was chosen
 * (docs/shim.md, "PyTorch").  --keep-framework-cache leaves PyTorch's
 * cache on.  `fragpool demo` is cmd_demo.c.
 *
 * Invariants: environment values are built at their full length, never
 * cut (fp_cli_arm_env, cli_common.c); a usage error prints one line and
 * the usage, exits with status 2 and runs nothing; the libraries are
 * found from this executable's own path (fp_find_paths), so an installed
 * fragpool runs its own.
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
#include <unistd.h>

#define FP_NO_CACHE_VAR    "PYTORCH_NO_CUDA_MEMORY_CACHING"
#define FP_CACHE_HANDSHAKE "FRAGPOOL_PYTORCH_CACHE"
#define FP_ALLOC_CONF      "PYTORCH_ALLOC_CONF"
#define FP_CUDA_ALLOC_CONF "PYTORCH_CUDA_ALLOC_CONF"
#define FP_ASYNC_BACKEND   "backend:cudaMallocAsync"

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

/* The PyTorch variable the allocator settings go in: the one the user
 * set (PYTORCH_ALLOC_CONF wins in PyTorch, as in fragpool), else the
 * older name, which every PyTorch version reads. */
static const char *pytorch_conf_var(void)
{
    return getenv(FP_ALLOC_CONF) ? FP_ALLOC_CONF : FP_CUDA_ALLOC_CONF;
}

/* 1 when the PyTorch settings in force name a backend (the user chose). */
static int names_backend(const char *conf)
{
    for (const char *p = conf; p && *p;) {
        p += strspn(p, " ,");
        if (!strncmp(p, "backend", 7) && (p[7] == ':' || p[7] == ' '))
            return 1;
        p += strcspn(p, ",");
    }
    return 0;
}

/* PyTorch's cudaMallocAsync backend, so that every tensor comes to
 * fragpool through cudaMallocAsync/cudaFreeAsync (docs/pytorch.md, "Why
 * the cudaMallocAsync backend"): unless kept, or the user already chose a
 * backend or turned the cache off.  Harmless to a program without
 * PyTorch; said in one line for a Python command.  The shim is told
 * either way (FRAGPOOL_PYTORCH_CACHE). */
static int framework_cache(const run_opts *o)
{
    const char *var = pytorch_conf_var(), *conf = getenv(var);
    int chosen = getenv(FP_NO_CACHE_VAR) || names_backend(conf);
    const char *mode = o->keep_cache ? "keep" : chosen ? "off" : "async";
    if (setenv(FP_CACHE_HANDSHAKE, mode, 1))
        return errno;
    if (o->keep_cache || chosen)
        return 0;
    char *v = malloc(strlen(FP_ASYNC_BACKEND) + (conf ? strlen(conf) + 1 : 0) + 1);
    if (!v)
        return ENOMEM;
    sprintf(v, "%s%s%s", FP_ASYNC_BACKEND, conf && *conf ? "," : "", conf ? conf : "");
    int rc = setenv(var, v, 1) ? errno : 0;
    free(v);
    if (!rc && is_python_command(o->cmd[0]))
        fprintf(stderr,
                "fragpool run: %s is a Python program: %s=%s... so that PyTorch hands every "
                "tensor to fragpool, whose Python side answers torch.cuda's memory API "
                "(--keep-framework-cache keeps PyTorch's own cache)\n",
                o->cmd[0], var, FP_ASYNC_BACKEND);
    return rc;
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
        else if (!strncmp(a, "--conf=", 7) && a[7])
            o->conf = a + 7;
        else if (!strcmp(a, "--conf") || !strcmp(a, "--conf="))
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
    if (fp_find_paths(&p) || fp_cli_arm_env(&p, o.simulate, o.conf))
        return 1;
    if ((rc = framework_cache(&o)) != 0 || (rc = fp_cli_prepend_env("PYTHONPATH", p.python))) {
        fprintf(stderr, "fragpool: cannot set the environment: %s\n", strerror(rc));
        return 1;
    }
    execvp(o.cmd[0], o.cmd);
    fprintf(stderr, "fragpool run: cannot execute '%s': %s\n", o.cmd[0], strerror(errno));
    return 127;
}
