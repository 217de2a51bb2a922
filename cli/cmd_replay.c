/* cmd_replay.c - `fragpool replay TRACE [--conf K:V,...] [--budget SIZE]
 * [--json]`: runs a recorded trace through the same pool code on a
 * simulated device and prints the summary the shim would write.
 * Deterministic: the same trace and settings give the same output.
 * Exit status 1 when the trace cannot be read or stdout cannot be written
 * (one line on stderr says which); the trace's frees of unknown ids and
 * allocations of live ids are counted in the summary and on stderr.
 * Also `fragpool snapshot` (below): the same replay, written as PyTorch's
 * memory snapshot.
 */
#include "cli.h"
#include "fp_advise.h"
#include "fp_groups.h"
#include "fp_report.h"
#include "fp_trace.h"
#include "fp_vec.h"
#include "fp_file.h"
#include "fp_snapshot.h"
#include <errno.h>
#include <stdlib.h>
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
    const fp_cli_spec *s = &fp_cli_replay;
    const char *val[FP_CLI_MAX_OPTS], *budget;
    memset(a, 0, sizeof *a);
    if (fp_cli_parse(s, argc, argv, val, &a->trace))
        return 2;
    a->conf = fp_cli_value(s, val, "--conf");
    a->json = fp_cli_value(s, val, "--json") != NULL;
    budget = fp_cli_value(s, val, "--budget");
    return budget && fp_parse_budget("replay", budget, &a->budget) ? 2 : 0;
}

void fp_cli_replay_report(fp_pool *p, const fp_replay_result *r, const fp_conf *c, size_t budget,
                          fp_replay_report *out)
{
    out->dev = (fp_dev_report){.device = 0,
                               .device_name = "replay (simulated device)",
                               .total_capacity = budget,
                               .device_free = (size_t)-1,
                               .replay = 1};
    fp_report_fill_pool(&out->dev, p, &r->stats, out->leaks);
    out->dev.segments_why = fp_segments_why(c->pool.expandable_segments, fp_pool_is_vmm(p));
    /* The shim's groups are null in a replay (no driver, no deferral, no
     * IPC): report/'s table keeps their keys, as in the shim's summary. */
    fp_report_groups_init(&out->dev, out->groups);
    fp_group trace;
    fp_replay_trace_group(r, out->trace_rows, &trace);
    fp_report_group_set(out->groups, FP_GROUP_TRACE, &trace);
    size_t n = fp_conf_entries(c, out->entries, FP_CONF_MAX_OPTIONS, out->conf, sizeof out->conf);
    out->run = (fp_run_report){.pid = 0,
                               .rank = -1,
                               .config = out->entries,
                               .nconfig = n,
                               .mode = "replay",
                               .devs = &out->dev,
                               .ndevs = 1};
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
    fp_trace t;
    char err[512];
    if (fp_trace_load(a.trace, &t, err, sizeof err)) {
        fprintf(stderr, "fragpool replay: %s\n", err);
        return 1;
    }
    print_input_notes(&a, &t);
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
        advise(&t, &c, a.budget);
    }
    rc = fp_cli_output_done("replay", print_summary(&a, &c, p, &r));
    fp_pool_destroy(p, 1);
    fp_trace_free(&t);
    return rc;
}

/* ---- `fragpool snapshot TRACE -o OUT.pickle [--conf K:V,...]
 * [--budget SIZE]`: replays a trace through the pool and writes what
 * happened as PyTorch's memory snapshot (report/fp_snapshot.h), for
 * pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`.
 *
 * The trace entries are the replay's own: segment_alloc and segment_free
 * where the pool reserved and released, alloc with the block's address
 * and requested size, free_requested then free_completed for each free
 * (fragpool gives a freed block straight back to best fit, so the two are
 * the same moment), oom for each refused request.  time_us is the event's
 * number in the trace (a trace records no time).  The segments are the
 * pool's at the end, so they agree with the entries.
 * Exit status: 0; 1 when the trace cannot be read or OUT cannot be
 * written (one line says which); 2 for a usage error.

 * (Here beside replay: it is a replay whose result is written as a
 * snapshot.) */
typedef struct snap_args {
    const char *trace, *out, *conf;
    size_t budget;
} snap_args;

typedef struct entries {
    fp_snap_entry *v;
    size_t n, cap;
    const fp_trace *t;
    int err;
} entries;

static int parse_snap_args(int argc, char **argv, snap_args *a)
{
    const fp_cli_spec *s = &fp_cli_snapshot;
    const char *val[FP_CLI_MAX_OPTS], *budget;
    memset(a, 0, sizeof *a);
    if (fp_cli_parse(s, argc, argv, val, &a->trace))
        return 2;
    a->out = fp_cli_value(s, val, "-o");
    a->conf = fp_cli_value(s, val, "--conf");
    budget = fp_cli_value(s, val, "--budget");
    return budget && fp_parse_budget("snapshot", budget, &a->budget) ? 2 : 0;
}

