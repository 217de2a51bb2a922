/* cmd_report.c - `fragpool report TRACE|SUMMARY.json -o OUT.html [--conf
 * K:V,...] [--budget SIZE] [--at reserved|allocated|end|N]`: one
 * self-contained HTML page (report_html.c) of a replayed trace or of a
 * JSON summary written by the shim.
 *
 * A trace is replayed twice through the pool.  The first pass samples
 * allocated and reserved after every event into at most FP_REPORT_POINTS
 * points (each the highest value of its events, so no peak falls between
 * samples) and finds the moments of peak reserved and peak allocated.  The
 * second pass stops right after the chosen event and walks the pool: that
 * is the segment map.  Default: peak reserved.  Reserved often stays at its
 * peak for a long time, so of those events the one with the most allocated
 * is taken: the fullest picture of the memory the run could not do without.
 *
 * The page is made in memory and written as snapshot -o writes its pickle
 * (fp_file_create, writes that never raise SIGXFSZ): a write that fails
 * leaves no partial page, only one line and exit 1 (docs/files.md).
 */
#include "cli.h"
#include "fp_vec.h"
#include "fp_report.h"
#include "fp_jread.h"
#include "fp_merge.h"
#include "fp_advise.h"
#include "fp_emit.h"
#include "fp_trace.h"
#include "report_html.h"
#include "fp_file.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define FP_REPORT_POINTS 2000

typedef struct report_args {
    const char *input, *out, *conf, *at;
    size_t budget;
    int quiet;
    fp_progress *pr; /* the progress line */
} report_args;

static int parse_args(int argc, char **argv, report_args *a)
{
    const fp_cli_spec *s = &fp_cli_report;
    const char *val[FP_CLI_MAX_OPTS], *budget;
    memset(a, 0, sizeof *a);
    if (fp_cli_parse(s, argc, argv, val, &a->input))
        return 2;
    a->out = fp_cli_value(s, val, "-o");
    a->conf = fp_cli_value(s, val, "--conf");
    a->at = fp_cli_value(s, val, "--at");
    a->at = a->at ? a->at : "reserved";
    a->quiet = fp_cli_value(s, val, "--quiet") != NULL;
    budget = fp_cli_value(s, val, "--budget");
    return budget && fp_parse_budget("report", budget, &a->budget) ? 2 : 0;
}

/* ---- reading the input ------------------------------------------------------ */

/* The input through zlib (gzip or plain), after fp_file_open_read: a
 * regular file, opened without blocking.  0, or an errno with why. */
static int open_input(const char *path, gzFile *f, char *why, size_t len)
{
    int fd, err = fp_file_open_read(path, &fd, why, len);
    if (err)
        return err;
    *f = gzdopen(fd, "rb");
    if (!*f) {
        close(fd);
        snprintf(why, len, "out of memory");
        return ENOMEM;
    }
    return 0;
}

/* gzread for fp_read_all (a plain file reads as it is), counting bytes. */
typedef struct gz_source {
    gzFile f;
    size_t n;
} gz_source;

static long read_gz(void *ctx, char *buf, size_t n)
{
    gz_source *src = ctx;
    int got = gzread(src->f, buf, n > (1u << 30) ? 1u << 30 : (unsigned)n);
    if (got > 0)
        src->n += (size_t)got;
    return got < 0 ? -1 : (long)got;
}

/* The whole file (gzip or plain) in a NUL-terminated malloc'd buffer; a
 * read or gzip error is an error, never a shorter text. */
static int slurp(const char *path, char **out, size_t *len, char *why, size_t whylen)
{
    gzFile f;
    int err = open_input(path, &f, why, whylen);
    if (err)
        return err;
    gz_source src = {f, 0};
    err = fp_read_all(read_gz, &src, out, len);
    int zerr = Z_OK;
    const char *msg = gzerror(f, &zerr);
    if (err == EIO)
        snprintf(why, whylen, "read error after %zu bytes: %s", src.n,
                 zerr == Z_ERRNO ? strerror(errno) : msg);
    else if (err)
        snprintf(why, whylen, "out of memory");
    gzclose(f);
    return err;
}

/* 1 when the file's first non-blank byte is '{' (a JSON summary); files
 * that cannot be read go to the trace loader, which says why. */
