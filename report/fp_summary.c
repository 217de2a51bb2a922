/* fp_summary.c - the memory summary: a text table in the layout of
 * torch.cuda.memory_summary() plus the lines PyTorch's summary lacks, and
 * the same numbers as one JSON document (docs/summary.md).
 *
 * Invariants:
 *  - text and JSON walk the same lists: the fp_stat table (fp_metrics) and
 *    the rows of the metric list (the pool's, FP_POOL_COUNTS_*, and the
 *    caller's groups), so every counter printed in one appears in the
 *    other under a fixed name;
 *  - every text line is one line of a 75-column box, "|...|": long values
 *    wrap, control characters in user text are escaped;
 *  - no allocation: lines are built in fixed buffers on the stack.
 */
#include "fp_report.h"

#include "fp_assert.h"
#include <stddef.h>
#include <string.h>

/* ---- the metric table --------------------------------------------------------- */

typedef struct fp_metric {
    const char *label; /* row name in torch.cuda.memory_summary()      */
    const char *key;   /* member name in the JSON                       */
    size_t off;        /* offsetof the fp_stat (array) in fp_pool_stats */
    int count;         /* 1: a count, 0: bytes                          */
} fp_metric;

#define FP_M(label, key, field, count)                                                             \
    {                                                                                              \
        label, key, offsetof(fp_pool_stats, field), count                                          \
    }

static const fp_metric fp_metrics[] = {
    FP_M("Allocated memory", "allocated", allocated_bytes, 0),
    FP_M("Active memory", "active", active_bytes, 0),
    FP_M("Requested memory", "requested", requested_bytes, 0),
    FP_M("GPU reserved memory", "reserved", reserved_bytes, 0),
    FP_M("Non-releasable memory", "non_releasable", inactive_split_bytes, 0),
    FP_M("Allocations", "allocations", allocations, 1),
    FP_M("Active allocs", "active_allocs", active, 1),
    FP_M("GPU reserved segments", "segments", segments, 1),
    FP_M("Non-releasable allocs", "non_releasable_allocs", inactive_split, 1),
};

/* Single fp_stat fields: no per-pool split. */
static const fp_metric fp_oversize[] = {
    FP_M("Oversize allocations", "oversize_allocations", oversize_allocations, 1),
    FP_M("Oversize GPU segments", "oversize_segments", oversize_segments, 1),
};

#define FP_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const fp_stat *fp_metric_stat(const fp_pool_stats *st, const fp_metric *m, int kind)
{
    return (const fp_stat *)(const void *)((const char *)st + m->off) + kind;
}

/* 1 - peak allocated / peak reserved, as num/den; den 0 when nothing was
 * reserved. */
static void fp_frag(const fp_pool_stats *st, uint64_t *num, uint64_t *den)
{
    int64_t a = st->allocated_bytes[FP_ALL].peak;
    int64_t r = st->reserved_bytes[FP_ALL].peak;
    *den = r > 0 ? (uint64_t)r : 0;
    *num = r > a && a >= 0 ? (uint64_t)(r - a) : 0;
}

/* The pool's counters: X(json key, text for one, text for many, kind,
 * field of fp_pool_stats).  fragmentation, a ratio, is computed between
 * largest_free_block_at_peak and cache_hits (the JSON's order). */
#define FP_POOL_COUNTS_A(X)                                                                        \
    X("oom_count", " OOM", " OOMs", FP_ROW_COUNT, num_ooms)                                        \
    X("alloc_retries", " alloc retry", " alloc retries", FP_ROW_COUNT, num_alloc_retries)          \
    X("largest_free_block", " largest free block", NULL, FP_ROW_BYTES, largest_free)               \
    X("largest_free_block_at_peak", " largest free block at peak", NULL, FP_ROW_BYTES,             \
      largest_free_at_peak)
#define FP_POOL_COUNTS_B(X)                                                                        \
    X("cache_hits", " cache hit", " cache hits", FP_ROW_COUNT, num_cache_hits)                     \
    X("allocs", " alloc", " allocs", FP_ROW_COUNT, num_allocs)                                     \
    X("frees", " free", " frees", FP_ROW_COUNT, num_frees)                                         \
    X("reserve_calls", " reserve call", " reserve calls", FP_ROW_COUNT, num_reserve_calls)         \
    X("release_calls", " release call", " release calls", FP_ROW_COUNT, num_release_calls)         \
    X("page_size", " page size", NULL, FP_ROW_BYTES, page_size)                                    \
    X("map_calls", " map call", " map calls", FP_ROW_COUNT, num_map_calls)                         \
    X("unmap_calls", " unmap call", " unmap calls", FP_ROW_COUNT, num_unmap_calls)                 \
    X("reclaims", " reclaim", " reclaims", FP_ROW_COUNT, num_reclaims)                             \
    X("headroom_reclaims", " reclaim for headroom", " reclaims for headroom", FP_ROW_COUNT,        \
      num_headroom_reclaims)                                                                       \
    X("gc_releases", " GC release", " GC releases", FP_ROW_COUNT, num_gc_releases)                 \
    X("invalid_frees", " invalid free", " invalid frees", FP_ROW_COUNT, num_invalid_frees)

