/* test_shim_advice.c - the OOM loop verbatim, on the simulated device, on
 * two real traces (docs/advice.md): a program runs out of memory under the
 * shim, the shim prints "fragpool: fix: FRAGPOOL_CONF=<conf> — ...", and the
 * same program run again with FRAGPOOL_CONF=<conf>, as printed, on the same
 * device, runs to the end.
 *
 * The program is tests/shim/trace_client.c: it sets the simulated device's
 * capacity, replays a trace through cuMemAlloc_v2/cuMemFree_v2 (each
 * block's ends marked and checked), and exits 3 at an OOM (a crashing
 * program), 0 when the whole trace ran.  It runs under this test's own
 * LD_PRELOAD (libfragpool.so) and LD_LIBRARY_PATH (the simulated
 * libcuda.so.1), which ctest sets, with FRAGPOOL_CONF set per run (so no
 * debug_check: it is slow on these traces).
 *
 * The traces, both recorded by fragpool on an H200 (tests/data):
 *  - resnet50_varres.csv.gz (ResNet-50, variable resolution) on a device
 *    of 4,650 MiB: a replay under PyTorch's defaults needs 4,692 MiB and
 *    under expandable_segments:True 4,602 MiB (`fragpool tune TRACE
 *    --budget 4650MiB`); the shim's virtual-memory segments ran it on
 *    4,602 MiB too.  The defaults OOM at event 10,867 (fragmentation).
 *  - gpt_varlen.csv.gz (GPT, variable sequence length) on 17,300 MiB: the
 *    defaults need 17,656 MiB, expandable_segments:True 16,896 MiB (the
 *    shim ran it on 16,896 MiB too).  The defaults OOM at event 4,305.
 * Cases:
 *  - the loop on each trace, for a run of the classic pool
 *    (expandable_segments:False): the first run exits 3 with the OOM
 *    headline, the cause line and a fix line that names a FRAGPOOL_CONF
 *    keeping this run's summary:off and says "it had <capacity> MiB"; the
 *    second run, with that FRAGPOOL_CONF verbatim, exits 0 with no OOM
 *    message;
 *  - the default: the same runs under fragpool's defaults (virtual-memory
 *    segments) on the same devices exit 0 with no OOM message;
 *  - nothing fits: ResNet under the defaults on 1,000 MiB fails at event 533 with 953 MiB live
 *    and a 72 MiB request: the fix line says "no setting fits" and names
 *    no FRAGPOOL_CONF.  (A capacity below the whole trace's peak live
 *    bytes is not enough: the proof covers the run up to the failure, and
 *    at 3,000 MiB, say, the first failure comes early, where a setting
 *    does fit.)
 *  - the exit summary's note: ResNet run whole on a large device on the
 *    classic pool with the JSON summary on stderr (the text summary wraps
 *    the note across lines); its note names expandable_segments:True and
 *    "% less than" the settings in force (24% less: 4,630 MiB, not
 *    6,142).  Only ResNet: the whole GPT trace on the classic pool takes
 *    two minutes under ASan (the simulated device's multi-GiB segments).
 * Every fix line, note and run time is printed, so the CI log shows the
 * loop.  About 8 s in all; under ASan+UBSan about 2.5 minutes, most of it
 * in the runs under the defaults.
 */
#include "child_run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Per run; under ASan the runs under the defaults take up to 1.5 minutes. */
#define RUN_TIMEOUT_S 600

#define RESNET FP_TEST_DATA "/resnet50_varres.csv.gz"
#define GPT    FP_TEST_DATA "/gpt_varlen.csv.gz"

#define FIX_CONF "fragpool: fix: FRAGPOOL_CONF="

/* ---- running trace_client ------------------------------------------------ */

typedef struct run {
    int status; /* exit status */
    char *out;  /* stdout and stderr, held until the teardown */
    char *err;
    double secs;
} run;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The search's time bound for these runs: they test what the search
 * proves, not its bound (test_shim_search does), and a sanitizer build
 * replays ten times slower than the default bound allows. */
#define BUDGET ",advice_budget_ms:600000"

/* Runs trace_client TRACE CAPACITY_MIB with FRAGPOOL_CONF=conf (exactly,
 * plus BUDGET unless conf names the key), under this process's LD_PRELOAD
 * and LD_LIBRARY_PATH; fails the case when it runs too long or does not
 * exit (a signal). */
