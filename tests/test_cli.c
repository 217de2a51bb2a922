/* test_cli.c - the fragpool command on bad input and lost output (issue
 * 15, items 2, 4, 6, 17): each case runs build/bin/fragpool in a child with
 * a deadline and checks its exit status and its stderr.
 *
 * Checked:
 *  - `replay /dev/zero`, a FIFO without a writer, a directory: exit 1 at
 *    once with one line naming the file; `report` and `merge` too;
 *  - `tune` on a trace with a 2^64-1 byte request ends (exit 0);
 *  - replay, tune, config and merge exit 1 with one line when stdout is
 *    /dev/full;
 *  - `--budget 0.5` is a usage error (exit 2), for replay, tune, report;
 *  - problems in --conf say "--conf", not "FRAGPOOL_CONF";
 *  - merge: a number out of range is an error naming the member;
 *  - tune --threads and report --at take digits only;
 *  - replay shows and counts frees of unknown ids and allocations of live
 *    ids (docs/replay.md);
 *  - report and merge take and refuse the same summaries, with the same
 *    line; merge says when a total saturated;
 *  - --budget: one parser for every command, config's number rules;
 *  - a request over 2^48 - 1 bytes: the OOM cause says too large, tune's
 *    verdict says every setting runs out of memory (text and JSON);
 *  - no error says line 0; defer_headroom_mb's help says it has no effect;
 *  - every command answers --help, -h and `help NAME`; --version;
 *    `help --help` (-h, help) is the overview; `merge` alone names what
 *    is missing, exit 2;
 *  - sizes in text as docs/replay.md, "Units" says: tune's table and
 *    budget line in MiB with separators, snapshot's peak with a unit;
 *  - an option that takes a value takes it as --name=VALUE too (--conf=,
 *    --budget=, in every command, run included); a flag given a value,
 *    or --name= with none, is a usage error;
 *  - a key with no effect in the segments in force is said once, where
 *    it was given, in replay, config and tune;
 *  - replay, tune and report show a progress line on a terminal (a pty),
 *    wiped at the end, and none with --quiet;
 *  - a typo'd key or command gets "did you mean"; `config` with a problem prints only
 *    the problem; `run` with a problem in --conf starts nothing;
 *  - `report -o` under a file size limit (SIGXFSZ at its default, fatal):
 *    exit 1 with "writing 'OUT': File too large", and no partial page left.
 */
#include "child_run.h"
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define DEADLINE_S 150 /* a hang guard: tune ranks VMM too, and TSan runs it 20x slower */

typedef struct cli_run {
    int status;
    char *out, *err;
} cli_run;

static const char *tmp_name(const char *stem)
{
    static char name[8][160];
    static int k;
    k = (k + 1) % 8;
    snprintf(name[k], sizeof name[k], "/tmp/fp-cli-%d-%s", (int)getpid(), stem);
    return name[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Runs fragpool with args (NULL-terminated); stdout to out_path when not
 * NULL (e.g. /dev/full), else captured. */
static const char *const *cli_add; /* run_cli's extra variables (NULL: none) */

static void run_cli(cli_run *r, const char *out_path, const char *const *args)
{
    static const char *const drop[] = {
        "FRAGPOOL_CONF=", "PYTORCH_ALLOC_CONF=", "PYTORCH_CUDA_ALLOC_CONF=", "LD_PRELOAD=", NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, cli_add));
    char *argv[16] = {(char *)FP_CLI};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = (char *)args[i];
    int out = out_path ? open(out_path, O_WRONLY) : fp_t_temp_fd("/tmp/fp-cli-io-");
    int err = fp_t_temp_fd("/tmp/fp-cli-io-");
    assert_true(out >= 0);
    pid_t pid = fp_t_spawn_wait(FP_CLI, argv, env, out, err, DEADLINE_S, &r->status);
    if (pid < 0)
        fail_msg("fragpool %s %s still running after %d s", args[0], args[1] ? args[1] : "",
                 DEADLINE_S);
    r->out = out_path ? fp_t_hold(strdup("")) : fp_t_slurp_fd(out);
    r->err = fp_t_slurp_fd(err);
    close(out);
    close(err);
}

static void expect(const cli_run *r, int code, const char *in_err)
{
    if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != code)
        fail_msg("status 0x%x, want exit %d; stderr:\n%s", r->status, code, r->err);
    if (in_err && !strstr(r->err, in_err))
        fail_msg("stderr lacks '%s':\n%s", in_err, r->err);
}

static int lines(const char *s)
{
    return fp_t_count_of(s, "\n");
}

static const char *small_trace(void)
{
    const char *path = tmp_name("t.csv");
    write_text(path, "seq,op,id,size,stream\n0,a,1,1000,0\n1,a,2,3000000,0\n2,f,1,0,0\n"
                     "3,f,9,0,0\n4,a,2,50,0\n5,f,2,0,0\n");
    return path;
}

/* ---- help ------------------------------------------------------------------------ */

/* Every command answers --help, -h and `fragpool help NAME` with its usage
 * (exit 0, stdout, nothing run); an unknown one gets one line, exit 2;
 * --version prints the version. */
