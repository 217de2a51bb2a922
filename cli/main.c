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
 * `fragpool CMD --help` print; the arguments come from the command's
 * spec (cli_args.c), the table its parser reads too. */
typedef struct command {
    int (*fn)(int, char **);
    const fp_cli_spec *spec;
    const char *what; /* one line                                */
} command;

#if !FP_CLI_TRACE
/* replay, tune and report need zlib, which this build was made without. */
static int no_trace(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr,
            "fragpool %s: not in this build (zlib was missing when it was built); "
            "install zlib (Debian: zlib1g-dev), configure and build again\n",
            argv[0]);
    return 1;
}
#define fp_cmd_replay   no_trace
#define fp_cmd_tune     no_trace
#define fp_cmd_report   no_trace
#define fp_cmd_snapshot no_trace
#endif

static const command commands[] = {
    {fp_cmd_demo, &fp_cli_demo,
     "the bundled workload on the driver, then under fragpool (GPU, else simulated)"},
    {fp_cmd_run, &fp_cli_run, "run CMD with libfragpool.so preloaded"},
    {fp_cmd_replay, &fp_cli_replay, "replay an allocation trace offline and print the summary"},
    {fp_cmd_tune, &fp_cli_tune,
     "rank settings by peak reserved, each with the smallest budget it runs in"},
    {fp_cmd_report, &fp_cli_report,
     "a self-contained HTML page: the finding, timeline, segment map, sizes, summary"},
    {fp_cmd_snapshot, &fp_cli_snapshot, "a trace as PyTorch's memory snapshot, for memory_viz"},
    {fp_cmd_merge, &fp_cli_merge, "one table of several ranks' JSON summaries"},
    {fp_cmd_config, &fp_cli_config, "list every FRAGPOOL_CONF key, or check a setting"},
};
#define NCOMMANDS (sizeof commands / sizeof *commands)

static const command *find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].spec->cmd))
            return &commands[i];
    return NULL;
}

/* fragpool help CMD, fragpool CMD --help. */
static int command_help(const command *c)
{
    fp_cli_usage(stdout, c->spec);
    printf("%s\n", c->what);
    fp_cli_put_options(stdout, c->spec);
    return fp_cli_output_done(c->spec->cmd, 0);
}

static void usage(FILE *f)
{
    fputs("usage: fragpool COMMAND [ARGS]   (fragpool help COMMAND: its options)\n", f);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const fp_cli_spec *sp = commands[i].spec;
        fprintf(f, "  %s%s", sp->cmd, *sp->positional || sp->nopts ? " " : "");
        fp_cli_put_synopsis(f, sp);
        fprintf(f, "\n      %s\n", commands[i].what);
    }
    fputs("  help [COMMAND]\n  --version\n"
          "SIZE: bytes, or with a unit: 512M, 8GiB, 1.5G.\n",
          f);
}

/* An unknown command: "did you mean" for a typo, else the overview. */
static int unknown(const char *word)
{
    const char *names[NCOMMANDS + 1];
    for (size_t i = 0; i < NCOMMANDS; i++)
        names[i] = commands[i].spec->cmd;
    names[NCOMMANDS] = "help";
    const char *guess = fp_closest((fp_slice){word, strlen(word)}, names, NCOMMANDS + 1);
    if (guess) {
        fprintf(stderr,
                "fragpool: unknown command '%s'; did you mean %s? (fragpool help lists "
                "them)\n",
                word, guess);
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

/* fragpool help [COMMAND]; help's own help (help --help, help help) is
 * the overview. */
static int help(int argc, char **argv)
{
    if (argc < 3 || is_help(argv[2]) || !strcmp(argv[2], "help")) {
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