size_t fp_report_pool_rows(const fp_pool_stats *st, fp_row rows[FP_POOL_NROWS])
{
    size_t n = 0;
    uint64_t num, den;
#define FP_POOL_ROW(key, one, many, kind, field)                                                   \
    rows[n++] = (fp_row){key, one, many, kind, (uint64_t)st->field, 0};
    FP_POOL_COUNTS_A(FP_POOL_ROW)
    fp_frag(st, &num, &den);
    rows[n++] = (fp_row){"fragmentation", " fragmentation at peak", NULL, FP_ROW_RATIO, num, den};
    FP_POOL_COUNTS_B(FP_POOL_ROW)
#undef FP_POOL_ROW
    fp_assert(n == FP_POOL_NROWS, "FP_POOL_NROWS counts the rows above");
    return n;
}

/* ---- leaks ---------------------------------------------------------------------------- */

typedef struct fp_leak_acc {
    fp_leak *top;   /* the caller's array, largest first  */
    size_t ntop, n; /* its capacity and entries filled    */
    uint64_t count; /* all live blocks                    */
    uint64_t bytes; /* their requested bytes              */
    uint64_t since; /* blocks numbered up to it are left out */
} fp_leak_acc;

/* 1 when a ranks before b: larger first, then older. */
static int fp_leak_before(const fp_leak *a, const fp_leak *b)
{
    return a->size != b->size ? a->size > b->size : a->seq < b->seq;
}

/* Insertion into the sorted, bounded top list. */
static void fp_leak_insert(fp_leak_acc *a, const fp_leak *l)
{
    size_t i = a->n;
    if (a->n == a->ntop) {
        if (!a->ntop || !fp_leak_before(l, &a->top[a->ntop - 1]))
            return;
        i = a->ntop - 1;
    } else {
        a->n++;
    }
    for (; i > 0 && fp_leak_before(l, &a->top[i - 1]); i--)
        a->top[i] = a->top[i - 1];
    a->top[i] = *l;
}

static void fp_leak_segment(void *ud, uint64_t addr, size_t size, int small, const fp_block_info *b,
                            size_t nb)
{
    fp_leak_acc *a = ud;
    (void)addr;
    (void)size;
    (void)small;
    for (size_t i = 0; i < nb; i++) {
        if (b[i].state != FP_BLOCK_ALLOCATED || b[i].seq <= a->since)
            continue;
        fp_leak l = {b[i].addr, b[i].requested, b[i].seq};
        a->count++;
        a->bytes += b[i].requested;
        fp_leak_insert(a, &l);
    }
}

void fp_report_fill_pool(fp_dev_report *d, fp_pool *p, const fp_pool_stats *st, fp_leak *leaks)
{
    d->stats = *st;
    d->idle_now =
        (size_t)(st->reserved_bytes[FP_ALL].current - st->allocated_bytes[FP_ALL].current);
    d->leaks = leaks;
    d->nleaks = fp_report_collect_leaks(p, d->since_seq, leaks, FP_REPORT_TOP_LEAKS, &d->leak_count,
                                        &d->leak_bytes);
}

size_t fp_report_collect_leaks(fp_pool *p, uint64_t since, fp_leak *top, size_t ntop,
                               uint64_t *count, uint64_t *bytes)
{
    fp_leak_acc a = {top, top ? ntop : 0, 0, 0, 0, since};
    if (p)
        fp_pool_walk(p, fp_leak_segment, &a);
    if (count)
        *count = a.count;
    if (bytes)
        *bytes = a.bytes;
    return a.n;
}

/* ---- text: building one value ------------------------------------------------------ */

/* A value assembled in a fixed buffer, then boxed by fp_tbl_kv. */
typedef struct fp_val {
    char buf[1024]; /* a config problem names every key: ~600 B with 23 */
    fp_sink s;
} fp_val;

static fp_sink *fp_val_begin(fp_val *v)
{
    v->s = fp_sink_buffer(v->buf, sizeof v->buf);
    return &v->s;
}

/* Box the value; one that did not fit ends in "..." on a whole character. */
static void fp_val_end(fp_val *v, fp_sink *out, const char *label)
{
    size_t n = fp_sink_length(&v->s);
    if (fp_sink_error(&v->s)) {
        n = n > 3 ? n - 3 : 0;
        while (n && ((unsigned char)v->buf[n] & 0xC0) == 0x80)
            n--;
        memcpy(v->buf + n, "...", 3);
        n += 3;
    }
    fp_tbl_kv(out, label, v->buf, n);
}