static void help_everywhere(void **state)
{
    (void)state;
    static const char *const names[] = {"demo",   "run",      "replay", "tune",
                                        "report", "snapshot", "merge",  "config"};
    cli_run r;
    char want[64];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(want, sizeof want, "usage: fragpool %s", names[i]);
        const char *ways[3][3] = {
            {names[i], "--help", NULL}, {names[i], "-h", NULL}, {"help", names[i], NULL}};
        for (int w = 0; w < 3; w++) {
            run_cli(&r, NULL, ways[w]);
            expect(&r, 0, NULL);
            if (strncmp(r.out, want, strlen(want)) != 0 || *r.err)
                fail_msg("fragpool %s %s: stdout '%.80s', stderr '%s'", ways[w][0], ways[w][1],
                         r.out, r.err);
        }
    }
    run_cli(&r, NULL, (const char *[]){"help", NULL});
    expect(&r, 0, NULL);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        assert_non_null(strstr(r.out, names[i]));
    assert_non_null(strstr(r.out, "--threads N")); /* every option is in the overview */
    assert_non_null(strstr(r.out, "--at "));
    run_cli(&r, NULL, (const char *[]){"help", "nope", NULL});
    expect(&r, 2, "unknown command 'nope'");
    run_cli(&r, NULL, (const char *[]){"replya", "x.csv", NULL}); /* a typo */
    expect(&r, 2, "unknown command 'replya'; did you mean replay?");
    assert_int_equal(lines(r.err), 1);
    run_cli(&r, NULL, (const char *[]){"help", "tnue", NULL});
    expect(&r, 2, "did you mean tune?");
    run_cli(&r, NULL, (const char *[]){"--version", NULL});
    expect(&r, 0, NULL);
    assert_true(strncmp(r.out, "fragpool ", 9) == 0 && lines(r.out) == 1);
    run_cli(&r, "/dev/full", (const char *[]){"replay", "--help", NULL});
    expect(&r, 1, NULL);
    static const char *const help_helps[] = {"--help", "-h", "help"};
    for (int i = 0; i < 3; i++) { /* help's own help: the overview */
        run_cli(&r, NULL, (const char *[]){"help", help_helps[i], NULL});
        expect(&r, 0, NULL);
        if (strncmp(r.out, "usage: fragpool COMMAND", 23) || *r.err)
            fail_msg("fragpool help %s: stdout '%.80s', stderr '%s'", help_helps[i], r.out, r.err);
    }
    run_cli(&r, NULL, (const char *[]){"merge", NULL});
    expect(&r, 2, NULL);
    if (strncmp(r.err, "fragpool merge: no SUMMARY.json given\n", 38))
        fail_msg("fragpool merge alone: stderr '%s'", r.err);
}

/* docs/replay.md, "Units": a budget and what is set against it in MiB
 * with thousands separators (tune), a measured size with its unit
 * (snapshot), never bare bytes. */
static void units_alike(void **state)
{
    (void)state;
    const char *trace = tmp_name("units.csv");
    write_text(trace, "seq,op,id,size,stream\n0,a,1,2147483648,0\n1,a,2,1000,0\n2,f,1,0,0\n");
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"tune", trace, "--threads", "1", "--budget", "3GiB", NULL});
    expect(&r, 0, NULL);
    assert_non_null(strstr(r.out, "  2,050 MiB     2,048.0 MiB")); /* peak reserved, allocated */
    assert_non_null(strstr(r.out, "\nbudget 3,072 MiB: "));
    assert_null(strstr(r.out, "GiB"));
    const char *pickle = tmp_name("units.pickle");
    run_cli(&r, NULL, (const char *[]){"snapshot", trace, "-o", pickle, NULL});
    expect(&r, 0, "peak reserved 2.00 GiB\n");
    assert_null(strstr(r.err, "bytes"));
    unlink(pickle);
}

/* --name=VALUE is --name VALUE: the value reaches the same check, with the
 * same line (a bad budget, an unknown key), in every command that takes
 * the option; a flag with a value, or an empty value, is a usage error. */
static void equals_forms(void **state)
{
    (void)state;
    char trace[160], out[160];
    snprintf(trace, sizeof trace, "%s", small_trace());
    snprintf(out, sizeof out, "%s", tmp_name("eq.out"));
    static const char *const with_budget[] = {"replay", "tune", "report", "snapshot"};
    cli_run r;
    for (int i = 0; i < 4; i++) {
        run_cli(&r, NULL, (const char *[]){with_budget[i], trace, "--budget=0.5", "-o", out, NULL});
        expect(&r, 2, "bad --budget '0.5': less than one byte");
        run_cli(&r, NULL, (const char *[]){with_budget[i], trace, "--budget=", "-o", out, NULL});
        expect(&r, 2, "no value after '--budget='");
        if (i == 1) /* tune has no --conf */
            continue;
        cli_run spaced;
        run_cli(
            &spaced, NULL,
            (const char *[]){with_budget[i], trace, "--conf", "foo:1", i ? "-o" : NULL, out, NULL});
        run_cli(
            &r, NULL,
            (const char *[]){with_budget[i], trace, "--conf=foo:1", i ? "-o" : NULL, out, NULL});
        assert_int_equal(r.status, spaced.status);
        assert_string_equal(r.err, spaced.err);
        assert_non_null(strstr(r.err, "fragpool: --conf: unknown key 'foo'"));
    }
    run_cli(&r, NULL,
            (const char *[]){"tune", trace, "--threads=2", "--json", "--budget=4.6GiB", NULL});
    expect(&r, 0, NULL);
    assert_non_null(strstr(r.out, "\"budget\":4939212390,"));
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--json=1", NULL});
    expect(&r, 2, "a value given to a flag '--json=1'");
    run_cli(&r, NULL, (const char *[]){"run", "--simulate", "--conf=foo:1", "--", "true", NULL});
    expect(&r, 2, "unknown key 'foo'");
    assert_non_null(strstr(r.err, "nothing was run"));
    run_cli(&r, NULL, (const char *[]){"run", "--conf=", "--", "true", NULL});
    expect(&r, 2, "--conf needs a value");
}

/* Every option a command's help lists is one its parser takes (the two
 * read one table, cli/cli_args.c): given with a value of the kind its
 * help names, no option is "unexpected"; a word no help lists is. */
