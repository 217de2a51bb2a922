/* shim_summary.c - what the shim tells the user: the memory summary at
 * exit and the explanation of an OOM.
 *
 * Both read only what the shim already holds in memory: the exit path
 * makes no CUDA call, and the report module formats into fixed buffers.
 * The summary goes where the summary key says: off, stderr, or a file
 * whose name may hold %p (pid), %r (rank), %h (host) and %% (a '%').
 *
 * Files (docs/files.md): the name must expand whole (no truncation, no
 * unknown escape); it is opened by fp_file_create (O_EXCL for a fresh
 * name, O_NOFOLLOW, never a FIFO, a device, or another user's file).  Any
 * problem - the name, the open, a failed write or close - is one line on
 * stderr, and the summary is then written on stderr instead: it is never
 * lost silently.  A name that is the trace's or the snapshot's file moves
 * to PATH.summary, and a forked child's name without %p to PATH.PID
 * (fp_path_claim, one line), so no other output is emptied.  No write
 * raises SIGXFSZ (past RLIMIT_FSIZE it fails with EFBIG).  At exit
 * summary_lock is tried only until the exit deadline (shim_exitlock.h).
 */
#include "shim_summary.h"
#include "fp_advise.h"
#include "fp_file.h"
#include "fp_groups.h"
#include "fp_report.h"
#include "shim_clock.h"
#include "shim_exitlock.h"
#include "shim_framework.h"
#include "shim_host.h"
#include "shim_lend.h"
#include "shim_pages.h"
#include "shim_path.h"
#include "shim_real.h"
#include "shim_snaprec.h"
#include "shim_state.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FP_MAX_REPORTS 64

/* The shim's counter groups of one device, rows built from the X-lists of
 * shim_counts.h, in the slots of report/'s group table (fp_groups.h: the
 * keys, labels and order are its; "trace" is a replay's and stays null). */
#define FP_NDEFER_ROWS    (1 + FP_DEFER_COUNTS(FP_COUNT_ONE) 0)
#define FP_NIPC_ROWS      (FP_IPC_COUNTS(FP_COUNT_ONE) 0)
#define FP_NFRONT_ROWS    (FP_FRONT_COUNTS(FP_COUNT_ONE) 0)
#define FP_NLEND_ROWS     (FP_LEND_COUNTS(FP_COUNT_ONE) 0)
#define FP_COUNT_ONE(...) 1 +

typedef struct dev_groups {
    fp_row pt[FP_PT_NKINDS];
    fp_row defer[FP_NDEFER_ROWS];
    fp_row ipc[FP_NIPC_ROWS];
    fp_row front[FP_NFRONT_ROWS];
    fp_row lend[FP_NLEND_ROWS];
    fp_group g[FP_DEV_NGROUPS]; /* fp_report_groups_init's slots */
} dev_groups;

#define FP_STACK_TEXT 1024 /* a leak's frames as text (trace_stacks) */

typedef struct collect {
    fp_dev_report devs[FP_MAX_REPORTS];
    fp_leak leaks[FP_MAX_REPORTS][FP_REPORT_TOP_LEAKS];
    dev_groups groups[FP_MAX_REPORTS];
    char stack[FP_MAX_REPORTS][FP_REPORT_TOP_LEAKS][FP_STACK_TEXT];
    const char *stacks[FP_MAX_REPORTS][FP_REPORT_TOP_LEAKS];
    char names[FP_MAX_REPORTS][64]; /* copied: a slot may be rebuilt after */
    size_t n;
    bool running; /* a SIGUSR1 dump, not the exit summary */
} collect;

static collect summary_data;   /* static: the exit path needs no big stack */
static const char *extra_note; /* fp_summary_note's line, for the exit summary;
                                  under summary_lock */

/* JSON key and text ("1 managed"), by kind. */
static const char *const pt_keys[FP_PT_NKINDS][2] = {
#define FP_PT_KEY(name, key) {key, " " key},
    FP_PT_KINDS(FP_PT_KEY)
#undef FP_PT_KEY
};

static void pt_group(dev_groups *g, const uint64_t counts[FP_PT_NKINDS])
{
    for (int k = 0; k < FP_PT_NKINDS; k++)
        g->pt[k] = (fp_row){pt_keys[k][0], pt_keys[k][1], NULL, FP_ROW_COUNT, counts[k], 0};
    fp_report_group_set(g->g, FP_GROUP_PASSTHROUGH,
                        &(fp_group){.rows = g->pt, .nrows = FP_PT_NKINDS, .per_line = 0});
}

