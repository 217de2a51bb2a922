/* cli_common.c - the small helpers the commands share: sizes, the
 * configuration a command is given, and where the libraries are.  Moved
 * out of main.c so that main.c calls the commands and none calls it back.
 *
 * Invariants: the libraries are found relative to this executable, in the
 * build tree or in an installed prefix, never through a search path; a
 * bad size or config is one line on stderr.
 */
#include "cli.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>
#include <unistd.h>

int fp_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || isinf(v))
        return EINVAL;
    double mult = 1;
    if (*end) {
        static const char *const units[] = {"k", "m", "g", "t"};
        int i = 0;
        while (i < 4 && tolower((unsigned char)*end) != units[i][0])
            i++;
        if (i == 4)
            return EINVAL;
        mult = pow(1024.0, i + 1);
        end++;
        if (strcasecmp(end, "ib") != 0 && strcasecmp(end, "b") != 0 && *end)
            return EINVAL;
    }
    double bytes = v * mult;
    if (bytes >= 18446744073709551615.0)
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
    return n + fp_conf_parse_as(text, "--conf", 0, c, print_problem, NULL);
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
    if (!realpath(dir, lib))   /* no "bin/.." in what the user sees */
        return ENOENT;
    int a = snprintf(p->lib, sizeof p->lib, "%s/libfragpool.so", lib);
    int b = snprintf(p->simdev, sizeof p->simdev, "%s/simdev", lib);
    int c = snprintf(p->workload, sizeof p->workload, "%s", work);
    if (a < 0 || b < 0 || c < 0 || (size_t)a >= sizeof p->lib ||
        (size_t)b >= sizeof p->simdev || (size_t)c >= sizeof p->workload)
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
    /* Installed: PREFIX/bin/fragpool, PREFIX/lib/fragpool/. */
    snprintf(lib, sizeof lib, "%s/../lib/fragpool", bin);
    snprintf(work, sizeof work, "%s/fragpool-demo-workload", lib);
    if (try_layout(p, lib, work) == 0)
        return 0;
    /* The build tree: build/bin/fragpool, build/lib/. */
    snprintf(lib, sizeof lib, "%s/../lib", bin);
    snprintf(work, sizeof work, "%s/fragpool-demo-workload", bin);
    if (try_layout(p, lib, work) == 0)
        return 0;
    fprintf(stderr, "fragpool: no libfragpool.so in %s/../lib/fragpool (installed) or "
            "%s/../lib (build tree); build it, or install fragpool again\n", bin, bin);
    return ENOENT;
}