static void help_options_parse(void **state)
{
    (void)state;
    static const char *const names[] = {"replay", "tune", "report", "snapshot"};
    char trace[160], out[160];
    snprintf(trace, sizeof trace, "%s", small_trace());
    snprintf(out, sizeof out, "%s", tmp_name("opts.out"));
    cli_run r;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        run_cli(&r, NULL, (const char *[]){names[i], "--help", NULL});
        expect(&r, 0, NULL);
        char help[4096];
        snprintf(help, sizeof help, "%s", r.out);
        int needs_o = strstr(help, "\n  -o ") != NULL, seen = 0;
        for (char *ln = strtok(help, "\n"); ln; ln = strtok(NULL, "\n")) {
            char opt[32] = "", arg[32] = "";
            if (strncmp(ln, "  -", 3) || sscanf(ln, " %31s %31s", opt, arg) < 1)
                continue;
            /* "--json   the summary": a flag; "--budget SIZE   ...": takes SIZE */
            int takes = !strcmp(arg, "SIZE") || !strcmp(arg, "N") || !strcmp(arg, "WHEN") ||
                        !strcmp(arg, "K:V,...") || strstr(arg, ".html") || strstr(arg, ".pickle");
            const char *val = !strcmp(arg, "SIZE")      ? "64MiB"
                              : !strcmp(arg, "N")       ? "1"
                              : !strcmp(arg, "WHEN")    ? "end"
                              : !strcmp(arg, "K:V,...") ? "strict:0"
                                                        : out;
            const char *argv[8] = {names[i], trace};
            int n = 2;
            if (needs_o && strcmp(opt, "-o"))
                argv[n++] = "-o", argv[n++] = out;
            argv[n++] = opt;
            if (takes)
                argv[n++] = val;
            run_cli(&r, NULL, argv);
            if (strstr(r.err, "unexpected argument") || strstr(r.err, "no value after"))
                fail_msg("fragpool %s %s %s: %s", names[i], opt, takes ? val : "", r.err);
            seen++;
        }
        assert_true(seen >= 3);
        run_cli(&r, NULL, (const char *[]){names[i], trace, "--nope", NULL});
        expect(&r, 2, "unexpected argument '--nope'");
    }
    /* run parses its own line (the command after --): with each option its
     * help lists, run goes on to start the command (one that does not
     * exist, so that nothing is loaded under the shim: exit 127, the
     * command named), never a usage error. */
    run_cli(&r, NULL, (const char *[]){"run", "--help", NULL});
    expect(&r, 0, NULL);
    char help[2048];
    snprintf(help, sizeof help, "%s", r.out);
    int seen = 0;
    for (char *ln = strtok(help, "\n"); ln; ln = strtok(NULL, "\n")) {
        char opt[32] = "", arg[32] = "";
        if (strncmp(ln, "  -", 3) || sscanf(ln, " %31s %31s", opt, arg) < 1)
            continue;
        int takes = !strcmp(arg, "K:V,...");
        const char *none = "/nonexistent/fp-cli-cmd";
        const char *argv[] = {"run",
                              "--simulate",
                              opt,
                              takes ? "strict:0" : "--",
                              takes ? "--" : none,
                              takes ? none : NULL,
                              NULL};
        run_cli(&r, NULL, argv);
        expect(&r, 127, "cannot execute '/nonexistent/fp-cli-cmd'");
        seen++;
    }
    assert_int_equal(seen, 3);
}

/* A mistake in a setting: `config` prints the problem alone (not the whole
 * setting after it), exit 1; `run` names the key meant and starts nothing,
 * exit 2. */
static void setting_mistakes(void **state)
{
    (void)state;
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"config", "max_split_size_mb:abc", NULL});
    expect(&r, 1, "'max_split_size_mb:abc': must be");
    assert_string_equal(r.out, "");
    assert_int_equal(lines(r.err), 1);
    run_cli(&r, NULL, (const char *[]){"config", "max_split_sise_mb:512", NULL});
    expect(&r, 1, "did you mean max_split_size_mb?");
    assert_string_equal(r.out, "");
    run_cli(&r, NULL, (const char *[]){"config", "max_split_size_mb:512", NULL});
    expect(&r, 0, NULL);
    assert_true(strncmp(r.out, "max_split_size_mb:512,", 22) == 0);
    run_cli(&r, NULL,
            (const char *[]){"run", "--simulate", "--conf", "expandable_segment:True", "--", "sh",
                             "-c", "echo RAN", NULL});
    expect(&r, 2, "did you mean expandable_segments?");
    assert_non_null(strstr(r.err, "nothing was run"));
    assert_null(strstr(r.out, "RAN"));
}

/* ---- inputs that are not regular files (item 4) ------------------------------ */

static void non_regular_inputs(void **state)
{
    (void)state;
    cli_run r;
    const char *fifo = tmp_name("fifo");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    const char *inputs[] = {"/dev/zero", fifo, "/tmp"};
    for (int i = 0; i < 3; i++) {
        run_cli(&r, NULL, (const char *[]){"replay", inputs[i], NULL});
        expect(&r, 1, "not a regular file");
        assert_int_equal(lines(r.err), 1);
        run_cli(&r, NULL, (const char *[]){"tune", inputs[i], NULL});
        expect(&r, 1, "not a regular file");
        run_cli(&r, NULL, (const char *[]){"report", inputs[i], "-o", tmp_name("r.html"), NULL});
        expect(&r, 1, "not a regular file");
        run_cli(&r, NULL, (const char *[]){"merge", inputs[i], NULL});
        expect(&r, 1, "not a regular file");
    }
}

/* ---- tune on 2^64-1 bytes (item 2) ------------------------------------------ */