static int looks_like_json(const char *path)
{
    char why[128];
    gzFile f;
    if (open_input(path, &f, why, sizeof why))
        return 0;
    int c;
    while ((c = gzgetc(f)) == ' ' || c == '\t' || c == '\r' || c == '\n')
        ;
    gzclose(f);
    return c == '{';
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---- the summaries, rendered into buffers ------------------------------------ */

static int render_json(const void *run, fp_sink *s)
{
    return fp_report_json(run, s);
}

static int render_text(const void *run, fp_sink *s)
{
    return fp_report_text(run, s);
}

typedef struct summaries {
    char *json, *text;
    size_t json_len, text_len;
} summaries;

/* The same summary `fragpool replay` prints, as JSON and as text. */
static int make_summaries(fp_pool *p, const fp_replay_result *r, const fp_conf *c, size_t budget,
                          summaries *out)
{
    static fp_replay_report rep;
    fp_cli_replay_report(p, r, c, budget, &rep);
    const fp_run_report run = rep.run;
    memset(out, 0, sizeof *out);
    int err = fp_render_alloc(render_json, &run, 1 << 14, &out->json, &out->json_len);
    if (!err)
        err = fp_render_alloc(render_text, &run, 1 << 14, &out->text, &out->text_len);
    return err;
}

/* ---- pass 1: timeline and peaks ---------------------------------------------- */

typedef struct timeline {
    size_t step, npoints;
    uint64_t *amax, *rmax;  /* per point: highest allocated / reserved   */
    int64_t peak_r, peak_a; /* highest seen so far                        */
    int64_t a_at_r;         /* most allocated while reserved was at peak_r */
    size_t at_r, at_a;      /* events replayed at those two moments        */
    fp_progress *pr;        /* the progress line, and the trace's events   */
    size_t n;
} timeline;

static int on_event(void *ud, fp_pool *p, size_t i, int refused)
{
    timeline *t = ud;
    (void)refused;
    /* reserved and allocated now, without fp_pool_get_stats: that also
     * finds the largest free block (a walk of the free blocks and, with
     * virtual memory, their pages), which made this hook most of a
     * report's time on a long trace */
    size_t res = fp_pool_reserved_bytes(p);
    int64_t r = (int64_t)res, a = (int64_t)(res - fp_pool_idle_bytes(p));
    size_t k = i / t->step;
    if ((uint64_t)a > t->amax[k])
        t->amax[k] = (uint64_t)a;
    if ((uint64_t)r > t->rmax[k])
        t->rmax[k] = (uint64_t)r;
    if (r > t->peak_r || (r == t->peak_r && a > t->a_at_r))
        t->peak_r = r, t->a_at_r = a, t->at_r = i + 1;
    if (a > t->peak_a)
        t->peak_a = a, t->at_a = i + 1;
    if (i % 65536 == 0)
        fp_progress_say(t->pr, "replaying, %zu of %zu events", i, t->n);
    return 0;
}

static int timeline_init(timeline *t, size_t n)
{
    memset(t, 0, sizeof *t);
    t->step = n / FP_REPORT_POINTS + (n % FP_REPORT_POINTS != 0);
    t->step = t->step ? t->step : 1;
    t->npoints = (n + t->step - 1) / t->step;
    t->amax = calloc(t->npoints + 1, sizeof *t->amax);
    t->rmax = calloc(t->npoints + 1, sizeof *t->rmax);
    return t->amax && t->rmax ? 0 : ENOMEM;
}

/* ---- pass 2: the segment map ------------------------------------------------- */

typedef struct segmap {
    fp_html_segment *segs;
    fp_html_block *blocks;
    size_t nsegs, capsegs, nblocks, capblocks;
    fp_html_range *ranges; /* virtual-memory segments: their pages */
    fp_html_run *runs;
    size_t nranges, capranges, nruns, capruns;
    int err;
} segmap;

/* fp_vec_grow for the arrays of a segmap: 0 or ENOMEM. */
static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    void *nv = fp_vec_grow(*v, cap, need, elem, 256);
    if (!nv)
        return ENOMEM;
    *v = nv;
    return 0;
}

static void on_segment(void *ud, uint64_t addr, size_t size, int small, const fp_block_info *b,
                       size_t n)
{
    segmap *m = ud;
    if (m->err || (m->err = grow((void **)&m->segs, &m->capsegs, m->nsegs + 1, sizeof *m->segs)) ||
        (m->err = grow((void **)&m->blocks, &m->capblocks, m->nblocks + n, sizeof *m->blocks)))
        return;
    m->segs[m->nsegs++] = (fp_html_segment){addr, size, small, m->nblocks, n};
    for (size_t i = 0; i < n; i++)
        m->blocks[m->nblocks++] = (fp_html_block){b[i].size, b[i].requested, b[i].state};
}

