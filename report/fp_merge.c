/* fp_merge.c - `fragpool merge`: read back the JSON summaries of several
 * ranks (fp_jread.h) and print one row per rank and device plus a total.
 *
 * Invariants:
 *  - a CLI path: it may allocate (file text, tokens, rows), and frees
 *    everything on every path; errors are "PATH: what" in err;
 *  - a member that is absent or null reads as its default; anything else
 *    that is not an integer in range is an error naming file and member;
 *    `fragpool report` checks a summary with the same code
 *    (fp_merge_check), so both take or refuse the same files;
 *  - totals saturate at INT64_MAX, never wrap, and a total that did is
 *    said in one line under the table.
 */
#include "fp_merge.h"
#include "fp_jread.h"
#include "fp_report.h"
#include "fp_file.h"
#include "fp_vec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- merge: reading ---------------------------------------------------------------- */

typedef struct merge_row {
    int64_t rank; /* -1 when none                 */
    int64_t pid;  /* 0 when unknown               */
    int64_t device;
    int64_t peak_alloc; /* allocated.peak               */
    int64_t peak_res;   /* reserved.peak                */
    int64_t ooms;
    int64_t retries;
} merge_row;

typedef struct merge_rows {
    merge_row *v;
    size_t n, cap;
} merge_rows;

static int fail(char *err, size_t errlen, const char *path, const char *what, int rc)
{
    fp_sink s = fp_sink_buffer(err, errlen);
    fp_puts(&s, path);
    fp_puts(&s, ": ");
    fp_puts(&s, what);
    return rc;
}

static int fail_json(char *err, size_t errlen, const char *path, size_t pos, int rc)
{
    char what[64];
    fp_sink s = fp_sink_buffer(what, sizeof what);
    fp_puts(&s, "invalid JSON at byte ");
    fp_put_u64(&s, pos);
    return fail(err, errlen, path, what, rc);
}

/* read(2) for fp_read_all: retries EINTR, keeps errno in *ctx's err. */
typedef struct fd_source {
    int fd;
    int err;
} fd_source;

static long read_fd(void *ctx, char *buf, size_t n)
{
    fd_source *src = ctx;
    for (;;) {
        ssize_t r = read(src->fd, buf, n);
        if (r >= 0)
            return (long)r;
        if (errno != EINTR) {
            src->err = errno;
            return -1;
        }
    }
}

/* The whole file in a malloc'd, NUL-terminated buffer; only a regular
 * file is read (fp_file_open_read: never a FIFO or /dev/zero). */
static int read_file(const char *path, char **text, size_t *len, char *why, size_t wlen)
{
    fd_source src = {-1, 0};
    int rc = fp_file_open_read(path, &src.fd, why, wlen);
    if (rc)
        return rc;
    rc = fp_read_all(read_fd, &src, text, len);
    close(src.fd);
    if (rc == EIO) {
        rc = src.err;
        fp_sink w = fp_sink_buffer(why, wlen);
        fp_puts(&w, "read error: ");
        fp_puts(&w, strerror(rc));
    }
    return rc;
}

/* One integer member of a summary, as merge reads it. */
typedef struct merge_field {
    const char *key, *sub; /* sub may be NULL                        */
    int64_t dflt, min;     /* absent or null: dflt; smaller: an error */
} merge_field;

/* "PATH: devices.0.reserved.peak is 1e99, not an integer from 0 to ..." */
static int fail_field(const fp_jdoc *d, int v, int dev, const merge_field *f, const char *path,
                      char *err, size_t errlen)
{
    fp_sink s = fp_sink_buffer(err, errlen);
    fp_puts(&s, path);
    fp_puts(&s, ": ");
    if (dev >= 0) {
        fp_puts(&s, "devices.");
        fp_put_u64(&s, (uint64_t)dev);
        fp_putc(&s, '.');
    }
    fp_puts(&s, f->key);
    if (f->sub) {
        fp_putc(&s, '.');
        fp_puts(&s, f->sub);
    }
    fp_puts(&s, " is ");
    size_t n = d->tok[v].end - d->tok[v].start;
    if (d->tok[v].type == FP_JNUM)
        fp_put_visible(&s, d->text + d->tok[v].start, n < 40 ? n : 40);
    else
        fp_puts(&s, d->tok[v].type == FP_JSTR ? "a string" : "not a number");
    fp_puts(&s, ", not an integer from ");
    fp_put_i64(&s, f->min);
    fp_puts(&s, " to 9223372036854775807");
    return EINVAL;
}

/* The integer member f of object t (device dev, -1 for the root): absent
 * or null reads as f->dflt; anything but an integer from f->min up, an
 * error naming the file and the member. */
