/* fp_merge.c - `fragpool merge`: read back the JSON summaries of several
 * ranks and print one row per rank and device plus a total; and the small
 * JSON reader it uses (also used by the tests to validate the summary).
 *
 * The reader parses one RFC 8259 value into a flat array of tokens that the
 * caller provides (fp_jtok): each container is followed by its children,
 * and every token knows the index just past its subtree, so lookups skip
 * whole values without recursion.
 *
 * Invariants:
 *  - the reader never allocates and never reads past len; depth <= 64;
 *  - object keys are compared raw (our schema's keys have no escapes);
 *  - merge is a CLI path: it may allocate (file text, tokens, rows), and
 *    frees everything on every path; errors are "PATH: what" in err.
 */
#include "fp_report.h"
#include "fp_file.h"
#include "fp_vec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FP_JMAX_DEPTH 64

/* ---- the reader ------------------------------------------------------------------ */

typedef struct fp_jparser {
    const char *p;       /* text                               */
    size_t n, i;         /* its length, the next byte          */
    fp_jtok *tok;        /* the caller's tokens                */
    size_t cap;          /* their number                       */
    int ntok;            /* tokens used                        */
    int depth;           /* open containers                    */
} fp_jparser;

static int fp_jvalue(fp_jparser *ps);

static void fp_jws(fp_jparser *ps)
{
    while (ps->i < ps->n && (ps->p[ps->i] == ' ' || ps->p[ps->i] == '\t' ||
                             ps->p[ps->i] == '\n' || ps->p[ps->i] == '\r'))
        ps->i++;
}

static int fp_jpeek(fp_jparser *ps)
{
    fp_jws(ps);
    return ps->i < ps->n ? (unsigned char)ps->p[ps->i] : -1;
}

static int fp_jnew(fp_jparser *ps, int type, size_t start)
{
    if ((size_t)ps->ntok >= ps->cap || ps->ntok == INT32_MAX)
        return -1;
    fp_jtok *t = &ps->tok[ps->ntok];
    t->type = type;
    t->start = start;
    t->end = start;
    t->n = 0;
    t->next = ++ps->ntok;
    return ps->ntok - 1;
}

static int fp_jishex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* One escape after the backslash at p[i]; returns bytes used or 0. */
static size_t fp_jescape_len(const char *p, size_t i, size_t n)
{
    if (i + 1 >= n)
        return 0;
    if (p[i + 1] && strchr("\"\\/bfnrt", p[i + 1]))
        return 2;
    if (p[i + 1] != 'u' || i + 6 > n)
        return 0;
    for (size_t k = 2; k < 6; k++)
        if (!fp_jishex(p[i + k]))
            return 0;
    return 6;
}

static int fp_jstring(fp_jparser *ps)
{
    int t = fp_jnew(ps, FP_JSTR, ps->i + 1);
    if (t < 0)
        return ENOMEM;
    for (ps->i++; ps->i < ps->n; ) {
        unsigned char c = (unsigned char)ps->p[ps->i];
        if (c == '"') {
            ps->tok[t].end = ps->i++;
            return 0;
        }
        if (c < 0x20)
            return EINVAL;
        size_t k = c == '\\' ? fp_jescape_len(ps->p, ps->i, ps->n) : 1;
        if (!k)
            return EINVAL;
        ps->i += k;
    }
    return EINVAL;
}

