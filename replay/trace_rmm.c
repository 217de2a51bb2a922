/* trace_rmm.c - RAPIDS RMM's logging_resource_adaptor CSV log as a trace:
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     140573312345856,1634567890.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020
 *
 * Actions: allocate (an `a` row: a new id for the pointer), free (RMM's
 * name; its documentation also says deallocate, read the same: an `f` row
 * for the allocation live at the pointer) and "allocate failure" (an `o`
 * row: the request the run was refused).  Thread and Time are not used
 * (rows replay in file order) but must be there.  Pointer is 0x and hex
 * digits (any text on a failure row), Size decimal, Stream 0x-hex or
 * decimal: streams are numbered 0 (the null stream), then 1, 2, ... in
 * order of first use.
 * Invariants: the header is the first line, as RMM writes it; a row that is
 * not six fields of those forms stops the load with its line and field; a
 * free of a pointer that is not live is skipped and counted
 * (t->dropped_frees), an allocate at a live pointer frees the old one
 * first (its free fell outside the log) and is counted (t->reused_live).
 */
#include "fp_hmap.h"
#include "trace_read.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char header[] = "Thread,Time,Action,Pointer,Size,Stream";
static const char *const fields[] = {"Thread", "Time", "Action", "Pointer", "Size", "Stream"};

typedef struct rmm_state {
    fp_hmap live;    /* pointer -> trace id        */
    fp_hmap streams; /* stream value -> its number */
    uint64_t next_id;
} rmm_state;

static int bad(fp_reader *r, int k, const char *p, size_t n, const char *want)
{
    char shown[4 * TRACE_SHOW + 8];
    fp_trace_show(shown, sizeof shown, p, n);
    snprintf(r->err, r->errlen, "%s:%zu: RMM log field %s is %s, not %s", r->path, r->lineno,
             fields[k], shown, want);
    return EINVAL;
}