static void fp_put_left(fp_sink *s, uint64_t v, size_t width)
{
    size_t before = fp_sink_total(s);
    fp_put_u64(s, v);
    size_t n = fp_sink_total(s) - before;
    fp_put_pad(s, ' ', n < width ? width - n : 0);
}

/* ---- text: the PyTorch part -------------------------------------------------------- */

static void fp_text_title(fp_sink *s, const fp_dev_report *d)
{
    char buf[96];
    fp_sink l = fp_sink_buffer(buf, sizeof buf);
    fp_puts(&l, "fragpool memory summary, device ID ");
    fp_put_i64(&l, d->device);
    fp_tbl_text(s, buf, fp_sink_length(&l), 18); /* PyTorch's indent */
}

static void fp_sep(fp_sink *l, const char *sep)
{
    if (fp_sink_total(l))
        fp_puts(l, sep);
}

/* "NVIDIA H200, 139.81 GiB; pid 42, rank 3", centred; nothing if empty. */
static void fp_text_subtitle(fp_sink *s, const fp_run_report *r, const fp_dev_report *d)
{
    char buf[160];
    fp_sink l = fp_sink_buffer(buf, sizeof buf);
    if (d->device_name)
        fp_put_visible(&l, d->device_name, strlen(d->device_name));
    if (d->total_capacity) {
        fp_sep(&l, ", ");
        fp_emit_size(&l, d->total_capacity);
    }
    if (r->pid > 0) {
        fp_sep(&l, "; ");
        fp_puts(&l, "pid ");
        fp_put_i64(&l, r->pid);
    }
    if (r->rank >= 0) {
        fp_sep(&l, r->pid > 0 ? ", " : "; ");
        fp_puts(&l, "rank ");
        fp_put_i64(&l, r->rank);
    }
    if (fp_sink_length(&l))
        fp_tbl_text(s, buf, fp_sink_length(&l), SIZE_MAX);
}

/* PyTorch's "CUDA OOMs: N | cudaMalloc retries: N" line, column for column. */
static void fp_text_oom_line(fp_sink *s, const fp_pool_stats *st)
{
    char buf[128];
    fp_sink l = fp_sink_buffer(buf, sizeof buf);
    fp_put_pad(&l, ' ', 12);
    fp_puts(&l, "CUDA OOMs: ");
    fp_put_left(&l, st->num_ooms, 12);
    fp_puts(&l, " |");
    fp_put_pad(&l, ' ', 8);
    fp_puts(&l, "cudaMalloc retries: ");
    fp_put_left(&l, st->num_alloc_retries, 8);
    fp_tbl_text(s, buf, fp_sink_length(&l), 0);
}

static void fp_text_cells(fp_sink *s, const char *label, const fp_stat *v, const fp_stat *pref,
                          int count)
{
    char c[4][24];
    const char *cells[4] = {c[0], c[1], c[2], c[3]};
    int64_t val[4] = {v->current, v->peak, v->allocated, v->freed};
    int64_t ref[4] = {pref->current, pref->peak, pref->allocated, pref->freed};
    for (int i = 0; i < 4; i++) {
        if (count)
            fp_format_count_col(val[i], ref[i], c[i]);
        else
            fp_format_size_col(val[i], ref[i], c[i]);
    }
    fp_tbl_row(s, label, cells);
}

/* A metric row and its two pool rows; units follow the "all" row. */
static void fp_text_metric(fp_sink *s, const fp_pool_stats *st, const fp_metric *m)
{
    const fp_stat *all = fp_metric_stat(st, m, FP_ALL);
    fp_tbl_rule(s, '-');
    fp_text_cells(s, m->label, all, all, m->count);
    fp_text_cells(s, "      from large pool", fp_metric_stat(st, m, FP_LARGE), all, m->count);
    fp_text_cells(s, "      from small pool", fp_metric_stat(st, m, FP_SMALL), all, m->count);
}

static void fp_text_table(fp_sink *s, const fp_run_report *r, const fp_dev_report *d)
{
    static const char head[] =
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ";
    fp_tbl_rule(s, '=');
    fp_text_title(s, d);
    fp_text_subtitle(s, r, d);
    fp_tbl_rule(s, '-');
    fp_text_oom_line(s, &d->stats);
    fp_tbl_rule(s, '=');
    fp_tbl_text(s, head, sizeof head - 1, 0);
    for (size_t i = 0; i < FP_COUNT(fp_metrics); i++)
        fp_text_metric(s, &d->stats, &fp_metrics[i]);
    for (size_t i = 0; i < FP_COUNT(fp_oversize); i++) {
        const fp_stat *v = fp_metric_stat(&d->stats, &fp_oversize[i], 0);
        fp_tbl_rule(s, '-');
        fp_text_cells(s, fp_oversize[i].label, v, v, 1);
    }
}

