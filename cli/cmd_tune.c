/* cmd_tune.c - `fragpool tune TRACE [--budget SIZE] [--json] [--threads N]
 * [--full] [--quiet]`: ranks pool settings by the peak reserved memory they give on
 * the trace, each with the smallest device budget it runs in without an
 * OOM (the search is fp_tune.c; docs/replay.md explains the output).
 *
 * stdout is deterministic (the same trace gives the same bytes); the time
 * taken goes to stderr.  Exit status 1 when stdout cannot be written.
 */
#include "cli.h"
#include "fp_report.h"
#include "fp_advise.h"
#include "fp_tune.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct tune_args {
    const char *trace;
    size_t budget; /* 0 = none given */
    int json, full, quiet;
    unsigned threads;
} tune_args;

static int parse_args(int argc, char **argv, tune_args *a)
{
    const fp_cli_spec *s = &fp_cli_tune;
    const char *val[FP_CLI_MAX_OPTS], *budget, *threads;
    memset(a, 0, sizeof *a);
    if (fp_cli_parse(s, argc, argv, val, &a->trace))
        return 2;
    a->json = fp_cli_value(s, val, "--json") != NULL;
    a->full = fp_cli_value(s, val, "--full") != NULL;
    a->quiet = fp_cli_value(s, val, "--quiet") != NULL;
    budget = fp_cli_value(s, val, "--budget");
    if (budget && fp_parse_budget("tune", budget, &a->budget))
        return 2;
    threads = fp_cli_value(s, val, "--threads");
    uint64_t v = 0;
    if (threads && fp_parse_count(threads, 64, &v)) {
        fprintf(stderr, "fragpool tune: bad --threads '%s' (want 0..64)\n", threads);
        return 2;
    }
    a->threads = (unsigned)v;
    return 0;
}

/* The setting as the user must write it.  A GC row was searched with the
 * budget as its cap ("per_process_memory_fraction:1" of a device of the
 * budget's size); on a real device, shared with other processes, that cap
 * is max_reserved_mb of the budget found, never a fraction of the device. */
static const char *label(const fp_tune_row *r)
{
    static const char cap[] = "per_process_memory_fraction:1";
    static char buf[FP_TUNE_CONF_MAX + 32];
    const char *at = r->set.gc ? strstr(r->set.conf, cap) : NULL;
    if (r->is_default)
        return "(defaults)";
    if (!at || !r->min_budget)
        return r->set.conf;
    snprintf(buf, sizeof buf, "%.*smax_reserved_mb:%zu%s", (int)(at - r->set.conf), r->set.conf,
             r->min_budget / FP_MIB, at + sizeof cap - 1);
    return buf;
}

/* bytes in MiB as budgets are written (docs/replay.md, "Units"): with
 * thousands separators, whole (rounded up), or with tenths one decimal
 * ("4,591.7 MiB"). */
static const char *mib_text(size_t bytes, int tenths, char out[40])
{
    uint64_t t = ((uint64_t)bytes * 10 + FP_MIB / 2) / FP_MIB; /* tenths of a MiB */
    char whole[32];
    fp_sink s = fp_sink_buffer(whole, sizeof whole);
    fp_advise_put_mib(&s, tenths ? (size_t)(t / 10) * FP_MIB : bytes); /* "4,591 MiB" */
    if (!tenths)
        snprintf(out, 40, "%s", whole);
    else
        snprintf(out, 40, "%.*s.%u MiB", (int)strcspn(whole, " "), whole, (unsigned)(t % 10));
    return out;
}

/* 1 - allocated/reserved, in tenths of a percent. */
static unsigned frag_permille(const fp_tune_row *r)
{
    if (!r->peak_reserved)
        return 0;
    return (unsigned)(1000 - (r->peak_allocated * 1000 + r->peak_reserved / 2) / r->peak_reserved);
}

static void print_text(const tune_args *a, const fp_trace *t, const fp_tune_row *rows, size_t n,
                       const fp_advice *v)
{
    printf("fragpool tune: %s, %zu events, %zu settings, budget step 2 MiB\n\n", a->trace, t->n, n);
    printf("rank  peak reserved  peak allocated   frag  min budget%s  setting\n",
           a->budget ? "  fits" : "");
    size_t nfit = 0;
    for (size_t i = 0; i < n; i++) {
        const fp_tune_row *r = &rows[i];
        unsigned f = frag_permille(r);
        char mb[40] = "none", res[40], alloc[40];
        if (r->min_budget)
            mib_text(r->min_budget, 0, mb);
        int fits = r->fits == 1;
        nfit += fits;
        printf("%4zu %c %13s  %14s  %3u.%u%%  %10s%s  %s\n", i + 1, r->is_default ? '*' : ' ',
               mib_text(r->peak_reserved, 0, res), mib_text(r->peak_allocated, 1, alloc), f / 10,
               f % 10, mb, a->budget ? (fits ? "   yes" : "    no") : "", label(r));
    }
    printf("\n* fragpool's defaults: virtual-memory segments (expandable_segments:False\n"
           "  rows: PyTorch's classic segments).  min budget: the smallest device size\n"
           "  (a multiple of 2 MiB) found to replay the trace without an OOM; 2 MiB less\n"
           "  OOMs.\n"
           "  garbage_collection_threshold acts only under a cap: its rows name the cap\n"
           "  as max_reserved_mb, the memory this process may reserve, not as a\n"
           "  fraction of the device (which other processes may share).\n");
    if (a->budget) {
        char b[40];
        printf("\nbudget %s: %zu of %zu settings run without an OOM\n", mib_text(a->budget, 0, b),
               nfit, n);
    }
    /* the verdict last: one line, then the lines to paste (docs/advice.md) */
    fflush(stdout);
    fp_sink s = fp_sink_fd(1);
    fp_putc(&s, '\n');
    fp_advise_put(&s, v, "verdict: ", "this trace");
    fp_advise_put_paste(&s, v);
    fp_sink_flush(&s);
}