static size_t fp_jdigits(fp_jparser *ps)
{
    size_t start = ps->i;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9')
        ps->i++;
    return ps->i - start;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int fp_jnumber(fp_jparser *ps)
{
    int t = fp_jnew(ps, FP_JNUM, ps->i);
    if (t < 0)
        return ENOMEM;
    if (ps->p[ps->i] == '-')
        ps->i++;
    size_t lead = ps->i;
    size_t nd = fp_jdigits(ps);
    if (!nd || (nd > 1 && ps->p[lead] == '0'))
        return EINVAL;
    if (ps->i < ps->n && ps->p[ps->i] == '.') {
        ps->i++;
        if (!fp_jdigits(ps))
            return EINVAL;
    }
    if (ps->i < ps->n && (ps->p[ps->i] == 'e' || ps->p[ps->i] == 'E')) {
        ps->i++;
        if (ps->i < ps->n && (ps->p[ps->i] == '+' || ps->p[ps->i] == '-'))
            ps->i++;
        if (!fp_jdigits(ps))
            return EINVAL;
    }
    ps->tok[t].end = ps->i;
    return 0;
}

static int fp_jliteral(fp_jparser *ps)
{
    static const struct { const char *word; int type; } lit[] = {
        {"true", FP_JBOOL}, {"false", FP_JBOOL}, {"null", FP_JNULL}};
    for (size_t k = 0; k < 3; k++) {
        size_t len = strlen(lit[k].word);
        if (ps->n - ps->i >= len && !memcmp(ps->p + ps->i, lit[k].word, len)) {
            int t = fp_jnew(ps, lit[k].type, ps->i);
            if (t < 0)
                return ENOMEM;
            ps->i += len;
            ps->tok[t].end = ps->i;
            return 0;
        }
    }
    return EINVAL;
}

/* The members or elements of a container whose token is t; obj selects
 * "key": value pairs. */
static int fp_jmembers(fp_jparser *ps, int t, int obj)
{
    char close = obj ? '}' : ']';
    ps->i++;
    if (fp_jpeek(ps) == close) {
        ps->i++;
        return 0;
    }
    for (;;) {
        int rc;
        if (obj) {
            if (fp_jpeek(ps) != '"')
                return EINVAL;
            if ((rc = fp_jstring(ps)) != 0)
                return rc;
            if (fp_jpeek(ps) != ':')
                return EINVAL;
            ps->i++;
        }
        if ((rc = fp_jvalue(ps)) != 0)
            return rc;
        ps->tok[t].n++;
        int c = fp_jpeek(ps);
        ps->i++;
        if (c == close)
            return 0;
        if (c != ',') {
            ps->i--;
            return EINVAL;
        }
    }
}

static int fp_jcontainer(fp_jparser *ps, int obj)
{
    int t = fp_jnew(ps, obj ? FP_JOBJ : FP_JARR, ps->i);
    if (t < 0)
        return ENOMEM;
    if (++ps->depth > FP_JMAX_DEPTH)
        return EINVAL;
    int rc = fp_jmembers(ps, t, obj);
    if (rc)
        return rc;
    ps->depth--;
    ps->tok[t].end = ps->i;
    ps->tok[t].next = ps->ntok;
    return 0;
}

static int fp_jvalue(fp_jparser *ps)
{
    int c = fp_jpeek(ps);
    if (c == '{' || c == '[')
        return fp_jcontainer(ps, c == '{');
    if (c == '"')
        return fp_jstring(ps);
    if (c == '-' || (c >= '0' && c <= '9'))
        return fp_jnumber(ps);
    if (c < 0)
        return EINVAL;
    return fp_jliteral(ps);
}

int fp_jdoc_parse(fp_jdoc *d, const char *text, size_t len, fp_jtok *tok,
                  size_t cap, size_t *errpos)
{
    fp_jparser ps = {text, len, 0, tok, cap, 0, 0};
    int rc = text ? fp_jvalue(&ps) : EINVAL;
    if (!rc && fp_jpeek(&ps) >= 0)
        rc = EINVAL;                    /* something after the value */
    if (errpos)
        *errpos = ps.i;
    d->text = text;
    d->tok = tok;
    d->ntok = rc ? 0 : ps.ntok;
    return rc;
}

/* ---- lookups ---------------------------------------------------------------------- */

static int fp_jvalid(const fp_jdoc *d, int t, int type)
{
    return t >= 0 && t < d->ntok && d->tok[t].type == type;
}

static int fp_jget_n(const fp_jdoc *d, int obj, const char *key, size_t klen)
{
    if (!fp_jvalid(d, obj, FP_JOBJ))
        return -1;
    int i = obj + 1;
    for (int m = 0; m < d->tok[obj].n; m++) {
        const fp_jtok *k = &d->tok[i];
        if (k->end - k->start == klen && !memcmp(d->text + k->start, key, klen))
            return i + 1;
        i = d->tok[i + 1].next;
    }
    return -1;
}

int fp_jdoc_get(const fp_jdoc *d, int obj, const char *key)
{
    return fp_jget_n(d, obj, key, strlen(key));
}

int fp_jdoc_at(const fp_jdoc *d, int arr, size_t idx)
{
    if (!fp_jvalid(d, arr, FP_JARR) || idx >= (size_t)d->tok[arr].n)
        return -1;
    int i = arr + 1;
    while (idx--)
        i = d->tok[i].next;
    return i;
}

/* A path segment as an array index; 0 when it is not all digits. */
static int fp_jindex(const char *p, size_t n, size_t *idx)
{
    *idx = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || *idx > SIZE_MAX / 10 - 1)
            return 0;
        *idx = *idx * 10 + (size_t)(p[i] - '0');
    }
    return n > 0;
}

