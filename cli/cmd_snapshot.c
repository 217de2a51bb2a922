/* cmd_snapshot.c - `fragpool snapshot TRACE -o OUT.pickle [--conf K:V,...]
 * [--budget SIZE]`: replays a trace through the pool and writes what
 * happened as PyTorch's memory snapshot (report/fp_snapshot.h), for
 * pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`.
 *
 * The trace entries are the replay's own: segment_alloc and segment_free
 * where the pool reserved and released, alloc with the block's address
 * and requested size, free_requested then free_completed for each free
 * (fragpool gives a freed block straight back to best fit, so the two are
 * the same moment), oom for each refused request.  time_us is the event's
 * number in the trace (a trace records no time).
 * Exit status: 0; 1 when the trace cannot be read or OUT cannot be
 * written (one line says which); 2 for a usage error.
 *
 * Invariants: the segments are the pool's at the end of the same replay
 * that made the entries, so the two agree; OUT is created with
 * fp_file_create (docs/files.md: no symlink followed, no other user's
 * file emptied), and a failure to create or write it is one line on
 * stderr and exit status 1, never a success.
 */
#include "cli.h"
#include "fp_trace.h"
#include "fp_vec.h"
#include "fp_file.h"
#include "fp_snapshot.h"
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
    fp_conf_format_pytorch(c, fp_pool_is_vmm(p), conf, sizeof conf); /* PyTorch's keys only */
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
    fp_cli_trace_threads(&c, &t);
    entries e = {.t = &t};
    fp_replay_hook h = {.on_change = on_change, .ud = &e};
    fp_replay_result r;
    fp_pool *p = NULL;
    rc = fp_replay_ex(&t, &c.pool, a.budget, &h, &r, &p) || e.err ? 1 : 0;
    if (rc)
        fprintf(stderr, "fragpool snapshot: %s: out of memory replaying the trace\n", a.trace);
    else
        rc = write_out(&a, &c, p, &e);
    char peak[32]; /* a measured size: as the summary writes it (docs/replay.md, "Units") */
    fp_format_size((size_t)r.stats.reserved_bytes[FP_ALL].peak, peak);
    if (!rc)
        fprintf(stderr,
                "fragpool snapshot: wrote %s: %zu trace entries from %zu events, peak "
                "reserved %s\n",
                a.out, e.n, r.events, peak);
    if (p)
        fp_pool_destroy(p, 1);
    free(e.v);
    fp_trace_free(&t);
    return rc;
}