/* ---- text: what PyTorch's summary lacks ---------------------------------------------- */

static void fp_text_frag(fp_sink *s, const fp_pool_stats *st)
{
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    uint64_t num, den;
    fp_frag(st, &num, &den);
    fp_put_percent(o, num, den);
    if (den) {
        fp_puts(o, " (1 - peak allocated ");
        fp_emit_size(o, (size_t)st->allocated_bytes[FP_ALL].peak);
        fp_puts(o, " / peak reserved ");
        fp_emit_size(o, (size_t)den);
        fp_putc(o, ')');
    } else {
        fp_puts(o, " (nothing reserved)");
    }
    fp_val_end(&v, s, "Fragmentation at peak");
}

static void fp_text_free(fp_sink *s, const fp_dev_report *d)
{
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    fp_emit_size(o, d->stats.largest_free);
    fp_puts(o, " now; ");
    fp_emit_size(o, d->stats.largest_free_at_peak);
    fp_puts(o, " at peak allocated");
    fp_val_end(&v, s, "Largest free block");
    o = fp_val_begin(&v);
    fp_emit_size(o, d->idle_now);
    fp_puts(o, " reserved but not allocated, now");
    fp_val_end(&v, s, "Idle in cached blocks");
    if (d->replay)
        return; /* no device */
    o = fp_val_begin(&v);
    if (d->device_free == (size_t)-1) {
        fp_puts(o, "unknown");
    } else {
        fp_emit_size(o, d->device_free);
        if (d->total_capacity) {
            fp_puts(o, " of ");
            fp_emit_size(o, d->total_capacity);
        }
    }
    fp_val_end(&v, s, "Free on the device");
}

static void fp_text_cache(fp_sink *s, const fp_pool_stats *st)
{
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    fp_put_u64(o, st->num_cache_hits);
    fp_puts(o, " of ");
    fp_put_u64(o, st->num_allocs);
    fp_puts(o, " allocations (");
    fp_put_percent(o, st->num_cache_hits, st->num_allocs);
    fp_putc(o, ')');
    fp_val_end(&v, s, "Served from cache");
    o = fp_val_begin(&v);
    fp_putc(o, '~');
    fp_put_u64(o, 2 * st->num_cache_hits);
    fp_puts(o, " (an allocation and a free per cache hit)");
    fp_val_end(&v, s, "Driver calls saved");
}

const char *fp_segments_why(int asked, int vmm)
{
    if (vmm)
        return asked == FP_VMM_ON ? "expandable_segments:True"
                                  : "the default where the driver has virtual memory "
                                    "management; expandable_segments:False for classic";
    return asked == FP_VMM_OFF ? "expandable_segments:False"
                               : "the driver has no virtual memory management here";
}

/* Which segments ran and why; with virtual memory, the page size and the
 * map/unmap calls. */
static void fp_text_segments(fp_sink *s, const fp_dev_report *d)
{
    const fp_pool_stats *st = &d->stats;
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    if (st->page_size) {
        fp_puts(o, "virtual memory, ");
        fp_emit_size(o, st->page_size);
        fp_puts(o, " pages");
    } else {
        fp_puts(o, "classic, as PyTorch's");
    }
    if (d->segments_why) {
        fp_puts(o, " (");
        fp_puts(o, d->segments_why);
        fp_putc(o, ')');
    }
    fp_val_end(&v, s, "Segments");
    if (!st->page_size)
        return;
    o = fp_val_begin(&v);
    fp_put_u64(o, st->num_map_calls);
    fp_puts(o, " maps, ");
    fp_put_u64(o, st->num_unmap_calls);
    fp_puts(o, " unmaps, ");
    fp_put_u64(o, st->num_reclaims);
    fp_puts(o, " reclaims");
    if (st->num_headroom_reclaims) {
        fp_puts(o, " (");
        fp_put_u64(o, st->num_headroom_reclaims);
        fp_puts(o, " to leave the driver its headroom)");
    }
    fp_val_end(&v, s, NULL);
}

static void fp_text_time(fp_sink *s, const fp_dev_report *d)
{
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    uint64_t calls = d->stats.num_allocs + d->stats.num_frees;
    fp_emit_duration(o, d->alloc_ns);
    if (calls) {
        fp_puts(o, "; ");
        fp_emit_duration(o, d->alloc_ns / calls);
        fp_puts(o, " per call (");
        fp_put_u64(o, calls);
        fp_puts(o, " allocs and frees)");
    }
    fp_val_end(&v, s, "Time in allocator");
}

static void fp_put_count(fp_sink *o, uint64_t n, const char *one, const char *many)
{
    fp_put_u64(o, n);
    fp_puts(o, n == 1 ? one : many);
}

