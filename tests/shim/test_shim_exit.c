/* test_shim_exit.c - the shim's exit paths and its configuration before
 * main, seen from outside: each case fork/execs tests/shim/exit_paths.c
 * under LD_PRELOAD=libfragpool.so (inherited from this test's own
 * environment) with its own FRAGPOOL_CONF, and reads its stdout, stderr
 * and summary files.
 *
 * Checked:
 *  - the summary appears exactly once (one "fragpool memory summary"
 *    header for the one device, closed by the box's rule) when the client
 *    returns from main, calls exit(0), calls exit(0) from another thread,
 *    forks a CUDA-free child, or frees a pool block from an atexit handler
 *    that runs after fragpool's;
 *  - the leak report names the live allocation (5.50 MiB);
 *  - a forked child that makes no CUDA call writes nothing (no output, no
 *    summary file under its pid);
 *  - a free during exit (after fragpool's handler) succeeds and makes no
 *    driver call (deferred and sync free policy);
 *  - summary:off writes nothing at all;
 *  - summary_format:json to summary:PATH parses (fp_jdoc_parse) and holds
 *    version, pid, config, devices[0].allocated.peak, .reserved, .oom_count,
 *    .alloc_retries, .largest_free_block, .fragmentation and .leaks with the
 *    values this client's allocations imply;
 *  - %p in the path is the client's pid; with RANK=3, %r is 3 and the JSON
 *    says "rank":3; %h is the host name;
 *  - strict:1 with a bad key exits with status 2 before main, printing the
 *    problem; without strict the bad key is reported once on stderr and the
 *    program runs normally.
 */
#include "shim_test.h"
#include "child_run.h"
#include "fp_report.h"
#include "fp_jread.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIVE_SIZE      5767168u /* exit_paths' live block, 5.50 MiB  */
#define PEAK_ALLOCATED (1024u + (3u << 20) + LIVE_SIZE)
/* Virtual-memory segments (the default): a 2 MiB page of the small range,
 * and the 3 MiB + 5.50 MiB of the large one on five 2 MiB pages. */
#define PEAK_RESERVED ((2u << 20) + (10u << 20))
/* The largest free run in mapped pages: the freed 3 MiB block. */
#define LARGEST_FREE  (3u << 20)
#define RUN_TIMEOUT_S 30

/* ---- running exit_paths -------------------------------------------------- */

/* Every buffer a case reads is held (fp_t_hold, fp_t_slurp_*) and freed by
 * the teardown, fp_t_release_held. */

typedef struct run {
    pid_t pid;
    int status;
    char *out, *err; /* NUL-terminated stdout and stderr */
} run;

/* Runs exit_paths MODE with this process's environment, FRAGPOOL_CONF=conf
 * (unset when NULL), no rank variables, plus extra (NULL-terminated, may be
 * NULL).  Waits at most RUN_TIMEOUT_S seconds. */
static void run_client(run *r, const char *mode, const char *conf, const char *const *extra)
{
    static const char *const drop[] = {
        "FRAGPOOL_CONF=", "RANK=",         "LOCAL_RANK=", "OMPI_COMM_WORLD_RANK=",
        "PMI_RANK=",      "SLURM_PROCID=", NULL}; /* and TSAN_OPTIONS=, always */
    const char *add[16];
    size_t k = 0;
    char confvar[1024];
    if (conf) {
        snprintf(confvar, sizeof confvar, "FRAGPOOL_CONF=%s", conf);
        add[k++] = confvar;
    }
    for (size_t i = 0; extra && extra[i] && i < 8; i++)
        add[k++] = extra[i];
    add[k] = NULL;
    char **env = fp_t_hold(fp_t_child_env(drop, add));

    int out = fp_t_temp_fd("/tmp/fp-exit-io-"), err = fp_t_temp_fd("/tmp/fp-exit-io-");
    char *argv[] = {(char *)FP_EXIT_PATHS, (char *)mode, NULL};
    int st = 0;
    pid_t pid = fp_t_spawn_wait(FP_EXIT_PATHS, argv, env, out, err, RUN_TIMEOUT_S, &st);
    if (pid < 0)
        fail_msg("exit_paths %s (FRAGPOOL_CONF=%s) still running after %d s", mode,
                 conf ? conf : "(unset)", RUN_TIMEOUT_S);
    r->pid = pid;
    r->status = st;
    r->out = fp_t_slurp_fd(out);
    r->err = fp_t_slurp_fd(err);
    close(out);
    close(err);
}