/* Deferred reuse: null where there is none (free_policy:sync). */
static void defer_group(dev_groups *g, const fp_defer_counts *c)
{
    size_t n = 0;
#define FP_DEFER_ROW(field, key, one, many)                                                        \
    g->defer[n++] = (fp_row){key, one, many, FP_ROW_COUNT, c ? c->field : 0, 0};
    FP_DEFER_COUNTS(FP_DEFER_ROW)
#undef FP_DEFER_ROW
    g->defer[n++] = (fp_row){
        "ctx_events", "context events", NULL, FP_ROW_FLAG, c ? (uint64_t)c->ctx_events : 0, 0};
    fp_group with = {.rows = c ? g->defer : NULL,
                     .nrows = n,
                     .per_line = 2,
                     .note = c && c->ctx_events ? "the device orders reuse (context events)"
                                                : "reuse synchronizes (no context events here)"};
    fp_report_group_set(g->g, FP_GROUP_DEFERRED, &with);
}

/* The threads' caches: null where the front end is off. */
static void front_group(dev_groups *g, const fp_front_counts *c)
{
    size_t n = 0;
#define FP_FRONT_ROW(field, key, one, many, kind)                                                  \
    g->front[n++] = (fp_row){key, one, many, FP_ROW_##kind, c ? c->field : 0, 0};
    FP_FRONT_COUNTS(FP_FRONT_ROW)
#undef FP_FRONT_ROW
    fp_report_group_set(g->g, FP_GROUP_THREADS,
                        &(fp_group){.rows = c ? g->front : NULL, .nrows = n, .per_line = 3});
}

/* Lending between processes: absent where the device never joined. */
static void lend_group(dev_groups *g, CUdevice dev)
{
    fp_lend_counts c;
    bool joined = fp_lend_counts_get(dev, &c);
    size_t n = 0;
#define FP_LEND_ROW(field, key, one, many, kind)                                                   \
    g->lend[n++] = (fp_row){key, one, many, kind, joined ? c.field : 0, 0};
    FP_LEND_COUNTS(FP_LEND_ROW)
#undef FP_LEND_ROW
    fp_report_group_set(g->g, FP_GROUP_LEND,
                        &(fp_group){.rows = joined ? g->lend : NULL,
                                    .nrows = n,
                                    .per_line = 4,
                                    .zero = ""}); /* alone on the GPU: no line */
}

static void ipc_group(dev_groups *g, const fp_ipc_counts *c)
{
    size_t n = 0;
#define FP_IPC_ROW(field, key, one, many)                                                          \
    g->ipc[n++] = (fp_row){key, one, many, FP_ROW_COUNT, c->field, 0};
    FP_IPC_COUNTS(FP_IPC_ROW)
#undef FP_IPC_ROW
    fp_report_group_set(g->g, FP_GROUP_IPC,
                        &(fp_group){.rows = g->ipc, .nrows = n, .per_line = 3, .zero = ""});
}

/* The groups of device i; process-wide counters ride on the first. */
static void shim_groups(collect *c, fp_ctx_pool *d, fp_dev_report *r)
{
    dev_groups *g = &c->groups[c->n];
    uint64_t pt[FP_PT_NKINDS] = {0};
    fp_ipc_counts ipc = {0};
    fp_defer_counts dc;
    if (c->n == 0) {
        fp_time_flush();
        r->alloc_ns = fp_ticks_to_ns(atomic_load(&fp_alloc_ticks));
        for (int k = 0; k < FP_PT_NKINDS; k++)
            pt[k] = atomic_load(&fp_passthrough[k]);
        fp_state_ipc_counts(&ipc);
    }
    bool deferred = fp_shim.conf.free_policy == FP_FREE_DEFERRED;
    if (deferred)
        fp_defer_counts_get(d->defer, &dc);
    fp_front_counts fc;
    bool front = deferred && fp_shim.conf.pool.thread_cache;
    if (front)
        fp_pool_front_counts(d->pool, &fc);
    fp_report_groups_init(r, g->g); /* every group null until filled */
    pt_group(g, pt);
    defer_group(g, deferred ? &dc : NULL);
    front_group(g, front ? &fc : NULL);
    ipc_group(g, &ipc);
    lend_group(g, d->dev);
}

static void add_pool(fp_ctx_pool *d, void *ud)
{
    collect *c = ud;
    if (c->n == FP_MAX_REPORTS)
        return;
    fp_dev_report *r = &c->devs[c->n];
    fp_pool_stats st;
    memset(r, 0, sizeof *r);
    r->running = c->running;
    r->device = d->dev;
    snprintf(c->names[c->n], sizeof c->names[c->n], "%s", d->name);
    r->device_name = c->names[c->n][0] ? c->names[c->n] : NULL;
    r->total_capacity = d->total;
    r->device_free = atomic_load(&d->free_seen); /* SIZE_MAX: unknown */
    r->segments_why = fp_segments_why(d->segments_asked, fp_pool_is_vmm(d->pool));
    fp_pool_get_stats(d->pool, &st);
    if (d->forked) { /* a forked child: what it did itself, not its parent */
        fp_pool_stats_since(&st, &d->at_fork);
        r->since_seq = d->at_fork.num_allocs;
    }
    fp_report_fill_pool(r, d->pool, &st, c->leaks[c->n]);
    for (size_t i = 0; i < r->nleaks; i++) { /* trace_stacks: who allocated them */
        c->stack[c->n][i][0] = '\0';
        fp_snap_stack_text(fp_pools_trace_id(d, c->leaks[c->n][i].seq), c->stack[c->n][i],
                           FP_STACK_TEXT);
        c->stacks[c->n][i] = c->stack[c->n][i];
    }
    r->leak_stacks = c->stacks[c->n];
    shim_groups(c, d, r);
    c->n++;
}

/* The SIGUSR1 dump n > 0 goes to PATH.n. */
static int dump_name(char *path, size_t len, unsigned dump, char *why, size_t whylen)
{
    size_t n = strlen(path);
    int m = snprintf(path + n, len - n, ".%u", dump);
    if (m < 0 || (size_t)m >= len - n) {
        path[n] = '\0';
        snprintf(why, whylen, "'%s.%u' is longer than %zu bytes", path, dump, len - 1);
        return ENAMETOOLONG;
    }
    return 0;
}

static char dest_path[FP_OUT_PATH_MAX]; /* under summary_lock */

/* dump 0: the exit summary; n > 0: the n-th SIGUSR1 dump.  -1: nothing to
 * write; 2: stderr (asked for, or instead of a file that failed, after
 * one line saying why); else the file's descriptor, named in dest_path. */
static int open_destination(int rank, const char *host, unsigned dump)
{
    const char *dest = fp_shim.conf.summary;
    if (strcmp(dest, "off") == 0 && !dump)
        return -1;
    if (strcmp(dest, "stderr") == 0 || strcmp(dest, "off") == 0)
        return 2;
    static char why[FP_OUT_PATH_MAX + 256];
    int fd = -1,
        err = fp_path_expand_as(dest, rank, host, dest_path, sizeof dest_path, why, sizeof why);
    if (!err && dump)
        err = dump_name(dest_path, sizeof dest_path, dump, why, sizeof why);
    if (!err)
        err = fp_path_claim("summary", dest, dest_path, sizeof dest_path, why, sizeof why);
    if (err) {
        fp_say("summary: %s; writing the summary on stderr instead", why);
        return 2;
    }
    if ((err = fp_file_create(dest_path, &fd, why, sizeof why)) != 0) {
        fp_say("summary: cannot write '%s': %s; writing the summary on stderr instead", dest_path,
               why);
        return 2;
    }
    fp_path_claimed("summary", dest, fd, dest_path);
    return fd;
}

/* Splits the stored config problems into lines for the report; *more
 * gets the problems that are not among them (no room to keep them). */
static size_t error_lines(const char **lines, size_t max, size_t *more)
{
    static char copy[sizeof fp_shim.conf_errors];
    memcpy(copy, fp_shim.conf_errors, sizeof copy);
    copy[sizeof copy - 1] = '\0';
    size_t n = 0;
    for (char *s = copy, *nl; *s && n < max; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl)
            break; /* a line cut short: not shown */
        *nl = '\0';
        lines[n++] = s;
    }
    *more = fp_shim.nconf_errors > n ? fp_shim.nconf_errors - n : 0;
    return n;
}