/* The frames of leak i, one boxed "  at ..." line each (trace_stacks). */
static void fp_text_stack(fp_sink *s, const fp_dev_report *d, size_t i)
{
    const char *st = d->leak_stacks ? d->leak_stacks[i] : NULL;
    for (const char *nl; st && *st; st = nl + 1) {
        nl = strchr(st, '\n');
        if (!nl)
            break;
        fp_val v;
        fp_sink *o = fp_val_begin(&v);
        fp_puts(o, "  at ");
        fp_put_visible(o, st, (size_t)(nl - st));
        fp_val_end(&v, s, NULL);
    }
}

static void fp_text_leaks(fp_sink *s, const fp_dev_report *d)
{
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    if (!d->leak_count) {
        fp_puts(o, "none");
    } else {
        fp_put_u64(o, d->leak_count);
        fp_puts(o, d->leak_count == 1 ? " allocation, " : " allocations, ");
        fp_emit_size(o, d->leak_bytes);
        fp_puts(o, ", largest first:");
    }
    fp_val_end(&v, s, d->running ? "Live now" : d->replay ? "Live at the end" : "Live at exit");
    for (size_t i = 0; i < d->nleaks && d->leaks; i++) {
        o = fp_val_begin(&v);
        fp_emit_size(o, d->leaks[i].size);
        fp_puts(o, " at ");
        fp_put_hex(o, d->leaks[i].addr);
        fp_puts(o, " (allocation #");
        fp_put_u64(o, d->leaks[i].seq);
        fp_putc(o, ')');
        fp_val_end(&v, s, NULL);
        fp_text_stack(s, d, i);
    }
    if (d->leak_count > d->nleaks) {
        o = fp_val_begin(&v);
        fp_puts(o, "... and ");
        fp_put_u64(o, d->leak_count - d->nleaks);
        fp_puts(o, " more");
        fp_val_end(&v, s, NULL);
    }
}

void fp_report_put_row(fp_sink *o, const fp_row *r)
{
    switch (r->kind) {
    case FP_ROW_BYTES:
        fp_emit_size(o, (size_t)r->value);
        fp_puts(o, r->one);
        break;
    case FP_ROW_FLAG:
        fp_puts(o, r->one);
        fp_puts(o, r->value ? ": yes" : ": no");
        break;
    case FP_ROW_RATIO:
        fp_put_percent(o, r->value, r->den);
        fp_puts(o, r->one);
        break;
    case FP_ROW_LIMIT:
        if (!r->value)
            fp_puts(o, "no");
        else
            fp_emit_size(o, (size_t)r->value);
        fp_puts(o, r->one);
        break;
    default: fp_put_count(o, r->value, r->one, r->many ? r->many : r->one); break;
    }
}

static int fp_group_all_zero(const fp_group *g)
{
    for (size_t i = 0; i < g->nrows; i++)
        if (g->rows[i].value)
            return 0;
    return 1;
}

/* A group's rows, per_line to a line, then its note. */
static void fp_text_group(fp_sink *s, const fp_group *g)
{
    const char *label = g->label;
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    if (!g->rows || (g->zero && !g->zero[0] && fp_group_all_zero(g)))
        return;
    if (g->zero && fp_group_all_zero(g)) {
        fp_puts(o, g->zero);
        fp_val_end(&v, s, label);
        return;
    }
    for (size_t i = 0; i < g->nrows; i++) {
        if (g->per_line && i && i % g->per_line == 0) {
            fp_val_end(&v, s, label);
            label = NULL;
            o = fp_val_begin(&v);
        } else if (i) {
            fp_puts(o, ", ");
        }
        fp_report_put_row(o, &g->rows[i]);
    }
    fp_val_end(&v, s, label);
    if (g->note)
        fp_tbl_kv(s, NULL, g->note, strlen(g->note));
}

int fp_report_row_in_prose(const char *key)
{
    static const char *const prose[] = {
        "largest_free_block", "largest_free_block_at_peak", /* Largest free block */
        "fragmentation",                                    /* Fragmentation at peak */
        "cache_hits",         "allocs",                     /* Served from cache */
        "page_size",          "map_calls",
        "unmap_calls",        "reclaims", /* Segments */
        "headroom_reclaims"};
    for (size_t i = 0; i < sizeof prose / sizeof *prose; i++)
        if (!strcmp(key, prose[i]))
            return 1;
    return 0;
}

static void fp_text_pool_counts(fp_sink *s, const fp_pool_stats *st)
{
    fp_row all[FP_POOL_NROWS], rows[FP_POOL_NROWS];
    size_t n = fp_report_pool_rows(st, all), k = 0;
    for (size_t i = 0; i < n; i++)
        if (!fp_report_row_in_prose(all[i].key))
            rows[k++] = all[i];
    fp_group g = {.label = "Pool counters", .rows = rows, .nrows = k, .per_line = 1};
    fp_text_group(s, &g);
}