static void expect_exit(const run *r, int code)
{
    if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != code)
        fail_msg("exit_paths: status 0x%x (want exit %d)\nstdout:\n%s\nstderr:\n%s", r->status,
                 code, r->out, r->err);
}

/* Lines of text that start with prefix. */
static int lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, strlen(prefix)) == 0)
            n++;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return n;
}

static int path_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

#define RULE "|===========================================================================|"

/* One complete text summary of one device, naming the live block. */
static void check_text_summary(const char *text)
{
    assert_int_equal(fp_t_count_of(text, "fragpool memory summary"), 1);
    assert_int_equal(fp_t_count_of(text, "fragpool memory summary, device ID 0"), 1);
    assert_int_equal(fp_t_count_of(text, "| fragpool run "), 1);
    assert_non_null(strstr(text, "| Live at exit          | 1 allocation, 5.50 MiB"));
    assert_non_null(strstr(text, "|                       | 5.50 MiB at 0x"));
    /* the box is closed: the last line is the rule */
    size_t n = strlen(text), m = strlen(RULE "\n");
    assert_true(n > m);
    assert_string_equal(text + n - m, RULE "\n");
}

/* ---- the exit paths, summary on stderr -------------------------------------- */

static void summary_once(const char *mode, const char *conf)
{
    run r;
    run_client(&r, mode, conf, NULL);
    expect_exit(&r, 0);
    assert_non_null(strstr(r.out, "main=1\n"));
    assert_non_null(strstr(r.out, "live=5767168\n"));
    check_text_summary(r.err);
}

static void exit_return(void **state)
{
    (void)state;
    summary_once("return", "");
}

static void exit_exit(void **state)
{
    (void)state;
    summary_once("exit", "");
}

static void exit_thread_exit(void **state)
{
    (void)state;
    summary_once("thread-exit", "");
}

static void exit_sync_policy(void **state)
{
    (void)state;
    summary_once("return", "free_policy:sync");
    summary_once("thread-exit", "free_policy:sync,debug_check:1");
}

static void fork_child_silent(void **state)
{
    (void)state;
    run r;
    run_client(&r, "fork-nocuda", "", NULL);
    expect_exit(&r, 0);
    assert_non_null(strstr(r.out, "child-pid="));
    check_text_summary(r.err); /* the parent's, once; nothing from the child */

    /* With %p in a summary path: the parent's file, none for the child. */
    char pat[256], mine[256], childs[256];
    snprintf(pat, sizeof pat, "summary:/tmp/fp-exit-%d-fork-%%p.txt", (int)getpid());
    run_client(&r, "fork-nocuda", pat, NULL);
    expect_exit(&r, 0);
    int child = atoi(strstr(r.out, "child-pid=") + 10);
    assert_true(child > 0 && child != r.pid);
    snprintf(mine, sizeof mine, "/tmp/fp-exit-%d-fork-%d.txt", (int)getpid(), (int)r.pid);
    snprintf(childs, sizeof childs, "/tmp/fp-exit-%d-fork-%d.txt", (int)getpid(), child);
    char said[700]; /* the one line: which file the %p named */
    snprintf(said, sizeof said, "fragpool: summary: writing %s (%s)\n", mine, pat);
    assert_string_equal(r.err, said);
    char *text = fp_t_slurp_path(mine);
    assert_non_null(text);
    check_text_summary(text);
    assert_false(path_exists(childs));
    unlink(mine);
    unlink(childs);
}

static void late_free(const char *conf)
{
    run r;
    run_client(&r, "abort-free-after-exit", conf, NULL);
    expect_exit(&r, 0);
    assert_non_null(strstr(r.out, "late-free rc=0 driver-frees=0 driver-syncs=0\n"));
    check_text_summary(r.err); /* written before the late free: the block is live */
}

static void free_after_exit_handler(void **state)
{
    (void)state;
    late_free("");
    late_free("free_policy:sync");
    late_free("debug_check:1,trace:/dev/null");
}

