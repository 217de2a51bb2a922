/* test_shim_sigexit.c - exit() from a signal handler that interrupted the
 * program inside fragpool must not hang it.
 *
 * Each case runs tests/shim/exit_paths.c "signal-exit" (a SIGALRM handler
 * calls exit(0) while main allocates and frees in a tight loop, so the
 * exit handler mostly runs on top of a frame that holds one of fragpool's
 * locks) RUNS times, each with a deadline, under one configuration: no
 * output file, a trace, a trace and a snapshot.  Checked, every run:
 *  - it ends by itself within DEADLINE_S seconds, with status 0 (a hang
 *    or a crash fails the case; the counts are printed);
 *  - stderr holds the summary (with the line of the setting its Notes
 *    name, when they name one) or the line saying it was skipped (not
 *    both; the line may name only the trace, beside a summary), or
 *    nothing at all (the timer fired before the pools were in use), and no
 *    other fragpool line.
 * Across the runs at least one must have skipped something (the case then
 * did reach a held lock).
 */
#include "shim_test.h"
#include "child_run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNS       50
#define DEADLINE_S 10
#define SKIP_LINE  "fragpool: exit while a thread was inside the allocator"
#define PASTE_LINE "fragpool: the setting the notes name, to paste:"

typedef struct tally {
    int hung, bad_status, odd_stderr, summaries, skipped, silent;
} tally;

/* Lines of text that start with prefix. */
static int lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        n += strncmp(p, prefix, strlen(prefix)) == 0;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return n;
}

static void one_run(const char *conf, tally *t)
{
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL};
    char confvar[512];
    snprintf(confvar, sizeof confvar, "FRAGPOOL_CONF=%s", conf);
    const char *add[] = {confvar, NULL};
    char **env = fp_t_child_env(drop, add);
    assert_non_null(env);
    int out = fp_t_temp_fd("/tmp/fp-sigexit-io-"), err = fp_t_temp_fd("/tmp/fp-sigexit-io-");
    char *argv[] = {(char *)FP_EXIT_PATHS, (char *)"signal-exit", NULL};
    int st = 0;
    pid_t pid = fp_t_spawn_wait(FP_EXIT_PATHS, argv, env, out, err, DEADLINE_S, &st);
    free(env);
    char *text = fp_t_read_fd(err);
    close(out);
    close(err);
    assert_non_null(text);
    bool summary = strstr(text, "fragpool memory summary") != NULL;
    bool skip = lines_starting(text, SKIP_LINE) == 1;
    /* less the lines naming the files the %p patterns gave (said once each)
     * and the summary's own line after its box (when its Notes name a
     * setting: a replay of the run's record, so of where the timer fired) */
    int lines = lines_starting(text, "fragpool: ") -
                lines_starting(text, "fragpool: trace: writing ") -
                lines_starting(text, "fragpool: snapshot: writing ") -
                (summary ? lines_starting(text, PASTE_LINE) : 0);
    if (pid < 0)
        t->hung++;
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        t->bad_status++;
    else if (lines != (skip ? 1 : 0) || (summary && strstr(text, "summary skipped")) ||
             (!summary && strstr(text, "|"))) {
        if (t->odd_stderr++ == 0)
            fprintf(stderr, "odd stderr (FRAGPOOL_CONF=%s):\n%s\n", conf, text);
    } else {
        t->summaries += summary;
        t->skipped += skip;
        t->silent += !summary && !skip;
    }
    free(text);
}

static void repeat(const char *conf)
{
    tally t = {0};
    for (int i = 0; i < RUNS; i++)
        one_run(conf, &t);
    print_message("FRAGPOOL_CONF=%s: %d runs: %d hung, %d bad status, %d odd stderr; "
                  "%d summaries, %d skipped, %d before the first pool call\n",
                  conf, RUNS, t.hung, t.bad_status, t.odd_stderr, t.summaries, t.skipped, t.silent);
    assert_int_equal(t.hung, 0);
    assert_int_equal(t.bad_status, 0);
    assert_int_equal(t.odd_stderr, 0);
    assert_true(t.skipped > 0);
}

static void sigexit_plain(void **state)
{
    (void)state;
    repeat("summary:stderr");
}

static void sigexit_trace(void **state)
{
    (void)state;
    char conf[256];
    snprintf(conf, sizeof conf, "summary:stderr,trace:/tmp/fp-sigexit-%d-t%%p.csv", (int)getpid());
    repeat(conf);
    fp_t_remove_own_tmp("fp-sigexit");
}

static void sigexit_trace_snapshot(void **state)
{
    (void)state;
    char conf[256];
    snprintf(conf, sizeof conf,
             "summary:stderr,trace:/tmp/fp-sigexit-%d-t%%p.csv,"
             "snapshot:/tmp/fp-sigexit-%d-s%%p.pickle",
             (int)getpid(), (int)getpid());
    repeat(conf);
    fp_t_remove_own_tmp("fp-sigexit");
}

static void add_option(const char *var, const char *opt)
{
    const char *cur = getenv(var);
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%s%s", cur ? cur : "", cur && *cur ? ":" : "", opt);
    setenv(var, opts, 1);
}

int main(void)
{
    /* ThreadSanitizer reports exit() in a signal handler as a signal-unsafe
     * call, and LeakSanitizer's check at exit waits for the allocator's
     * lock that an interrupted malloc holds: that pattern is this test's
     * subject, and neither is fragpool's to guard. */
    add_option("TSAN_OPTIONS", "report_signal_unsafe=0");
    add_option("ASAN_OPTIONS", "detect_leaks=0");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sigexit_plain),
        cmocka_unit_test(sigexit_trace),
        cmocka_unit_test(sigexit_trace_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
