/* trace_read.c - the chunked reader of trace_read.h: lines of any length,
 * or the whole file, through zlib; and the small field helpers that the
 * text formats share.
 *
 * Invariants: a zlib error (a gzip file cut short, a bad CRC) is an
 * error naming the line (read by line; never line 0) and the bytes
 * reached, never an early end; the whole-file read refuses more than
 * FP_TRACE_MAX_BYTES.
 */
#include "trace_read.h"
#include "fp_vec.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP_TRACE_MAX_BYTES ((size_t)1 << 34) /* 16 GiB of pickle */

static int grow_line(fp_reader *r, size_t need)
{
    char *p = fp_vec_grow(r->line, &r->cap, need, 1, 256);
    if (!p) {
        snprintf(r->err, r->errlen, "%s:%zu: out of memory for a line of %zu bytes", r->path,
                 r->lineno + 1, need); /* the line being read */
        return ENOMEM;
    }
    r->line = p;
    return 0;
}

int fp_reader_fill(fp_reader *r)
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
    const char *colon = strstr(msg, ">: "); /* zlib's "<fd:3>: " prefix */
    msg = colon && msg[0] == '<' ? colon + 3 : msg;
    char line[32] = ""; /* a file read whole (a pickle) has no lines */
    if (!r->whole)
        snprintf(line, sizeof line, ":%zu", r->lineno + 1);
    snprintf(r->err, r->errlen, "%s%s: read error after %" PRIu64 " bytes%s: %s%s", r->path, line,
             r->bytes, r->whole ? "" : " of text", zerr == Z_ERRNO ? strerror(errno) : msg,
             zerr == Z_BUF_ERROR    ? " (the gzip file is cut short)"
             : zerr == Z_DATA_ERROR ? " (the gzip data is corrupt)"
                                    : "");
    return EIO;
}

int fp_reader_line(fp_reader *r, int *got)
{
    r->len = 0;
    *got = 0;
    for (;;) {
        if (r->pos == r->end) {
            int rc = r->eof ? 0 : fp_reader_fill(r);
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

int fp_reader_all(fp_reader *r, unsigned char **data, size_t *len)
{
    size_t n = 0, cap = 0;
    unsigned char *buf = NULL;
    r->whole = 1;
    for (;;) {
        if (r->pos == r->end) {
            int rc = r->eof ? 0 : fp_reader_fill(r);
            if (rc || r->eof) {
                if (rc)
                    free(buf);
                *data = rc ? NULL : buf;
                *len = rc ? 0 : n;
                return rc;
            }
        }
        size_t k = r->end - r->pos;
        if (n + k > cap) {
            size_t ncap = cap ? cap * 2 : (size_t)1 << 20;
            unsigned char *nb = n + k > FP_TRACE_MAX_BYTES ? NULL : realloc(buf, ncap);
            if (!nb) {
                free(buf);
                snprintf(r->err, r->errlen, "%s: %s after %zu bytes", r->path,
                         n + k > FP_TRACE_MAX_BYTES ? "larger than 16 GiB" : "out of memory", n);
                return ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        memcpy(buf + n, r->chunk + r->pos, k);
        n += k;
        r->pos = r->end;
    }
}

size_t fp_reader_trim(const fp_reader *r)
{
    size_t n = r->len;
    const char *s = r->line;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    size_t lead = 0;
    while (lead < n && (s[lead] == ' ' || s[lead] == '\t'))
        lead++;
    return lead == n || s[0] == '#' ? 0 : n;
}

void fp_trace_show(char *out, size_t len, const char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    out[o++] = '\'';
    for (size_t i = 0; i < n && i < TRACE_SHOW && o + 8 < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (n > TRACE_SHOW && o + 4 < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o++] = '\'';
    out[o] = '\0';
}

int fp_trace_parse_u64(const char *p, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (!n)
        return EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(unsigned char)p[i] - '0';
        if (d > 9 || d > max || v > (max - d) / 10)
            return EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

size_t fp_trace_split(const char *s, size_t n, const char **f, size_t *fl, size_t max)
{
    size_t k = 0, start = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || s[i] == ',') {
            if (k == max)
                return max + 1;
            f[k] = s + start;
            fl[k++] = i - start;
            start = i + 1;
        }
    return k;
}

int fp_trace_map_set(fp_hmap *m, uint64_t key, uint64_t val)
{
    size_t i = fp_hmap_slot(m, key);
    if (fp_hmap_at(m, i)) {
        m->slots[i].val = val;
        return 0;
    }
    if (fp_hmap_make_room(m))
        return ENOMEM;
    fp_hmap_fill(m, fp_hmap_slot(m, key), key, val);
    return 0;
}