static const char *const verdict_kinds[] = {"fix",    "raise_cap", "none_fits", "current_fits",
                                            "leaner", "keep",      "all_oom"};

static void json_verdict(fp_json *j, const fp_advice *v)
{
    fp_json_obj(j, "verdict");
    fp_json_str(j, "kind", verdict_kinds[v->kind]);
    if (v->kind == FP_ADVICE_FIX || v->kind == FP_ADVICE_RAISE_CAP || v->kind == FP_ADVICE_BEST)
        fp_json_str(j, "fragpool_conf", v->conf);
    else
        fp_json_null(j, "fragpool_conf");
    if (v->torch[0])
        fp_json_str(j, "pytorch_cuda_alloc_conf", v->torch);
    else
        fp_json_null(j, "pytorch_cuda_alloc_conf");
    fp_json_u64(j, "need", v->need);
    fp_json_u64(j, "current_need", v->current_need);
    fp_json_u64(j, "peak_live", v->peak_live);
    if (v->too_large) {
        fp_json_u64(j, "too_large_request", v->too_large);
        fp_json_u64(j, "too_large_event", v->too_large_at);
    } else {
        fp_json_null(j, "too_large_request");
        fp_json_null(j, "too_large_event");
    }
    fp_json_end_obj(j);
}

/* 0, or the sink's error. */
static int print_json(const tune_args *a, const fp_trace *t, const fp_tune_row *rows, size_t n,
                      const fp_advice *v)
{
    fp_sink s = fp_sink_fd(1);
    fp_json j;
    fp_json_init(&j, &s);
    fp_json_obj(&j, NULL);
    fp_json_str(&j, "trace", a->trace);
    fp_json_u64(&j, "events", t->n);
    fp_json_u64(&j, "granularity", 2 * FP_MIB);
    if (a->budget)
        fp_json_u64(&j, "budget", a->budget);
    else
        fp_json_null(&j, "budget");
    fp_json_arr(&j, "settings");
    for (size_t i = 0; i < n; i++) {
        const fp_tune_row *r = &rows[i];
        fp_json_obj(&j, NULL);
        fp_json_u64(&j, "rank", i + 1);
        fp_json_str(&j, "conf", r->is_default ? "" : label(r));
        fp_json_u64(&j, "default", (uint64_t)r->is_default);
        fp_json_u64(&j, "gc", (uint64_t)r->set.gc);
        fp_json_u64(&j, "peak_reserved", r->peak_reserved);
        fp_json_u64(&j, "peak_allocated", r->peak_allocated);
        fp_json_fixed(&j, "fragmentation", r->peak_reserved - r->peak_allocated, r->peak_reserved,
                      4);
        if (r->min_budget)
            fp_json_u64(&j, "min_budget", r->min_budget);
        else
            fp_json_null(&j, "min_budget");
        if (a->budget)
            fp_json_u64(&j, "fits", r->fits == 1);
        fp_json_u64(&j, "replays", r->replays);
        fp_json_end_obj(&j);
    }
    fp_json_end_arr(&j);
    json_verdict(&j, v);
    fp_json_end_obj(&j);
    fp_putc(&s, '\n');
    return fp_sink_flush(&s);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* fp_tune_params.progress: settings done, of those known so far (the
 * garbage-collection variants are added once the first stage is done). */
static void say_progress(void *ud, size_t done, size_t total)
{
    fp_progress_say(ud, "%zu of %zu settings evaluated", done, total);
}

int fp_cmd_tune(int argc, char **argv)
{
    tune_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    fp_cli_env_inert();
    fp_trace t;
    char err[512];
    if (fp_trace_load(a.trace, &t, err, sizeof err)) {
        fprintf(stderr, "fragpool tune: %s\n", err);
        return 1;
    }
    double t0 = now_s();
    fp_progress pr;
    fp_progress_init(&pr, "tune", a.quiet);
    fp_tune_params p = {.threads = a.threads,
                        .full = a.full,
                        .at_budget = a.budget,
                        .progress = say_progress,
                        .progress_ud = &pr};
    fp_tune_row *rows;
    size_t n;
    int failed = fp_tune_run(&t, &p, &rows, &n);
    fp_progress_done(&pr);
    if (failed) {
        fprintf(stderr, "fragpool tune: out of host memory\n");
        fp_trace_free(&t);
        return 1;
    }
    double secs = now_s() - t0;
    size_t replays = 0;
    for (size_t i = 0; i < n; i++)
        replays += rows[i].shared ? 0 : rows[i].replays; /* replays made */
    fp_advice v;
    fp_advice_req req = {.budget = a.budget, .threads = a.threads};
    if (fp_advise_rows(&t, rows, n, &req, &v)) {
        fprintf(stderr, "fragpool tune: out of host memory\n");
        free(rows);
        fp_trace_free(&t);
        return 1;
    }
    int out_err = 0;
    if (a.json)
        out_err = print_json(&a, &t, rows, n, &v);
    else
        print_text(&a, &t, rows, n, &v);
    rc = fp_cli_output_done("tune", out_err);
    if (!a.quiet)
        fprintf(stderr, "fragpool tune: %zu settings, %zu replays of %zu events in %.2f s\n", n,
                replays, t.n, secs);
    free(rows);
    fp_trace_free(&t);
    return rc;
}