/* "0x" and 1 to 16 hex digits. */
static int parse_hex(const char *p, size_t n, uint64_t *out)
{
    if (n < 3 || n > 18 || p[0] != '0' || (p[1] != 'x' && p[1] != 'X'))
        return EINVAL;
    uint64_t v = 0;
    for (size_t i = 2; i < n; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d > 15)
            return EINVAL;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static int oom(fp_reader *r, const fp_trace *t)
{
    if (!r->lineno)
        snprintf(r->err, r->errlen, "%s: out of memory before the first line", r->path);
    else
        snprintf(r->err, r->errlen, "%s:%zu: out of memory after %zu events", r->path, r->lineno,
                 t->n);
    return ENOMEM;
}

static int stream_number(fp_reader *r, rmm_state *st, const char *p, size_t n, uint32_t *out)
{
    uint64_t v;
    if (parse_hex(p, n, &v) && fp_trace_parse_u64(p, n, UINT64_MAX, &v))
        return bad(r, 5, p, n, "a stream (0x and hex digits, or a decimal number)");
    if (!v) {
        *out = 0;
        return 0;
    }
    size_t i = fp_hmap_slot(&st->streams, v);
    if (!fp_hmap_at(&st->streams, i) && fp_trace_map_set(&st->streams, v, st->streams.count + 1))
        return ENOMEM;
    *out = (uint32_t)fp_hmap_at(&st->streams, fp_hmap_slot(&st->streams, v));
    return 0;
}

static int take_alloc(rmm_state *st, fp_trace *t, uint64_t ptr, uint64_t size, uint32_t s)
{
    size_t i = fp_hmap_slot(&st->live, ptr);
    if (fp_hmap_at(&st->live, i)) { /* its free fell outside the log: close it first */
        if (fp_trace_push(t, 'f', fp_hmap_at(&st->live, i), 0, s))
            return ENOMEM;
        t->reused_live++;
    }
    uint64_t id = ++st->next_id;
    if (fp_trace_map_set(&st->live, ptr, id))
        return ENOMEM;
    return fp_trace_push(t, 'a', id, size, s);
}

static int take_free(rmm_state *st, fp_trace *t, uint64_t ptr, uint64_t size, uint32_t s)
{
    size_t i = fp_hmap_slot(&st->live, ptr);
    if (!fp_hmap_at(&st->live, i)) {
        t->dropped_frees++;
        return 0;
    }
    uint64_t id = fp_hmap_at(&st->live, i);
    fp_hmap_erase(&st->live, i);
    return fp_trace_push(t, 'f', id, size, s);
}

static int take_row(fp_reader *r, rmm_state *st, fp_trace *t, const char *s, size_t n)
{
    const char *f[6];
    size_t fl[6];
    size_t k = fp_trace_split(s, n, f, fl, 6);
    if (k != 6) {
        snprintf(r->err, r->errlen, "%s:%zu: not an RMM log row (%s%zu field%s; want %s)", r->path,
                 r->lineno, k > 6 ? "more than " : "", k > 6 ? (size_t)6 : k, k == 1 ? "" : "s",
                 header);
        return EINVAL;
    }
    if (!fl[0] || !fl[1])
        return bad(r, fl[0] ? 1 : 0, "", 0, "a value (an empty field)");
    int act = fl[2] == 8 && !memcmp(f[2], "allocate", 8) ? 'a'
              : (fl[2] == 4 && !memcmp(f[2], "free", 4)) ||
                      (fl[2] == 10 && !memcmp(f[2], "deallocate", 10))
                  ? 'f'
              : fl[2] == 16 && !memcmp(f[2], "allocate failure", 16) ? 'o'
                                                                     : 0;
    if (!act)
        return bad(r, 2, f[2], fl[2], "allocate, free, deallocate or allocate failure");
    uint64_t ptr = 0, size;
    if (act != 'o' && parse_hex(f[3], fl[3], &ptr))
        return bad(r, 3, f[3], fl[3], "a pointer (0x and 1 to 16 hex digits)");
    if (fp_trace_parse_u64(f[4], fl[4], UINT64_MAX, &size))
        return bad(r, 4, f[4], fl[4], "a decimal number from 0 to 18446744073709551615");
    uint32_t stream = 0; /* set by stream_number on success (gcc 13 cannot see it) */
    int rc = stream_number(r, st, f[5], fl[5], &stream);
    if (rc)
        return rc == ENOMEM ? oom(r, t) : rc;
    rc = act == 'a'   ? take_alloc(st, t, ptr, size, stream)
         : act == 'f' ? take_free(st, t, ptr, size, stream)
                      : fp_trace_push(t, 'o', 0, size, stream);
    return rc ? oom(r, t) : 0;
}

static int take_line(fp_reader *r, rmm_state *st, fp_trace *t)
{
    size_t n = fp_reader_trim(r);
    if (r->lineno == 1) {
        if (n == sizeof header - 1 && !memcmp(r->line, header, n))
            return 0;
        char shown[4 * TRACE_SHOW + 8];
        fp_trace_show(shown, sizeof shown, r->line, r->len);
        snprintf(r->err, r->errlen, "%s:1: the RMM log header is %s, not '%s'", r->path, shown,
                 header);
        return EINVAL;
    }
    return n ? take_row(r, st, t, r->line, n) : 0;
}

int fp_trace_read_rmm(fp_reader *r, fp_trace *t)
{
    rmm_state st = {0};
    int rc = fp_hmap_init(&st.live, 4096) || fp_hmap_init(&st.streams, 64) ? ENOMEM : 0;
    if (rc)
        rc = oom(r, t);
    int got = 1;
    while (!rc && !(rc = fp_reader_line(r, &got)) && got)
        rc = take_line(r, &st, t);
    fp_hmap_fini(&st.live);
    fp_hmap_fini(&st.streams);
    return rc;
}