static int emit(const fp_run_report *r, int fd)
{
    fp_sink s = fp_sink_fd(fd);
    if (fp_shim.conf.summary_format == FP_SUMMARY_JSON)
        return fp_report_json(r, &s);
    return fp_report_text(r, &s);
}

/* A summary file that could not be written whole: one line, then the
 * summary on stderr. */
static void emit_to_file(const fp_run_report *r, int fd)
{
    int err = emit(r, fd);
    if (close(fd) != 0 && !err)
        err = errno;
    if (!err)
        return;
    fp_say("summary: writing '%s' failed: %s; writing the summary on stderr instead", dest_path,
           strerror(err));
    emit(r, 2);
}

static void write_summary(const char *mode, unsigned dump)
{
    static char host[256], conf[4096];
    static fp_kv entries[FP_CONF_MAX_OPTIONS];
    const char *errs[32];
    const char *notes[5];
    collect *c = &summary_data;
    c->n = 0;
    c->running = dump != 0;
    fp_pools_each(add_pool, c);
    gethostname(host, sizeof host - 1);
    size_t nconf = fp_conf_entries(&fp_shim.conf, entries, FP_CONF_MAX_OPTIONS, conf, sizeof conf);
    static unsigned char set[FP_CONF_MAX_OPTIONS];
    for (size_t i = 0; i < nconf; i++)
        set[i] = !fp_conf_is_default(&fp_shim.conf, i);
    static fp_host_report hr;
    bool pinned = fp_host_report_get(&hr);
    fp_run_report r = {.pid = (int)getpid(),
                       .rank = fp_path_rank(),
                       .host = host,
                       .config = entries,
                       .nconfig = nconf,
                       .config_set = set,
                       .config_errors = errs,
                       .mode = mode,
                       .config_source = fp_fw_conf_source(),
                       .notes = notes,
                       .nnotes = fp_fw_notes(notes, 4),
                       .devs = c->devs,
                       .ndevs = c->n,
                       .pinned = pinned ? &hr : NULL};
    r.nconfig_errors = error_lines(errs, 32, &r.config_errors_more);
    if (extra_note && !dump)
        notes[r.nnotes++] = extra_note;
    int fd = open_destination(r.rank, host, dump);
    if (fd == 2)
        emit(&r, 2);
    else if (fd >= 0)
        emit_to_file(&r, fd);
}