static run run_client(const char *trace, unsigned mib, const char *conf)
{
    static const char *const drop[] = {
        "FRAGPOOL_CONF=", "PYTORCH_ALLOC_CONF=", "PYTORCH_CUDA_ALLOC_CONF=", NULL};
    char *confvar = fp_t_hold(malloc(strlen(conf) + sizeof BUDGET + 16));
    sprintf(confvar, "FRAGPOOL_CONF=%s%s", conf, strstr(conf, "advice_budget_ms:") ? "" : BUDGET);
    const char *const add[] = {confvar, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    char cap[32];
    snprintf(cap, sizeof cap, "%u", mib);
    char *argv[] = {(char *)FP_TRACE_CLIENT, (char *)trace, cap, NULL};
    int out_fd = fp_t_temp_fd("/tmp/fp-advice-out-");
    int err_fd = fp_t_temp_fd("/tmp/fp-advice-err-");
    int st = 0;
    double t0 = now_s();
    pid_t pid = fp_t_spawn_wait(FP_TRACE_CLIENT, argv, env, out_fd, err_fd, RUN_TIMEOUT_S, &st);
    run r = {.secs = now_s() - t0};
    r.out = fp_t_slurp_fd(out_fd);
    r.err = fp_t_slurp_fd(err_fd);
    close(out_fd);
    close(err_fd);
    if (pid < 0)
        fail_msg("trace_client %s %u (FRAGPOOL_CONF=%s) still running after %d s; stderr:\n%s",
                 base_name(trace), mib, conf, RUN_TIMEOUT_S, r.err);
    if (!WIFEXITED(st))
        fail_msg("trace_client %s %u (FRAGPOOL_CONF=%s): wait status 0x%x; stdout:\n%s\n"
                 "stderr:\n%s",
                 base_name(trace), mib, conf, st, r.out, r.err);
    r.status = WEXITSTATUS(st);
    if (strstr(r.err, "runtime error: ") || strstr(r.err, "Sanitizer"))
        fail_msg("trace_client %s %u (FRAGPOOL_CONF=%s): a sanitizer report:\n%s", base_name(trace),
                 mib, conf, r.err);
    printf("trace_client %s %u MiB, FRAGPOOL_CONF=%s: exit %d in %.2f s\n", base_name(trace), mib,
           conf, r.status, r.secs);
    return r;
}

/* The line of text that starts with prefix, as a held copy without its
 * newline; NULL when there is none. */
static char *line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, prefix, n) == 0) {
            size_t len = strcspn(p, "\n");
            char *l = fp_t_hold(malloc(len + 1));
            memcpy(l, p, len);
            l[len] = '\0';
            return l;
        }
    }
    return NULL;
}

static char *need_line(const run *r, const char *prefix)
{
    char *l = line_starting(r->err, prefix);
    if (!l)
        fail_msg("no line starting \"%s\" on stderr:\n%s", prefix, r->err);
    return l;
}

/* "4,650" after key in line, as a number; fails the case without one. */
static unsigned long long mib_after(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    if (!p)
        fail_msg("no \"%s\" in: %s", key, line);
    unsigned long long v = 0;
    int digits = 0;
    for (p += strlen(key); (*p >= '0' && *p <= '9') || *p == ','; p++)
        if (*p != ',')
            v = v * 10 + (unsigned)(*p - '0'), digits++;
    if (!digits || strncmp(p, " MiB", 4) != 0)
        fail_msg("no \"%s<N> MiB\" in: %s", key, line);
    return v;
}

/* The first run: the OOM exit and the message's lines; returns the fix
 * line (held). */
static char *expect_oom(const run *r, const char *trace, unsigned mib)
{
    if (r->status != 3)
        fail_msg("trace_client %s %u: exit %d, want 3 (an OOM); stdout:\n%s\nstderr:\n%s",
                 base_name(trace), mib, r->status, r->out, r->err);
    char *oom = line_starting(r->out, "TRACE_CLIENT OOM event ");
    if (!oom)
        fail_msg("no TRACE_CLIENT OOM line; stdout:\n%s", r->out);
    need_line(r, "fragpool: CUDA out of memory. Tried to allocate ");
    char *cause = need_line(r, "fragpool: cause: ");
    char *fix = need_line(r, "fragpool: fix: ");
    char *how = line_starting(r->err, "fragpool: advice: replayed ");
    printf("  %s\n  %s\n  %s\n  %s\n", oom, cause, fix, how ? how : "(no advice line)");
    assert_non_null(how);
    return fix;
}

/* ---- the loop -------------------------------------------------------------------- */

#define CLASSIC "summary:off,expandable_segments:False"

static void loop(const char *trace, unsigned mib)
{
    run first = run_client(trace, mib, CLASSIC);
    char *fix = expect_oom(&first, trace, mib);
    if (strncmp(fix, FIX_CONF, strlen(FIX_CONF)) != 0)
        fail_msg("the fix line names no FRAGPOOL_CONF: %s", fix);
    const char *c = fix + strlen(FIX_CONF);
    size_t len = strcspn(c, " \t");
    char *conf = fp_t_hold(malloc(len + 1));
    memcpy(conf, c, len);
    conf[len] = '\0';
    assert_true(len > 0);
    /* the user's own keys are kept; the line says what the run had and a
     * replay's need within it */
    if (!strstr(conf, "summary:off"))
        fail_msg("the fix's FRAGPOOL_CONF dropped this run's summary:off: %s", conf);
    assert_memory_equal(c + len, " \xe2\x80\x94 a replay of this run up to this failure fits in ",
                        strlen(" \xe2\x80\x94 a replay of this run up to this failure fits in "));
    unsigned long long need = mib_after(fix, "fits in ");
    unsigned long long had = mib_after(fix, "it had ");
    assert_int_equal(had, mib);
    assert_true(need <= had);

    run second = run_client(trace, mib, conf);
    if (second.status != 0 || !strstr(second.out, "TRACE_CLIENT DONE events ") ||
        strstr(second.err, "fragpool: CUDA out of memory"))
        fail_msg("the fix, FRAGPOOL_CONF=%s verbatim, on the same %u MiB device: exit %d; "
                 "stdout:\n%s\nstderr:\n%s",
                 conf, mib, second.status, second.out, second.err);
    printf("  %s", second.out);
    printf("  the loop on %s at %u MiB: %.2f s + %.2f s\n", base_name(trace), mib, first.secs,
           second.secs);
}

