/* cmd_replay.c - `fragpool replay TRACE [--conf K:V,...] [--budget SIZE]
 * [--json] [--quiet]`: runs a recorded trace through the same pool code on a
 * simulated device and prints the summary the shim would write
 * (fp_cli_replay_report, cli_replay_report.c).
 * Deterministic: the same trace and settings give the same output.
 * Exit status 1 when the trace cannot be read or stdout cannot be written
 * (one line on stderr says which); the trace's frees of unknown ids and
 * allocations of live ids are counted in the summary and on stderr.
 * `fragpool snapshot`, the same replay written as PyTorch's memory
 * snapshot, is cmd_snapshot.c.
 */
#include "cli.h"
#include "fp_advise.h"
#include "fp_report.h"
#include "fp_trace.h"
#include <stdio.h>
#include <string.h>

typedef struct replay_args {
    const char *trace, *conf;
    size_t budget;
    int json, quiet;
} replay_args;

static int parse_args(int argc, char **argv, replay_args *a)
{
    const fp_cli_spec *s = &fp_cli_replay;
    const char *val[FP_CLI_MAX_OPTS], *budget;
    memset(a, 0, sizeof *a);
    if (fp_cli_parse(s, argc, argv, val, &a->trace))
        return 2;
    a->conf = fp_cli_value(s, val, "--conf");
    a->json = fp_cli_value(s, val, "--json") != NULL;
    a->quiet = fp_cli_value(s, val, "--quiet") != NULL;
    budget = fp_cli_value(s, val, "--budget");
    return budget && fp_parse_budget("replay", budget, &a->budget) ? 2 : 0;
}

/* 0, or the sink's error. */
static int print_summary(const replay_args *a, const fp_conf *c, fp_pool *p,
                         const fp_replay_result *r)
{
    static fp_replay_report rep;
    fp_cli_replay_report(p, r, c, a->budget, &rep);
    fflush(stdout);
    fp_sink s = fp_sink_fd(1);
    return a->json ? fp_report_json(&rep.run, &s) : fp_report_text(&rep.run, &s);
}

/* docs/replay.md: both are skipped and counted, neither stops the replay. */
static void print_trace_problems(const fp_replay_result *r)
{
    if (r->bad_frees)
        fprintf(stderr,
                "fragpool replay: frees of unknown ids: %zu, skipped; the first at "
                "event %zu\n",
                r->bad_frees, r->first_bad_free);
    if (r->dup_allocs)
        fprintf(stderr,
                "fragpool replay: allocations of live ids: %zu, refused (the live "
                "allocation stays); the first at event %zu\n",
                r->dup_allocs, r->first_dup_alloc);
    if (r->recorded_ooms)
        fprintf(stderr,
                "fragpool replay: the recorded run failed %zu allocation%s ('o' rows); "
                "this replay refused %zu of them\n",
                r->recorded_ooms, r->recorded_ooms == 1 ? "" : "s", r->recorded_refused);
}

/* An RMM log or a snapshot: what its reader left out (docs/replay.md,
 * "Other inputs"). */
static void print_input_notes(const replay_args *a, const fp_trace *t)
{
    if (t->dropped_frees)
        fprintf(stderr,
                "fragpool replay: %s (%s): %zu free%s of an address with no live "
                "allocation (made before the recording began), skipped\n",
                a->trace, t->format, t->dropped_frees, t->dropped_frees == 1 ? "" : "s");
    if (t->reused_live)
        fprintf(stderr,
                "fragpool replay: %s (%s): %zu allocation%s at an address still "
                "live, whose free was not recorded: the old one was freed first\n",
                a->trace, t->format, t->reused_live, t->reused_live == 1 ? "" : "s");
}

static void print_first_oom(const fp_replay_result *r, const fp_conf *c, size_t budget)
{
    fprintf(stderr, "fragpool replay: %zu allocation%s failed; the first at event %zu:\n", r->ooms,
            r->ooms == 1 ? "" : "s", r->first_oom_event);
    fflush(stderr);
    fp_sink s = fp_sink_fd(2);
    fp_oom_message(&r->first_oom, &r->stats, &c->pool, 0, budget, (size_t)-1, &s);
}

/* After an OOM: the verdict on the whole trace in the same budget
 * (replay/fp_advise.h), the one `fragpool tune --budget` prints.  The
 * shim, at a real OOM, can only prove the run up to the failure; offline
 * the whole run is known. */
static void advise(const fp_trace *t, const fp_conf *c, size_t budget)
{
    fp_advice v;
    fp_advice_req req = {.budget = budget, .current = c};
    fp_sink s = fp_sink_fd(2);
    if (fp_advise(t, &req, &v))
        fp_puts(&s, "fragpool: fix: none proven \xe2\x80\x94 out of host memory for the replays\n");
    else
        fp_advise_put(&s, &v, "fragpool: fix: ", "this trace");
    fp_sink_flush(&s);
}

int fp_cmd_replay(int argc, char **argv)
{
    replay_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    fp_conf c;
    fp_cli_conf(a.conf, &c);
    fp_cli_vmm_note(&c, a.budget);
    fp_trace t;
    char err[512];
    if (fp_trace_load(a.trace, &t, err, sizeof err)) {
        fprintf(stderr, "fragpool replay: %s\n", err);
        return 1;
    }
    fp_cli_trace_threads(&c, &t);
    print_input_notes(&a, &t);
    fp_replay_result r;
    fp_pool *p;
    fp_progress pr;
    fp_progress_init(&pr, "replay", a.quiet);
    fp_progress_events pe = {&pr, "replaying,", t.n};
    fp_replay_hook h = {.after_event = fp_progress_replay_hook, .ud = &pe};
    int failed = fp_replay_ex(&t, &c.pool, a.budget, &h, &r, &p);
    fp_progress_done(&pr);
    if (failed) {
        fprintf(stderr, "fragpool replay: out of host memory\n");
        fp_trace_free(&t);
        return 1;
    }
    print_trace_problems(&r);
    if (r.ooms) {
        print_first_oom(&r, &c, a.budget);
        advise(&t, &c, a.budget);
    }
    rc = fp_cli_output_done("replay", print_summary(&a, &c, p, &r));
    fp_pool_destroy(p, 1);
    fp_trace_free(&t);
    return rc;
}