static void fp_text_extras(fp_sink *s, const fp_dev_report *d)
{
    static const char title[] = "fragpool: what the table above does not show";
    fp_tbl_rule(s, '=');
    fp_tbl_text(s, title, sizeof title - 1, 1);
    fp_tbl_rule(s, '-');
    fp_text_segments(s, d);
    fp_text_frag(s, &d->stats);
    fp_text_free(s, d);
    fp_text_cache(s, &d->stats);
    if (!d->replay) /* a replay is not timed */
        fp_text_time(s, d);
    fp_text_pool_counts(s, &d->stats);
    for (size_t i = 0; i < d->ngroups && d->groups; i++)
        fp_text_group(s, &d->groups[i]);
    fp_text_leaks(s, d);
}

/* ---- text: the run ------------------------------------------------------------------ */

static void fp_text_process(fp_sink *s, const fp_run_report *r)
{
    fp_val v;
    fp_sink *o = fp_val_begin(&v);
    if (r->pid > 0) {
        fp_puts(o, "pid ");
        fp_put_i64(o, r->pid);
    }
    if (r->rank >= 0) {
        fp_sep(o, ", ");
        fp_puts(o, "rank ");
        fp_put_i64(o, r->rank);
    }
    if (r->host) {
        fp_sep(o, ", ");
        fp_puts(o, "host ");
        fp_put_visible(o, r->host, strlen(r->host));
    }
    if (fp_sink_total(o)) /* a replay has no process */
        fp_val_end(&v, s, "Process");
    o = fp_val_begin(&v);
    fp_puts(o, r->mode ? r->mode : "unknown");
    fp_val_end(&v, s, "Mode");
    o = fp_val_begin(&v);
    fp_puts(o, "fragpool " FP_VERSION);
    fp_val_end(&v, s, "Version");
}

/* One config entry per line, as "key:value": those not at their default
 * (config_set), then how many keys are; "defaults" when all are. */
static void fp_text_config(fp_sink *s, const fp_run_report *r)
{
    const char *label = "Configuration";
    fp_val v;
    size_t hidden = 0;
    for (size_t i = 0; i < r->nconfig && r->config; i++) {
        const fp_kv *e = &r->config[i];
        if (r->config_set && !r->config_set[i]) {
            hidden++;
            continue;
        }
        fp_sink *o = fp_val_begin(&v);
        fp_put_visible(o, e->key, strlen(e->key));
        if (e->value) {
            fp_putc(o, ':');
            fp_put_visible(o, e->value, strlen(e->value));
        }
        fp_val_end(&v, s, label);
        label = NULL;
    }
    if (label && hidden) {
        static const char all[] = "defaults (fragpool config lists every key)";
        fp_tbl_kv(s, label, all, sizeof all - 1);
    } else if (label) {
        fp_tbl_kv(s, label, "defaults", 8);
    } else if (hidden) {
        fp_sink *o = fp_val_begin(&v);
        fp_puts(o, "the other ");
        fp_put_u64(o, hidden);
        fp_puts(o, hidden == 1 ? " key: its default" : " keys: their defaults");
        fp_val_end(&v, s, NULL);
    }
}

static void fp_text_config_errors(fp_sink *s, const fp_run_report *r)
{
    const char *label = "Config errors";
    fp_val v;
    for (size_t i = 0; i < r->nconfig_errors; i++) {
        const char *e = r->config_errors[i] ? r->config_errors[i] : "";
        fp_put_visible(fp_val_begin(&v), e, strlen(e));
        fp_val_end(&v, s, label);
        label = NULL;
    }
    if (label)
        fp_tbl_kv(s, label, "none", 4);
    if (r->config_errors_more) {
        fp_sink *o = fp_val_begin(&v);
        fp_puts(o, "... and ");
        fp_put_u64(o, r->config_errors_more);
        fp_puts(o, " more (all were printed on stderr at the start)");
        fp_val_end(&v, s, NULL);
    }
}

/* Where the configuration came from, and any notes (none: no row). */
static void fp_text_source_notes(fp_sink *s, const fp_run_report *r)
{
    const char *label = "Notes";
    fp_val v;
    if (r->config_source)
        fp_tbl_kv(s, "Config source", r->config_source, strlen(r->config_source));
    for (size_t i = 0; i < r->nnotes; i++) {
        const char *e = r->notes[i] ? r->notes[i] : "";
        fp_put_visible(fp_val_begin(&v), e, strlen(e));
        fp_val_end(&v, s, label);
        label = NULL;
    }
}

/* A setting a note names for pasting: "FRAGPOOL_CONF=..." or
 * "PYTORCH_CUDA_ALLOC_CONF=...", up to a space or ')'.  The box wraps its
 * notes, so these follow the box whole, one a line, to be pasted. */
