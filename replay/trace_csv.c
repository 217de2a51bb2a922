/* trace_csv.c - fragpool's own trace rows (docs/replay.md, "The trace
 * format"): seq,op,id,size[,stream[,thread]], with an optional header
 * line.
 *
 * Each line is blank (only spaces, tabs, CR), a comment ('#' first), the
 * optional header (the first line that is neither), or a row.  Trailing
 * spaces, tabs and a CR are ignored; anything else is parsed strictly:
 * unsigned decimal digits only (no sign, space, 0x, or value past the
 * field's range), op one of a, f, o, j, l, s, r (s and r rows, the shim's
 * segment events, are checked and are no events; an s row's address and
 * size go to the trace's segments, fp_trace_push_segment).  A thread is any number; the
 * trace numbers them 0, 1, ... in order of first use (fp_trace_set_thread),
 * and a trace without the column is one thread, 0.
 * Invariant: a malformed line stops the load with its line and field.
 */
#include "trace_read.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const field_names[] = {"seq", "op", "id", "size", "stream", "thread"};

static int bad_field(fp_reader *r, int k, const char *p, size_t n, const char *want)
{
    char shown[4 * TRACE_SHOW + 8];
    fp_trace_show(shown, sizeof shown, p, n);
    snprintf(r->err, r->errlen, "%s:%zu: field %s is %s, not %s", r->path, r->lineno,
             field_names[k], shown, want);
    return EINVAL;
}

static int parse_row(fp_reader *r, const char *s, size_t n, fp_tracer_event *e, uint64_t *thread)
{
    static const char num[] = "a decimal number from 0 to 18446744073709551615";
    const char *f[6];
    size_t fl[6];
    size_t k = fp_trace_split(s, n, f, fl, 6);
    if (k < 4 || k > 6) {
        snprintf(r->err, r->errlen,
                 "%s:%zu: not a trace row (%s%zu field%s; want "
                 "seq,op,id,size[,stream[,thread]] with op a, f, o, j or l)",
                 r->path, r->lineno, k > 6 ? "more than " : "", k > 6 ? (size_t)6 : k,
                 k == 1 ? "" : "s");
        return EINVAL;
    }
    uint64_t seq, st = 0;
    *thread = 0;
    if (fp_trace_parse_u64(f[0], fl[0], UINT64_MAX, &seq))
        return bad_field(r, 0, f[0], fl[0], num);
    if (fl[1] != 1 || !f[1][0] || !strchr("afsrojl", f[1][0]))
        return bad_field(r, 1, f[1], fl[1], "a, f, s, r, o, j or l");
    if (fp_trace_parse_u64(f[2], fl[2], UINT64_MAX, &e->id))
        return bad_field(r, 2, f[2], fl[2], num);
    if (fp_trace_parse_u64(f[3], fl[3], UINT64_MAX, &e->size))
        return bad_field(r, 3, f[3], fl[3], num);
    if (k == 5 && fp_trace_parse_u64(f[4], fl[4], UINT32_MAX, &st))
        return bad_field(r, 4, f[4], fl[4], "a decimal number from 0 to 4294967295");
    if (k == 6 && fp_trace_parse_u64(f[5], fl[5], UINT64_MAX, thread))
        return bad_field(r, 5, f[5], fl[5], num);
    e->op = f[1][0];
    e->stream = (uint32_t)st;
    return 0;
}

static int is_header(const char *s, size_t n)
{
    return (n == 14 && !memcmp(s, "seq,op,id,size", 14)) ||
           (n == 21 && !memcmp(s, "seq,op,id,size,stream", 21)) ||
           (n == 28 && !memcmp(s, "seq,op,id,size,stream,thread", 28));
}

/* One line: skipped, or an a/f/o event pushed onto t. */
static int take_line(fp_reader *r, fp_trace *t)
{
    size_t n = fp_reader_trim(r);
    const char *s = r->line;
    if (!n)
        return 0;
    int first = !r->header_seen;
    r->header_seen = 1;
    if (first && is_header(s, n))
        return 0;
    fp_tracer_event e = {0};
    uint64_t thread;
    int rc = parse_row(r, s, n, &e, &thread);
    if (!rc && e.op == 's' && e.size && (rc = fp_trace_push_segment(t, e.id, e.size)))
        snprintf(r->err, r->errlen, "%s:%zu: out of memory after %zu events", r->path, r->lineno,
                 t->n);
    if (rc || e.op == 's' || e.op == 'r')
        return rc;
    rc = fp_trace_push(t, e.op, e.id, e.size, e.stream);
    if (!rc)
        rc = fp_trace_set_thread(t, thread);
    if (rc == E2BIG)
        snprintf(r->err, r->errlen, "%s:%zu: more than %d threads; fragpool replays at most %d",
                 r->path, r->lineno, FP_TRACE_MAX_THREADS, FP_TRACE_MAX_THREADS);
    else if (rc)
        snprintf(r->err, r->errlen, "%s:%zu: out of memory after %zu events", r->path, r->lineno,
                 t->n);
    if (!rc && e.op == 'j' && !t->thread_cache)
        t->thread_cache = (size_t)(e.size > SIZE_MAX ? SIZE_MAX : e.size);
    return rc;
}

int fp_trace_read_csv(fp_reader *r, fp_trace *t)
{
    int rc = 0, got = 1;
    while (!rc && !(rc = fp_reader_line(r, &got)) && got)
        rc = take_line(r, t);
    return rc;
}
