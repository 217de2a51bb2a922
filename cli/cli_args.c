/* cli_args.c - every subcommand's arguments in one table: the rows that
 * parse a command line (fp_cli_parse) are the rows that `fragpool help CMD`
 * and the usage lines print, so the two cannot drift apart.
 *
 * Invariants: an option is either a flag (arg NULL) or takes exactly one
 * argument, the next word or the rest of "--name=VALUE", checked there
 * when the row has a check; a
 * command has at most one positional argument (run's is the rest of the
 * line: cmd_run.c parses it with its own loop over run_opts' names,
 * which test_cli holds to this table); a usage error is one line on
 * stderr naming the word, then the usage line.
 */
#include "cli.h"
#include <stdio.h>
#include <string.h>

/* A spec's options: the array and its count.  Each count must fit the
 * callers' val[FP_CLI_MAX_OPTS] (asserted below the arrays). */
#define NOPTS(a) (sizeof a / sizeof *a)
#define OPTS(a)  a, NOPTS(a)

/* --budget's value, checked where it stands on the line (the first
 * problem in the line is the one reported). */
static int check_budget(const char *cmd, const char *v)
{
    size_t bytes;
    return fp_parse_budget(cmd, v, &bytes);
}

/* Rows several commands share (macros: a static initializer may not read
 * another object, even a const one). */
#define CONF_OPT                                                                                   \
    {                                                                                              \
        "--conf", "K:V,...", "the settings, as FRAGPOOL_CONF takes them (fragpool config)", 0,     \
            NULL                                                                                   \
    }
#define QUIET_OPT                                                                                  \
    {                                                                                              \
        "--quiet", NULL, "no progress line (on a terminal past 2 s) nor timing on stderr", 0, NULL \
    }
#define BUDGET_OPT                                                                                 \
    {                                                                                              \
        "--budget", "SIZE", "a device of SIZE: what does not fit is an OOM", 0, check_budget       \
    }

const fp_cli_spec fp_cli_demo = {"demo", "", NULL, 0};

static const fp_cli_opt run_opts[] = {
    {"--simulate", NULL, "on fragpool's simulated device instead of the GPU", 0, NULL},
    {"--conf", "K:V,...", "FRAGPOOL_CONF for CMD (fragpool config lists the keys)", 0, NULL},
    {"--keep-framework-cache", NULL, "leave PyTorch's own caching allocator on", 0, NULL},
};
const fp_cli_spec fp_cli_run = {"run", "-- CMD...", OPTS(run_opts)};

static const fp_cli_opt replay_opts[] = {
    CONF_OPT, BUDGET_OPT, {"--json", NULL, "the summary as JSON", 0, NULL}, QUIET_OPT};
const fp_cli_spec fp_cli_replay = {"replay", "TRACE", OPTS(replay_opts)};

static const fp_cli_opt tune_opts[] = {
    {"--budget", "SIZE", "also: which settings fit a device of SIZE", 0, check_budget},
    {"--json", NULL, "the table and the verdict as JSON", 0, NULL},
    {"--threads", "N", "replay workers (default: one per CPU; 0..64)", 0, NULL},
    {"--full", NULL, "garbage-collection variants of every setting, not the best 3", 0, NULL},
    QUIET_OPT,
};
const fp_cli_spec fp_cli_tune = {"tune", "TRACE", OPTS(tune_opts)};

static const fp_cli_opt report_opts[] = {
    {"-o", "OUT.html", "the page", 1, NULL},
    CONF_OPT,
    BUDGET_OPT,
    {"--at", "WHEN", "the map's moment: reserved (the default), allocated, end, or an event number",
     0, NULL},
    QUIET_OPT,
};
const fp_cli_spec fp_cli_report = {"report", "TRACE|SUMMARY.json", OPTS(report_opts)};

static const fp_cli_opt snapshot_opts[] = {
    {"-o", "OUT.pickle", "the snapshot", 1, NULL}, CONF_OPT, BUDGET_OPT};
const fp_cli_spec fp_cli_snapshot = {"snapshot", "TRACE", OPTS(snapshot_opts)};

_Static_assert(NOPTS(run_opts) <= FP_CLI_MAX_OPTS && NOPTS(replay_opts) <= FP_CLI_MAX_OPTS &&
                   NOPTS(tune_opts) <= FP_CLI_MAX_OPTS && NOPTS(report_opts) <= FP_CLI_MAX_OPTS &&
                   NOPTS(snapshot_opts) <= FP_CLI_MAX_OPTS,
               "every command's options fit val[FP_CLI_MAX_OPTS]");

