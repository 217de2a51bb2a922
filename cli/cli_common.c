/* cli_common.c - the small helpers the commands share: sizes, the
 * configuration a command is given, where the libraries are, and putting
 * them into a program's environment (run and demo).  Moved out of main.c
 * so that main.c calls the commands and none calls it back, and out of
 * the cmd_*.c files so that no command calls into another.
 *
 * Invariants: the libraries are found relative to this executable, in the
 * build tree or in an installed prefix, never through a search path;
 * environment values are built at their full length, never cut; a bad
 * size or config is one line on stderr.
 */
#include "cli.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>
#include <unistd.h>

#ifndef FP_BIN_TO_LIB /* set by cli/CMakeLists.txt from GNUInstallDirs */
#define FP_BIN_TO_LIB "../lib/fragpool"
#endif

/* The number rules of config/ (FRAGPOOL_CONF's reals): digits, a point
 * and digits, either side of the point may be empty but not both; at
 * most 15 decimals, trailing zeros not counted; no sign, space, hex,
 * exponent or locale.  The value m / 10^k, exactly. */
static int parse_decimal(const char *s, size_t n, uint64_t *m, unsigned *k)
{
    const char *dot = memchr(s, '.', n);
    size_t end = n;
    if (dot)
        while (end > (size_t)(dot - s) + 1 && s[end - 1] == '0')
            end--; /* trailing zeros add nothing */
    *m = 0;
    *k = 0;
    for (size_t i = 0; i < end; i++) {
        if (s + i == dot)
            continue;
        unsigned d = (unsigned)(unsigned char)s[i] - '0';
        if (d > 9 || *m > (UINT64_MAX - d) / 10)
            return EINVAL;
        *m = *m * 10 + d;
        *k += dot && s + i > dot;
    }
    return n - (dot != NULL) == 0 || *k > 15 ? EINVAL : 0;
}

int fp_parse_size(const char *s, size_t *out)
{
    size_t n = strspn(s, "0123456789.");
    uint64_t m;
    unsigned k, shift = 0;
    if (parse_decimal(s, n, &m, &k))
        return EINVAL;
    const char *unit = s + n;
    if (*unit) {
        static const char units[] = "kmgt";
        const char *u = strchr(units, tolower((unsigned char)*unit));
        if (!u || !*u)
            return EINVAL;
        shift = 10 * (unsigned)(u - units + 1);
        unit++;
        if (*unit && strcasecmp(unit, "ib") != 0 && strcasecmp(unit, "b") != 0)
            return EINVAL;
    }
    unsigned __int128 bytes = (unsigned __int128)m << shift;
    for (unsigned i = 0; i < k; i++)
        bytes /= 10; /* m / 10^k, rounded down: whole bytes */
    if (bytes > SIZE_MAX)
        return EINVAL;
    *out = (size_t)bytes;
    return 0;
}

static void print_problem(void *ud, const char *line)
{
    (void)ud;
    fprintf(stderr, "%s\n", line);
}

int fp_cli_conf(const char *text, fp_conf *c)
{
    const char *source;
    char line[1024];
    fp_conf_default(c);
    int n = fp_conf_from_env(c, getenv, print_problem, NULL, &source);
    if (fp_conf_source_line(c, source, line, sizeof line) != ENOENT)
        fprintf(stderr, "%s\n", line);
    uint64_t from_env = c->set_mask;
    n += fp_conf_parse_as(text, "--conf", 0, c, print_problem, NULL);
    fp_conf_inert(c, from_env, fp_conf_segs(c), source, print_problem, NULL);
    fp_conf_inert(c, c->set_mask & ~from_env, fp_conf_segs(c), "--conf", print_problem, NULL);
    return n;
}

void fp_cli_trace_threads(fp_conf *c, fp_trace *t)
{
    int k = fp_conf_find("thread_cache_mb", strlen("thread_cache_mb"));
    if (k >= 0 && (c->set_mask >> k & 1))
        t->thread_cache = c->pool.thread_cache;
    else
        c->pool.thread_cache = t->thread_cache;
}

