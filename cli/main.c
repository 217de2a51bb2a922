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
#include <stdbool.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>
#include <unistd.h>

/* One row per command: what `fragpool`, `fragpool help CMD` and
 * `fragpool CMD --help` print.  The commands' own usage lines (printed on
 * a usage error) repeat the synopsis. */
typedef struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *synopsis;   /* after "fragpool NAME"                   */
    const char *what;       /* one line                                */
    const char *options;    /* the options, one per line; or NULL      */
} command;

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

static const char conf_opt[] =
    "  --conf K:V,...     the settings, as FRAGPOOL_CONF takes them (fragpool config)\n";
static const char budget_opt[] =
    "  --budget SIZE      a device of SIZE: what does not fit is an OOM\n";

static const command commands[] = {
    {"demo", fp_cmd_demo, "",
     "the bundled workload on the driver, then under fragpool (GPU, else simulated)", NULL},
    {"run", fp_cmd_run, "[--simulate] [--conf K:V,...] [--keep-framework-cache] -- CMD...",
     "run CMD with libfragpool.so preloaded",
     "  --simulate               on fragpool's simulated device instead of the GPU\n"
     "  --conf K:V,...           FRAGPOOL_CONF for CMD (fragpool config lists the keys)\n"
     "  --keep-framework-cache   leave PyTorch's own caching allocator on\n"},
    {"replay", fp_cmd_replay, "TRACE [--conf K:V,...] [--budget SIZE] [--json]",
     "replay an allocation trace offline and print the summary", NULL},
    {"tune", fp_cmd_tune, "TRACE [--budget SIZE] [--json] [--threads N] [--full]",
     "rank settings by peak reserved, each with the smallest budget it runs in",
     "  --budget SIZE      also: which settings fit a device of SIZE\n"
     "  --json             the table and the verdict as JSON\n"
     "  --threads N        replay workers (default: one per CPU; 0..64)\n"
     "  --full             garbage-collection variants of every setting, not the best 3\n"},
    {"report", fp_cmd_report,
     "TRACE|SUMMARY.json -o OUT.html [--conf K:V,...] [--budget SIZE] "
     "[--at reserved|allocated|end|N]",
     "a self-contained HTML page: timeline, segment map, sizes, summary",
     "  -o OUT.html        the page\n"
     "  --at WHEN          the map's moment: peak reserved (default), peak allocated,\n"
     "                     the end, or after event N\n"},
    {"snapshot", fp_cmd_snapshot, "TRACE -o OUT.pickle [--conf K:V,...] [--budget SIZE]",
     "a trace as PyTorch's memory snapshot, for memory_viz",
     "  -o OUT.pickle      the snapshot\n"},
    {"merge", fp_cmd_merge, "SUMMARY.json...", "one table of several ranks' JSON summaries",
     NULL},
    {"config", fp_cmd_config, "[K:V,...]",
     "list every FRAGPOOL_CONF key, or check a setting", NULL},
};
#define NCOMMANDS (sizeof commands / sizeof *commands)

static const command *find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

static bool takes(const command *c, const char *opt)
{
    return strstr(c->synopsis, opt) != NULL;
}

/* fragpool help CMD, fragpool CMD --help. */
static int command_help(const command *c)
{
    printf("usage: fragpool %s%s%s\n%s\n", c->name, *c->synopsis ? " " : "", c->synopsis,
           c->what);
    if (c->options)
        fputs(c->options, stdout);
    if (takes(c, "--conf") && !(c->options && strstr(c->options, "--conf")))
        fputs(conf_opt, stdout);
    if (takes(c, "--budget") && !(c->options && strstr(c->options, "--budget")))
        fputs(budget_opt, stdout);
    if (takes(c, "--json") && !(c->options && strstr(c->options, "--json")))
        fputs("  --json             the summary as JSON\n", stdout);
    if (takes(c, "SIZE"))
        fputs("SIZE: bytes, or with a unit: 512M, 8GiB, 1.5G.\n", stdout);
    return fp_cli_output_done(c->name, 0);
}

static void usage(FILE *f)
{
    fputs("usage: fragpool COMMAND [ARGS]   (fragpool help COMMAND: its options)\n", f);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %s%s%s\n      %s\n", commands[i].name, *commands[i].synopsis ? " " : "",
                commands[i].synopsis, commands[i].what);
    fputs("  help [COMMAND]\n  --version\n"
          "SIZE: bytes, or with a unit: 512M, 8GiB, 1.5G.\n", f);
}

/* An unknown command: "did you mean" for a typo, else the overview. */
static int unknown(const char *word)
{
    const char *names[NCOMMANDS + 1];
    for (size_t i = 0; i < NCOMMANDS; i++)
        names[i] = commands[i].name;
    names[NCOMMANDS] = "help";
    const char *guess = fp_closest((fp_slice){word, strlen(word)}, names, NCOMMANDS + 1);
    if (guess) {
        fprintf(stderr, "fragpool: unknown command '%s'; did you mean %s? (fragpool help lists "
                "them)\n", word, guess);
        return 2;
    }
    fprintf(stderr, "fragpool: unknown command '%s'\n", word);
    usage(stderr);
    return 2;
}

static bool is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

/* fragpool help [COMMAND] */
static int help(int argc, char **argv)
{
    if (argc < 3) {
        usage(stdout);
        return fp_cli_output_done("help", 0);
    }
    const command *c = find(argv[2]);
    if (c)
        return command_help(c);
    return unknown(argv[2]);
}

int main(int argc, char **argv)
{
    if (argc < 2 || is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : fp_cli_output_done("help", 0);
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("fragpool %s\n", FP_VERSION);
        return fp_cli_output_done("version", 0);
    }
    if (!strcmp(argv[1], "help"))
        return help(argc, argv);
    const command *c = find(argv[1]);
    if (!c)
        return unknown(argv[1]);
    if (argc > 2 && is_help(argv[2])) /* `run -- CMD --help` is CMD's */
        return command_help(c);
    return c->fn(argc - 1, argv + 1);
}