static int read_int(const fp_jdoc *d, int t, int dev, const merge_field *f, int64_t *out,
                    const char *path, char *err, size_t errlen)
{
    int v = fp_jdoc_get(d, t, f->key);
    if (f->sub && v >= 0 && d->tok[v].type != FP_JNULL)
        v = fp_jdoc_get(d, v, f->sub);
    if (v < 0 || d->tok[v].type == FP_JNULL) {
        *out = f->dflt;
        return 0;
    }
    if (fp_jdoc_int(d, v, out) || *out < f->min)
        return fail_field(d, v, dev, f, path, err, errlen);
    return 0;
}

static int rows_push(merge_rows *rows, const merge_row *r)
{
    merge_row *v = fp_vec_grow(rows->v, &rows->cap, rows->n + 1, sizeof *v, 16);
    if (!v)
        return ENOMEM;
    rows->v = v;
    rows->v[rows->n++] = *r;
    return 0;
}

/* Reads every member merge uses, in order; rows may be NULL (a check). */
static int merge_doc(const fp_jdoc *d, merge_rows *rows, const char *path, char *err, size_t errlen)
{
    int64_t version;
    if (!fp_jdoc_is(d, 0, FP_JOBJ))
        return fail(err, errlen, path,
                    "not a fragpool summary (its JSON is not an object; "
                    "docs/summary.md)",
                    EINVAL);
    if (fp_jdoc_int(d, fp_jdoc_path(d, "version"), &version) || version != 1)
        return fail(err, errlen, path,
                    "not a fragpool summary (\"version\" is not the "
                    "number 1; docs/summary.md)",
                    EINVAL);
    int devs = fp_jdoc_path(d, "devices");
    if (!fp_jdoc_is(d, devs, FP_JARR))
        return fail(err, errlen, path, "no \"devices\" array", EINVAL);
    static const merge_field rank = {"rank", NULL, -1, 0}, pid = {"pid", NULL, 0, 0};
    static const merge_field fields[5] = {{"device", NULL, 0, 0},
                                          {"allocated", "peak", 0, 0},
                                          {"reserved", "peak", 0, 0},
                                          {"oom_count", NULL, 0, 0},
                                          {"alloc_retries", NULL, 0, 0}};
    merge_row base = {0};
    int rc = read_int(d, 0, -1, &rank, &base.rank, path, err, errlen);
    if (!rc)
        rc = read_int(d, 0, -1, &pid, &base.pid, path, err, errlen);
    for (int i = 0; i < d->tok[devs].n && !rc; i++) {
        int t = fp_jdoc_at(d, devs, (size_t)i);
        merge_row r = base;
        int64_t *dst[5] = {&r.device, &r.peak_alloc, &r.peak_res, &r.ooms, &r.retries};
        for (int k = 0; k < 5 && !rc; k++)
            rc = read_int(d, t, i, &fields[k], dst[k], path, err, errlen);
        if (!rc && rows && rows_push(rows, &r))
            rc = fail(err, errlen, path, "out of memory", ENOMEM);
    }
    return rc;
}

int fp_merge_check(const fp_jdoc *d, const char *path, char *err, size_t errlen)
{
    return merge_doc(d, NULL, path, err, errlen);
}

static int merge_file(const char *path, merge_rows *rows, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0, pos = 0;
    char why[128];
    int rc = read_file(path, &text, &len, why, sizeof why);
    if (rc)
        return fail(err, errlen, path, rc == ENOMEM ? "out of memory" : why, rc);
    size_t cap = len / 2 + 2;
    fp_jtok *tok = malloc(cap * sizeof *tok);
    fp_jdoc d;
    if (!tok)
        rc = fail(err, errlen, path, "out of memory", ENOMEM);
    else if ((rc = fp_jdoc_parse(&d, text, len, tok, cap, &pos)) != 0)
        rc = fail_json(err, errlen, path, pos, rc);
    else
        rc = merge_doc(&d, rows, path, err, errlen);
    free(tok);
    free(text);
    return rc;
}

/* ---- merge: writing ------------------------------------------------------------------ */

/* " text |" with text right-aligned in width columns. */
static void put_cell(fp_sink *s, const char *text, size_t n, size_t width)
{
    fp_putc(s, ' ');
    fp_put_pad(s, ' ', n < width ? width - n : 0);
    fp_put(s, text, n);
    fp_put(s, " |", 2);
}

typedef struct cell_buf {
    char buf[40];
    fp_sink s;
} cell_buf;

static fp_sink *cell_begin(cell_buf *c)
{
    c->s = fp_sink_buffer(c->buf, sizeof c->buf);
    return &c->s;
}

static void cell_end(cell_buf *c, fp_sink *out, size_t width)
{
    put_cell(out, c->buf, fp_sink_length(&c->s), width);
}

static const size_t column_width[8] = {5, 9, 3, 14, 13, 13, 4, 7};

