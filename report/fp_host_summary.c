/* fp_host_summary.c - pinned host memory in the summary: the
 * rows of the "pinned" section and the OOM explanation's note.
 *
 * Invariants: the section is one list of rows (fp_report_host_rows, below) in
 * groups; fp_summary.c walks the same groups for the text box and the
 * JSON object "pinned", so every field is in both.  Reads only the
 * fp_host_report it is given; never allocates, locks or calls stdio, so it
 * is safe at exit.
 */
#include "fp_report.h"

static const fp_row *put(fp_host_list *o, const char *key, const char *one, const char *many,
                         int kind, uint64_t value)
{
    fp_row *r = &o->rows[o->nrows++];
    *r = (fp_row){key, one, many, kind, value, 0};
    return r;
}

static void group(fp_host_list *o, const char *key, const char *label, const fp_row *first,
                  unsigned per_line)
{
    fp_group *g = &o->groups[o->ngroups++];
    *g = (fp_group){.key = key,
                    .label = label,
                    .rows = first,
                    .nrows = (size_t)(&o->rows[o->nrows] - first),
                    .per_line = per_line};
}

/* A current/peak pair as an object under key. */
static void host_stat(fp_host_list *o, const char *key, const char *label, int kind,
                      const fp_stat *st)
{
    const fp_row *first = put(o, "current", " now", NULL, kind, (uint64_t)st->current);
    put(o, "peak", " at peak", NULL, kind, (uint64_t)st->peak);
    group(o, key, label, first, 0);
}

void fp_report_host_rows(const fp_host_report *h, fp_host_list *o)
{
    const fp_pool_stats *st = &h->stats;
    o->nrows = o->ngroups = 0;
    group(o, NULL, "Pooling",
          put(o, "pooling", "host_pool", NULL, FP_ROW_FLAG, (uint64_t)h->pooling), 0);
    host_stat(o, "reserved_bytes", "Reserved (pinned)", FP_ROW_BYTES, &st->reserved_bytes[FP_ALL]);
    host_stat(o, "allocated_bytes", "Allocated", FP_ROW_BYTES, &st->allocated_bytes[FP_ALL]);
    host_stat(o, "requested_bytes", "Requested", FP_ROW_BYTES, &st->requested_bytes[FP_ALL]);
    host_stat(o, "segments", "Segments", FP_ROW_COUNT, &st->segments[FP_ALL]);
    const fp_row *first =
        put(o, "allocs", " allocation", " allocations", FP_ROW_COUNT, st->num_allocs);
    put(o, "frees", " free", " frees", FP_ROW_COUNT, st->num_frees);
    put(o, "cache_hits", " served from cache", NULL, FP_ROW_COUNT, st->num_cache_hits);
    group(o, NULL, "Pinned calls", first, 1);
    first =
        put(o, "reserve_calls", " pinned by the driver", NULL, FP_ROW_COUNT, st->num_reserve_calls);
    put(o, "release_calls", " released to it", NULL, FP_ROW_COUNT, st->num_release_calls);
    put(o, "invalid_frees", " invalid free", " invalid frees", FP_ROW_COUNT, st->num_invalid_frees);
    group(o, NULL, "Driver pinning", first, 1);
    group(o, NULL, "Time in allocator", put(o, "alloc_ns", " ns", NULL, FP_ROW_COUNT, h->alloc_ns),
          0);
    first = put(o, "to_driver", " passed to the driver", NULL, FP_ROW_COUNT, h->to_driver);
    put(o, "fallbacks", " when reuse could not be ordered", NULL, FP_ROW_COUNT, h->fallbacks);
    group(o, NULL, "Not pooled", first, 1);
    first = put(o, "fences", " fence at frees", " fences at frees", FP_ROW_COUNT, h->fences);
    put(o, "waits", " reuse waited", " reuses waited", FP_ROW_COUNT, h->waits);
    put(o, "syncs", " synchronized", NULL, FP_ROW_COUNT, h->syncs);
    group(o, NULL, "Freed, then reused", first, 1);
    group(o, NULL, "Limit",
          put(o, "max_reserved", " host_max_reserved_mb", NULL, FP_ROW_LIMIT, h->max_reserved), 0);
}

int fp_report_host_oom_note(const fp_host_report *h, fp_sink *out)
{
    size_t held = h ? (size_t)h->stats.reserved_bytes[FP_ALL].current : 0;
    if (held >= FP_HOST_LARGE) {
        size_t idle = held - (size_t)h->stats.allocated_bytes[FP_ALL].current;
        fp_puts(out, "fragpool: note: ");
        fp_emit_size(out, held);
        fp_puts(out, " of host memory is pinned through fragpool (");
        fp_emit_size(out, idle);
        fp_puts(out, " of it idle in its cache); pinned pages stay out of the OS's reach: "
                     "host_max_cached_mb or host_max_reserved_mb limit them\n");
    }
    return fp_sink_flush(out);
}