static void fp_text_paste(fp_sink *s, const fp_run_report *r)
{
    static const char *const vars[] = {"FRAGPOOL_CONF=", "PYTORCH_CUDA_ALLOC_CONF="};
    int said = 0;
    for (size_t i = 0; i < r->nnotes; i++)
        for (size_t k = 0; k < 2 && r->notes[i]; k++) {
            const char *at = strstr(r->notes[i], vars[k]);
            if (!at || (at > r->notes[i] && at[-1] != ' ' && at[-1] != '('))
                continue;
            if (!said++)
                fp_puts(s, "fragpool: the setting the notes name, to paste:\n");
            fp_puts(s, "    ");
            fp_put_visible(s, at, strcspn(at, " )"));
            fp_putc(s, '\n');
        }
}

static void fp_text_run(fp_sink *s, const fp_run_report *r)
{
    static const char title[] = "fragpool run";
    fp_tbl_rule(s, '=');
    fp_tbl_text(s, title, sizeof title - 1, 1);
    fp_tbl_rule(s, '-');
    fp_text_process(s, r);
    fp_text_config(s, r);
    fp_text_config_errors(s, r);
    fp_text_source_notes(s, r);
    fp_tbl_rule(s, '=');
    fp_text_paste(s, r);
}

/* The pinned host memory box: a title, then the host rows' groups. */
static void fp_text_host(fp_sink *s, const fp_host_report *h)
{
    static const char title[] = "fragpool: pinned host memory (cudaHostAlloc, cudaMallocHost)";
    fp_host_list l;
    fp_report_host_rows(h, &l);
    fp_tbl_rule(s, '=');
    fp_tbl_text(s, title, sizeof title - 1, 1);
    fp_tbl_rule(s, '-');
    for (size_t i = 0; i < l.ngroups; i++)
        fp_text_group(s, &l.groups[i]);
}

int fp_report_text(const fp_run_report *r, fp_sink *out)
{
    for (size_t i = 0; i < r->ndevs; i++) {
        fp_text_table(out, r, &r->devs[i]);
        fp_text_extras(out, &r->devs[i]);
    }
    if (r->pinned)
        fp_text_host(out, r->pinned);
    fp_text_run(out, r);
    return fp_sink_flush(out);
}

/* ---- JSON --------------------------------------------------------------------------- */

static void fp_json_stat(fp_json *j, const char *key, const fp_stat *st)
{
    fp_json_obj(j, key);
    fp_json_i64(j, "current", st->current);
    fp_json_i64(j, "peak", st->peak);
    fp_json_i64(j, "total_allocated", st->allocated);
    fp_json_i64(j, "total_freed", st->freed);
    fp_json_end_obj(j);
}

static void fp_json_metrics(fp_json *j, const fp_pool_stats *st, int kind)
{
    for (size_t i = 0; i < FP_COUNT(fp_metrics); i++)
        fp_json_stat(j, fp_metrics[i].key, fp_metric_stat(st, &fp_metrics[i], kind));
}

static void fp_json_by_pool(fp_json *j, const fp_pool_stats *st)
{
    fp_json_obj(j, "by_pool");
    fp_json_obj(j, "small");
    fp_json_metrics(j, st, FP_SMALL);
    fp_json_end_obj(j);
    fp_json_obj(j, "large");
    fp_json_metrics(j, st, FP_LARGE);
    fp_json_end_obj(j);
    fp_json_end_obj(j);
}

/* A byte count, or null when unknown (unknown is the given sentinel). */
static void fp_json_size(fp_json *j, const char *key, size_t v, size_t unknown)
{
    if (v == unknown)
        fp_json_null(j, key);
    else
        fp_json_u64(j, key, v);
}

static void fp_json_row(fp_json *j, const fp_row *r)
{
    if (r->kind == FP_ROW_LIMIT && !r->value)
        fp_json_null(j, r->key);
    else if (r->kind == FP_ROW_RATIO)
        fp_json_fixed(j, r->key, r->value, r->den, 4);
    else
        fp_json_u64(j, r->key, r->value);
}

/* A group: its rows as an object under its key (null when absent), or as
 * members of the object open now when it has no key. */
static void fp_json_group(fp_json *j, const fp_group *g)
{
    if (g->key && !g->rows) {
        if (!g->omit)
            fp_json_null(j, g->key);
        return;
    }
    if (g->key)
        fp_json_obj(j, g->key);
    for (size_t i = 0; i < g->nrows; i++)
        fp_json_row(j, &g->rows[i]);
    if (g->key)
        fp_json_end_obj(j);
}

static void fp_json_pool_counts(fp_json *j, const fp_pool_stats *st)
{
    fp_row rows[FP_POOL_NROWS];
    fp_group g = {.rows = rows};
    g.nrows = fp_report_pool_rows(st, rows);
    fp_json_group(j, &g);
}