int fp_jdoc_path(const fp_jdoc *d, const char *path)
{
    int t = d->ntok ? 0 : -1;
    while (t >= 0 && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path), idx;
        if (d->tok[t].type == FP_JARR && fp_jindex(path, n, &idx))
            t = fp_jdoc_at(d, t, idx);
        else
            t = fp_jget_n(d, t, path, n);
        path += dot ? n + 1 : n;
    }
    return t;
}

int fp_jdoc_int(const fp_jdoc *d, int t, int64_t *v)
{
    if (!fp_jvalid(d, t, FP_JNUM))
        return EINVAL;
    const char *p = d->text + d->tok[t].start, *end = d->text + d->tok[t].end;
    int neg = *p == '-';
    uint64_t u = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (p += neg; p < end; p++) {
        if (*p < '0' || *p > '9')
            return EINVAL;              /* a fraction or an exponent */
        unsigned dgt = (unsigned)(*p - '0');
        if (u > (lim - dgt) / 10)
            return EINVAL;
        u = u * 10 + dgt;
    }
    *v = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

/* ---- string unescaping ------------------------------------------------------------- */

typedef struct fp_jout {
    char *buf;
    size_t len, k;       /* capacity, bytes produced (kept or not) */
} fp_jout;

static void fp_jout_byte(fp_jout *o, unsigned char c)
{
    if (o->k + 1 < o->len)
        o->buf[o->k] = (char)c;
    o->k++;
}

static void fp_jout_utf8(fp_jout *o, uint32_t cp)
{
    if (cp < 0x80) {
        fp_jout_byte(o, (unsigned char)cp);
    } else if (cp < 0x800) {
        fp_jout_byte(o, (unsigned char)(0xC0 | cp >> 6));
        fp_jout_byte(o, (unsigned char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        fp_jout_byte(o, (unsigned char)(0xE0 | cp >> 12));
        fp_jout_byte(o, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
        fp_jout_byte(o, (unsigned char)(0x80 | (cp & 0x3F)));
    } else {
        fp_jout_byte(o, (unsigned char)(0xF0 | cp >> 18));
        fp_jout_byte(o, (unsigned char)(0x80 | ((cp >> 12) & 0x3F)));
        fp_jout_byte(o, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
        fp_jout_byte(o, (unsigned char)(0x80 | (cp & 0x3F)));
    }
}

static uint32_t fp_jhex4(const char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* The \u escape at p (validated by the parser); a surrogate pair takes
 * both escapes, a lone surrogate becomes U+FFFD.  Returns bytes used. */
static size_t fp_junicode(const char *p, const char *end, uint32_t *cp)
{
    *cp = fp_jhex4(p + 2);
    if (*cp >= 0xDC00 && *cp <= 0xDFFF)
        *cp = 0xFFFD;
    if (*cp < 0xD800 || *cp > 0xDBFF)
        return 6;
    if (end - p >= 12 && p[6] == '\\' && p[7] == 'u') {
        uint32_t lo = fp_jhex4(p + 8);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            return 12;
        }
    }
    *cp = 0xFFFD;
    return 6;
}

static char fp_jsimple(char c)
{
    return c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r'
         : c == 't' ? '\t' : c;
}

size_t fp_jdoc_str(const fp_jdoc *d, int t, char *buf, size_t len)
{
    if (!fp_jvalid(d, t, FP_JSTR))
        return (size_t)-1;
    fp_jout o = {buf, len, 0};
    const char *p = d->text + d->tok[t].start, *end = d->text + d->tok[t].end;
    while (p < end) {
        if (*p != '\\') {
            fp_jout_byte(&o, (unsigned char)*p++);
        } else if (p[1] == 'u') {
            uint32_t cp;
            p += fp_junicode(p, end, &cp);
            fp_jout_utf8(&o, cp);
        } else {
            fp_jout_byte(&o, (unsigned char)fp_jsimple(p[1]));
            p += 2;
        }
    }
    if (len)
        buf[o.k < len ? o.k : len - 1] = '\0';
    return o.k;
}

/* ---- merge: reading ---------------------------------------------------------------- */

typedef struct fp_mrow {
    int64_t rank;        /* -1 when none                 */
    int64_t pid;         /* 0 when unknown               */
    int64_t device;
    int64_t peak_alloc;  /* allocated.peak               */
    int64_t peak_res;    /* reserved.peak                */
    int64_t ooms;
    int64_t retries;
} fp_mrow;

typedef struct fp_mrows {
    fp_mrow *v;
    size_t n, cap;
} fp_mrows;

static int fp_merr(char *err, size_t errlen, const char *path, const char *what,
                   int rc)
{
    fp_sink s = fp_sink_buffer(err, errlen);
    fp_puts(&s, path);
    fp_puts(&s, ": ");
    fp_puts(&s, what);
    return rc;
}

static int fp_merr_json(char *err, size_t errlen, const char *path, size_t pos,
                        int rc)
{
    fp_sink s = fp_sink_buffer(err, errlen);
    fp_puts(&s, path);
    fp_puts(&s, ": invalid JSON at byte ");
    fp_put_u64(&s, pos);
    return rc;
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
typedef struct fp_mfield {
    const char *key, *sub;   /* sub may be NULL                        */
    int64_t dflt, min;       /* absent or null: dflt; smaller: an error */
} fp_mfield;

/* "PATH: devices.0.reserved.peak is 1e99, not an integer from 0 to ..." */
static int fp_merr_field(const fp_jdoc *d, int v, int dev, const fp_mfield *f,
                         const char *path, char *err, size_t errlen)
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
static int fp_mint(const fp_jdoc *d, int t, int dev, const fp_mfield *f, int64_t *out,
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
        return fp_merr_field(d, v, dev, f, path, err, errlen);
    return 0;
}

static int fp_mrows_push(fp_mrows *rows, const fp_mrow *r)
{
    fp_mrow *v = fp_vec_grow(rows->v, &rows->cap, rows->n + 1, sizeof *v, 16);
    if (!v)
        return ENOMEM;
    rows->v = v;
    rows->v[rows->n++] = *r;
    return 0;
}

static int fp_merge_doc(const fp_jdoc *d, fp_mrows *rows, const char *path,
                        char *err, size_t errlen)
{
    int64_t version;
    if (fp_jdoc_int(d, fp_jdoc_path(d, "version"), &version) || version != 1)
        return fp_merr(err, errlen, path, "not a fragpool summary (version 1)", EINVAL);
    int devs = fp_jdoc_path(d, "devices");
    if (!fp_jvalid(d, devs, FP_JARR))
        return fp_merr(err, errlen, path, "no \"devices\" array", EINVAL);
    static const fp_mfield rank = {"rank", NULL, -1, 0}, pid = {"pid", NULL, 0, 0};
    static const fp_mfield fields[5] = {
        {"device", NULL, 0, 0},        {"allocated", "peak", 0, 0},
        {"reserved", "peak", 0, 0},    {"oom_count", NULL, 0, 0},
        {"alloc_retries", NULL, 0, 0}};
    fp_mrow base = {0};
    int rc = fp_mint(d, 0, -1, &rank, &base.rank, path, err, errlen);
    if (!rc)
        rc = fp_mint(d, 0, -1, &pid, &base.pid, path, err, errlen);
    for (int i = 0; i < d->tok[devs].n && !rc; i++) {
        int t = fp_jdoc_at(d, devs, (size_t)i);
        fp_mrow r = base;
        int64_t *dst[5] = {&r.device, &r.peak_alloc, &r.peak_res, &r.ooms, &r.retries};
        for (int k = 0; k < 5 && !rc; k++)
            rc = fp_mint(d, t, i, &fields[k], dst[k], path, err, errlen);
        if (!rc && fp_mrows_push(rows, &r))
            rc = fp_merr(err, errlen, path, "out of memory", ENOMEM);
    }
    return rc;
}

static int fp_merge_file(const char *path, fp_mrows *rows, char *err,
                         size_t errlen)
{
    char *text = NULL;
    size_t len = 0, pos = 0;
    char why[128];
    int rc = read_file(path, &text, &len, why, sizeof why);
    if (rc)
        return fp_merr(err, errlen, path, rc == ENOMEM ? "out of memory" : why, rc);
    size_t cap = len / 2 + 2;
    fp_jtok *tok = malloc(cap * sizeof *tok);
    fp_jdoc d;
    if (!tok)
        rc = fp_merr(err, errlen, path, "out of memory", ENOMEM);
    else if ((rc = fp_jdoc_parse(&d, text, len, tok, cap, &pos)) != 0)
        rc = fp_merr_json(err, errlen, path, pos, rc);
    else
        rc = fp_merge_doc(&d, rows, path, err, errlen);
    free(tok);
    free(text);
    return rc;
}

/* ---- merge: writing ------------------------------------------------------------------ */

/* " text |" with text right-aligned in width columns. */
static void fp_mcell(fp_sink *s, const char *text, size_t n, size_t width)
{
    fp_putc(s, ' ');
    fp_put_pad(s, ' ', n < width ? width - n : 0);
    fp_put(s, text, n);
    fp_put(s, " |", 2);
}

typedef struct fp_mcellbuf {
    char buf[40];
    fp_sink s;
} fp_mcellbuf;

static fp_sink *fp_mcell_begin(fp_mcellbuf *c)
{
    c->s = fp_sink_buffer(c->buf, sizeof c->buf);
    return &c->s;
}

static void fp_mcell_end(fp_mcellbuf *c, fp_sink *out, size_t width)
{
    fp_mcell(out, c->buf, fp_sink_length(&c->s), width);
}

static const size_t fp_mwidth[8] = {5, 9, 3, 14, 13, 13, 4, 7};

static void fp_mheader(fp_sink *s)
{
    static const char *const head[8] = {"Rank", "PID", "Dev", "Peak allocated",
        "Peak reserved", "Fragmentation", "OOMs", "Retries"};
    fp_putc(s, '|');
    for (int i = 0; i < 8; i++)
        fp_mcell(s, head[i], strlen(head[i]), fp_mwidth[i]);
    fp_putc(s, '\n');
    fp_putc(s, '|');
    for (int i = 0; i < 8; i++) {
        fp_put_pad(s, '-', fp_mwidth[i] + 2);
        fp_putc(s, '|');
    }
    fp_putc(s, '\n');
}

/* One row; rank/pid/dev < 0 print as "-" (or the label for the total). */
static void fp_mline(fp_sink *s, const fp_mrow *r, const char *label)
{
    fp_mcellbuf c;
    int64_t id[3] = {r->rank, r->pid > 0 ? r->pid : -1, r->device};
    fp_putc(s, '|');
    for (int i = 0; i < 3; i++) {
        fp_sink *o = fp_mcell_begin(&c);
        if (label)
            fp_puts(o, i == 0 ? label : "");
        else if (id[i] < 0)
            fp_putc(o, '-');
        else
            fp_put_i64(o, id[i]);
        fp_mcell_end(&c, s, fp_mwidth[i]);
    }
    fp_put_size(fp_mcell_begin(&c), r->peak_alloc > 0 ? (size_t)r->peak_alloc : 0);
    fp_mcell_end(&c, s, fp_mwidth[3]);
    fp_put_size(fp_mcell_begin(&c), r->peak_res > 0 ? (size_t)r->peak_res : 0);
    fp_mcell_end(&c, s, fp_mwidth[4]);
    uint64_t res = r->peak_res > 0 ? (uint64_t)r->peak_res : 0;
    uint64_t alloc = r->peak_alloc > 0 ? (uint64_t)r->peak_alloc : 0;
    fp_put_percent(fp_mcell_begin(&c), res > alloc ? res - alloc : 0, res);
    fp_mcell_end(&c, s, fp_mwidth[5]);
    fp_put_i64(fp_mcell_begin(&c), r->ooms);
    fp_mcell_end(&c, s, fp_mwidth[6]);
    fp_put_i64(fp_mcell_begin(&c), r->retries);
    fp_mcell_end(&c, s, fp_mwidth[7]);
    fp_putc(s, '\n');
}

static int fp_mrow_before(const fp_mrow *a, const fp_mrow *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->device < b->device;
}

/* Stable insertion sort by (rank, device). */
static void fp_msort(fp_mrows *rows)
{
    for (size_t i = 1; i < rows->n; i++) {
        fp_mrow r = rows->v[i];
        size_t j = i;
        for (; j > 0 && fp_mrow_before(&r, &rows->v[j - 1]); j--)
            rows->v[j] = rows->v[j - 1];
        rows->v[j] = r;
    }
}

/* Sums saturate at INT64_MAX: every term is >= 0 (fp_mint). */
static int64_t fp_msum(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static void fp_mtotal(const fp_mrows *rows, fp_mrow *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < rows->n; i++) {
        t->peak_alloc = fp_msum(t->peak_alloc, rows->v[i].peak_alloc);
        t->peak_res = fp_msum(t->peak_res, rows->v[i].peak_res);
        t->ooms = fp_msum(t->ooms, rows->v[i].ooms);
        t->retries = fp_msum(t->retries, rows->v[i].retries);
    }
}

static void fp_mwrite(fp_sink *out, const fp_mrows *rows, size_t nfiles)
{
    fp_mrow total;
    fp_mtotal(rows, &total);
    fp_puts(out, "fragpool merge: ");
    fp_put_u64(out, nfiles);
    fp_puts(out, nfiles == 1 ? " summary, " : " summaries, ");
    fp_put_u64(out, rows->n);
    fp_puts(out, rows->n == 1 ? " device\n" : " devices\n");
    fp_mheader(out);
    for (size_t i = 0; i < rows->n; i++)
        fp_mline(out, &rows->v[i], NULL);
    fp_mline(out, &total, "total");
    fp_puts(out, "(total peaks are sums of per-rank peaks; fragmentation is "
                 "1 - total peak allocated / total peak reserved)\n");
}

int fp_merge_json(const char *const *paths, size_t n, fp_sink *out,
                  char *err, size_t errlen)
{
    fp_mrows rows = {NULL, 0, 0};
    int rc = 0;
    if (err && errlen)
        err[0] = '\0';
    if (!n)
        rc = fp_merr(err, errlen, "merge", "no summaries given", EINVAL);
    for (size_t i = 0; i < n && !rc; i++)
        rc = fp_merge_file(paths[i], &rows, err, errlen);
    if (!rc) {
        fp_msort(&rows);
        fp_mwrite(out, &rows, n);
        rc = fp_sink_flush(out);
        if (rc)
            fp_merr(err, errlen, "cannot write the table", strerror(rc), rc);
    }
    free(rows.v);
    return rc;
}