static void tune_huge_request(void **state)
{
    (void)state;
    const char *path = tmp_name("huge.csv");
    write_text(path, "0,a,1,18446744073709551615,0\n1,a,2,9223372036854775808,0\n"
                     "2,a,3,67108864,0\n3,f,1,0,0\n4,f,3,0,0\n");
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"tune", path, "--threads", "2", NULL});
    expect(&r, 0, NULL);
    assert_non_null(strstr(r.out, "(defaults)"));
    /* no setting serves 2^64 - 1 bytes: said once, in the verdict */
    assert_non_null(strstr(r.out, "\nverdict: every setting runs out of memory, whatever the "
                                  "budget \xe2\x80\x94 event 0 asks for 18446744073709551615 "
                                  "bytes"));
    assert_int_equal(fp_t_count_of(r.out, "every setting runs out of memory"), 1);
    run_cli(&r, NULL, (const char *[]){"tune", path, "--threads", "2", "--json", NULL});
    expect(&r, 0, NULL);
    assert_non_null(strstr(r.out, "\"kind\":\"all_oom\""));
    assert_non_null(strstr(r.out, "\"too_large_request\":18446744073709551615"));
    run_cli(&r, NULL, (const char *[]){"report", path, "-o", tmp_name("huge.html"), NULL});
    expect(&r, 0,
           "fragpool report: the requests of 2^63 to 2^64 - 1 bytes add up past "
           "2^64 - 1 bytes; the size histogram shows 2^64 - 1 bytes for them\n");
    assert_int_equal(lines(r.err), 1);
    run_cli(&r, NULL, (const char *[]){"replay", path, NULL});
    expect(&r, 0,
           "\nfragpool: cause: a request too large \xe2\x80\x94 "
           "18446744073709551615 bytes is more than the 281474976710655 (2^48 - 1)");
    assert_null(strstr(r.err, "exhaustion"));
}

/* A trace that fits: no such verdict, no too large request. */
static void tune_fits_says_nothing(void **state)
{
    (void)state;
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"tune", small_trace(), "--threads", "2", "--json", NULL});
    expect(&r, 0, NULL);
    assert_null(strstr(r.out, "all_oom"));
    assert_non_null(strstr(r.out, "\"too_large_request\":null"));
}

/* ---- stdout that cannot be written (item 6) --------------------------------- */

static void stdout_full(void **state)
{
    (void)state;
    const char *trace = small_trace();
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--json", NULL});
    expect(&r, 0, NULL);
    const char *json = tmp_name("s.json");
    write_text(json, r.out);
    const char *const cases[][4] = {
        {"replay", trace, NULL}, {"replay", trace, "--json", NULL},
        {"tune", trace, NULL},   {"tune", trace, "--json", NULL},
        {"config", NULL},        {"config", "max_split_size_mb:64", NULL},
        {"merge", json, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_cli(&r, "/dev/full", cases[i]);
        expect(&r, 1, "No space left on device");
        assert_non_null(strstr(r.err, "cannot write"));
    }
}

/* ---- --budget, --conf (item 17) ----------------------------------------------- */

static void budget_and_conf(void **state)
{
    (void)state;
    const char *trace = small_trace();
    cli_run r;
    const char *cmds[] = {"replay", "tune", "report"};
    for (int i = 0; i < 3; i++) {
        run_cli(
            &r, NULL,
            (const char *[]){cmds[i], trace, "--budget", "0.5", "-o", tmp_name("b.html"), NULL});
        expect(&r, 2, "bad --budget '0.5': less than one byte");
    }
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--conf", "foo:1", NULL});
    expect(&r, 0, "fragpool: --conf: unknown key 'foo'");
    assert_null(strstr(r.err, "FRAGPOOL_CONF"));
}

/* Every command reads --budget with one parser, by config's number rules:
 * no sign, space, hex, exponent, inf or nan; at most 15 decimals
 * (trailing zeros not counted); the
 * value exact (4.6GiB is 4939212390 bytes, not a double's rounding). */
static void budget_one_parser(void **state)
{
    (void)state;
    char trace[160], out[160]; /* tmp_name's 8 buffers are reused */
    snprintf(trace, sizeof trace, "%s", small_trace());
    snprintf(out, sizeof out, "%s", tmp_name("b.out"));
    const char *bad[] = {"+8G", " 8G",   "8G ", "0x10",      "1e3",
                         "inf", "nan",   "-1",  "1..",       ".",
                         "8X",  "8GiBs", "",    "16777216T", "1.0000000000000001"};
    const char *cmds[] = {"replay", "tune", "report", "snapshot"};
    cli_run r;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        for (int c = 0; c < 4; c++) {
            run_cli(&r, NULL,
                    (const char *[]){cmds[c], trace, "--budget", bad[i], "-o", out, NULL});
            expect(&r, 2, "bad --budget '");
            assert_int_equal(lines(r.err), 1);
        }
    static const struct {
        const char *in, *bytes;
    } good[] = {
        {"4.6GiB", "4939212390"},
        {"1.5k", "1536"},
        {"8gb", "8589934592"},
        {"4096", "4096"},
        {".5M", "524288"},
        {"15.99999999999999T", "17592186044415"},
        {"1.", "1"},
        {"2.50000000000000000000k", "2560"},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        run_cli(&r, NULL,
                (const char *[]){"tune", trace, "--threads", "2", "--json", "--budget", good[i].in,
                                 NULL});
        expect(&r, 0, NULL);
        char want[64];
        snprintf(want, sizeof want, "\"budget\":%s,", good[i].bytes);
        if (!strstr(r.out, want))
            fail_msg("--budget %s: no %s in\n%.300s", good[i].in, want, r.out);
    }
}

/* Siblings of item 9: the CLI's own counts are strict numbers too. */
static void strict_counts(void **state)
{
    (void)state;
    const char *trace = small_trace();
    cli_run r;
    const char *bad_threads[] = {"+1", " 1", "-1", "1x", "", "65"};
    for (int i = 0; i < 6; i++) {
        run_cli(&r, NULL, (const char *[]){"tune", trace, "--threads", bad_threads[i], NULL});
        expect(&r, 2, "bad --threads");
    }
    const char *bad_at[] = {"+2", " 2", "-1", "2x", "7", "18446744073709551617"};
    for (int i = 0; i < 6; i++) {
        run_cli(
            &r, NULL,
            (const char *[]){"report", trace, "-o", tmp_name("a.html"), "--at", bad_at[i], NULL});
        expect(&r, 1, "bad --at");
    }
    run_cli(&r, NULL,
            (const char *[]){"report", trace, "-o", tmp_name("a.html"), "--at", "6", NULL});
    expect(&r, 0, NULL);
}

/* ---- merge: numbers out of range (item 17) ----------------------------------- */

static void merge_out_of_range(void **state)
{
    (void)state;
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":99999999999999999999}}]}",
         "devices.0.reserved.peak is 99999999999999999999, not an integer"},
        {"{\"version\":1,\"devices\":[{\"oom_count\":-1}]}", "devices.0.oom_count is -1"},
        {"{\"version\":1,\"devices\":[{\"allocated\":{\"peak\":1.5}}]}",
         "devices.0.allocated.peak is 1.5"},
        {"{\"version\":1,\"rank\":\"3\",\"devices\":[]}", "rank is a string"},
        {"{\"version\":1,\"pid\":1e400,\"devices\":[]}", "pid is 1e400"},
    };
    const char *path = tmp_name("m.json");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(path, bad[i].json);
        cli_run r;
        run_cli(&r, NULL, (const char *[]){"merge", path, NULL});
        expect(&r, 1, bad[i].want);
        assert_int_equal(lines(r.err), 1);
    }
    write_text(path, "{\"version\":1,\"rank\":null,\"devices\":[{\"reserved\":{\"peak\":"
                     "9223372036854775807}},{\"reserved\":{\"peak\":9223372036854775807}}]}");
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"merge", path, NULL});
    expect(&r, 0, NULL); /* the total saturates instead of overflowing, and says so */
    assert_int_equal(fp_t_count_of(r.out, "a total passed 9223372036854775807"), 1);
    write_text(path, "{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":5}}]}");
    run_cli(&r, NULL, (const char *[]){"merge", path, NULL});
    expect(&r, 0, NULL);
    assert_null(strstr(r.out, "a total passed"));
}