static void summary_off_silent(void **state)
{
    (void)state;
    static const char *const modes[] = {"return", "exit", "thread-exit", "fork-nocuda",
                                        "abort-free-after-exit"};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        run r;
        run_client(&r, modes[i], "summary:off", NULL);
        expect_exit(&r, 0);
        assert_string_equal(r.err, "");
        assert_non_null(strstr(r.out, "live=5767168\n"));
    }
}

/* ---- JSON ---------------------------------------------------------------------- */

enum { NTOK = 8192 };
static fp_jtok toks[NTOK];

static int64_t jint(const fp_jdoc *d, const char *path)
{
    int64_t v = -1;
    int t = fp_jdoc_path(d, path);
    if (t < 0 || fp_jdoc_int(d, t, &v))
        fail_msg("JSON summary: no integer at %s", path);
    return v;
}

static int jtype(const fp_jdoc *d, const char *path)
{
    int t = fp_jdoc_path(d, path);
    if (t < 0)
        fail_msg("JSON summary: no member %s", path);
    return d->tok[t].type;
}

static void check_json(const char *text, fp_jdoc *d, int pid)
{
    size_t errpos = 0;
    int rc = fp_jdoc_parse(d, text, strlen(text), toks, NTOK, &errpos);
    if (rc)
        fail_msg("JSON summary does not parse (%d at byte %zu): %s", rc, errpos, text);
    assert_int_equal(d->tok[0].type, FP_JOBJ);
    assert_int_equal(jint(d, "version"), 1);
    assert_int_equal(jint(d, "pid"), pid);
    assert_int_equal(jtype(d, "config"), FP_JOBJ);
    char buf[64];
    assert_int_not_equal(fp_jdoc_str(d, fp_jdoc_path(d, "config.summary_format"), buf, sizeof buf),
                         (size_t)-1);
    assert_string_equal(buf, "json");
    assert_int_equal(jtype(d, "devices"), FP_JARR);
    assert_int_equal(d->tok[fp_jdoc_path(d, "devices")].n, 1);
    assert_int_equal(jint(d, "devices.0.device"), 0);
    assert_int_equal(jint(d, "devices.0.allocated.peak"), PEAK_ALLOCATED);
    assert_int_equal(jint(d, "devices.0.allocated.current"), LIVE_SIZE);
    assert_int_equal(jtype(d, "devices.0.reserved"), FP_JOBJ);
    assert_int_equal(jint(d, "devices.0.reserved.peak"), PEAK_RESERVED);
    assert_int_equal(jint(d, "devices.0.reserved.current"), PEAK_RESERVED);
    assert_int_equal(jint(d, "devices.0.oom_count"), 0);
    assert_int_equal(jint(d, "devices.0.alloc_retries"), 0);
    assert_int_equal(jint(d, "devices.0.largest_free_block"), LARGEST_FREE);
    assert_int_equal(jint(d, "devices.0.page_size"), 2u << 20);
    assert_int_not_equal(
        fp_jdoc_str(d, fp_jdoc_path(d, "devices.0.segments_mode"), buf, sizeof buf), (size_t)-1);
    assert_string_equal(buf, "virtual memory");
    int f = fp_jdoc_path(d, "devices.0.fragmentation");
    assert_true(f >= 0);
    assert_int_equal(d->tok[f].type, FP_JNUM);
    double frag = strtod(text + d->tok[f].start, NULL);
    double want = 1.0 - (double)PEAK_ALLOCATED / (double)PEAK_RESERVED;
    assert_true(frag > want - 0.0001 && frag < want + 0.0001);
    assert_int_equal(jtype(d, "devices.0.leaks"), FP_JOBJ);
    assert_int_equal(jint(d, "devices.0.leaks.count"), 1);
    assert_int_equal(jint(d, "devices.0.leaks.bytes"), LIVE_SIZE);
    assert_int_equal(jint(d, "devices.0.leaks.top.0.size"), LIVE_SIZE);
}

