/* fp_trace.c - reading allocation traces (docs/replay.md, "The trace
 * format"; docs/files.md).
 *
 * The file is opened with fp_file_open_read (a regular file, never a FIFO
 * or a device, opened without blocking) and read through zlib, gzip or
 * plain.  Lines may be of any length.  Each line is one of: blank (only
 * spaces, tabs, CR), a comment ('#' first), the optional header (the first
 * line that is neither), or a row seq,op,id,size[,stream].  Trailing
 * spaces, tabs and a CR are ignored; anything else is parsed strictly:
 * unsigned decimal digits only (no sign, space, 0x, or value past the
 * field's range), op one of a, f, s, r (s and r rows, the shim's segment
 * events, are checked and skipped).
 *
 * Invariants: every failure is one line in err naming the file and the
 * line (and for a zlib error the byte) where it happened; nothing is
 * returned on failure (the trace is freed); a file that ends inside a
 * gzip stream, fails its CRC, or holds no event is a failure, never a
 * shorter trace.
 */
#include "fp_trace.h"
#include "fp_file.h"
#include "fp_vec.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define TRACE_CHUNK (1u << 16)
#define TRACE_SHOW 32            /* bytes of a bad field quoted */

int fp_trace_push(fp_trace *t, char op, uint64_t id, uint64_t size, uint32_t stream)
{
    fp_trace_event *nv = fp_vec_grow(t->ev, &t->cap, t->n + 1, sizeof *nv, 4096);
    if (!nv)
        return ENOMEM;
    t->ev = nv;
    t->ev[t->n++] = (fp_trace_event){id, size, stream, op};
    return 0;
}

void fp_trace_free(fp_trace *t)
{
    free(t->ev);
    *t = (fp_trace){0};
}

/* ---- reading lines --------------------------------------------------------- */

typedef struct reader {
    gzFile f;
    const char *path;
    char *err;
    size_t errlen;
    char chunk[TRACE_CHUNK];
    size_t pos, end;      /* unread bytes of chunk                    */
    int eof;
    char *line;           /* the current line, without its '\n'        */
    size_t len, cap;
    size_t lineno;
    uint64_t bytes;       /* uncompressed bytes read so far            */
    int header_seen;      /* a row or the header came already          */
} reader;

static int grow_line(reader *r, size_t need)
{
    char *p = fp_vec_grow(r->line, &r->cap, need, 1, 256);
    if (!p) {
        snprintf(r->err, r->errlen, "%s:%zu: out of memory for a line of %zu bytes", r->path,
                 r->lineno, need);
        return ENOMEM;
    }
    r->line = p;
    return 0;
}

static int fill(reader *r)
{
    int got = gzread(r->f, r->chunk, sizeof r->chunk);
    if (got > 0) {
        r->pos = 0;
        r->end = (size_t)got;
        r->bytes += (uint64_t)got;
        return 0;
    }
    int zerr = Z_OK;
    const char *msg = gzerror(r->f, &zerr);
    if (got == 0 && zerr == Z_OK) {
        r->eof = 1;
        return 0;
    }
    const char *colon = strstr(msg, ">: ");   /* zlib's "<fd:3>: " prefix */
    msg = colon && msg[0] == '<' ? colon + 3 : msg;
    snprintf(r->err, r->errlen, "%s:%zu: read error after %" PRIu64 " bytes of text: %s%s", r->path,
             r->lineno + 1, r->bytes, zerr == Z_ERRNO ? strerror(errno) : msg,
             zerr == Z_BUF_ERROR ? " (the gzip file is cut short)"
             : zerr == Z_DATA_ERROR ? " (the gzip data is corrupt)" : "");
    return EIO;
}

/* The next line into r->line/len; 0 with *got 0 at the end of the file. */
static int next_line(reader *r, int *got)
{
    r->len = 0;
    *got = 0;
    for (;;) {
        if (r->pos == r->end) {
            int rc = r->eof ? 0 : fill(r);
            if (rc)
                return rc;
            if (r->eof)
                break;
        }
        const char *s = r->chunk + r->pos;
        const char *nl = memchr(s, '\n', r->end - r->pos);
        size_t n = nl ? (size_t)(nl - s) : r->end - r->pos;
        if (grow_line(r, r->len + n + 1))
            return ENOMEM;
        memcpy(r->line + r->len, s, n);
        r->len += n;
        r->pos += n + (nl != NULL);
        *got = 1;
        if (nl)
            break;
    }
    if (*got)
        r->lineno++;
    return 0;
}

/* ---- parsing one row ------------------------------------------------------ */

typedef struct field {
    const char *p;
    size_t n;
} field;

static const char *const field_names[] = {"seq", "op", "id", "size", "stream"};

