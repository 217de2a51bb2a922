/* main.c - `fragpool`: dispatches to the subcommands and holds the small
 * helpers they share (sizes, configuration, where the libraries are).
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

static const char usage[] =
    "usage: fragpool COMMAND [ARGS]\n"
    "  demo                                 run the bundled workload under fragpool\n"
    "                                       (real GPU if present, else the simulated device)\n"
    "  run [--simulate] [--conf K:V,...] -- CMD...\n"
    "                                       run CMD with libfragpool.so preloaded\n"
    "  replay TRACE [--conf K:V,...] [--budget SIZE] [--json]\n"
    "                                       replay an allocation trace offline, print the summary\n"
    "  tune TRACE [--budget SIZE]           rank settings by peak reserved, with the smallest\n"
    "                                       budget each runs in without an OOM\n"
    "  report TRACE|SUMMARY.json -o OUT.html\n"
    "                                       a self-contained HTML report\n"
    "  merge SUMMARY.json...                one table of several ranks' JSON summaries\n"
    "  config [K:V,...]                     list every FRAGPOOL_CONF key, or check a setting\n"
    "SIZE: bytes, or with a unit: 512M, 8GiB, 1.5G.\n";

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

/* ud: NULL, or the label of the text's source ("--conf"), which replaces
 * config/'s "FRAGPOOL_CONF" in the line. */
static void print_problem(void *ud, const char *line)
{
    static const char env[] = "fragpool: FRAGPOOL_CONF: ";
    if (ud && !strncmp(line, env, sizeof env - 1))
        fprintf(stderr, "fragpool: %s: %s\n", (const char *)ud, line + sizeof env - 1);
    else
        fprintf(stderr, "%s\n", line);
}

int fp_cli_conf(const char *text, fp_conf *c)
{
    fp_conf_default(c);
    int n = fp_conf_parse(getenv("FRAGPOOL_CONF"), c, print_problem, NULL);
    return n + fp_conf_parse(text, c, print_problem, "--conf");
}

int fp_lib_dir(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return ENOENT;
    *slash = '\0';
    int m = snprintf(out, len, "%s/../lib", exe);
    return m < 0 || (size_t)m >= len ? ENAMETOOLONG : 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"demo", fp_cmd_demo},     {"run", fp_cmd_run},   {"replay", fp_cmd_replay},
                {"tune", fp_cmd_tune},     {"merge", fp_cmd_merge}, {"report", fp_cmd_report},
                {"config", fp_cmd_config}};
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "fragpool: unknown command '%s'\n%s", argv[1], usage);
    return 2;
}
