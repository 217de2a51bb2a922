/* main.c - `fragpool`: dispatches to the subcommands (their shared helpers
 * are in cli_common.c, so no command calls back into this file).
 *
 * Invariants: a build without zlib (FP_CLI_TRACE 0) has no replay, tune
 * or report, and says so in one line when asked for them; the libraries
 * are found relative to this executable, in the build tree or in an
 * installed prefix, never through a search path.
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
    "  run [--simulate] [--conf K:V,...] [--keep-framework-cache] -- CMD...\n"
    "                                       run CMD with libfragpool.so preloaded\n"
    "  replay TRACE [--conf K:V,...] [--budget SIZE] [--json]\n"
    "                                       replay an allocation trace offline, print the summary\n"
    "  tune TRACE [--budget SIZE]           rank settings by peak reserved, with the smallest\n"
    "                                       budget each runs in without an OOM\n"
    "  report TRACE|SUMMARY.json -o OUT.html\n"
    "                                       a self-contained HTML report\n"
    "  snapshot TRACE -o OUT.pickle [--conf K:V,...] [--budget SIZE]\n"
    "                                       a trace as PyTorch's memory snapshot (memory_viz)\n"
    "  merge SUMMARY.json...                one table of several ranks' JSON summaries\n"
    "  config [K:V,...]                     list every FRAGPOOL_CONF key, or check a setting\n"
    "SIZE: bytes, or with a unit: 512M, 8GiB, 1.5G.\n";

#if !FP_CLI_TRACE
/* replay, tune and report need zlib, which this build was made without. */
static int no_trace(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "fragpool %s: not in this build (zlib was missing when it was built); "
            "install zlib (Debian: zlib1g-dev), configure and build again\n", argv[0]);
    return 1;
}
#define fp_cmd_replay no_trace
#define fp_cmd_tune no_trace
#define fp_cmd_report no_trace
#define fp_cmd_snapshot no_trace
#endif

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"demo", fp_cmd_demo},     {"run", fp_cmd_run},   {"replay", fp_cmd_replay},
                {"tune", fp_cmd_tune},     {"merge", fp_cmd_merge}, {"report", fp_cmd_report},
                {"config", fp_cmd_config}, {"snapshot", fp_cmd_snapshot}};
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