static void json_summary_file(void **state)
{
    (void)state;
    char conf[256], path[256];
    snprintf(conf, sizeof conf, "summary:/tmp/fp-exit-%d-%%p.json,summary_format:json",
             (int)getpid());
    run r;
    run_client(&r, "exit", conf, NULL);
    expect_exit(&r, 0);
    snprintf(path, sizeof path, "/tmp/fp-exit-%d-%d.json", (int)getpid(), (int)r.pid);
    char said[700];
    snprintf(said, sizeof said,
             "fragpool: summary: writing %s (summary:/tmp/fp-exit-%d-%%p.json)\n", path,
             (int)getpid());
    assert_string_equal(r.err, said);
    char *text = fp_t_slurp_path(path);
    if (!text)
        fail_msg("no summary at %s (the %%p of the pattern must be the client's pid)", path);
    fp_jdoc d;
    check_json(text, &d, r.pid);
    assert_int_equal(jtype(&d, "rank"), FP_JNULL);
    assert_int_equal(fp_t_count_of(text, "\n"), 1); /* one line */
    unlink(path);
}

static void json_summary_stderr(void **state)
{
    (void)state;
    run r;
    run_client(&r, "thread-exit", "summary_format:json", NULL);
    expect_exit(&r, 0);
    fp_jdoc d;
    check_json(r.err, &d, r.pid);
}

/* The JSON summary's segments_mode and segments_why (devices.0). */
static void expect_segments(const char *json, const char *mode, const char *why)
{
    fp_jdoc d;
    size_t errpos = 0;
    char buf[128];
    if (fp_jdoc_parse(&d, json, strlen(json), toks, NTOK, &errpos))
        fail_msg("JSON summary does not parse at byte %zu: %s", errpos, json);
    assert_int_not_equal(
        fp_jdoc_str(&d, fp_jdoc_path(&d, "devices.0.segments_mode"), buf, sizeof buf), (size_t)-1);
    assert_string_equal(buf, mode);
    assert_int_not_equal(
        fp_jdoc_str(&d, fp_jdoc_path(&d, "devices.0.segments_why"), buf, sizeof buf), (size_t)-1);
    assert_string_equal(buf, why);
}

/* Which segments ran and why: the default on a device with and without
 * virtual memory management (silent), expandable_segments:False, and
 * expandable_segments:True where the driver cannot (one line). */
static void segments_said(void **state)
{
    (void)state;
    static const char *const no_vmm[] = {"FRAGPOOL_SIM_VMM=0", NULL};
    static const char no_vmm_why[] = "the driver has no virtual memory management here";
    run r;
    run_client(&r, "return", "summary_format:json", NULL);
    expect_exit(&r, 0);
    expect_segments(r.err, "virtual memory",
                    "the default where the driver has virtual memory management; "
                    "expandable_segments:False for classic");
    run_client(&r, "return", "summary_format:json,expandable_segments:False", NULL);
    expect_exit(&r, 0);
    expect_segments(r.err, "classic", "expandable_segments:False");
    run_client(&r, "return", "summary_format:json", no_vmm);
    expect_exit(&r, 0);
    assert_null(strstr(r.err, "fragpool: expandable_segments"));
    expect_segments(r.err, "classic", no_vmm_why);
    run_client(&r, "return", "summary_format:json,expandable_segments:True", no_vmm);
    expect_exit(&r, 0);
    assert_int_equal(fp_t_count_of(r.err, "fragpool: expandable_segments:True: the driver has no "
                                          "virtual memory management here; serving from classic "
                                          "segments\n"),
                     1);
    expect_segments(strchr(r.err, '{'), "classic", no_vmm_why);
}

static void rank_and_host_in_path(void **state)
{
    (void)state;
    char conf[256], path[512], host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(conf, sizeof conf, "summary_format:json,summary:/tmp/fp-exit-%d-%%p-r%%r-%%h.json",
             (int)getpid());
    static const char *const extra[] = {"RANK=3", NULL};
    run r;
    run_client(&r, "return", conf, extra);
    expect_exit(&r, 0);
    snprintf(path, sizeof path, "/tmp/fp-exit-%d-%d-r3-%s.json", (int)getpid(), (int)r.pid, host);
    assert_int_equal(fp_t_count_of(r.err, "\n"), 1); /* which file the escapes named */
    assert_non_null(strstr(r.err, path));
    char *text = fp_t_slurp_path(path);
    if (!text)
        fail_msg("no summary at %s", path);
    fp_jdoc d;
    check_json(text, &d, r.pid);
    assert_int_equal(jint(&d, "rank"), 3);
    char got[256];
    assert_int_not_equal(fp_jdoc_str(&d, fp_jdoc_path(&d, "host"), got, sizeof got), (size_t)-1);
    assert_string_equal(got, host);
    unlink(path);
}