static void report_under_file_size_limit(void **state)
{
    (void)state;
    const char *html = tmp_name("limited.html");
    unlink(html);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096; /* the page is larger; stderr fits */
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"report", small_trace(), "-o", html, NULL});
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    expect(&r, 1, "fragpool report: writing '");
    expect(&r, 1, "': File too large; the partial page is removed");
    struct stat st;
    assert_int_equal(stat(html, &st), -1); /* no partial page */
    assert_int_equal(lines(r.err), 1);
}

/* report and merge share one check: each bad summary is refused by both
 * with the same one line, each good one taken by both. */
static void report_and_merge_agree(void **state)
{
    (void)state;
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":-1}}]}",
         "devices.0.reserved.peak is -1"},
        {"{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":1e999}}]}",
         "devices.0.reserved.peak is 1e999"},
        {"{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":18446744073709551616}}]}",
         "devices.0.reserved.peak is 18446744073709551616"},
        {"{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":\"5\"}}]}",
         "devices.0.reserved.peak is a string"},
        {"{\"version\":\"1\",\"devices\":[{\"reserved\":{\"peak\":5}}]}",
         "not a fragpool summary (\"version\" is not the number 1"},
        {"{\"version\":1,\"devices\":{}}", "no \"devices\" array"},
        {"{\"version\":1,\"devices\":[{\"reserved\":{\"peak\":5}}]", "invalid JSON at byte"},
    };
    char path[160], html[160]; /* tmp_name's 8 buffers are reused */
    snprintf(path, sizeof path, "%s", tmp_name("agree.json"));
    snprintf(html, sizeof html, "%s", tmp_name("agree.html"));
    cli_run m, r;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(path, bad[i].json);
        run_cli(&m, NULL, (const char *[]){"merge", path, NULL});
        expect(&m, 1, bad[i].want);
        run_cli(&r, NULL, (const char *[]){"report", path, "-o", html, NULL});
        expect(&r, 1, bad[i].want);
        assert_int_equal(lines(m.err), 1);
        assert_int_equal(lines(r.err), 1);
        assert_string_equal(m.err + strlen("fragpool merge: "),
                            r.err + strlen("fragpool report: "));
    }
    const char *good[] = {"{\"version\":1,\"devices\":[]}",
                          "{\"version\":1,\"rank\":null,\"devices\":[{\"reserved\":{\"peak\":"
                          "9223372036854775807}}]}"};
    for (size_t i = 0; i < 2; i++) {
        write_text(path, good[i]);
        run_cli(&m, NULL, (const char *[]){"merge", path, NULL});
        expect(&m, 0, NULL);
        run_cli(&r, NULL, (const char *[]){"report", path, "-o", html, NULL});
        expect(&r, 0, NULL);
    }
}

/* No error names line 0: an empty file, a gzip pickle cut short (read
 * whole: no line at all). */