/* summary_data is shared by the exit summary and the SIGUSR1 dumps. */
static pthread_mutex_t summary_lock = PTHREAD_MUTEX_INITIALIZER;

/* At exit: summary_lock is tried until by (shim_exitlock.h); false when
 * it could not be had and nothing was written. */
bool fp_summary_write(const char *mode, const struct timespec *by)
{
    if (!fp_exit_lock(&summary_lock, by))
        return false;
    write_summary(mode, 0);
    pthread_mutex_unlock(&summary_lock);
    return true;
}

void fp_summary_dump(unsigned n)
{
    static char mode[64]; /* under summary_lock */
    pthread_mutex_lock(&summary_lock);
    snprintf(mode, sizeof mode, "%s, SIGUSR1 dump", fp_real_device_kind());
    if (!atomic_load(&fp_shim.exiting)) /* the exit summary is the last word */
        write_summary(mode, n);
    pthread_mutex_unlock(&summary_lock);
}

/* The text of the latest OOM, for fragpool_last_oom (under summary_lock). */
static char oom_text[8192];
static size_t oom_len;
static uint64_t oom_count;

void fp_summary_oom_say(const char *text, bool first)
{
    size_t n = strlen(text);
    fp_write_capped(2, text, n);
    pthread_mutex_lock(&summary_lock);
    if (first) {
        oom_count++;
        oom_len = 0;
    }
    size_t room = sizeof oom_text - 1 - oom_len;
    memcpy(oom_text + oom_len, text, n < room ? n : room);
    oom_len += n < room ? n : room;
    oom_text[oom_len] = '\0';
    pthread_mutex_unlock(&summary_lock);
}

uint64_t fp_summary_oom_text(char *buf, size_t len)
{
    pthread_mutex_lock(&summary_lock);
    uint64_t n = oom_count;
    if (buf && len)
        snprintf(buf, len, "%s", oom_text);
    pthread_mutex_unlock(&summary_lock);
    return n;
}

void fp_summary_oom(fp_ctx_pool *d, fp_oom_info *o, size_t *device_free)
{
    char text[2048];
    fp_pool_stats st;
    fp_pool_last_oom(d->pool, o);
    fp_pool_get_stats(d->pool, &st);
    size_t fr = (size_t)-1, tot = 0;
    if (fp_real.cuMemGetInfo_v2 && fp_real.cuMemGetInfo_v2(&fr, &tot) != CUDA_SUCCESS)
        fr = (size_t)-1;
    *device_free = fr;
    o->held_aside =
        d->vmm && fp_pages_kept(d->vmm) ? fp_pages_kept(d->vmm) * fp_pages_page(d->vmm) : 0;
    fp_sink s = fp_sink_buffer(text, sizeof text);
    fp_oom_message(o, &st, fp_pool_get_opts(d->pool), d->dev, d->total, fr, &s);
    if (o->held_aside) { /* the pool gave them back, the device has them still */
        fp_puts(&s, "fragpool: and ");
        fp_advise_put_mib(&s, o->held_aside);
        fp_puts(&s, " more of fragpool's: pages given back during the stream capture, which "
                    "stay mapped until the device has finished the work that used them (after "
                    "the capture)\n");
    }
    fp_summary_oom_say(text, true);
}

void fp_summary_oom_host(fp_sink *s)
{
    fp_host_report hr;
    if (fp_host_report_get(&hr)) /* pinned memory, when it is large */
        fp_report_host_oom_note(&hr, s);
}

/* Under summary_lock: a SIGUSR1 dump may be reading the notes. */
void fp_summary_note(const char *line)
{
    pthread_mutex_lock(&summary_lock);
    extra_note = line;
    pthread_mutex_unlock(&summary_lock);
}

void fp_summary_fork_prepare(void)
{
    pthread_mutex_lock(&summary_lock);
}

void fp_summary_fork_after(bool child)
{
    fp_mutex_fork_after(&summary_lock, child);
}
