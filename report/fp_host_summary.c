/* fp_host_summary.c - pinned host memory in the summary (issue 17): the
 * text box, the JSON object and the OOM explanation's note.
 *
 * Reads only the fp_host_report it is given; like the rest of report/, it
 * never allocates, locks or calls stdio, so it is safe at exit.  The text
 * and the JSON object "pinned" show the same fields: reserved, allocated and requested
 * (current and peak), cache hits, time in the allocator, requests passed
 * to the driver.
 */
#include "fp_report.h"
#include <string.h>

/* A boxed "label | value" whose value is built in a fixed buffer. */
typedef struct hval {
    char buf[256];
    fp_sink s;
} hval;

static fp_sink *hv_begin(hval *v)
{
    v->s = fp_sink_buffer(v->buf, sizeof v->buf);
    return &v->s;
}

static void hv_end(hval *v, fp_sink *out, const char *label)
{
    fp_tbl_kv(out, label, v->buf, fp_sink_length(&v->s));
}

static void text_stat(fp_sink *s, const char *label, const fp_stat *st)
{
    hval v;
    fp_sink *o = hv_begin(&v);
    fp_put_size(o, (size_t)st->current);
    fp_puts(o, " now, peak ");
    fp_put_size(o, (size_t)st->peak);
    hv_end(&v, s, label);
}

static void text_held(fp_sink *s, const fp_pool_stats *st)
{
    hval v;
    fp_sink *o = hv_begin(&v);
    int64_t req = st->requested_bytes[FP_ALL].peak;
    fp_put_fixed(o, (uint64_t)st->reserved_bytes[FP_ALL].peak, (uint64_t)(req > 0 ? req : 0), 3);
    fp_puts(o, "x the peak requested bytes");
    hv_end(&v, s, "Held / requested");
}

static void text_cache(fp_sink *s, const fp_host_report *h)
{
    hval v;
    fp_sink *o = hv_begin(&v);
    fp_put_u64(o, h->stats.num_cache_hits);
    fp_puts(o, " of ");
    fp_put_u64(o, h->stats.num_allocs);
    fp_puts(o, " pinned allocations (");
    fp_put_percent(o, h->stats.num_cache_hits, h->stats.num_allocs);
    fp_puts(o, "); ");
    fp_put_u64(o, h->stats.num_reserve_calls);
    fp_puts(o, " pinned by the driver");
    hv_end(&v, s, "Served from cache");
}

static void text_time(fp_sink *s, const fp_host_report *h)
{
    hval v;
    fp_sink *o = hv_begin(&v);
    uint64_t calls = h->stats.num_allocs + h->stats.num_frees;
    fp_put_duration(o, h->alloc_ns);
    if (calls) {
        fp_puts(o, "; ");
        fp_put_duration(o, h->alloc_ns / calls);
        fp_puts(o, " per call");
    }
    hv_end(&v, s, "Time in allocator");
}

static void text_safety(fp_sink *s, const fp_host_report *h)
{
    hval v;
    fp_sink *o = hv_begin(&v);
    fp_put_u64(o, h->fences);
    fp_puts(o, " fences at frees; reuse waited ");
    fp_put_u64(o, h->waits);
    fp_puts(o, "x, synchronized ");
    fp_put_u64(o, h->syncs);
    fp_putc(o, 'x');
    hv_end(&v, s, "Freed, then reused");
}

static void text_driver(fp_sink *s, const fp_host_report *h)
{
    hval v;
    fp_sink *o = hv_begin(&v);
    fp_put_u64(o, h->to_driver);
    fp_puts(o, h->pooling ? " (flags, size, cap, no context; " : " (host_pool:0; ");
    fp_put_u64(o, h->fallbacks);
    fp_puts(o, " when reuse could not be ordered)");
    hv_end(&v, s, "Passed to the driver");
}

void fp_host_text(fp_sink *s, const fp_host_report *h)
{
    static const char title[] = "fragpool: pinned host memory (cudaHostAlloc, cudaMallocHost)";
    fp_tbl_rule(s, '=');
    fp_tbl_text(s, title, sizeof title - 1, 1);
    fp_tbl_rule(s, '-');
    text_stat(s, "Reserved (pinned)", &h->stats.reserved_bytes[FP_ALL]);
    text_stat(s, "Allocated", &h->stats.allocated_bytes[FP_ALL]);
    text_stat(s, "Requested", &h->stats.requested_bytes[FP_ALL]);
    text_held(s, &h->stats);
    text_cache(s, h);
    text_time(s, h);
    text_safety(s, h);
    text_driver(s, h);
    if (h->stats.num_invalid_frees) {
        hval v;
        fp_put_u64(hv_begin(&v), h->stats.num_invalid_frees);
        hv_end(&v, s, "Invalid frees");
    }
}

static void json_stat(fp_json *j, const char *key, const fp_stat *st)
{
    fp_json_obj(j, key);
    fp_json_i64(j, "current", st->current);
    fp_json_i64(j, "peak", st->peak);
    fp_json_end_obj(j);
}

void fp_host_json(fp_json *j, const fp_host_report *h)
{
    if (!h) {
        fp_json_null(j, "pinned");
        return;
    }
    const fp_pool_stats *st = &h->stats;
    fp_json_obj(j, "pinned");
    fp_json_u64(j, "pooling", (uint64_t)h->pooling);
    json_stat(j, "reserved_bytes", &st->reserved_bytes[FP_ALL]);
    json_stat(j, "allocated_bytes", &st->allocated_bytes[FP_ALL]);
    json_stat(j, "requested_bytes", &st->requested_bytes[FP_ALL]);
    json_stat(j, "segments", &st->segments[FP_ALL]);
    fp_json_u64(j, "allocs", st->num_allocs);
    fp_json_u64(j, "frees", st->num_frees);
    fp_json_u64(j, "cache_hits", st->num_cache_hits);
    fp_json_u64(j, "reserve_calls", st->num_reserve_calls);
    fp_json_u64(j, "release_calls", st->num_release_calls);
    fp_json_u64(j, "invalid_frees", st->num_invalid_frees);
    fp_json_u64(j, "alloc_ns", h->alloc_ns);
    fp_json_u64(j, "to_driver", h->to_driver);
    fp_json_u64(j, "fallbacks", h->fallbacks);
    fp_json_u64(j, "fences", h->fences);
    fp_json_u64(j, "waits", h->waits);
    fp_json_u64(j, "syncs", h->syncs);
    if (h->max_reserved)
        fp_json_u64(j, "max_reserved", h->max_reserved);
    else
        fp_json_null(j, "max_reserved");
    fp_json_end_obj(j);
}

int fp_host_oom_note(const fp_host_report *h, fp_sink *out)
{
    size_t held = h ? (size_t)h->stats.reserved_bytes[FP_ALL].current : 0;
    if (held >= FP_HOST_LARGE) {
        size_t idle = held - (size_t)h->stats.allocated_bytes[FP_ALL].current;
        fp_puts(out, "fragpool: note: ");
        fp_put_size(out, held);
        fp_puts(out, " of host memory is pinned through fragpool (");
        fp_put_size(out, idle);
        fp_puts(out, " of it idle in its cache); pinned pages stay out of the OS's reach: "
                     "host_max_cached_mb or host_max_reserved_mb limit them\n");
    }
    return fp_sink_flush(out);
}