static void on_page_run(void *ud, const fp_page_run *r)
{
    segmap *m = ud;
    int fresh = !m->nranges || m->ranges[m->nranges - 1].addr != r->range;
    if (m->err ||
        (fresh &&
         (m->err = grow((void **)&m->ranges, &m->capranges, m->nranges + 1, sizeof *m->ranges))) ||
        (m->err = grow((void **)&m->runs, &m->capruns, m->nruns + 1, sizeof *m->runs)))
        return;
    if (fresh)
        m->ranges[m->nranges++] = (fp_html_range){r->range, r->range_size, r->small, m->nruns, 0};
    m->runs[m->nruns++] = (fp_html_run){r->size, r->mapped};
    m->ranges[m->nranges - 1].n++;
}

static int stop_at(void *ud, fp_pool *p, size_t i, int refused)
{
    (void)p, (void)refused;
    return i + 1 >= *(const size_t *)ud;
}

static int snapshot(const fp_trace *t, const fp_conf *c, size_t budget, size_t events, segmap *m)
{
    fp_replay_hook h = {.after_event = stop_at, .ud = &events};
    fp_replay_result r;
    fp_pool *p;
    memset(m, 0, sizeof *m);
    if (!events) /* before the first event: no segment yet */
        return 0;
    int err = fp_replay_ex(t, &c->pool, budget, &h, &r, &p);
    if (err)
        return err;
    fp_pool_walk(p, on_segment, m);
    fp_pool_walk_pages(p, on_page_run, m);
    fp_pool_destroy(p, 1);
    return m->err;
}

/* "reserved", "allocated", "end" or an event count -> events to replay. */
static int pick_event(const char *at, const timeline *tl, size_t n, size_t *ev, const char **what)
{
    uint64_t v;
    if (!strcmp(at, "reserved"))
        *ev = tl->at_r, *what = "peak reserved";
    else if (!strcmp(at, "allocated"))
        *ev = tl->at_a, *what = "peak allocated";
    else if (!strcmp(at, "end"))
        *ev = n, *what = "the end";
    else if (!fp_parse_count(at, n, &v))
        *ev = (size_t)v, *what = "the chosen event";
    else
        return EINVAL;
    return 0;
}

/* Requests by power of two.  A bin's bytes saturate at 2^64 - 1 (two
 * requests of 2^63 bytes): its lowest bin is returned, else -1. */
static int histogram(const fp_trace *t, uint64_t *count, uint64_t *bytes)
{
    int over = -1;
    memset(count, 0, FP_HIST_BINS * sizeof *count);
    memset(bytes, 0, FP_HIST_BINS * sizeof *bytes);
    for (size_t i = 0; i < t->n; i++) {
        if (t->ev[i].op != 'a')
            continue;
        uint64_t s = t->ev[i].size;
        unsigned k = s ? 63u - (unsigned)__builtin_clzll(s) : 0;
        count[k]++;
        if (bytes[k] > UINT64_MAX - s && (over < 0 || (int)k < over))
            over = (int)k;
        bytes[k] = bytes[k] > UINT64_MAX - s ? UINT64_MAX : bytes[k] + s;
    }
    return over;
}

/* ---- the two kinds of input ---------------------------------------------------- */

/* The page rendered in memory, then written as snapshot -o writes:
 * fp_file_create (no symlink followed, no other user's file) and an fd
 * sink, whose writes never raise SIGXFSZ (past RLIMIT_FSIZE: EFBIG).  A
 * write that fails removes the partial page.  0, or 1 after one line. */
static int write_page(const char *out, const fp_html_page *pg)
{
    char *buf = NULL, why[256];
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    int err = mem ? fp_html_write(mem, pg) : ENOMEM, fd;
    if (mem && fclose(mem) && !err)
        err = ENOMEM;
    if (err) {
        fprintf(stderr, "fragpool report: writing '%s': %s\n", out, strerror(err));
        free(buf);
        return 1;
    }
    if ((err = fp_file_create(out, &fd, why, sizeof why))) {
        fprintf(stderr, "fragpool report: cannot write '%s': %s\n", out, why);
        free(buf);
        return 1;
    }
    static fp_sink sink; /* 64 KiB: not on the stack */
    sink = fp_sink_fd(fd);
    fp_put(&sink, buf, len);
    err = fp_sink_flush(&sink);
    if (close(fd) != 0 && !err)
        err = errno;
    free(buf);
    if (err) {
        unlink(out);
        fprintf(stderr, "fragpool report: writing '%s': %s; the partial page is removed\n", out,
                strerror(err));
        return 1;
    }
    return 0;
}