static void loop_resnet(void **state)
{
    (void)state;
    loop(RESNET, 4650);
}

static void loop_gpt(void **state)
{
    (void)state;
    loop(GPT, 17300);
}

static void default_runs(const char *trace, unsigned mib)
{
    run r = run_client(trace, mib, "summary:off");
    if (r.status != 0 || !strstr(r.out, "TRACE_CLIENT DONE events ") ||
        strstr(r.err, "fragpool: CUDA out of memory"))
        fail_msg("the defaults on %u MiB: exit %d; stdout:\n%s\nstderr:\n%s", mib, r.status, r.out,
                 r.err);
}

static void default_fits(void **state)
{
    (void)state;
    default_runs(RESNET, 4650);
    default_runs(GPT, 17300);
}

/* ---- nothing fits ------------------------------------------------------------------ */

static void nothing_fits(void **state)
{
    (void)state;
    run r = run_client(RESNET, 1000, "summary:off");
    char *fix = expect_oom(&r, RESNET, 1000);
    if (strncmp(fix, "fragpool: fix: no setting fits \xe2\x80\x94 ", 35) != 0)
        fail_msg("want \"fragpool: fix: no setting fits\", got: %s", fix);
    assert_null(strstr(r.err, "FRAGPOOL_CONF="));
    assert_non_null(strstr(fix, "the peak live bytes are "));
    assert_non_null(strstr(fix, "than the 1,000 MiB it had"));
}

/* ---- the exit summary's note ---------------------------------------------------------- */

/* The JSON summary's note about a replay (held), from "notes":[...]. */
/* record_mb:off: no record, so nothing is proven, and the line says how
 * to get a replay instead. */
static void record_off(void **state)
{
    (void)state;
    run r = run_client(RESNET, 4650, CLASSIC ",record_mb:off");
    assert_int_equal(r.status, 3);
    char *fix = need_line(&r, "fragpool: fix: ");
    printf("  %s\n", fix);
    assert_null(line_starting(r.err, "fragpool: advice: ")); /* nothing was replayed */
    assert_non_null(strstr(fix, "fragpool: fix: none proven \xe2\x80\x94 the record of requests "
                                "is off (record_mb:off)"));
    assert_null(strstr(r.err, "fix: FRAGPOOL_CONF="));
}

static char *replay_note(const char *json)
{
    const char *p = strstr(json, "\"notes\":[");
    if (!p)
        return NULL;
    for (p += 9; *p == '"';) {
        const char *q = p + 1;
        while (*q && *q != '"')
            q += q[0] == '\\' && q[1] ? 2 : 1;
        if (!*q)
            return NULL;
        size_t len = (size_t)(q - p - 1);
        char *s = fp_t_hold(malloc(len + 1));
        memcpy(s, p + 1, len);
        s[len] = '\0';
        if (strstr(s, "a replay of this run holds "))
            return s;
        p = q + 1;
        if (*p == ',')
            p++;
    }
    return NULL;
}

static void exit_note(const char *trace)
{
    run r =
        run_client(trace, 65536, "summary:stderr,summary_format:json,expandable_segments:False");
    if (r.status != 0 || !strstr(r.out, "TRACE_CLIENT DONE events "))
        fail_msg("trace_client %s on 65536 MiB: exit %d; stdout:\n%s\nstderr:\n%s",
                 base_name(trace), r.status, r.out, r.err);
    char *note = replay_note(r.err);
    if (!note)
        fail_msg("no note about a replay in the summary:\n%s", r.err);
    printf("  note: %s\n", note);
    assert_non_null(strstr(note, "FRAGPOOL_CONF="));
    assert_non_null(strstr(note, "expandable_segments:True"));
    assert_non_null(strstr(note, "% less than"));
}

static void exit_note_resnet(void **state)
{
    (void)state;
    exit_note(RESNET);
}

/* ---- main ------------------------------------------------------------------------------ */

static int check_env(void **state)
{
    (void)state;
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "libfragpool")) {
        fprintf(stderr,
                "test_shim_advice: LD_PRELOAD must name libfragpool.so (run it by ctest)\n");
        return -1;
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(loop_resnet, fp_t_release_held),
        cmocka_unit_test_teardown(loop_gpt, fp_t_release_held),
        cmocka_unit_test_teardown(default_fits, fp_t_release_held),
        cmocka_unit_test_teardown(nothing_fits, fp_t_release_held),
        cmocka_unit_test_teardown(record_off, fp_t_release_held),
        cmocka_unit_test_teardown(exit_note_resnet, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, check_env, fp_t_release_held);
}