void fp_cli_env_inert(void)
{
    const char *source;
    fp_conf c;
    fp_conf_default(&c);
    fp_conf_from_env(&c, getenv, NULL, NULL, &source);
    fp_conf_inert(&c, c.set_mask, fp_conf_segs(&c), source, print_problem, NULL);
}

void fp_cli_vmm_note(const fp_conf *c, size_t budget)
{
    fp_pool_opts o = c->pool;
    char line[512];
    o.device_total = o.device_total ? o.device_total : budget;
    if (o.expandable_segments &&
        fp_conf_vmm_note(&o, 2 * FP_MIB, "the budget's", line, sizeof line))
        fprintf(stderr, "fragpool: %s\n", line);
}

/* The folder of this executable, without the trailing slash. */
static int exe_dir(char *out, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", out, len - 1);
    if (n <= 0 || (size_t)n >= len - 1)
        return ENOENT;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        return ENOENT;
    *slash = '\0';
    return 0;
}

/* Fills p for the layout whose libfragpool.so is in lib, with the workload
 * at work; 0 when libfragpool.so is there. */
static int try_layout(fp_paths *p, const char *dir, const char *work)
{
    char lib[PATH_MAX];
    if (!realpath(dir, lib)) /* no "bin/.." in what the user sees */
        return ENOENT;
    int a = snprintf(p->lib, sizeof p->lib, "%s/libfragpool.so", lib);
    int b = snprintf(p->simdev, sizeof p->simdev, "%s/simdev", lib);
    int c = snprintf(p->workload, sizeof p->workload, "%s", work);
    int d = snprintf(p->python, sizeof p->python, "%s/python", lib);
    if (a < 0 || b < 0 || c < 0 || d < 0 || (size_t)a >= sizeof p->lib ||
        (size_t)b >= sizeof p->simdev || (size_t)c >= sizeof p->workload ||
        (size_t)d >= sizeof p->python)
        return ENAMETOOLONG;
    return access(p->lib, R_OK) ? ENOENT : 0;
}

int fp_find_paths(fp_paths *p)
{
    char bin[PATH_MAX], lib[PATH_MAX + 20], work[PATH_MAX + 48];
    if (exe_dir(bin, sizeof bin)) {
        fprintf(stderr, "fragpool: cannot read /proc/self/exe to find libfragpool.so\n");
        return ENOENT;
    }
    /* Installed: PREFIX/BINDIR/fragpool, PREFIX/LIBDIR/fragpool/. */
    snprintf(lib, sizeof lib, "%s/%s", bin, FP_BIN_TO_LIB);
    snprintf(work, sizeof work, "%s/fragpool-demo-workload", lib);
    if (try_layout(p, lib, work) == 0)
        return 0;
    /* The build tree: build/bin/fragpool, build/lib/. */
    snprintf(lib, sizeof lib, "%s/../lib", bin);
    snprintf(work, sizeof work, "%s/fragpool-demo-workload", bin);
    if (try_layout(p, lib, work) == 0)
        return 0;
    fprintf(stderr,
            "fragpool: no libfragpool.so in %s/%s (installed) or "
            "%s/../lib (build tree); build it, or install fragpool again\n",
            bin, FP_BIN_TO_LIB, bin);
    return ENOENT;
}

/* name=value:old (or name=value when old is unset or empty), whole. */
int fp_cli_prepend_env(const char *name, const char *value)
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
int fp_cli_arm_env(const fp_paths *p, int simulate, const char *conf)
{
    int rc = fp_cli_prepend_env("LD_PRELOAD", p->lib);
    if (!rc && simulate)
        rc = fp_cli_prepend_env("LD_LIBRARY_PATH", p->simdev);
    if (!rc && conf && setenv("FRAGPOOL_CONF", conf, 1))
        rc = errno;
    if (rc)
        fprintf(stderr, "fragpool: cannot set the environment: %s\n", strerror(rc));
    return rc;
}