typedef struct trace_report {
    timeline tl;
    segmap map;
    summaries sum;
    uint64_t count[FP_HIST_BINS], bytes[FP_HIST_BINS];
    char subtitle[512];
    char finding[2048];
} trace_report;

/* The page's lead: fragmentation at peak, the OOMs under a budget, and the
 * verdict `fragpool tune` gives on the same trace and budget, with the
 * lines to paste. */
static void make_finding(const fp_trace *t, const fp_conf *c, size_t budget,
                         const fp_replay_result *r, char *out, size_t n)
{
    fp_sink s = fp_sink_buffer(out, n);
    int64_t res = r->stats.reserved_bytes[FP_ALL].peak, al = r->stats.allocated_bytes[FP_ALL].peak;
    char a[32], b[32], line[160];
    fp_format_size((size_t)res, a);
    fp_format_size((size_t)al, b);
    snprintf(line, sizeof line,
             "Fragmentation at peak: %.1f%% (peak reserved %s for peak "
             "allocated %s).",
             res > 0 ? 100.0 * (1.0 - (double)al / (double)res) : 0.0, a, b);
    fp_puts(&s, line);
    if (budget) {
        fp_format_size(budget, a);
        snprintf(line, sizeof line, " %zu allocation%s failed in a budget of %s.", r->ooms,
                 r->ooms == 1 ? "" : "s", a);
        fp_puts(&s, line);
    }
    fp_putc(&s, '\n');
    fp_advice v;
    fp_advice_req req = {.budget = budget, .current = c};
    if (fp_advise(t, &req, &v)) {
        fp_puts(&s, "verdict: none proven \xe2\x80\x94 out of host memory for the replays\n");
        return;
    }
    fp_advise_put(&s, &v, "verdict: ", "this trace");
    fp_advise_put_paste(&s, &v);
}

static int collect(const report_args *a, const fp_trace *t, const fp_conf *c, trace_report *rp,
                   fp_html_page *pg)
{
    int err = timeline_init(&rp->tl, t->n);
    rp->tl.pr = a->pr;
    rp->tl.n = t->n;
    fp_replay_hook h = {.after_event = on_event, .ud = &rp->tl};
    fp_replay_result r;
    fp_pool *p;
    if (err || (err = fp_replay_ex(t, &c->pool, a->budget, &h, &r, &p)))
        return err;
    err = make_summaries(p, &r, c, a->budget, &rp->sum);
    fp_pool_destroy(p, 1);
    fp_progress_say(a->pr, "the verdict: replaying the settings tune ranks");
    if (!err)
        make_finding(t, c, a->budget, &r, rp->finding, sizeof rp->finding);
    fp_progress_say(a->pr, "the segment map");
    size_t ev;
    const char *what;
    if (pick_event(a->at, &rp->tl, t->n, &ev, &what)) {
        fprintf(stderr,
                "fragpool report: bad --at '%s' (want reserved, allocated, end or an "
                "event count up to %zu)\n",
                a->at, t->n);
        return EINVAL;
    }
    if (!err)
        err = snapshot(t, c, a->budget, ev, &rp->map);
    int over = histogram(t, rp->count, rp->bytes);
    if (over >= 0)
        fprintf(stderr,
                "fragpool report: the requests of 2^%d to 2^%d - 1 bytes add up past "
                "2^64 - 1 bytes; the size histogram shows 2^64 - 1 bytes for them\n",
                over, over + 1);
    char budget[32] = "unlimited";
    if (a->budget)
        fp_format_size(a->budget, budget);
    const char *env = getenv("FRAGPOOL_CONF");
    int has_env = env && *env, has_conf = a->conf && *a->conf;
    snprintf(rp->subtitle, sizeof rp->subtitle,
             "%zu events replayed through fragpool's pool on a simulated device; config: "
             "%s%s%s%s%s; device budget: %s; %zu OOM%s",
             t->n, has_env ? "FRAGPOOL_CONF=" : "", has_env ? env : "",
             has_env && has_conf ? " then " : "", has_conf ? a->conf : "",
             has_env || has_conf ? "" : "fragpool's defaults", budget, r.ooms,
             r.ooms == 1 ? "" : "s");
    *pg = (fp_html_page){.title = base_name(a->input),
                         .subtitle = rp->subtitle,
                         .finding = rp->finding,
                         .events = t->n,
                         .budget = a->budget,
                         .step = rp->tl.step,
                         .npoints = rp->tl.npoints,
                         .allocated_max = rp->tl.amax,
                         .reserved_max = rp->tl.rmax,
                         .snapshot_what = what,
                         .snapshot_event = ev,
                         .segs = rp->map.segs,
                         .nsegs = rp->map.nsegs,
                         .blocks = rp->map.blocks,
                         .ranges = rp->map.ranges,
                         .nranges = rp->map.nranges,
                         .runs = rp->map.runs,
                         .hist_count = rp->count,
                         .hist_bytes = rp->bytes,
                         .summary_json = rp->sum.json,
                         .summary_json_len = rp->sum.json_len,
                         .summary_text = rp->sum.text,
                         .summary_text_len = rp->sum.text_len};
    return err;
}

