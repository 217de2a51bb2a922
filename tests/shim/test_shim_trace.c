/* test_shim_trace.c - trace:PATH, the shim's allocation recorder, checked
 * end to end: tests/shim/exit_paths.c runs its "workload" (3000 steps of
 * cuMemAlloc/cuMemFree and cuMemAllocAsync/cuMemFreeAsync on a stream,
 * three blocks left live) under LD_PRELOAD=libfragpool.so with
 * FRAGPOOL_CONF=trace:/tmp/..-%p.csv,summary:/tmp/..-%p.json,
 * summary_format:json; then this test
 *  - loads the file with fp_trace_load (the CLI's loader, which skips the
 *    segment rows s/r) and checks that the a rows and f rows are exactly
 *    the client's allocations and frees, that every f frees a live id of
 *    an earlier a with the same size, and that ids are not reused while
 *    live;
 *  - checks the raw file: one header, seq numbers 0, 1, 2, ... in order
 *    (no row twice), s and r rows as many as the summary's reserve_calls
 *    and release_calls, stream 0 for cuMemAlloc rows and 1 for the stream;
 *  - replays it with fp_replay (default options, unlimited device) and
 *    checks that the replay's peak allocated equals the peak allocated of
 *    the shim's own JSON summary of that run (and the client's own count):
 *    trace -> replay fidelity.  The workload's sizes make every block
 *    exactly its rounded request, so the peak cannot depend on which block
 *    the pool picked (deferred reuse may pick other blocks than replay).
 * With the default free policy (deferred), with free_policy:sync, and with
 * a client that forks a CUDA-free child half-way (the child must add
 * nothing to the parent's trace).
 */
#include "shim_test.h"
#include "child_run.h"
#include "fp_report.h"
#include "fp_jread.h"
#include "fp_trace.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 30

/* ---- running exit_paths -------------------------------------------------- */

/* Every buffer a case reads is held (fp_t_hold, fp_t_slurp_*) and freed by
 * the teardown, release_held, so a failing case (cmocka longjmps out of it)
 * leaks nothing either. */
static fp_trace trace; /* the loaded trace, freed the same way */

static int release_held(void **state)
{
    fp_t_release_held(state);
    fp_trace_free(&trace);
    return 0;
}

/* Runs exit_paths MODE with FRAGPOOL_CONF=conf; returns its pid, stdout in
 * *out (held until the teardown).  Its stderr is this test's. */
static pid_t run_client(const char *mode, const char *conf, char **out)
{
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL}; /* and TSAN_OPTIONS= */
    char confvar[1024];
    snprintf(confvar, sizeof confvar, "FRAGPOOL_CONF=%s", conf);
    const char *const add[] = {confvar, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    int fd = fp_t_temp_fd("/tmp/fp-trace-out-");
    char *argv[] = {(char *)FP_EXIT_PATHS, (char *)mode, NULL};
    int st = 0;
    pid_t pid = fp_t_spawn_wait(FP_EXIT_PATHS, argv, env, fd, -1, RUN_TIMEOUT_S, &st);
    if (pid < 0)
        fail_msg("exit_paths %s still running after %d s", mode, RUN_TIMEOUT_S);
    *out = fp_t_slurp_fd(fd);
    close(fd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("exit_paths %s: status 0x%x; stdout:\n%s", mode, st, *out);
    return pid;
}

/* ---- the summary ---------------------------------------------------------------- */

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

/* ---- the raw CSV --------------------------------------------------------------- */

typedef struct raw_counts {
    size_t headers, rows, a, f, s, r, stream0, stream1, other_stream;
    int seq_in_order;
} raw_counts;

static void scan_raw(const char *text, raw_counts *c)
{
    memset(c, 0, sizeof *c);
    c->seq_in_order = 1;
    unsigned long long want = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl); /* every row is complete */
        if (strncmp(p, "seq,op,id,size,stream,thread\n", 29) == 0) {
            c->headers++;
        } else {
            unsigned long long seq, id, size;
            unsigned stream;
            char op;
            assert_int_equal(sscanf(p, "%llu,%c,%llu,%llu,%u", &seq, &op, &id, &size, &stream), 5);
            if (seq != want)
                c->seq_in_order = 0;
            want = seq + 1;
            c->rows++;
            c->a += op == 'a';
            c->f += op == 'f';
            c->s += op == 's';
            c->r += op == 'r';
            if (op == 'a' || op == 'f') {
                c->stream0 += stream == 0;
                c->stream1 += stream == 1;
                c->other_stream += stream > 1;
            }
        }
        p = nl + 1;
    }
}

/* ---- one run -------------------------------------------------------------------- */

