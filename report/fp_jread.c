/* fp_jread.c - the JSON reader: one RFC 8259 value parsed into a flat
 * array of tokens that the caller provides (fp_jtok): each container is
 * followed by its children, and every token knows the index just past its
 * subtree, so lookups skip whole values without recursion.  merge, the
 * report command and the tests read our summaries back with it.
 *
 * Invariants:
 *  - never allocates and never reads past len; depth <= FP_JMAX_DEPTH;
 *  - object keys are compared raw (our schema's keys have no escapes);
 *  - a string is unescaped only on request (fp_jdoc_str), into the
 *    caller's buffer, invalid escapes never reaching it.
 */
#include "fp_jread.h"

#include <errno.h>
#include <string.h>

#define FP_JMAX_DEPTH 64

/* ---- the reader ------------------------------------------------------------------ */

typedef struct fp_jparser {
    const char *p; /* text                               */
    size_t n, i;   /* its length, the next byte          */
    fp_jtok *tok;  /* the caller's tokens                */
    size_t cap;    /* their number                       */
    int ntok;      /* tokens used                        */
    int depth;     /* open containers                    */
} fp_jparser;

static int fp_jvalue(fp_jparser *ps);

static void fp_jws(fp_jparser *ps)
{
    while (ps->i < ps->n && (ps->p[ps->i] == ' ' || ps->p[ps->i] == '\t' || ps->p[ps->i] == '\n' ||
                             ps->p[ps->i] == '\r'))
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
    for (ps->i++; ps->i < ps->n;) {
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
    static const struct {
        const char *word;
        int type;
    } lit[] = {{"true", FP_JBOOL}, {"false", FP_JBOOL}, {"null", FP_JNULL}};
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

int fp_jdoc_parse(fp_jdoc *d, const char *text, size_t len, fp_jtok *tok, size_t cap,
                  size_t *errpos)
{
    fp_jparser ps = {text, len, 0, tok, cap, 0, 0};
    int rc = text ? fp_jvalue(&ps) : EINVAL;
    if (!rc && fp_jpeek(&ps) >= 0)
        rc = EINVAL; /* something after the value */
    if (errpos)
        *errpos = ps.i;
    d->text = text;
    d->tok = tok;
    d->ntok = rc ? 0 : ps.ntok;
    return rc;
}

/* ---- lookups ---------------------------------------------------------------------- */

int fp_jdoc_is(const fp_jdoc *d, int t, int type)
{
    return t >= 0 && t < d->ntok && d->tok[t].type == type;
}

static int fp_jget_n(const fp_jdoc *d, int obj, const char *key, size_t klen)
{
    if (!fp_jdoc_is(d, obj, FP_JOBJ))
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
    if (!fp_jdoc_is(d, arr, FP_JARR) || idx >= (size_t)d->tok[arr].n)
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
    if (!fp_jdoc_is(d, t, FP_JNUM))
        return EINVAL;
    const char *p = d->text + d->tok[t].start, *end = d->text + d->tok[t].end;
    int neg = *p == '-';
    uint64_t u = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (p += neg; p < end; p++) {
        if (*p < '0' || *p > '9')
            return EINVAL; /* a fraction or an exponent */
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
    size_t len, k; /* capacity, bytes produced (kept or not) */
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
    return c == 'b'   ? '\b'
           : c == 'f' ? '\f'
           : c == 'n' ? '\n'
           : c == 'r' ? '\r'
           : c == 't' ? '\t'
                      : c;
}

size_t fp_jdoc_str(const fp_jdoc *d, int t, char *buf, size_t len)
{
    if (!fp_jdoc_is(d, t, FP_JSTR))
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