const fp_cli_spec fp_cli_merge = {"merge", "SUMMARY.json...", NULL, 0};
const fp_cli_spec fp_cli_config = {"config", "[K:V,...]", NULL, 0};

/* The positional argument leads, except "-- CMD..." (run), which follows
 * the options as it must on the command line. */
void fp_cli_put_synopsis(FILE *f, const fp_cli_spec *s)
{
    int last = !strncmp(s->positional, "--", 2), sep = 0;
    if (!last && *s->positional)
        fputs(s->positional, f), sep = 1;
    for (size_t i = 0; i < s->nopts; i++, sep = 1) {
        const fp_cli_opt *o = &s->opts[i];
        fprintf(f, "%s%s%s%s%s%s", sep ? " " : "", o->required ? "" : "[", o->name,
                o->arg ? " " : "", o->arg ? o->arg : "", o->required ? "" : "]");
    }
    if (last)
        fprintf(f, "%s%s", sep ? " " : "", s->positional);
}

void fp_cli_usage(FILE *f, const fp_cli_spec *s)
{
    fprintf(f, "usage: fragpool %s%s", s->cmd, *s->positional || s->nopts ? " " : "");
    fp_cli_put_synopsis(f, s);
    fputc('\n', f);
}

void fp_cli_put_options(FILE *f, const fp_cli_spec *s)
{
    int size = 0;
    for (size_t i = 0; i < s->nopts; i++) {
        const fp_cli_opt *o = &s->opts[i];
        char head[64];
        snprintf(head, sizeof head, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-24s %s\n", head, o->help);
        size |= o->arg && !strcmp(o->arg, "SIZE");
    }
    if (size)
        fputs("SIZE: bytes, or with a unit: 512M, 8GiB, 1.5G.\n", f);
}

static long find_opt(const fp_cli_spec *s, const char *word)
{
    for (size_t i = 0; i < s->nopts; i++)
        if (!strcmp(word, s->opts[i].name))
            return (long)i;
    return -1;
}

/* The option a word names, as "--name" or "--name=VALUE" (then *inline
 * points at VALUE, else it is NULL); -1 for none. */
static long find_opt_eq(const fp_cli_spec *s, const char *word, const char **inline_val)
{
    const char *eq = strncmp(word, "--", 2) ? NULL : strchr(word, '=');
    *inline_val = eq ? eq + 1 : NULL;
    size_t len = eq ? (size_t)(eq - word) : strlen(word);
    for (size_t i = 0; i < s->nopts; i++)
        if (strlen(s->opts[i].name) == len && !strncmp(word, s->opts[i].name, len))
            return (long)i;
    return -1;
}

static int usage_error(const fp_cli_spec *s, const char *why, const char *word)
{
    fprintf(stderr, "fragpool %s: %s '%s'\n", s->cmd, why, word);
    fp_cli_usage(stderr, s);
    return 2;
}

int fp_cli_parse(const fp_cli_spec *s, int argc, char **argv, const char **val, const char **pos)
{
    for (size_t i = 0; i < s->nopts; i++)
        val[i] = NULL;
    *pos = NULL;
    for (int i = 1; i < argc; i++) {
        const char *eq;
        long k = find_opt_eq(s, argv[i], &eq);
        if (k >= 0 && eq && !s->opts[k].arg)
            return usage_error(s, "a value given to a flag", argv[i]);
        if (k >= 0 && s->opts[k].arg && (eq ? !*eq : i + 1 >= argc))
            return usage_error(s, "no value after", argv[i]);
        if (k >= 0) {
            val[k] = eq ? eq : s->opts[k].arg ? argv[++i] : "";
            if (s->opts[k].check && s->opts[k].check(s->cmd, val[k]))
                return 2;
        } else if (argv[i][0] != '-' && !*pos && *s->positional) {
            *pos = argv[i];
        } else {
            return usage_error(s, "unexpected argument", argv[i]);
        }
    }
    for (size_t i = 0; i < s->nopts; i++)
        if (s->opts[i].required && !val[i]) {
            fprintf(stderr, "fragpool %s: %s %s is required\n", s->cmd, s->opts[i].name,
                    s->opts[i].arg);
            fp_cli_usage(stderr, s);
            return 2;
        }
    if (*s->positional && !*pos) {
        fprintf(stderr, "fragpool %s: no %s given\n", s->cmd, s->positional);
        fp_cli_usage(stderr, s);
        return 2;
    }
    return 0;
}

const char *fp_cli_value(const fp_cli_spec *s, const char *const *val, const char *name)
{
    long k = find_opt(s, name);
    return k >= 0 ? val[k] : NULL;
}