/* ---- configuration before main ----------------------------------------------- */

#define UNKNOWN_FOO "fragpool: FRAGPOOL_CONF: unknown key 'foo' (in 'foo:1'); nearest keys: "

static void strict_exits_before_main(void **state)
{
    (void)state;
    static const char *const modes[] = {"nocuda", "return"};
    for (size_t i = 0; i < 2; i++) {
        run r;
        run_client(&r, modes[i], "strict:1,foo:1", NULL);
        expect_exit(&r, 2);
        assert_string_equal(r.out, ""); /* main never ran */
        assert_int_equal(lines_starting(r.err, UNKNOWN_FOO), 1);
        assert_int_equal(
            lines_starting(
                r.err,
                "fragpool: strict:1 and 1 problem in FRAGPOOL_CONF: exiting with status 2\n"),
            1);
        assert_int_equal(fp_t_count_of(r.err, "\n"), 2); /* nothing else */
    }
}

static void bad_key_reported_once(void **state)
{
    (void)state;
    run r;
    /* No CUDA: the problem line and nothing else. */
    run_client(&r, "nocuda", "foo:1", NULL);
    expect_exit(&r, 0);
    assert_string_equal(r.out, "main=1\n");
    assert_int_equal(lines_starting(r.err, UNKNOWN_FOO), 1);
    assert_int_equal(fp_t_count_of(r.err, "\n"), 1);

    /* A CUDA client with the summary off: it runs normally. */
    run_client(&r, "return", "foo:1,summary:off", NULL);
    expect_exit(&r, 0);
    assert_string_equal(r.out, "main=1\nlive=5767168\n");
    assert_int_equal(lines_starting(r.err, UNKNOWN_FOO), 1);
    assert_int_equal(fp_t_count_of(r.err, "\n"), 1);

    /* With the summary on stderr: the line once, and the summary lists it
     * among its config errors (inside the box). */
    run_client(&r, "return", "foo:1", NULL);
    expect_exit(&r, 0);
    assert_int_equal(lines_starting(r.err, UNKNOWN_FOO), 1);
    assert_int_equal(lines_starting(r.err, "fragpool: "), 1);
    assert_non_null(
        strstr(r.err, "| Config errors         | fragpool: FRAGPOOL_CONF: unknown key"));
    assert_int_equal(fp_t_count_of(r.err, "fragpool memory summary"), 1);
}

static int check_env(void **state)
{
    (void)state;
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "libfragpool")) {
        fprintf(stderr, "test_shim_exit: LD_PRELOAD must name libfragpool.so (run it by ctest)\n");
        return -1;
    }
    return 0;
}

/* Group teardown: removes what a failed case left behind. */
static int remove_leftovers(void **state)
{
    fp_t_release_held(state);
    fp_t_remove_own_tmp("fp-exit");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(exit_return, fp_t_release_held),
        cmocka_unit_test_teardown(exit_exit, fp_t_release_held),
        cmocka_unit_test_teardown(exit_thread_exit, fp_t_release_held),
        cmocka_unit_test_teardown(exit_sync_policy, fp_t_release_held),
        cmocka_unit_test_teardown(fork_child_silent, fp_t_release_held),
        cmocka_unit_test_teardown(free_after_exit_handler, fp_t_release_held),
        cmocka_unit_test_teardown(summary_off_silent, fp_t_release_held),
        cmocka_unit_test_teardown(json_summary_file, fp_t_release_held),
        cmocka_unit_test_teardown(json_summary_stderr, fp_t_release_held),
        cmocka_unit_test_teardown(segments_said, fp_t_release_held),
        cmocka_unit_test_teardown(rank_and_host_in_path, fp_t_release_held),
        cmocka_unit_test_teardown(strict_exits_before_main, fp_t_release_held),
        cmocka_unit_test_teardown(bad_key_reported_once, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, check_env, remove_leftovers);
}