static void no_line_zero(void **state)
{
    (void)state;
    const char *empty = tmp_name("empty.csv");
    write_text(empty, "");
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"replay", empty, NULL});
    expect(&r, 1, "empty.csv: no events: the file is empty\n");
    assert_null(strstr(r.err, ":0:"));
    /* gzip header, then one stored deflate block of a pickle's first 4
     * bytes, and no more: the stream ends early */
    static const unsigned char gz[] = {0x1f, 0x8b, 8, 0,    0,    0,    0,    0,   0,   3,
                                       0x00, 4,    0, 0xfb, 0xff, 0x80, 0x04, '}', 0x94};
    const char *cut = tmp_name("cut.pickle.gz");
    FILE *f = fopen(cut, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(gz, 1, sizeof gz, f), sizeof gz);
    assert_int_equal(fclose(f), 0);
    run_cli(&r, NULL, (const char *[]){"replay", cut, NULL});
    expect(&r, 1, "cut.pickle.gz: read error after 4 bytes: ");
    assert_non_null(strstr(r.err, "(the gzip file is cut short)"));
    assert_int_equal(lines(r.err), 1);
}

/* defer_headroom_mb's help says what the shim does: nothing. */
static void headroom_help(void **state)
{
    (void)state;
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"config", NULL});
    expect(&r, 0, NULL);
    const char *at = strstr(r.out, "defer_headroom_mb ");
    assert_non_null(at);
    const char *help = strchr(at, '\n');
    assert_non_null(help);
    assert_true(strncmp(help + strspn(help, "\n "), "no effect", 9) == 0);
    assert_null(strstr(r.out, "waits for them first"));
}

/* ---- the trace's problems in the replay summary (item 10) --------------------- */

static void replay_shows_trace_problems(void **state)
{
    (void)state;
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"replay", small_trace(), NULL});
    expect(&r, 0, "frees of unknown ids: 1, skipped; the first at event 3");
    assert_non_null(strstr(r.err, "allocations of live ids: 1, refused"));
    assert_non_null(strstr(r.out, "| Trace problems        | 1 free of an unknown id (skipped)"));
    run_cli(&r, NULL, (const char *[]){"replay", small_trace(), "--json", NULL});
    assert_non_null(strstr(r.out, "\"trace\":{\"unknown_frees\":1,\"duplicate_allocs\":1}"));
}

/* A trace without threads replays as one thread: its summary says
 * nothing of the shim's thread caches (no "thread_cache" group, no
 * thread_cache_mb setting), so its JSON stays byte for byte what it was
 * before them (issue 43). */
static void replay_says_nothing_of_thread_caches(void **state)
{
    (void)state;
    cli_run r;
    const char *trace = small_trace();
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--json", NULL});
    assert_non_null(strstr(r.out, "\"deferred\":null,\"trace\":"));
    assert_null(strstr(r.out, "thread_cache"));
    run_cli(&r, NULL, (const char *[]){"replay", trace, NULL});
    assert_null(strstr(r.out, "thread_cache"));
    assert_null(strstr(r.out, "Thread caches"));
}

/* A trace whose threads joined the caches ('j' rows, the thread column):
 * the replay's summary has the shim's "Thread caches" group, counted by
 * the replay's own caches (thread 1 frees its block into its cache and
 * takes it back, frees thread 2's block through the pool, caches its
 * own; thread 2's 3 MB request grows the pool, which first takes back
 * thread 1's cached 1 KiB), and lists thread_cache_mb; --conf
 * thread_cache_mb:0 replays the same rows without them (issue 43). */
static void replay_shows_thread_caches(void **state)
{
    (void)state;
    const char *trace = tmp_name("threads.csv");
    write_text(trace, "seq,op,id,size,stream,thread\n0,j,0,8388608,0,1\n1,j,0,8388608,0,2\n"
                      "2,a,1,1000,0,1\n3,a,2,1000,0,2\n4,f,1,1000,0,1\n5,a,3,900,0,1\n"
                      "6,f,2,1000,0,1\n7,f,3,900,0,1\n8,a,4,3000000,0,2\n9,f,4,0,0,2\n"
                      "10,l,0,0,0,1\n");
    static const char *const modes[] = {"expandable_segments:True", "expandable_segments:False"};
    cli_run r;
    for (size_t i = 0; i < 2; i++) {
        run_cli(&r, NULL, (const char *[]){"replay", trace, "--conf", modes[i], "--json", NULL});
        expect(&r, 0, NULL);
        assert_non_null(strstr(r.out,
                               "\"thread_cache\":{\"threads\":2,\"lockless_allocs\":1,"
                               "\"lockless_frees\":3,\"flushes\":1,\"returned_bytes\":1024}"));
        assert_non_null(strstr(r.out, "\"thread_cache_mb\":\"8\""));
    }
    run_cli(&r, NULL, (const char *[]){"replay", trace, NULL});
    assert_non_null(strstr(
        r.out, "| Thread caches         | 2 threads, 1 allocation without the pool's lock,"));
    run_cli(&r, NULL,
            (const char *[]){"replay", trace, "--conf", "thread_cache_mb:0", "--json", NULL});
    expect(&r, 0, NULL);
    assert_null(strstr(r.out, "\"thread_cache\":{"));
}

/* An OOM in replay: the fix is the verdict on the whole trace in the same
 * budget (replay/fp_advise.c): for the classic pool, expandable_segments:True
 * at 4,650 MiB, which the default runs without an OOM; no setting at 4,600
 * MiB (it needs 4,602), and never a setting already on; tune --budget
 * weighs the settings against the defaults, which fit. */