static void push(entries *e, unsigned action, uint64_t addr, uint64_t size, size_t event)
{
    if (e->err)
        return;
    fp_snap_entry *v = fp_vec_grow(e->v, &e->cap, e->n + 1, sizeof *v, 4096);
    if (!v) {
        e->err = ENOMEM;
        return;
    }
    e->v = v;
    uint64_t stream =
        action <= FP_SNAP_FREE_COMPLETED || action == FP_SNAP_OOM ? e->t->ev[event].stream : 0;
    e->v[e->n++] = (fp_snap_entry){.addr = addr,
                                   .size = size,
                                   .stream = stream,
                                   .time_us = (int64_t)event,
                                   .action = (uint8_t)action};
}

static void on_change(void *ud, int kind, uint64_t addr, uint64_t size, size_t event)
{
    entries *e = ud;
    switch (kind) {
    case FP_REPLAY_ALLOC: push(e, FP_SNAP_ALLOC, addr, size, event); break;
    case FP_REPLAY_FREE:
        push(e, FP_SNAP_FREE_REQUESTED, addr, size, event);
        push(e, FP_SNAP_FREE_COMPLETED, addr, size, event);
        break;
    case FP_REPLAY_OOM: push(e, FP_SNAP_OOM, 0, size, event); break;
    case FP_REPLAY_SEGMENT_ALLOC: push(e, FP_SNAP_SEGMENT_ALLOC, addr, size, event); break;
    case FP_REPLAY_SEGMENT_MAP: /* pages of a range: as PyTorch's expandable segments */
        push(e, FP_SNAP_SEGMENT_MAP, addr, size, event);
        break;
    case FP_REPLAY_SEGMENT_UNMAP: push(e, FP_SNAP_SEGMENT_UNMAP, addr, size, event); break;
    default: push(e, FP_SNAP_SEGMENT_FREE, addr, size, event); break;
    }
}

/* Writes the snapshot of p and e to a->out: 0, or 1 after one line. */
static int write_out(const snap_args *a, const fp_conf *c, fp_pool *p, const entries *e)
{
    char why[256], conf[4096];
    int fd, err = fp_file_create(a->out, &fd, why, sizeof why);
    if (err) {
        fprintf(stderr, "fragpool snapshot: cannot write '%s': %s\n", a->out, why);
        return 1;
    }
    fp_conf_format(c, conf, sizeof conf);
    fp_snap_device d = {.device = 0, .pool = p};
    fp_snap s = {.devs = &d,
                 .ndevs = 1,
                 .ev = {e->v, NULL},
                 .nev = {e->n, 0},
                 .opts = &c->pool,
                 .conf = conf};
    static fp_sink sink;
    sink = fp_sink_fd(fd);
    err = fp_snapshot_write(&s, &sink);
    if (close(fd) != 0 && !err)
        err = errno;
    if (err) {
        fprintf(stderr, "fragpool snapshot: writing '%s' failed: %s\n", a->out, strerror(err));
        return 1;
    }
    return 0;
}

int fp_cmd_snapshot(int argc, char **argv)
{
    snap_args a;
    int rc = parse_snap_args(argc, argv, &a);
    if (rc)
        return rc;
    fp_conf c;
    if (fp_cli_conf(a.conf, &c))
        return 2;
    fp_trace t;
    char err[1024];
    if (fp_trace_load(a.trace, &t, err, sizeof err)) {
        fprintf(stderr, "fragpool snapshot: %s\n", err);
        return 1;
    }
    entries e = {.t = &t};
    fp_replay_hook h = {.on_change = on_change, .ud = &e};
    fp_replay_result r;
    fp_pool *p = NULL;
    rc = fp_replay_ex(&t, &c.pool, a.budget, &h, &r, &p) || e.err ? 1 : 0;
    if (rc)
        fprintf(stderr, "fragpool snapshot: %s: out of memory replaying the trace\n", a.trace);
    else
        rc = write_out(&a, &c, p, &e);
    if (!rc)
        fprintf(stderr,
                "fragpool snapshot: wrote %s: %zu trace entries from %zu events, peak "
                "reserved %lld bytes\n",
                a.out, e.n, r.events, (long long)r.stats.reserved_bytes[FP_ALL].peak);
    if (p)
        fp_pool_destroy(p, 1);
    free(e.v);
    fp_trace_free(&t);
    return rc;
}