/* The JSON object "pinned": the same groups as the text box; null when h
 * is NULL. */
static void fp_json_host(fp_json *j, const fp_host_report *h)
{
    if (!h) {
        fp_json_null(j, "pinned");
        return;
    }
    fp_host_list l;
    fp_report_host_rows(h, &l);
    fp_json_obj(j, "pinned");
    for (size_t i = 0; i < l.ngroups; i++)
        fp_json_group(j, &l.groups[i]);
    fp_json_end_obj(j);
}

static void fp_json_leaks(fp_json *j, const fp_dev_report *d)
{
    fp_json_obj(j, "leaks");
    fp_json_u64(j, "count", d->leak_count);
    fp_json_u64(j, "bytes", d->leak_bytes);
    fp_json_arr(j, "top");
    for (size_t i = 0; i < d->nleaks && d->leaks; i++) {
        fp_json_obj(j, NULL);
        fp_json_u64(j, "size", d->leaks[i].size);
        fp_json_hex(j, "addr", d->leaks[i].addr);
        fp_json_u64(j, "seq", d->leaks[i].seq);
        const char *st = d->leak_stacks ? d->leak_stacks[i] : NULL;
        if (st && *st) { /* trace_stacks: one string per frame */
            fp_json_arr(j, "frames");
            for (const char *nl; *st && (nl = strchr(st, '\n')) != NULL; st = nl + 1)
                fp_json_strn(j, NULL, st, (size_t)(nl - st));
            fp_json_end_arr(j);
        }
        fp_json_end_obj(j);
    }
    fp_json_end_arr(j);
    fp_json_end_obj(j);
}

static void fp_json_device(fp_json *j, const fp_dev_report *d)
{
    fp_json_obj(j, NULL);
    fp_json_i64(j, "device", d->device);
    fp_json_str(j, "name", d->device_name);
    fp_json_size(j, "total_capacity", d->total_capacity, 0);
    fp_json_size(j, "device_free", d->device_free, (size_t)-1);
    fp_json_u64(j, "idle", d->idle_now);
    fp_json_str(j, "segments_mode", d->stats.page_size ? "virtual memory" : "classic");
    fp_json_str(j, "segments_why", d->segments_why);
    fp_json_metrics(j, &d->stats, FP_ALL);
    for (size_t i = 0; i < FP_COUNT(fp_oversize); i++)
        fp_json_stat(j, fp_oversize[i].key, fp_metric_stat(&d->stats, &fp_oversize[i], 0));
    fp_json_by_pool(j, &d->stats);
    fp_json_pool_counts(j, &d->stats);
    fp_json_u64(j, "alloc_ns", d->alloc_ns);
    for (size_t i = 0; i < d->ngroups && d->groups; i++)
        fp_json_group(j, &d->groups[i]);
    fp_json_leaks(j, d);
    fp_json_end_obj(j);
}

/* The config as an object of strings; an entry without a value is null. */
static void fp_json_config(fp_json *j, const fp_run_report *r)
{
    fp_json_obj(j, "config");
    for (size_t i = 0; i < r->nconfig && r->config; i++)
        fp_json_str(j, r->config[i].key, r->config[i].value);
    fp_json_end_obj(j);
}

int fp_report_json(const fp_run_report *r, fp_sink *out)
{
    fp_json j;
    fp_json_init(&j, out);
    fp_json_obj(&j, NULL);
    fp_json_u64(&j, "version", 1);
    if (r->pid > 0)
        fp_json_i64(&j, "pid", r->pid);
    else
        fp_json_null(&j, "pid");
    if (r->rank >= 0)
        fp_json_i64(&j, "rank", r->rank);
    else
        fp_json_null(&j, "rank");
    fp_json_str(&j, "host", r->host);
    fp_json_str(&j, "mode", r->mode);
    fp_json_str(&j, "fragpool_version", FP_VERSION);
    fp_json_config(&j, r);
    fp_json_arr(&j, "config_errors");
    for (size_t i = 0; i < r->nconfig_errors; i++)
        fp_json_str(&j, NULL, r->config_errors[i] ? r->config_errors[i] : "");
    fp_json_end_arr(&j);
    fp_json_u64(&j, "config_errors_more", r->config_errors_more);
    fp_json_str(&j, "config_source", r->config_source);
    fp_json_arr(&j, "notes");
    for (size_t i = 0; i < r->nnotes; i++)
        fp_json_str(&j, NULL, r->notes[i] ? r->notes[i] : "");
    fp_json_end_arr(&j);
    fp_json_arr(&j, "devices");
    for (size_t i = 0; i < r->ndevs; i++)
        fp_json_device(&j, &r->devs[i]);
    fp_json_end_arr(&j);
    fp_json_host(&j, r->pinned);
    fp_json_end_obj(&j);
    fp_putc(out, '\n');
    return fp_sink_flush(out);
}