static void trace_report_free(trace_report *rp)
{
    free(rp->tl.amax);
    free(rp->tl.rmax);
    free(rp->map.segs);
    free(rp->map.blocks);
    free(rp->map.ranges);
    free(rp->map.runs);
    free(rp->sum.json);
    free(rp->sum.text);
}

static int report_trace(const report_args *a)
{
    fp_conf c;
    fp_cli_conf(a->conf, &c);
    fp_trace t;
    char err[512];
    if (fp_trace_load(a->input, &t, err, sizeof err)) {
        fprintf(stderr, "fragpool report: %s\n", err);
        return 1;
    }
    fp_cli_trace_threads(&c, &t);
    trace_report *rp = calloc(1, sizeof *rp);
    fp_html_page pg;
    fp_progress pr;
    report_args with = *a;
    fp_progress_init(&pr, "report", a->quiet);
    with.pr = &pr;
    int rc = !rp ? ENOMEM : collect(&with, &t, &c, rp, &pg);
    fp_progress_done(&pr);
    if (rc && rc != EINVAL)
        fprintf(stderr, "fragpool report: out of host memory\n");
    if (!rc && !(rc = write_page(a->out, &pg)))
        printf("fragpool report: wrote %s: %zu timeline points, %zu segments at %s (after "
               "event %zu of %zu)\n",
               a->out, pg.npoints, pg.nsegs, pg.snapshot_what, pg.snapshot_event, t.n);
    if (!rc)
        rc = fp_cli_output_done("report", 0);
    if (rp)
        trace_report_free(rp);
    free(rp);
    fp_trace_free(&t);
    return rc ? 1 : 0;
}

/* A JSON summary: checked to be one by the checks `fragpool merge` makes
 * (fp_merge_check: the same files are taken or refused by both), then
 * embedded. */
static int report_summary(const report_args *a)
{
    char *text, why[512];
    size_t len, errpos = 0;
    int err = slurp(a->input, &text, &len, why, sizeof why);
    if (err) {
        fprintf(stderr, "fragpool report: cannot read '%s': %s\n", a->input, why);
        return 1;
    }
    size_t cap = len / 2 + 16;
    fp_jtok *tok = malloc(cap * sizeof *tok);
    fp_jdoc d;
    err = tok ? fp_jdoc_parse(&d, text, len, tok, cap, &errpos) : ENOMEM;
    if (err == EINVAL)
        fprintf(stderr, "fragpool report: %s: invalid JSON at byte %zu\n", a->input, errpos);
    else if (err)
        fprintf(stderr, "fragpool report: %s: out of memory\n", a->input);
    else if ((err = fp_merge_check(&d, a->input, why, sizeof why)) != 0)
        fprintf(stderr, "fragpool report: %s\n", why);
    int rc = err ? 1 : 0;
    if (!err) {
        fp_html_page pg = {.title = base_name(a->input),
                           .subtitle = "a JSON summary (docs/summary.md); replay a trace for "
                                       "the timeline and the segment map",
                           .summary_json = text,
                           .summary_json_len = len};
        rc = write_page(a->out, &pg);
        if (!rc)
            printf("fragpool report: wrote %s from the summary %s\n", a->out, a->input);
        rc = rc ? rc : fp_cli_output_done("report", 0);
    }
    free(tok);
    free(text);
    return rc;
}

int fp_cmd_report(int argc, char **argv)
{
    report_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    return looks_like_json(a.input) ? report_summary(&a) : report_trace(&a);
}