/* "'text'" with bytes outside printable ASCII as \xNN, at most TRACE_SHOW. */
static void show(char *out, size_t len, field f)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    out[o++] = '\'';
    for (size_t i = 0; i < f.n && i < TRACE_SHOW && o + 8 < len; i++) {
        unsigned char c = (unsigned char)f.p[i];
        if (c >= 0x20 && c < 0x7f) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (f.n > TRACE_SHOW && o + 4 < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '\'';
    out[o] = '\0';
}

static int bad_field(reader *r, int k, field f, const char *want)
{
    char shown[4 * TRACE_SHOW + 8];
    show(shown, sizeof shown, f);
    snprintf(r->err, r->errlen, "%s:%zu: field %s is %s, not %s", r->path, r->lineno,
             field_names[k], shown, want);
    return EINVAL;
}

/* Unsigned decimal digits only, at most max. */
static int parse_u64(field f, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (!f.n)
        return EINVAL;
    for (size_t i = 0; i < f.n; i++) {
        unsigned d = (unsigned)(unsigned char)f.p[i] - '0';
        if (d > 9 || d > max || v > (max - d) / 10)
            return EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Splits s[0..n) at commas into at most 6 fields; returns the count. */
static size_t split(const char *s, size_t n, field *f)
{
    size_t k = 0, start = 0;
    for (size_t i = 0; i <= n && k < 6; i++)
        if (i == n || s[i] == ',') {
            f[k++] = (field){s + start, i - start};
            start = i + 1;
        }
    return k;
}

static int parse_row(reader *r, const char *s, size_t n, fp_trace_event *e)
{
    static const char num[] = "a decimal number from 0 to 18446744073709551615";
    field f[6];
    size_t k = split(s, n, f);
    if (k < 4 || k > 5) {
        snprintf(r->err, r->errlen, "%s:%zu: not a trace row (%s%zu field%s; want "
                 "seq,op,id,size[,stream] with op a, f or o)", r->path, r->lineno,
                 k > 5 ? "more than " : "", k > 5 ? (size_t)5 : k, k == 1 ? "" : "s");
        return EINVAL;
    }
    uint64_t seq, st = 0;
    if (parse_u64(f[0], UINT64_MAX, &seq))
        return bad_field(r, 0, f[0], num);
    if (f[1].n != 1 || !strchr("afsro", f[1].p[0]) || !f[1].p[0])
        return bad_field(r, 1, f[1], "a, f, s, r or o");
    if (parse_u64(f[2], UINT64_MAX, &e->id))
        return bad_field(r, 2, f[2], num);
    if (parse_u64(f[3], UINT64_MAX, &e->size))
        return bad_field(r, 3, f[3], num);
    if (k == 5 && parse_u64(f[4], UINT32_MAX, &st))
        return bad_field(r, 4, f[4], "a decimal number from 0 to 4294967295");
    e->op = f[1].p[0];
    e->stream = (uint32_t)st;
    return 0;
}

static int is_header(const char *s, size_t n)
{
    return (n == 14 && !memcmp(s, "seq,op,id,size", 14)) ||
           (n == 21 && !memcmp(s, "seq,op,id,size,stream", 21));
}

/* One line: skipped, or an a/f event pushed onto t. */
static int take_line(reader *r, fp_trace *t)
{
    size_t n = r->len;
    const char *s = r->line;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    size_t lead = 0;
    while (lead < n && (s[lead] == ' ' || s[lead] == '\t'))
        lead++;
    if (lead == n || s[0] == '#')
        return 0;
    int first = !r->header_seen;
    r->header_seen = 1;
    if (first && is_header(s, n))
        return 0;
    fp_trace_event e = {0};
    int rc = parse_row(r, s, n, &e);
    if (rc || e.op == 's' || e.op == 'r')
        return rc;
    rc = fp_trace_push(t, e.op, e.id, e.size, e.stream);
    if (rc)
        snprintf(r->err, r->errlen, "%s:%zu: out of memory after %zu events", r->path,
                 r->lineno, t->n);
    return rc;
}

static int read_all(reader *r, fp_trace *t)
{
    int rc = 0, got = 1;
    while (!rc && !(rc = next_line(r, &got)) && got)
        rc = take_line(r, t);
    if (!rc && !t->n) {
        snprintf(r->err, r->errlen, "%s: no events in %zu line%s (an empty trace)", r->path,
                 r->lineno, r->lineno == 1 ? "" : "s");
        rc = EINVAL;
    }
    return rc;
}

static int open_gz(const char *path, gzFile *f, char *err, size_t errlen)
{
    char why[128];
    int fd, rc = fp_file_open_read(path, &fd, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "cannot read trace '%s': %s", path, why);
        return rc;
    }
    *f = gzdopen(fd, "rb");
    if (!*f) {
        close(fd);
        snprintf(err, errlen, "cannot read trace '%s': out of memory", path);
        return ENOMEM;
    }
    gzbuffer(*f, TRACE_CHUNK);
    return 0;
}

int fp_trace_load(const char *path, fp_trace *t, char *err, size_t errlen)
{
    *t = (fp_trace){0};
    reader *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "cannot read trace '%s': out of memory", path);
        return ENOMEM;
    }
    int rc = open_gz(path, &r->f, err, errlen);
    if (!rc) {
        r->path = path;
        r->err = err;
        r->errlen = errlen;
        rc = read_all(r, t);
        gzclose(r->f);
    }
    free(r->line);
    free(r);
    if (rc)
        fp_trace_free(t);
    return rc;
}
