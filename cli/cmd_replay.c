/* cmd_replay.c - `fragpool replay TRACE [--conf K:V,...] [--budget SIZE]
 * [--json]`: runs a recorded trace through the same pool code on a
 * simulated device and prints the summary the shim would write.
 * Deterministic: the same trace and settings give the same output.
 * Exit status 1 when the trace cannot be read or stdout cannot be written
 * (one line on stderr says which); the trace's frees of unknown ids and
 * allocations of live ids are counted in the summary and on stderr.
 */
#include "cli.h"
#include "fp_report.h"
#include "fp_trace.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct replay_args {
    const char *trace, *conf;
    size_t budget;
    int json;
} replay_args;

static int parse_args(int argc, char **argv, replay_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
            a->conf = argv[++i];
        } else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
            if (fp_parse_budget("replay", argv[++i], &a->budget))
                return 2;
        } else if (!strcmp(argv[i], "--json")) {
            a->json = 1;
        } else if (argv[i][0] != '-' && !a->trace) {
            a->trace = argv[i];
        } else {
            fprintf(stderr, "fragpool replay: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!a->trace)
        fprintf(stderr, "usage: fragpool replay TRACE [--conf K:V,...] [--budget SIZE] [--json]\n");
    return a->trace ? 0 : 2;
}

void fp_replay_run_report(fp_pool *p, const fp_replay_result *r, const fp_conf *c,
                          size_t budget, fp_replay_report *out)
{
    out->dev = (fp_dev_report){.device = 0, .device_name = "replay (simulated device)",
                               .total_capacity = budget, .device_free = (size_t)-1};
    fp_report_fill_pool(&out->dev, p, &r->stats, out->leaks);
    /* The shim's groups are null in a replay (no driver, no deferral, no
     * IPC): the JSON keeps the keys of the shim's summary. */
    out->groups[0] = (fp_group){.key = "passthrough"};
    out->groups[1] = (fp_group){.key = "deferred"};
    fp_replay_trace_group(r, out->trace_rows, &out->groups[2]);
    out->groups[3] = (fp_group){.key = "ipc"};
    out->dev.groups = out->groups;
    out->dev.ngroups = 4;
    size_t n = fp_conf_entries(c, out->entries, FP_CONF_MAX_OPTIONS, out->conf,
                               sizeof out->conf);
    out->run = (fp_run_report){.pid = 0, .rank = -1, .config = out->entries,
                               .nconfig = n, .mode = "replay", .devs = &out->dev,
                               .ndevs = 1};
}

/* 0, or the sink's error. */
static int print_summary(const replay_args *a, const fp_conf *c, fp_pool *p,
                         const fp_replay_result *r)
{
    static fp_replay_report rep;
    fp_replay_run_report(p, r, c, a->budget, &rep);
    fflush(stdout);
    fp_sink s = fp_sink_fd(1);
    return a->json ? fp_summary_json(&rep.run, &s) : fp_summary_text(&rep.run, &s);
}

/* docs/replay.md: both are skipped and counted, neither stops the replay. */
static void print_trace_problems(const fp_replay_result *r)
{
    if (r->bad_frees)
        fprintf(stderr, "fragpool replay: frees of unknown ids: %zu, skipped; the first at "
                "event %zu\n", r->bad_frees, r->first_bad_free);
    if (r->dup_allocs)
        fprintf(stderr, "fragpool replay: allocations of live ids: %zu, refused (the live "
                "allocation stays); the first at event %zu\n", r->dup_allocs, r->first_dup_alloc);
    if (r->recorded_ooms)
        fprintf(stderr, "fragpool replay: the recorded run failed %zu allocation%s ('o' rows); "
                "this replay refused %zu of them\n", r->recorded_ooms,
                r->recorded_ooms == 1 ? "" : "s", r->recorded_refused);
}

static void print_first_oom(const fp_replay_result *r, const fp_conf *c, size_t budget)
{
    fprintf(stderr, "fragpool replay: %zu allocation%s failed; the first at event %zu:\n",
            r->ooms, r->ooms == 1 ? "" : "s", r->first_oom_event);
    fflush(stderr);
    fp_sink s = fp_sink_fd(2);
    fp_oom_message(&r->first_oom, &r->stats, &c->pool, 0, budget, (size_t)-1, &s);
}

/* After an OOM without expandable_segments: the same trace and budget
 * replayed in that mode; one line when it fits (never advice for a
 * setting already on). */
static void try_expandable(const fp_trace *t, const fp_conf *c, size_t budget)
{
    if (c->pool.expandable_segments)
        return;
    fp_pool_opts o = c->pool;
    o.expandable_segments = 1;
    fp_replay_result r;
    if (fp_replay(t, &o, budget, &r, NULL) || r.ooms)
        return;
    fprintf(stderr, "fragpool replay: with expandable_segments:True added, this trace runs "
            "in the same budget without an OOM (peak reserved %zu MiB); check it with "
            "`fragpool replay TRACE --conf expandable_segments:True`\n",
            (size_t)r.stats.reserved_bytes[FP_ALL].peak / FP_MIB);
}

int fp_cmd_replay(int argc, char **argv)
{
    replay_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    fp_conf c;
    fp_cli_conf(a.conf, &c);
    fp_trace t;
    char err[512];
    if (fp_trace_load(a.trace, &t, err, sizeof err)) {
        fprintf(stderr, "fragpool replay: %s\n", err);
        return 1;
    }
    fp_replay_result r;
    fp_pool *p;
    if (fp_replay(&t, &c.pool, a.budget, &r, &p)) {
        fprintf(stderr, "fragpool replay: out of host memory\n");
        fp_trace_free(&t);
        return 1;
    }
    print_trace_problems(&r);
    if (r.ooms) {
        print_first_oom(&r, &c, a.budget);
        try_expandable(&t, &c, a.budget);
    }
    rc = fp_cli_output_done("replay", print_summary(&a, &c, p, &r));
    fp_pool_destroy(p, 1);
    fp_trace_free(&t);
    return rc;
}