static void put_header(fp_sink *s)
{
    static const char *const head[8] = {"Rank",          "PID",           "Dev",  "Peak allocated",
                                        "Peak reserved", "Fragmentation", "OOMs", "Retries"};
    fp_putc(s, '|');
    for (int i = 0; i < 8; i++)
        put_cell(s, head[i], strlen(head[i]), column_width[i]);
    fp_putc(s, '\n');
    fp_putc(s, '|');
    for (int i = 0; i < 8; i++) {
        fp_put_pad(s, '-', column_width[i] + 2);
        fp_putc(s, '|');
    }
    fp_putc(s, '\n');
}

/* One row; rank/pid/dev < 0 print as "-" (or the label for the total). */
static void put_row(fp_sink *s, const merge_row *r, const char *label)
{
    cell_buf c;
    int64_t id[3] = {r->rank, r->pid > 0 ? r->pid : -1, r->device};
    fp_putc(s, '|');
    for (int i = 0; i < 3; i++) {
        fp_sink *o = cell_begin(&c);
        if (label)
            fp_puts(o, i == 0 ? label : "");
        else if (id[i] < 0)
            fp_putc(o, '-');
        else
            fp_put_i64(o, id[i]);
        cell_end(&c, s, column_width[i]);
    }
    fp_emit_size(cell_begin(&c), r->peak_alloc > 0 ? (size_t)r->peak_alloc : 0);
    cell_end(&c, s, column_width[3]);
    fp_emit_size(cell_begin(&c), r->peak_res > 0 ? (size_t)r->peak_res : 0);
    cell_end(&c, s, column_width[4]);
    uint64_t res = r->peak_res > 0 ? (uint64_t)r->peak_res : 0;
    uint64_t alloc = r->peak_alloc > 0 ? (uint64_t)r->peak_alloc : 0;
    fp_put_percent(cell_begin(&c), res > alloc ? res - alloc : 0, res);
    cell_end(&c, s, column_width[5]);
    fp_put_i64(cell_begin(&c), r->ooms);
    cell_end(&c, s, column_width[6]);
    fp_put_i64(cell_begin(&c), r->retries);
    cell_end(&c, s, column_width[7]);
    fp_putc(s, '\n');
}

static int row_before(const merge_row *a, const merge_row *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->device < b->device;
}

/* Stable insertion sort by (rank, device). */
static void sort_rows(merge_rows *rows)
{
    for (size_t i = 1; i < rows->n; i++) {
        merge_row r = rows->v[i];
        size_t j = i;
        for (; j > 0 && row_before(&r, &rows->v[j - 1]); j--)
            rows->v[j] = rows->v[j - 1];
        rows->v[j] = r;
    }
}

/* Sums saturate at INT64_MAX, setting *over: every term is >= 0
 * (read_int). */
static int64_t sum_saturated(int64_t a, int64_t b, int *over)
{
    if (a > INT64_MAX - b) {
        *over = 1;
        return INT64_MAX;
    }
    return a + b;
}

/* The total row; 1 when a sum passed INT64_MAX (and shows it). */
static int total_of(const merge_rows *rows, merge_row *t)
{
    int over = 0;
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < rows->n; i++) {
        t->peak_alloc = sum_saturated(t->peak_alloc, rows->v[i].peak_alloc, &over);
        t->peak_res = sum_saturated(t->peak_res, rows->v[i].peak_res, &over);
        t->ooms = sum_saturated(t->ooms, rows->v[i].ooms, &over);
        t->retries = sum_saturated(t->retries, rows->v[i].retries, &over);
    }
    return over;
}

static void write_table(fp_sink *out, const merge_rows *rows, size_t nfiles)
{
    merge_row total;
    int over = total_of(rows, &total);
    fp_puts(out, "fragpool merge: ");
    fp_put_u64(out, nfiles);
    fp_puts(out, nfiles == 1 ? " summary, " : " summaries, ");
    fp_put_u64(out, rows->n);
    fp_puts(out, rows->n == 1 ? " device\n" : " devices\n");
    put_header(out);
    for (size_t i = 0; i < rows->n; i++)
        put_row(out, &rows->v[i], NULL);
    put_row(out, &total, "total");
    fp_puts(out, "(total peaks are sums of per-rank peaks; fragmentation is "
                 "1 - total peak allocated / total peak reserved)\n");
    if (over)
        fp_puts(out, "(a total passed 9223372036854775807, the largest a summary holds: "
                     "the total row shows that largest value, not the sum)\n");
}

int fp_merge_json(const char *const *paths, size_t n, fp_sink *out, char *err, size_t errlen)
{
    merge_rows rows = {NULL, 0, 0};
    int rc = 0;
    if (err && errlen)
        err[0] = '\0';
    if (!n)
        rc = fail(err, errlen, "merge", "no summaries given", EINVAL);
    for (size_t i = 0; i < n && !rc; i++)
        rc = merge_file(paths[i], &rows, err, errlen);
    if (!rc) {
        sort_rows(&rows);
        write_table(out, &rows, n);
        rc = fp_sink_flush(out);
        if (rc)
            fail(err, errlen, "cannot write the table", strerror(rc), rc);
    }
    free(rows.v);
    return rc;
}