static void replay_oom_advises_proven_fix(void **state)
{
    (void)state;
    const char *trace = FP_TEST_DATA "/resnet50_varres.csv.gz";
    const char *fix = "fragpool: fix: FRAGPOOL_CONF=expandable_segments:True \xe2\x80\x94 a replay "
                      "of this trace fits in 4,602 MiB; it had 4,650 MiB (PyTorch: "
                      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)\n";
    const char *classic = "expandable_segments:False";
    cli_run r;
    run_cli(&r, NULL,
            (const char *[]){"replay", trace, "--budget", "4650MiB", "--conf", classic, NULL});
    expect(&r, 0, "allocations failed");
    assert_non_null(strstr(r.err, fix));
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--budget", "4650MiB", NULL});
    expect(&r, 0, NULL); /* the default, virtual memory, fits */
    assert_null(strstr(r.err, "allocations failed"));
    /* tune weighs every setting against fragpool's defaults, which fit */
    run_cli(&r, NULL, (const char *[]){"tune", trace, "--budget", "4650MiB", NULL});
    expect(&r, 0, NULL);
    assert_non_null(strstr(r.out, "   1 *     4,630 MiB     4,591.7 MiB    0.8%   4,602 MiB   yes  "
                                  "(defaults)\n"));
    assert_non_null(strstr(r.out, "\nverdict: none needed \xe2\x80\x94 a replay of this trace "
                                  "under the settings in force fits in 4,602 MiB"));
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--budget", "4600MiB", NULL});
    expect(&r, 0, "allocations failed");
    assert_non_null(strstr(r.err, "fragpool: fix: no setting fits"));
    assert_null(strstr(r.err, "fix: FRAGPOOL_CONF="));
    assert_null(strstr(r.err, "empty_cache"));
    run_cli(&r, NULL,
            (const char *[]){"replay", trace, "--budget", "4650MiB", "--conf",
                             "expandable_segments:True", NULL});
    expect(&r, 0, NULL);
    assert_null(strstr(r.err, "allocations failed"));
    run_cli(&r, NULL,
            (const char *[]){"replay", trace, "--budget", "4500MiB", "--conf",
                             "expandable_segments:True", NULL});
    expect(&r, 0, "allocations failed");
    assert_null(strstr(r.err, "fix: FRAGPOOL_CONF=expandable_segments:True"));
}

/* The demo shows the loop on the simulated device (CI has no GPU): PyTorch's
 * rules run out of memory within its limit, the OOM message proves a
 * fix, the fix run verbatim completes, and one line says before and after. */
static void demo_runs_the_loop(void **state)
{
    (void)state;
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"demo", NULL});
    expect(&r, 0, NULL);
    assert_non_null(
        strstr(r.out, "fragpool demo: no GPU found; running on fragpool's simulated device"));
    assert_non_null(strstr(r.out, "fragpool: CUDA out of memory."));
    assert_non_null(strstr(r.out, "fragpool: fix: FRAGPOOL_CONF=max_reserved_mb:312,summary:off,"
                                  "expandable_segments:True \xe2\x80\x94 a replay of this run up "
                                  "to this failure fits in 288 MiB; it had 312 MiB"));
    assert_non_null(strstr(r.out, "== 3. the fix, verbatim: FRAGPOOL_CONF=max_reserved_mb:312,"
                                  "summary:off,expandable_segments:True\n"));
    assert_non_null(strstr(r.out, "(figures from fragpool's simulated device)\nbefore: PyTorch's "
                                  "rules ran out of memory within 312 MiB; after: "));
    assert_non_null(strstr(r.out, " us under fragpool\n"));
}

/* tune's pick with garbage collection names its cap as max_reserved_mb,
 * and that text, replayed verbatim, runs without an OOM. */
static void tune_gc_setting_runs_verbatim(void **state)
{
    (void)state;
    const char *trace = FP_TEST_DATA "/resnet50_varres.csv.gz";
    cli_run r;
    run_cli(&r, NULL, (const char *[]){"tune", trace, "--budget", "7GiB", "--json", NULL});
    expect(&r, 0, NULL);
    const char *key = "\"conf\":\"garbage_collection_threshold:0.8,max_reserved_mb:";
    const char *at = strstr(r.out, key);
    assert_non_null(at);
    assert_null(strstr(r.out, "per_process_memory_fraction:1"));
    char conf[128];
    at += strlen("\"conf\":\"");
    size_t n = strcspn(at, "\"");
    assert_true(n < sizeof conf);
    memcpy(conf, at, n);
    conf[n] = 0;
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--conf", conf, NULL});
    expect(&r, 0, NULL);
    assert_null(strstr(r.err, "failed"));
    assert_non_null(strstr(r.out, "CUDA OOMs: 0"));
}

static int cleanup(void **state)
{
    fp_t_release_held(state);
    fp_t_remove_own_tmp("fp-cli");
    return 0;
}

/* A key that has no effect with the segments in force: one line, where
 * it was given (--conf, FRAGPOOL_CONF, PyTorch's variable), in replay,
 * config and tune; none once expandable_segments:False makes it act. */
#define NO_EFFECT                                                                                  \
    "max_split_size_mb:128 has no effect with virtual-memory segments (the default): add "         \
    "expandable_segments:False for PyTorch's classic rules\n"