static void trace_matches_run(const char *mode, const char *extra_conf)
{
    char conf[512], trace_path[256], sum_path[256];
    int me = (int)getpid();
    snprintf(conf, sizeof conf,
             "trace:/tmp/fp-trace-%d-%%p.csv,summary:/tmp/fp-trace-%d-%%p.json,"
             "summary_format:json%s%s",
             me, me, extra_conf[0] ? "," : "", extra_conf);
    char *out;
    pid_t pid = run_client(mode, conf, &out);
    snprintf(trace_path, sizeof trace_path, "/tmp/fp-trace-%d-%d.csv", me, (int)pid);
    snprintf(sum_path, sizeof sum_path, "/tmp/fp-trace-%d-%d.json", me, (int)pid);
    unsigned long allocs = 0, frees = 0;
    size_t peak_rounded = 0;
    const char *line = strstr(out, "allocs=");
    assert_non_null(line);
    assert_int_equal(
        sscanf(line, "allocs=%lu frees=%lu peak-rounded=%zu", &allocs, &frees, &peak_rounded), 3);
    assert_true(allocs > 1000 && frees > 1000);

    /* The shim's JSON summary of the run. */
    char *json = fp_t_slurp_path(sum_path);
    if (!json)
        fail_msg("no summary at %s", sum_path);
    fp_jdoc d;
    size_t errpos = 0;
    if (fp_jdoc_parse(&d, json, strlen(json), toks, NTOK, &errpos))
        fail_msg("summary does not parse at byte %zu: %s", errpos, json);
    int64_t shim_peak = jint(&d, "devices.0.allocated.peak");
    assert_int_equal(jint(&d, "devices.0.allocs"), allocs);
    assert_int_equal(jint(&d, "devices.0.leaks.count"), 3);
    assert_int_equal(jint(&d, "devices.0.oom_count"), 0);

    /* The raw file. */
    char *raw = fp_t_slurp_path(trace_path);
    if (!raw)
        fail_msg("no trace at %s (%%p must be the client's pid)", trace_path);
    raw_counts rc;
    scan_raw(raw, &rc);
    if (rc.headers != 1 || !rc.seq_in_order || rc.a != allocs || rc.f != frees)
        fail_msg("%s: %zu header lines (want 1), seq %s, %zu a rows for %lu allocations, "
                 "%zu f rows for %lu frees",
                 trace_path, rc.headers,
                 rc.seq_in_order ? "in order" : "NOT 0, 1, 2, ... (rows repeated?)", rc.a, allocs,
                 rc.f, frees);
    assert_int_equal(rc.s, jint(&d, "devices.0.reserve_calls"));
    assert_int_equal(rc.r, jint(&d, "devices.0.release_calls"));
    assert_true(rc.stream0 > 0 && rc.stream1 > 0);
    assert_int_equal(rc.other_stream, 0);

    /* The loader's view: a and f rows only, ids paired. */
    fp_trace t;
    char err[256] = "";
    fp_trace_free(&trace);
    if (fp_trace_load(trace_path, &trace, err, sizeof err))
        fail_msg("fp_trace_load: %s", err);
    t = trace;
    assert_int_equal(t.n, allocs + frees);
    uint64_t *live_id = fp_t_hold(calloc(t.n, sizeof *live_id));
    uint64_t *live_size = fp_t_hold(calloc(t.n, sizeof *live_size));
    size_t nlive = 0, na = 0, nf = 0;
    for (size_t i = 0; i < t.n; i++) {
        const fp_tracer_event *e = &t.ev[i];
        size_t j = 0;
        while (j < nlive && live_id[j] != e->id)
            j++;
        if (e->op == 'a') {
            if (j < nlive)
                fail_msg("event %zu: id %llu allocated again while live", i,
                         (unsigned long long)e->id);
            live_id[nlive] = e->id;
            live_size[nlive++] = e->size;
            na++;
        } else {
            assert_int_equal(e->op, 'f');
            if (j == nlive)
                fail_msg("event %zu: free of id %llu, which no earlier a row made live", i,
                         (unsigned long long)e->id);
            assert_int_equal(live_size[j], e->size);
            live_id[j] = live_id[nlive - 1];
            live_size[j] = live_size[--nlive];
            nf++;
        }
    }
    assert_int_equal(na, allocs);
    assert_int_equal(nf, frees);
    assert_int_equal(nlive, 3);

    /* Replay: the same peak allocated as the shim's summary. */
    fp_pool_opts opts;
    fp_pool_opts_default(&opts);
    fp_replay_result res;
    assert_int_equal(fp_replay(&t, &opts, 0, &res, NULL), 0);
    assert_int_equal(res.events, t.n);
    assert_int_equal(res.ooms, 0);
    assert_int_equal(res.bad_frees, 0);
    printf("%s %s: %zu events, peak allocated: replay %lld, shim %lld, client %zu\n", mode,
           extra_conf, t.n, (long long)res.stats.allocated_bytes[FP_ALL].peak, (long long)shim_peak,
           peak_rounded);
    assert_int_equal(res.stats.allocated_bytes[FP_ALL].peak, shim_peak);
    assert_int_equal(shim_peak, peak_rounded);

    unlink(trace_path);
    unlink(sum_path);
}

static void trace_deferred(void **state)
{
    (void)state;
    trace_matches_run("workload", "");
}

static void trace_sync(void **state)
{
    (void)state;
    trace_matches_run("workload", "free_policy:sync");
}

/* A child forked without CUDA inherits the recorder's unwritten rows: it
 * must not write them (or anything) into the parent's trace. */
static void trace_survives_fork(void **state)
{
    (void)state;
    trace_matches_run("workload-fork", "");
}

/* Group teardown: removes what a failed case left behind. */
static int remove_leftovers(void **state)
{
    release_held(state);
    fp_t_remove_own_tmp("fp-trace");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(trace_deferred, release_held),
        cmocka_unit_test_teardown(trace_sync, release_held),
        cmocka_unit_test_teardown(trace_survives_fork, release_held),
    };
    return cmocka_run_group_tests(tests, NULL, remove_leftovers);
}