static void inert_keys_said(void **state)
{
    (void)state;
    cli_run r;
    const char *trace = tmp_name("clean.csv");
    write_text(trace, "seq,op,id,size,stream\n0,a,1,1000,0\n1,a,2,3000000,0\n2,f,1,0,0\n"
                      "3,f,2,0,0\n");
    run_cli(&r, NULL, (const char *[]){"replay", trace, "--conf", "max_split_size_mb:128", NULL});
    expect(&r, 0, NULL);
    assert_string_equal(r.err, "fragpool: --conf: " NO_EFFECT);
    run_cli(&r, NULL,
            (const char *[]){"replay", trace, "--conf",
                             "max_split_size_mb:128,expandable_segments:False", NULL});
    expect(&r, 0, NULL);
    assert_string_equal(r.err, "");
    run_cli(&r, NULL, (const char *[]){"config", "max_split_size_mb:128", NULL});
    expect(&r, 0, NULL);
    assert_string_equal(r.err, "fragpool: FRAGPOOL_CONF: " NO_EFFECT);
    /* one setting is one argument: a second one is a usage error */
    run_cli(&r, NULL, (const char *[]){"config", "max_split_size_mb:128", "junk", NULL});
    expect(&r, 2, "fragpool config: unexpected argument 'junk'");
    cli_add = (const char *const[]){"FRAGPOOL_CONF=max_split_size_mb:128", NULL};
    run_cli(&r, NULL, (const char *[]){"tune", trace, "--threads", "1", NULL});
    expect(&r, 0, "fragpool: FRAGPOOL_CONF: " NO_EFFECT);
    assert_int_equal(fp_t_count_of(r.err, "has no effect"), 1);
    cli_add = (const char *const[]){"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128", NULL};
    run_cli(&r, NULL, (const char *[]){"replay", trace, NULL});
    cli_add = NULL;
    expect(&r, 0, "fragpool: PYTORCH_CUDA_ALLOC_CONF: " NO_EFFECT);
    assert_int_equal(fp_t_count_of(r.err, "has no effect"), 1);
}

/* The progress line: on a terminal (a pty here) past the delay
 * (FRAGPOOL_PROGRESS_AFTER_MS=0 for the test), "\rfragpool CMD: ..."
 * and wiped at the end; none with --quiet, none when stderr is a file
 * (every other case of this file checks stderr whole). */
static void progress_on_a_terminal(void **state)
{
    (void)state;
    const char *trace = tmp_name("progress.csv");
    FILE *f = fopen(trace, "w");
    assert_non_null(f);
    fputs("seq,op,id,size,stream\n", f);
    for (int i = 0; i < 200000; i++)
        fprintf(f, "%d,%c,%d,%d,0\n", i, i % 2 ? 'f' : 'a', i / 2, 1000 + i % 7 * 4096);
    assert_int_equal(fclose(f), 0);
    const char *html = tmp_name("progress.html");
    const char *const cmds[][6] = {
        {"replay", trace, NULL},
        {"tune", trace, "--threads", "1", NULL},
        {"report", trace, "-o", html, NULL},
    };
    static const char *const drop[] = {"FRAGPOOL_CONF=", "LD_PRELOAD=", NULL};
    static const char *const add[] = {"FRAGPOOL_PROGRESS_AFTER_MS=0", NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    for (int quiet = 0; quiet < 2; quiet++)
        for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++) {
            char *argv[10] = {(char *)FP_CLI};
            int k = 1;
            for (int j = 0; cmds[c][j]; j++)
                argv[k++] = (char *)cmds[c][j];
            if (quiet)
                argv[k++] = (char *)"--quiet";
            argv[k] = NULL;
            int master = posix_openpt(O_RDWR | O_NOCTTY);
            assert_true(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
            int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
            int out = fp_t_temp_fd("/tmp/fp-cli-io-");
            assert_true(slave >= 0);
            int status;
            pid_t pid = fp_t_spawn_wait(FP_CLI, argv, env, out, slave, DEADLINE_S, &status);
            if (pid <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("%s: status 0x%x", cmds[c][0], status);
            close(slave);
            char buf[4096];
            ssize_t n = read(master, buf, sizeof buf - 1);
            buf[n > 0 ? n : 0] = '\0';
            char want[64];
            snprintf(want, sizeof want, "\rfragpool %s: ", cmds[c][0]);
            if (quiet ? n > 0 : !strstr(buf, want) || !strstr(buf, "\r\033[K"))
                fail_msg("%s%s: stderr on a terminal '%s'", cmds[c][0], quiet ? " --quiet" : "",
                         buf);
            close(master);
            close(out);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(help_everywhere, fp_t_release_held),
        cmocka_unit_test_teardown(help_options_parse, fp_t_release_held),
        cmocka_unit_test_teardown(setting_mistakes, fp_t_release_held),
        cmocka_unit_test_teardown(non_regular_inputs, fp_t_release_held),
        cmocka_unit_test_teardown(tune_huge_request, fp_t_release_held),
        cmocka_unit_test_teardown(tune_fits_says_nothing, fp_t_release_held),
        cmocka_unit_test_teardown(budget_one_parser, fp_t_release_held),
        cmocka_unit_test_teardown(report_and_merge_agree, fp_t_release_held),
        cmocka_unit_test_teardown(report_under_file_size_limit, fp_t_release_held),
        cmocka_unit_test_teardown(no_line_zero, fp_t_release_held),
        cmocka_unit_test_teardown(headroom_help, fp_t_release_held),
        cmocka_unit_test_teardown(stdout_full, fp_t_release_held),
        cmocka_unit_test_teardown(budget_and_conf, fp_t_release_held),
        cmocka_unit_test_teardown(equals_forms, fp_t_release_held),
        cmocka_unit_test_teardown(units_alike, fp_t_release_held),
        cmocka_unit_test_teardown(strict_counts, fp_t_release_held),
        cmocka_unit_test_teardown(merge_out_of_range, fp_t_release_held),
        cmocka_unit_test_teardown(replay_shows_trace_problems, fp_t_release_held),
        cmocka_unit_test_teardown(replay_says_nothing_of_thread_caches, fp_t_release_held),
        cmocka_unit_test_teardown(replay_shows_thread_caches, fp_t_release_held),
        cmocka_unit_test_teardown(replay_oom_advises_proven_fix, fp_t_release_held),
        cmocka_unit_test_teardown(tune_gc_setting_runs_verbatim, fp_t_release_held),
        cmocka_unit_test_teardown(demo_runs_the_loop, fp_t_release_held),
        cmocka_unit_test_teardown(inert_keys_said, fp_t_release_held),
        cmocka_unit_test_teardown(progress_on_a_terminal, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
