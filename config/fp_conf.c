/* fp_conf.c - the FRAGPOOL_CONF option table, its parser and formatter.
 *
 * Shape of the work: the text is cut into entries at commas that are not
 * inside [ ]; each entry is cut at its first ':' into key and value, both
 * trimmed; the key picks one row of fp_options, whose parse function
 * turns the value into fields of fp_conf.  Every problem becomes exactly
 * one report line, built in a fixed buffer, and the entry is skipped.
 *
 * Invariants:
 *  - pure: no globals besides the const table, no I/O, no malloc, no
 *    locale (numbers are read and written by hand);
 *  - linear time and no recursion, whatever the input;
 *  - a row's parse function writes its field only when the whole value
 *    is good, so a rejected entry leaves fp_conf untouched;
 *  - the first occurrence of a key is the only one considered; later ones
 *    are reported as duplicates (whether the first was good or not), and
 *    so is an alias given after its other name with another value (the
 *    same value, as fp_conf_format writes it, is no problem);
 *  - quoted input in a message is at most FP_SHOW bytes, with bytes
 *    outside printable ASCII written as \xNN, so a line stays one line;
 *  - a line names where the text came from (FRAGPOOL_CONF, a PyTorch
 *    variable, --conf); text written for PyTorch (FP_CONF_LENIENT) loses
 *    its PyTorch-only keys without a line, and nothing else is lenient;
 *  - the environment is read only through the caller's lookup function.
 */
#include "fp_conf.h"

#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <string.h>

_Static_assert(SIZE_MAX == UINT64_MAX, "fragpool needs a 64-bit size_t");

#define FP_LABEL         "FRAGPOOL_CONF" /* what fp_conf_parse's lines name  */
#define FP_TAIL          "; ignoring this entry, the rest still applies"
#define FP_MAX_MB        ((uint64_t)(SIZE_MAX / FP_MIB)) /* 17592186044415 */
#define FP_SHOW          64    /* input bytes quoted in a message          */
#define FP_SHOW_ITEM     32    /* bytes of one list item quoted            */
#define FP_LINE          2048  /* a report line can never need more        */
#define FP_DIV_MAX       1024  /* largest roundup_power2_divisions value   */
#define FP_DIV_KEY_MAX   32768 /* largest list size, MiB (interval 15)     */
#define FP_REAL_DECIMALS 15    /* digits after the point a real may have   */

/* s[0..n) as a message shows it: at most max bytes, odd bytes escaped. */
static void fp_put_shown(fp_sink *b, const char *s, size_t n, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f) {
            fp_putc(b, (char)ch);
            continue;
        }
        char esc[4] = {'\\', 'x', hex[ch >> 4], hex[ch & 15]};
        fp_put(b, esc, sizeof esc);
    }
    if (n > max)
        fp_puts(b, "...");
}

static void fp_put_quoted(fp_sink *b, const char *s, size_t n, size_t max)
{
    fp_putc(b, '\'');
    fp_put_shown(b, s, n, max);
    fp_putc(b, '\'');
}

/* ---- small lexical helpers -------------------------------------------- */
static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int slice_is(const char *p, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(p, word, n) == 0;
}

/* Multiply-add one decimal digit; -1 on uint64 overflow. */
static int mul10_add(uint64_t *v, char digit)
{
    unsigned d = (unsigned)(digit - '0');
    if (*v > (UINT64_MAX - d) / 10)
        return -1;
    *v = *v * 10 + d;
    return 0;
}

/* A plain decimal integer: digits only, no sign, no overflow. */
static int parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (!n)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(s[i]) || mul10_add(&v, s[i]))
            return -1;
    *out = v;
    return 0;
}

static int is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static unsigned log2_u64(uint64_t v)
{
    unsigned i = 0;
    while (v >>= 1)
        i++;
    return i;
}

/* ---- reals: read and written by hand, exactly ---------------------------
 * A real is digits[.digits] or .digits with at most FP_REAL_DECIMALS
 * significant decimals (trailing zeros do not count).  Its value is m/10^k
 * with m <= 2^53 and k <= 15: both exact doubles, so one division gives
 * the correctly rounded result, the same as strtod, with no locale. */
static const double fp_pow10[FP_REAL_DECIMALS + 1] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
};
#define FP_EXACT_INT ((uint64_t)1 << 53)

static int parse_fraction(const char *s, size_t n, uint64_t *m, unsigned *k)
{
    while (n && s[n - 1] == '0') /* trailing zeros add nothing */
        n--;
    if (n > FP_REAL_DECIMALS)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(s[i]) || mul10_add(m, s[i]))
            return -1;
    *k = (unsigned)n;
    return 0;
}

static int parse_real(const char *s, size_t n, double *out)
{
    uint64_t m = 0;
    unsigned k = 0;
    size_t i = 0;
    for (; i < n && is_digit(s[i]); i++)
        if (mul10_add(&m, s[i]))
            return -1;
    size_t int_digits = i;
    if (i < n && s[i] == '.') {
        if (int_digits == 0 && i + 1 == n)
            return -1; /* "." alone */
        if (parse_fraction(s + i + 1, n - i - 1, &m, &k))
            return -1;
    } else if (i != n || int_digits == 0) {
        return -1;
    }
    if (m > FP_EXACT_INT)
        return -1;
    *out = (double)m / fp_pow10[k];
    return 0;
}

/* m with k digits after the point (m / 10^k is exact, so no rounding). */
static void fp_put_scaled(fp_sink *b, uint64_t m, unsigned k)
{
    uint64_t den = 1;
    for (unsigned i = 0; i < k; i++)
        den *= 10;
    fp_put_fixed(b, m, den, k);
}

/* The shortest m/10^k that parse_real reads back as exactly v.  Values
 * that parse_real can give always have one (k <= 15, m <= 2^53); others
 * get the nearest form with the most decimals that keep m exact. */
static void fp_put_real(fp_sink *b, double v)
{
    const double lim = (double)FP_EXACT_INT;
    unsigned best = 0;
    if (!(v >= 0 && v <= lim)) {
        fp_puts(b, "invalid");
        return;
    }
    for (unsigned k = 0; k <= FP_REAL_DECIMALS && v * fp_pow10[k] <= lim; k++) {
        uint64_t m = (uint64_t)(v * fp_pow10[k] + 0.5);
        best = k;
        if ((double)m / fp_pow10[k] == v) {
            fp_put_scaled(b, m, k);
            return;
        }
    }
    fp_put_scaled(b, (uint64_t)(v * fp_pow10[best] + 0.5), best);
}

/* ---- the rows' parse and format functions ------------------------------ */
static void *field(fp_conf *c, const fp_option *o)
{
    return (char *)c + o->offset;
}

static const void *cfield(const fp_conf *c, const fp_option *o)
{
    return (const char *)c + o->offset;
}

/* An integer number of MiB stored as size_t bytes. */
static int parse_mib(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    uint64_t mb;
    (void)why;
    if (o->off_word && slice_is(v, n, o->off_word)) {
        *(size_t *)field(c, o) = o->off_value;
        return 0;
    }
    if (parse_u64(v, n, &mb) || mb < o->min || mb > o->max)
        return -1;
    *(size_t *)field(c, o) = (size_t)mb * FP_MIB;
    return 0;
}

static void format_mib(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    size_t v = *(const size_t *)cfield(c, o);
    if (o->off_word && v == o->off_value)
        fp_puts(out, o->off_word);
    else
        fp_put_u64(out, v / FP_MIB);
}

/* A plain integer count stored as int (trace_stacks). */
static int parse_count(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    uint64_t x;
    (void)why;
    if (parse_u64(v, n, &x) || x < o->min || x > o->max)
        return -1;
    *(int *)field(c, o) = (int)x;
    return 0;
}

static void format_count(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    fp_put_u64(out, (uint64_t) * (const int *)cfield(c, o));
}

static int real_in_range(const fp_option *o, double x)
{
    int lo = o->open_min ? x > o->rmin : x >= o->rmin;
    int hi = o->open_max ? x < o->rmax : x <= o->rmax;
    return lo && hi;
}

/* A real stored as double; off_word stores 0. */
static int parse_dbl(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    double x;
    (void)why;
    if (o->off_word && slice_is(v, n, o->off_word)) {
        *(double *)field(c, o) = 0.0;
        return 0;
    }
    if (parse_real(v, n, &x) || !real_in_range(o, x))
        return -1;
    *(double *)field(c, o) = x;
    return 0;
}

static void format_dbl(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    double v = *(const double *)cfield(c, o);
    if (o->off_word && v == 0.0)
        fp_puts(out, o->off_word);
    else
        fp_put_real(out, v);
}

/* 0/1/true/false/True/False stored as int; off_word (a third state, such
 * as "auto") stores off_value. */
static int parse_bool(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    (void)why;
    if (o->off_word && slice_is(v, n, o->off_word)) {
        *(int *)field(c, o) = (int)o->off_value;
        return 0;
    }
    for (int i = 0; o->words[i]; i++) /* "0", "1", then pairs true/false */
        if (slice_is(v, n, o->words[i])) {
            *(int *)field(c, o) = i < 2 ? i : i % 2 == 0;
            return 0;
        }
    return -1;
}

static void format_bool(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    int v = *(const int *)cfield(c, o);
    if (o->off_word && (size_t)v == o->off_value)
        fp_puts(out, o->off_word);
    else
        fp_puts(out, v ? "1" : "0");
}

/* One of o->words, stored as its index (int). */
static int parse_word(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    (void)why;
    for (int i = 0; o->words[i]; i++)
        if (slice_is(v, n, o->words[i])) {
            *(int *)field(c, o) = i;
            return 0;
        }
    return -1;
}

static void format_word(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    fp_puts(out, o->words[*(const int *)cfield(c, o)]);
}

/* A destination: one of o->words, or a path (no control bytes, shorter
 * than FP_CONF_PATH_MAX), stored as text.  '[', ']' and ',' would cut or
 * join entries of the formatted text, so the formatter writes them as
 * %5B, %5D and %2C, and the parser turns these back (either case); %%
 * stays as it is, and the other escapes (%p, ...) are the shim's.  A '%'
 * right before one of the three is refused: it is no escape, and its
 * formatted form would read back as %%. */
static int hex_escape(const char *v, size_t n, size_t i, char *out)
{
    static const char *const esc[] = {"5B[", "5D]", "2C,"};
    if (i + 2 >= n || v[i] != '%')
        return 0;
    for (size_t k = 0; k < 3; k++) {
        char a = v[i + 1], b = v[i + 2];
        b = (char)(b >= 'a' && b <= 'z' ? b - 'a' + 'A' : b);
        if (a == esc[k][0] && b == esc[k][1]) {
            *out = esc[k][2];
            return 1;
        }
    }
    return 0;
}

/* A '%' at v[i] that is not %% or a hex escape: one of the shim's
 * escapes (%p pid, %r rank, %h host: shim/shim_path.c), or 0 with why. */
static int is_path_escape(const char *v, size_t n, size_t i, fp_sink *why)
{
    if (i + 1 < n && strchr("prh", v[i + 1]))
        return 1;
    if (i + 1 >= n) {
        fp_puts(why, "a lone '%' at the end (write %% for a '%')");
        return 0;
    }
    fp_puts(why, "unknown escape ");
    fp_putc(why, '%');
    fp_put_shown(why, v + i + 1, 1, 1);
    fp_puts(why, " (the escapes are %p pid, %r rank, %h host, %% a '%')");
    return 0;
}

static int parse_dest(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    (void)o;
    char tmp[FP_CONF_PATH_MAX];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
            fp_puts(why, "control byte in path");
            return -1;
        }
        char ch = v[i];
        int pair = v[i] == '%' && i + 1 < n && v[i + 1] == '%'; /* kept whole */
        if (m + 1 + (size_t)pair >= FP_CONF_PATH_MAX) {
            fp_puts(why, "path too long");
            return -1;
        }
        char next;
        if (!pair && hex_escape(v, n, i, &ch)) {
            i += 2;
        } else if (pair) {
            tmp[m++] = v[i++];
        } else if (ch == '%' && i + 1 < n &&
                   (strchr("[],", v[i + 1]) || hex_escape(v, n, i + 1, &next))) {
            fp_puts(why, "'%' before '[', ']' or ','"); /* no escape, and no round trip */
            return -1;
        } else if (ch == '%' && !is_path_escape(v, n, i, why)) {
            return -1; /* the shim would refuse it at its first write */
        }
        tmp[m++] = ch;
    }
    char *dst = field(c, o);
    memcpy(dst, tmp, m);
    dst[m] = '\0';
    return 0;
}

static void format_dest(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    for (const char *p = (const char *)cfield(c, o); *p; p++) {
        if (*p == '[')
            fp_puts(out, "%5B");
        else if (*p == ']')
            fp_puts(out, "%5D");
        else if (*p == ',')
            fp_puts(out, "%2C");
        else
            fp_putc(out, *p);
    }
}

/* ---- roundup_power2_divisions ------------------------------------------
 * One number fills all 16 intervals.  The list [size:div,...,>:div] follows
 * PyTorch's parser exactly: a size (MiB, a power of two) names interval
 * log2(size), clamped to 0..15; the first size also fills every interval
 * below its own; each size sets its own interval; intervals between two
 * sizes keep 0 (no rounding); '>' fills every interval after the last size
 * named (after interval 0 when none was).  fragpool also rejects sizes that
 * go down, which PyTorch silently lets overwrite. */
typedef struct fp_divs {
    uint32_t d[FP_ROUNDUP_INTERVALS];
    int last;   /* interval of the last size listed, -1 before any */
    int closed; /* a '>' item was seen                             */
} fp_divs;

static int is_division(uint64_t v)
{
    return v == 0 || (v <= FP_DIV_MAX && is_pow2(v));
}

static void fill(uint32_t *d, int from, int to, uint32_t v)
{
    for (int i = from; i <= to; i++)
        d[i] = v;
}

static int item_fail(fp_sink *why, fp_slice it, const char *what)
{
    fp_puts(why, "item ");
    fp_put_quoted(why, it.p, it.n, FP_SHOW_ITEM);
    fp_puts(why, what);
    return -1;
}

static int divs_size(fp_divs *s, fp_slice it, fp_slice k, uint32_t val, fp_sink *why)
{
    uint64_t mb;
    if (parse_u64(k.p, k.n, &mb) || !is_pow2(mb))
        return item_fail(why, it, ": size must be a power of two (MiB)");
    int idx = (int)log2_u64(mb);
    if (idx > FP_ROUNDUP_INTERVALS - 1)
        idx = FP_ROUNDUP_INTERVALS - 1;
    if (idx < s->last || (idx == s->last && mb <= FP_DIV_KEY_MAX))
        return item_fail(why, it, ": sizes must increase");
    if (s->last < 0)
        fill(s->d, 0, idx, val);
    s->d[idx] = val;
    s->last = idx;
    return 0;
}

static int divs_item(fp_divs *s, fp_slice it, size_t no, fp_sink *why)
{
    uint64_t val;
    if (!it.n) {
        fp_puts(why, "item ");
        fp_put_u64(why, no);
        fp_puts(why, " is empty");
        return -1;
    }
    if (s->closed)
        return item_fail(why, it, " follows '>', which must be last");
    const char *colon = memchr(it.p, ':', it.n);
    if (!colon)
        return item_fail(why, it, " is not size:divisions");
    fp_slice k = fp_trim(it.p, (size_t)(colon - it.p));
    fp_slice v = fp_trim(colon + 1, it.n - (size_t)(colon - it.p) - 1);
    if (parse_u64(v.p, v.n, &val) || !is_division(val))
        return item_fail(why, it, ": divisions must be 0 or a power of two up to 1024");
    if (!slice_is(k.p, k.n, ">"))
        return divs_size(s, it, k, (uint32_t)val, why);
    fill(s->d, (s->last < 0 ? 0 : s->last) + 1, FP_ROUNDUP_INTERVALS - 1, (uint32_t)val);
    s->closed = 1;
    return 0;
}

/* The inside of [ ]: items split at every comma. */
static int divs_list(fp_divs *s, fp_slice in, fp_sink *why)
{
    size_t no = 1;
    if (!in.n) {
        fp_puts(why, "empty list");
        return -1;
    }
    for (const char *p = in.p, *end = in.p + in.n;; no++) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (divs_item(s, fp_trim(p, (size_t)(stop - p)), no, why))
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static int parse_divs_list(const char *v, size_t n, uint32_t *out, fp_sink *why)
{
    fp_divs s = {.last = -1};
    const char *close = memchr(v, ']', n);
    if (!close) {
        fp_puts(why, "no closing ']'");
        return -1;
    }
    if (close != v + n - 1) {
        fp_puts(why, "text after ']'");
        return -1;
    }
    if (divs_list(&s, fp_trim(v + 1, n - 2), why))
        return -1;
    memcpy(out, s.d, sizeof s.d);
    return 0;
}

static int parse_divs(const fp_option *o, const char *v, size_t n, fp_conf *c, fp_sink *why)
{
    uint32_t *dst = field(c, o);
    uint64_t x;
    if (v[0] == '[')
        return parse_divs_list(v, n, dst, why);
    if (parse_u64(v, n, &x) || !is_division(x))
        return -1;
    fill(dst, 0, FP_ROUNDUP_INTERVALS - 1, (uint32_t)x);
    return 0;
}

static void put_div_item(fp_sink *out, int idx, uint32_t v, int first)
{
    if (!first)
        fp_putc(out, ',');
    fp_put_u64(out, (uint64_t)1 << idx);
    fp_putc(out, ':');
    fp_put_u64(out, v);
}

/* The first run of equal values by its last interval (which fills below),
 * then every later interval that is not 0, each by its own size; a last
 * run of equal values that starts right after the last size written is
 * '>'.  Exact under the list rules, so the text parses back the same. */
static void format_divs(const fp_option *o, const fp_conf *c, fp_sink *out)
{
    const uint32_t *d = cfield(c, o);
    const int top = FP_ROUNDUP_INTERVALS - 1;
    int end = 0, tail = top;
    while (end < top && d[end + 1] == d[0])
        end++;
    if (end == top) {
        fp_put_u64(out, d[0]);
        return;
    }
    while (tail > end + 1 && d[tail - 1] == d[top])
        tail--;
    bool use_gt = d[top] && (tail - 1 == end || d[tail - 1]);
    int stop = use_gt ? tail - 1 : top;
    fp_putc(out, '[');
    put_div_item(out, end, d[0], 1);
    for (int i = end + 1; i <= stop; i++)
        if (d[i])
            put_div_item(out, i, d[i], 0);
    if (use_gt) {
        fp_puts(out, ",>:");
        fp_put_u64(out, d[top]);
    }
    fp_putc(out, ']');
}

/* ---- what a row accepts, derived from its bounds -------------------------
 * A numeric row states its bounds once (min/max, rmin/rmax with open_*,
 * off_word); its range in the key list and the "must be ..." of its
 * messages are written from them here, as are a word row's from words.
 * Only rows without bounds (lists, paths) spell them out in range and
 * accept. */

/* "a, b or c" (last "or") or "a, b, c" (last ", "). */
static void put_words(fp_sink *b, const char *const *w, const char *last)
{
    for (int i = 0; w[i]; i++) {
        if (i)
            fp_puts(b, w[i + 1] ? ", " : last);
        fp_puts(b, w[i]);
    }
}

static void put_off(fp_sink *b, const fp_option *o, const char *sep)
{
    if (o->off_word) {
        fp_puts(b, sep);
        fp_puts(b, o->off_word);
    }
}

static void put_range(fp_sink *b, const fp_option *o)
{
    if (o->parse == parse_mib) {
        fp_put_u64(b, o->min);
        fp_puts(b, "..");
        fp_put_u64(b, o->max);
        put_off(b, o, ", ");
    } else if (o->parse == parse_count) {
        fp_put_u64(b, o->min);
        fp_puts(b, "..");
        fp_put_u64(b, o->max);
    } else if (o->parse == parse_dbl) {
        fp_putc(b, o->open_min ? '(' : '[');
        fp_put_real(b, o->rmin);
        fp_putc(b, ',');
        fp_put_real(b, o->rmax);
        fp_putc(b, o->open_max ? ')' : ']');
        put_off(b, o, ", ");
    } else if (o->words) {
        put_words(b, o->words, ", ");
        put_off(b, o, ", ");
    } else {
        fp_puts(b, o->range);
    }
}

/* What "must be ..." says. */
static void put_accept(fp_sink *b, const fp_option *o)
{
    if (o->parse == parse_mib) {
        fp_puts(b, "an integer number of MiB >= ");
        fp_put_u64(b, o->min);
        fp_puts(b, " (up to ");
        fp_put_u64(b, o->max);
        fp_putc(b, ')');
        put_off(b, o, ", or ");
    } else if (o->parse == parse_count) {
        fp_puts(b, "an integer from ");
        fp_put_u64(b, o->min);
        fp_puts(b, " to ");
        fp_put_u64(b, o->max);
    } else if (o->parse == parse_dbl) {
        fp_puts(b, o->open_min ? "a decimal number > " : "a decimal number >= ");
        fp_put_real(b, o->rmin);
        fp_puts(b, o->open_max ? " and < " : " and <= ");
        fp_put_real(b, o->rmax);
        fp_puts(b, " such as ");
        fp_puts(b, o->example);
        fp_puts(b, " (at most 15 decimals)");
        put_off(b, o, ", or ");
    } else if (o->words) {
        put_words(b, o->words, o->off_word ? ", " : " or ");
        put_off(b, o, " or ");
    } else {
        fp_puts(b, o->accept);
    }
}

int fp_conf_range(const fp_option *o, char *buf, size_t len)
{
    fp_sink b = fp_sink_buffer(buf, len);
    put_range(&b, o);
    return fp_sink_error(&b) || len == 0 ? ENOSPC : 0;
}

int fp_conf_accept(const fp_option *o, char *buf, size_t len)
{
    fp_sink b = fp_sink_buffer(buf, len);
    put_accept(&b, o);
    return fp_sink_error(&b) || len == 0 ? ENOSPC : 0;
}

/* ---- the table ---------------------------------------------------------- */
#define POOL_FIELD(f) (offsetof(fp_conf, pool) + offsetof(fp_pool_opts, f))

/* The words a bool row accepts, for its range and its messages. */
static const char *const fp_bool_words[] = {"0", "1", "true", "false", "True", "False", NULL};

/* A 0/1 key stored in the int field of fp_conf of the same name. */
#define FP_BOOL_OPTION(key, def, text)                                                             \
    {                                                                                              \
        .name = #key, .type = "bool", .deflt = def, .words = fp_bool_words, .help = text,          \
        .offset = offsetof(fp_conf, key), .acts = FP_ACTS_ALL, .parse = parse_bool,                \
        .format = format_bool,                                                                     \
    }

static const fp_option fp_options[] = {
    {
        .name = "max_split_size_mb",
        .pytorch = 1,
        .acts = FP_ACTS_CLASSIC,
        .type = "integer MiB",
        .deflt = "unlimited",
        .help = "blocks of this size or more are never split; requests of "
                "this size or more never take a cached block more than "
                "max_non_split_rounding_mb bigger",
        .offset = POOL_FIELD(max_split_size),
        .min = 21,
        .max = FP_MAX_MB,
        .off_word = "unlimited",
        .off_value = SIZE_MAX,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "max_non_split_rounding_mb",
        .pytorch = 1,
        .acts = FP_ACTS_CLASSIC,
        .type = "integer MiB",
        .deflt = "20",
        .help = "how much bigger than the request a cached block at or "
                "above max_split_size_mb may be and still be used whole",
        .offset = POOL_FIELD(max_non_split_rounding),
        .min = 20,
        .max = FP_MAX_MB,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "roundup_power2_divisions",
        .pytorch = 1,
        .acts = FP_ACTS_ALL,
        .type = "divisions",
        .deflt = "0",
        .range = "0, 1, 2, 4, ..., 1024, or [size:div,...,>:div]",
        .help = "round requests up to one of N steps between powers of two, "
                "for every size interval (1 MiB .. 32 GiB) or per interval",
        .accept = "0 or a power of two up to 1024, or a list like "
                  "[256:1,512:2,>:8] of increasing power-of-two sizes in "
                  "MiB with such values, '>' last",
        .offset = POOL_FIELD(roundup_divisions),
        .parse = parse_divs,
        .format = format_divs,
    },
    {
        .name = "garbage_collection_threshold",
        .pytorch = 1,
        .acts = FP_ACTS_CLASSIC,
        .type = "real",
        .deflt = "off",
        .example = "0.6",
        .help = "when reserved memory passes this fraction of the cap, free "
                "cached blocks, oldest first, before reserving more",
        .offset = POOL_FIELD(gc_threshold),
        .rmin = 0,
        .rmax = 1,
        .open_min = 1,
        .open_max = 1,
        .off_word = "off",
        .parse = parse_dbl,
        .format = format_dbl,
    },
    {
        .name = "per_process_memory_fraction",
        .acts = FP_ACTS_ALL,
        .type = "real",
        .deflt = "unlimited",
        .example = "0.5",
        .help = "cap on reserved memory as a fraction of the device's total",
        .offset = POOL_FIELD(memory_fraction),
        .rmin = 0,
        .rmax = 1,
        .open_min = 1,
        .off_word = "unlimited",
        .parse = parse_dbl,
        .format = format_dbl,
    },
    {
        .name = "max_reserved_mb",
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "unlimited",
        .help = "cap on reserved memory in MiB",
        .offset = POOL_FIELD(max_reserved),
        .min = 1,
        .max = FP_MAX_MB,
        .off_word = "unlimited",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    FP_BOOL_OPTION(strict, "0",
                   "1: any problem in FRAGPOOL_CONF is fatal (exit status 2 "
                   "before main)"),
    FP_BOOL_OPTION(meminfo_counts_cache, "1",
                   "1: cuMemGetInfo's free memory includes the bytes idle in "
                   "fragpool's cache"),
    FP_BOOL_OPTION(debug_check, "0",
                   "1: verify every pool invariant after each allocation and "
                   "free, and abort with the broken one (slow)"),
    {
        .name = "free_policy",
        .acts = FP_ACTS_ALL,
        .type = "word",
        .deflt = "deferred",
        .help = "deferred: a free returns at once and the block is reused "
                "after the work queued before it has finished; sync: every "
                "free synchronizes the device, exactly as cuMemFree",
        .offset = offsetof(fp_conf, free_policy),
        .words = (const char *const[]){"deferred", "sync", NULL},
        .parse = parse_word,
        .format = format_word,
    },
    {
        .name = "defer_headroom_mb",
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "0",
        .help = "no effect, kept so that existing settings still parse: "
                "deferred reuse never waits for the GPU on the host; a "
                "non-zero value is said once on stderr and ignored",
        .offset = offsetof(fp_conf, defer_headroom),
        .min = 0,
        .max = FP_MAX_MB,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "summary",
        .acts = FP_ACTS_ALL,
        .type = "destination",
        .deflt = "stderr",
        .range = "off, stderr, PATH (%p pid, %r rank, %h host)",
        .help = "where the memory summary goes at exit",
        .accept = "off, stderr, or a file path shorter than 256 bytes "
                  "(%p pid, %r rank, %h host)",
        .offset = offsetof(fp_conf, summary),
        .parse = parse_dest,
        .format = format_dest,
    },
    {
        .name = "summary_format",
        .acts = FP_ACTS_ALL,
        .type = "word",
        .deflt = "text",
        .help = "the summary's format: PyTorch's memory_summary table, or "
                "JSON (docs/summary.md)",
        .offset = offsetof(fp_conf, summary_format),
        .words = (const char *const[]){"text", "json", NULL},
        .parse = parse_word,
        .format = format_word,
    },
    FP_BOOL_OPTION(dump_on_sigusr1, "0",
                   "1: SIGUSR1 writes the current summary (to stderr, or to "
                   "PATH.N with a summary path) and the program runs on"),
    {
        .name = "trace",
        .acts = FP_ACTS_ALL,
        .type = "destination",
        .deflt = "off",
        .range = "off, PATH (%p pid, %r rank, %h host)",
        .help = "record every allocation, free and segment event to this "
                "CSV file, for fragpool replay and tune",
        .accept = "off, or a file path shorter than 256 bytes (%p pid, "
                  "%r rank, %h host)",
        .offset = offsetof(fp_conf, trace),
        .parse = parse_dest,
        .format = format_dest,
    },
    {
        .name = "record_mb",
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "16",
        .help = "host memory each pool may use to record its requests (16 "
                "bytes each), so that after an OOM a replay of the run can "
                "prove which setting fits (docs/advice.md); off: no record, "
                "and no proven advice",
        .offset = POOL_FIELD(record_bytes),
        .min = 1,
        .max = 65536,
        .off_word = "off",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "advice_budget_ms",
        .acts = FP_ACTS_ALL,
        .type = "integer",
        .deflt = "1000",
        .help = "the most milliseconds the search after an OOM may replay the "
                "run; past it the OOM is returned and the message says the "
                "search was cut short (docs/advice.md)",
        .offset = offsetof(fp_conf, advice_budget_ms),
        .min = 1,
        .max = 3600000,
        .parse = parse_count,
        .format = format_count,
    },
    FP_BOOL_OPTION(lend, "1",
                   "when this process would run out of device memory, ask the "
                   "other fragpool processes of this user on the same GPU to give "
                   "back idle memory, and answer their asks (docs/lending.md); 0 "
                   "neither asks nor answers"),
    {
        .name = "lend_wait_ms",
        .acts = FP_ACTS_ALL,
        .type = "integer",
        .deflt = "1000",
        .help = "the most milliseconds an ask for idle memory waits for the "
                "other processes' answers before the allocation fails "
                "(docs/lending.md)",
        .offset = offsetof(fp_conf, lend_wait_ms),
        .min = 1,
        .max = 60000,
        .parse = parse_count,
        .format = format_count,
    },
    {
        .name = "lend_dir",
        .acts = FP_ACTS_ALL,
        .type = "directory",
        .deflt = "/dev/shm",
        .range = "PATH",
        .help = "where the processes of one GPU meet to lend memory: a "
                "private file per user and GPU (docs/lending.md)",
        .accept = "a directory path shorter than 256 bytes",
        .offset = offsetof(fp_conf, lend_dir),
        .parse = parse_dest,
        .format = format_dest,
    },
    {
        .name = "ipc_export",
        .acts = FP_ACTS_ALL,
        .type = "word",
        .deflt = "fragpool",
        .help = "cuIpcGetMemHandle of an allocation inside a pool segment or "
                "of virtual memory: give a fragpool handle that processes "
                "under fragpool open (the default), or refuse it "
                "(CUDA_ERROR_NOT_SUPPORTED) (docs/shim.md, IPC)",
        .offset = offsetof(fp_conf, ipc_export),
        .words = (const char *const[]){"refuse", "fragpool", NULL},
        .parse = parse_word,
        .format = format_word,
    },
    {
        .name = "own_segment_mb",
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "off",
        .help = "allocations of this many MiB or more go to the driver, each "
                "a segment of its own (not cached), so that any process can "
                "open their IPC handles (PyTorch with its cache on: 2)",
        .offset = offsetof(fp_conf, own_segment),
        .min = 1,
        .max = FP_MAX_MB,
        .off_word = "off",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    /* ---- snapshot:PATH and trace_stacks:N ---- */
    {
        .name = "snapshot",
        .acts = FP_ACTS_ALL,
        .type = "destination",
        .deflt = "off",
        .range = "off, PATH (%p pid, %r rank, %h host)",
        .help = "write PyTorch's memory snapshot (the pickle of "
                "_dump_snapshot, for memory_viz) to this file at exit, and "
                "to PATH.N on SIGUSR1 with dump_on_sigusr1:1",
        .accept = "off, or a file path shorter than 256 bytes (%p pid, "
                  "%r rank, %h host)",
        .offset = offsetof(fp_conf, snapshot),
        .parse = parse_dest,
        .format = format_dest,
    },
    {
        .name = "trace_stacks",
        .acts = FP_ACTS_ALL,
        .type = "integer",
        .deflt = "0",
        .help = "record the N innermost host frames of each allocation "
                "(backtrace) for the snapshot's frames and the leak report; "
                "0: none",
        .offset = offsetof(fp_conf, trace_stacks),
        .min = 0,
        .max = 32,
        .parse = parse_count,
        .format = format_count,
    },
    {
        .name = "tools",
        .acts = FP_ACTS_ALL,
        .type = "word",
        .deflt = "passthrough",
        .help = "when a CUDA tool is injected (compute-sanitizer, Nsight: "
                "CUDA_INJECTION64_PATH or NVTX_INJECTION64_PATH set): "
                "passthrough sends every allocation to the driver, so the "
                "tool sees each one; pool serves from the pool anyway",
        .offset = offsetof(fp_conf, tools),
        .words = (const char *const[]){"passthrough", "pool", NULL},
        .parse = parse_word,
        .format = format_word,
    },
    /* ---- end of the snapshot keys ---- */
    /* ---- virtual-memory segments ---- */
    {
        .name = "expandable_segments",
        .pytorch = 1,
        .acts = FP_ACTS_ALL,
        .type = "bool",
        .deflt = "auto",
        .words = fp_bool_words,
        .off_word = "auto",
        .off_value = FP_VMM_AUTO,
        .help = "1: serve from large reserved address ranges whose physical "
                "pages are mapped on demand and moved to where they are "
                "needed (docs/vmm.md); 0: PyTorch's classic segments; auto: "
                "1 wherever the driver has virtual memory management",
        .offset = POOL_FIELD(expandable_segments),
        .parse = parse_bool,
        .format = format_bool,
    },
    {
        .name = "vmm_page_mb",
        .acts = FP_ACTS_VMM,
        .type = "integer MiB",
        .deflt = "granularity",
        .help = "with expandable_segments, the page mapped at a time, rounded "
                "up to the device's granularity (2 MiB on an H200)",
        .offset = POOL_FIELD(vmm_page),
        .min = 1,
        .max = 1048576,
        .off_word = "granularity",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "vmm_reserve_mb",
        .acts = FP_ACTS_VMM,
        .type = "integer MiB",
        .deflt = "device",
        .help = "with expandable_segments, the address space reserved per "
                "range (one for small and one for large blocks; more only "
                "when one is full); device: the device's memory size",
        .offset = POOL_FIELD(vmm_reserve),
        .min = 2,
        .max = FP_MAX_MB,
        .off_word = "device",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "vmm_headroom_mb",
        .acts = FP_ACTS_VMM,
        .type = "integer MiB",
        .deflt = "64",
        .help = "with expandable_segments, device memory a new page may not "
                "take: idle pages are unmapped first, so that the driver and "
                "libraries (kernels loaded lazily, local memory, their own "
                "cudaMalloc) find room; off or 0: map until the device is full",
        .offset = POOL_FIELD(vmm_headroom),
        .min = 0,
        .max = FP_MAX_MB,
        .off_word = "off",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "thread_cache_mb",
        .type = "integer MiB",
        .deflt = "off",
        .acts = FP_ACTS_ALL,
        .help = "freed blocks each thread may keep for its own next "
                "allocations without the pool's lock, once a second thread "
                "allocates (given back before the pool grows, before an OOM "
                "and at the thread's exit); off or 0: every pair takes the "
                "pool's lock",
        .offset = POOL_FIELD(thread_cache),
        .min = 0,
        .max = FP_MAX_MB,
        .off_word = "off",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    /* ---- pinned host memory ---- */
    FP_BOOL_OPTION(host_pool, "1",
                   "1: cuMemHostAlloc/cudaHostAlloc and cuMemAllocHost/"
                   "cudaMallocHost are served from a pool of pinned memory "
                   "(docs/shim.md, Pinned host memory); 0: all to the driver"),
    {
        .name = "host_max_reserved_mb",
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "unlimited",
        .help = "cap on the pinned memory the host pool holds; past it, "
                "requests go to the driver uncached",
        .offset = offsetof(fp_conf, host_max_reserved),
        .min = 1,
        .max = FP_MAX_MB,
        .off_word = "unlimited",
        .off_value = 0,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "host_max_cached_mb",
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "unlimited",
        .help = "pinned requests of more than this many MiB go to the "
                "driver and are not cached (PyTorch: pinned_max_cached_size_mb)",
        .offset = offsetof(fp_conf, host_max_cached),
        .min = 0,
        .max = FP_MAX_MB,
        .off_word = "unlimited",
        .off_value = SIZE_MAX,
        .parse = parse_mib,
        .format = format_mib,
    },
    {
        .name = "pinned_max_cached_size_mb",
        .pytorch = 1,
        .acts = FP_ACTS_ALL,
        .type = "integer MiB",
        .deflt = "unlimited",
        .help = "PyTorch's name for host_max_cached_mb: the same value",
        .offset = offsetof(fp_conf, host_max_cached),
        .min = 0,
        .max = FP_MAX_MB,
        .off_word = "unlimited",
        .off_value = SIZE_MAX,
        .parse = parse_mib,
        .format = format_mib,
    },
};

#define FP_NOPTIONS (sizeof fp_options / sizeof fp_options[0])
_Static_assert(FP_NOPTIONS <= FP_CONF_MAX_OPTIONS, "set_mask has 64 bits");

size_t fp_conf_noptions(void)
{
    return FP_NOPTIONS;
}

const fp_option *fp_conf_option(size_t i)
{
    return i < FP_NOPTIONS ? &fp_options[i] : NULL;
}

int fp_conf_find(const char *name, size_t n)
{
    for (size_t i = 0; i < FP_NOPTIONS; i++)
        if (slice_is(name, n, fp_options[i].name))
            return (int)i;
    return -1;
}

void fp_conf_default(fp_conf *c)
{
    memset(c, 0, sizeof *c);
    fp_pool_opts_default(&c->pool);
    c->meminfo_counts_cache = 1;
    memcpy(c->summary, "stderr", sizeof "stderr");
    memcpy(c->trace, "off", sizeof "off");
    memcpy(c->snapshot, "off", sizeof "off");
    c->host_pool = 1;
    c->host_max_cached = SIZE_MAX;
    c->ipc_export = FP_IPC_FRAGPOOL;
    c->pool.record_bytes = (size_t)16 << 20;
    c->advice_budget_ms = 1000;
    c->lend = 1;
    c->lend_wait_ms = 1000;
    memcpy(c->lend_dir, "/dev/shm", sizeof "/dev/shm");
}

/* "k:v,k:v" of the keys whose bit is set in mask, in table order. */
static int format_keys(const fp_conf *c, uint64_t mask, char *buf, size_t len)
{
    fp_sink b = fp_sink_buffer(buf, len);
    int first = 1;
    for (size_t i = 0; i < FP_NOPTIONS; i++) {
        if (!(mask & ((uint64_t)1 << i)))
            continue;
        if (!first)
            fp_putc(&b, ',');
        first = 0;
        fp_puts(&b, fp_options[i].name);
        fp_putc(&b, ':');
        fp_options[i].format(&fp_options[i], c, &b);
    }
    return fp_sink_error(&b) || len == 0 ? ENOSPC : 0;
}

int fp_conf_format(const fp_conf *c, char *buf, size_t len)
{
    return format_keys(c, UINT64_MAX, buf, len);
}

size_t fp_conf_entries(const fp_conf *c, fp_kv *out, size_t max, char *buf, size_t len)
{
    size_t n = 0, used = 0;
    for (; n < FP_NOPTIONS && n < max && used < len; n++) {
        fp_sink v = fp_sink_buffer(buf + used, len - used);
        fp_options[n].format(&fp_options[n], c, &v);
        if (fp_sink_error(&v))
            break;
        out[n] = (fp_kv){fp_options[n].name, buf + used};
        used += fp_sink_length(&v) + 1;
    }
    return n;
}

int fp_conf_format_pytorch(const fp_conf *c, int vmm, char *buf, size_t len)
{
    fp_sink b = fp_sink_buffer(buf, len);
    int es = fp_conf_find("expandable_segments", 19);
    for (size_t i = 0; i < FP_NOPTIONS; i++) {
        if (!fp_options[i].pytorch || (int)i == es || fp_conf_is_default(c, i))
            continue;
        fp_puts(&b, fp_options[i].name);
        fp_putc(&b, ':');
        fp_options[i].format(&fp_options[i], c, &b);
        fp_putc(&b, ',');
    }
    fp_puts(&b, vmm ? "expandable_segments:True" : "expandable_segments:False");
    return fp_sink_error(&b) || len == 0 ? ENOSPC : 0;
}

int fp_conf_is_default(const fp_conf *c, size_t i)
{
    char a[FP_CONF_PATH_MAX * 3 + 64], b[sizeof a];
    fp_conf d;
    if (i >= FP_NOPTIONS)
        return 0;
    fp_conf_default(&d);
    fp_sink x = fp_sink_buffer(a, sizeof a), y = fp_sink_buffer(b, sizeof b);
    fp_options[i].format(&fp_options[i], c, &x);
    fp_options[i].format(&fp_options[i], &d, &y);
    return !fp_sink_error(&x) && !fp_sink_error(&y) && !strcmp(a, b);
}

/* ---- the parser ---------------------------------------------------------- */
typedef struct fp_parser {
    fp_conf *c;
    fp_conf_report_fn report;
    void *ud;
    const char *label; /* "fragpool: <label>: " starts every line */
    unsigned flags;    /* FP_CONF_LENIENT                        */
    uint64_t seen;     /* keys met in this text, good or bad */
    int problems;
} fp_parser;

static void line_start(fp_parser *ps, fp_sink *b, char *buf, size_t cap)
{
    *b = fp_sink_buffer(buf, cap);
    fp_puts(b, "fragpool: ");
    fp_puts(b, ps->label);
    fp_puts(b, ": ");
}

/* line: the buffer a line_start sink wrote into. */
static void emit(fp_parser *ps, const char *line)
{
    if (ps->problems < INT_MAX)
        ps->problems++;
    if (ps->report)
        ps->report(ps->ud, line);
}

/* "'entry': what; ignoring this entry, the rest still applies" */
static void problem(fp_parser *ps, fp_slice e, const char *what)
{
    char buf[FP_LINE];
    fp_sink b;
    line_start(ps, &b, buf, sizeof buf);
    fp_put_quoted(&b, e.p, e.n, FP_SHOW);
    fp_puts(&b, ": ");
    fp_puts(&b, what);
    fp_puts(&b, FP_TAIL);
    emit(ps, buf);
}

static void problem_empty(fp_parser *ps, size_t at)
{
    char buf[FP_LINE];
    fp_sink b;
    line_start(ps, &b, buf, sizeof buf);
    fp_puts(&b, "empty entry at byte ");
    fp_put_u64(&b, at);
    fp_puts(&b, " (stray ','); expected key:value" FP_TAIL);
    emit(ps, buf);
}

/* The key k most likely stands for (fp_closest), or NULL. */
static const char *meant(fp_slice k)
{
    const char *names[FP_NOPTIONS];
    for (size_t i = 0; i < FP_NOPTIONS; i++)
        names[i] = fp_options[i].name;
    return fp_closest(k, names, FP_NOPTIONS);
}

static void problem_unknown(fp_parser *ps, fp_slice e, fp_slice k)
{
    char buf[FP_LINE];
    fp_sink b;
    line_start(ps, &b, buf, sizeof buf);
    fp_puts(&b, "unknown key ");
    fp_put_quoted(&b, k.p, k.n, FP_SHOW);
    fp_puts(&b, " (in ");
    fp_put_quoted(&b, e.p, e.n, FP_SHOW);
    const char *guess = meant(k);
    if (guess) {
        fp_puts(&b, "); did you mean ");
        fp_puts(&b, guess);
        fp_puts(&b, "? (fragpool config lists every key)");
    } else {
        const char *names[FP_NOPTIONS];
        size_t near[3];
        for (size_t i = 0; i < FP_NOPTIONS; i++)
            names[i] = fp_options[i].name;
        size_t m = fp_nearest(k, names, FP_NOPTIONS, near, 3);
        fp_puts(&b, "); nearest keys: ");
        for (size_t i = 0; i < m; i++) {
            fp_puts(&b, i ? ", " : "");
            fp_puts(&b, names[near[i]]);
        }
        fp_puts(&b, " (fragpool config lists every key)");
    }
    fp_puts(&b, FP_TAIL);
    emit(ps, buf);
}

/* "'entry': what; ignoring this entry (key stays cur), the rest ..." */
static void problem_key(fp_parser *ps, fp_slice e, const fp_option *o, const char *what)
{
    char buf[FP_LINE];
    fp_sink b;
    line_start(ps, &b, buf, sizeof buf);
    fp_put_quoted(&b, e.p, e.n, FP_SHOW);
    fp_puts(&b, ": ");
    fp_puts(&b, what);
    fp_puts(&b, "; ignoring this entry (");
    fp_puts(&b, o->name);
    fp_puts(&b, " stays ");
    o->format(o, ps->c, &b);
    fp_puts(&b, "), the rest still applies");
    emit(ps, buf);
}

static void problem_value(fp_parser *ps, fp_slice e, const fp_option *o, const char *detail)
{
    char buf[FP_LINE / 2];
    fp_sink b = fp_sink_buffer(buf, sizeof buf);
    if (detail[0]) {
        fp_puts(&b, detail);
        fp_puts(&b, "; ");
    }
    fp_puts(&b, "must be ");
    put_accept(&b, o);
    problem_key(ps, e, o, buf);
}

static void problem_duplicate(fp_parser *ps, fp_slice e, const fp_option *o)
{
    char buf[128];
    fp_sink b = fp_sink_buffer(buf, sizeof buf);
    fp_puts(&b, "duplicate key, only the first ");
    fp_puts(&b, o->name);
    fp_puts(&b, " counts");
    problem_key(ps, e, o, buf);
}

/* An alias given after its other name (two rows of one field). */
static void problem_alias(fp_parser *ps, fp_slice e, const fp_option *o, const fp_option *first)
{
    char buf[256];
    fp_sink b = fp_sink_buffer(buf, sizeof buf);
    fp_puts(&b, o->name);
    fp_puts(&b, " is another name of ");
    fp_puts(&b, first->name);
    fp_puts(&b, ", given before; only the first counts");
    problem_key(ps, e, o, buf);
}

/* The first row in mask, other than row i, that sets the same field (an
 * alias: pinned_max_cached_size_mb and host_max_cached_mb), or -1. */
static int alias_in(uint64_t mask, size_t i)
{
    for (size_t j = 0; j < FP_NOPTIONS; j++)
        if (j != i && ((mask >> j) & 1) && fp_options[j].offset == fp_options[i].offset &&
            fp_options[j].parse == fp_options[i].parse)
            return (int)j;
    return -1;
}

/* Whether v, as row o would parse it, leaves c as it is (an alias that
 * repeats its other name's value, as fp_conf_format writes both). */
static bool same_value(const fp_option *o, fp_slice v, const fp_conf *c)
{
    fp_conf t = *c;
    char whybuf[256];
    fp_sink why = fp_sink_buffer(whybuf, sizeof whybuf);
    return v.n && o->parse(o, v.p, v.n, &t, &why) == 0 && memcmp(&t, c, sizeof t) == 0;
}

/* Key and value of a non-empty entry that has a ':' and a known key. */
static void apply(fp_parser *ps, fp_slice e, int idx, fp_slice v)
{
    const fp_option *o = &fp_options[idx];
    uint64_t bit = (uint64_t)1 << idx;
    char whybuf[256];
    fp_sink why;
    if (ps->seen & bit) {
        problem_duplicate(ps, e, o);
        return;
    }
    int alias = alias_in(ps->seen, (size_t)idx);
    if (alias >= 0 && !same_value(o, v, ps->c)) {
        ps->seen |= bit;
        problem_alias(ps, e, o, &fp_options[alias]);
        return;
    }
    ps->seen |= bit;
    why = fp_sink_buffer(whybuf, sizeof whybuf);
    if (!v.n)
        problem_value(ps, e, o, "empty value");
    else if (o->parse(o, v.p, v.n, ps->c, &why))
        problem_value(ps, e, o, whybuf);
    else
        ps->c->set_mask |= bit;
}

static void parse_entry(fp_parser *ps, const char *text, size_t at, size_t end)
{
    fp_slice e = fp_trim(text + at, end - at);
    if (!e.n) {
        problem_empty(ps, at);
        return;
    }
    const char *colon = memchr(e.p, ':', e.n);
    if (!colon) {
        problem(ps, e, "no ':' in entry; expected key:value");
        return;
    }
    fp_slice k = fp_trim(e.p, (size_t)(colon - e.p));
    fp_slice v = fp_trim(colon + 1, e.n - (size_t)(colon - e.p) - 1);
    int idx = fp_conf_find(k.p, k.n);
    if (!k.n)
        problem(ps, e, "empty key; expected key:value");
    else if (idx < 0 && (ps->flags & FP_CONF_LENIENT) && fp_conf_pytorch_only(k.p, k.n))
        return; /* PyTorch's alone */
    else if (idx < 0)
        problem_unknown(ps, e, k);
    else
        apply(ps, e, idx, v);
}

/* Where the entry starting at i ends: the next ',' outside [ ].  A '['
 * opens only if some ']' follows it (i < last_close), so an unclosed '['
 * spoils one entry, not the rest of the text; skipping to the next ']'
 * keeps the scan linear. */
static size_t entry_end(const char *t, size_t i, size_t n, size_t last_close)
{
    for (; i < n && t[i] != ','; i++) {
        if (t[i] == '[' && i < last_close) {
            const char *close = memchr(t + i + 1, ']', last_close - i);
            i = (size_t)(close - t);
        }
    }
    return i;
}

/* Index of the last ']', or 0 when there is none (then no '[' opens). */
static size_t find_last_close(const char *t, size_t n)
{
    while (n && t[n - 1] != ']')
        n--;
    return n ? n - 1 : 0;
}

int fp_conf_parse(const char *text, fp_conf *c, fp_conf_report_fn report, void *ud)
{
    return fp_conf_parse_as(text, FP_LABEL, 0, c, report, ud);
}

int fp_conf_parse_as(const char *text, const char *label, unsigned flags, fp_conf *c,
                     fp_conf_report_fn report, void *ud)
{
    fp_parser ps = {
        .c = c, .report = report, .ud = ud, .label = label ? label : FP_LABEL, .flags = flags};
    size_t n = text ? strlen(text) : 0;
    if (fp_trim(text, n).n == 0)
        return 0;
    size_t last_close = find_last_close(text, n);
    for (size_t at = 0;;) {
        size_t end = entry_end(text, at, n, last_close);
        parse_entry(&ps, text, at, end);
        if (end >= n)
            break;
        at = end + 1;
    }
    return ps.problems;
}

/* ---- where the text comes from ------------------------------------------- */

/* Keys of PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF that fragpool has no
 * row for (c10/core/AllocatorConfig.cpp, c10/cuda/CUDAAllocatorConfig.cpp
 * and PyTorch's docs).  The shared ones are rows of fp_options. */
static const char *const fp_pytorch_only[] = {
    "pinned_use_background_threads",
    "large_segment_size_mb",
    "backend",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "graph_capture_record_stream_reuse",
    "throw_on_cudamalloc_oom",
    "pinned_max_round_threshold_mb",
};

int fp_conf_pytorch_only(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof fp_pytorch_only / sizeof *fp_pytorch_only; i++)
        if (slice_is(name, n, fp_pytorch_only[i]))
            return 1;
    return 0;
}

/* In the order fragpool looks: its own, then PyTorch's (PyTorch reads
 * PYTORCH_ALLOC_CONF and falls back to PYTORCH_CUDA_ALLOC_CONF). */
static const char *const fp_env_order[] = {
    "FRAGPOOL_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
};

int fp_conf_from_env(fp_conf *c, fp_conf_getenv_fn get, fp_conf_report_fn report, void *ud,
                     const char **source)
{
    *source = NULL;
    for (size_t i = 0; i < sizeof fp_env_order / sizeof *fp_env_order; i++) {
        const char *text = get(fp_env_order[i]);
        if (!text)
            continue;
        *source = fp_env_order[i];
        return fp_conf_parse_as(text, fp_env_order[i], i ? FP_CONF_LENIENT : 0, c, report, ud);
    }
    return 0;
}

int fp_conf_format_set(const fp_conf *c, char *buf, size_t len)
{
    return format_keys(c, c->set_mask, buf, len);
}

int fp_conf_source_line(const fp_conf *c, const char *source, char *buf, size_t len)
{
    char keys[FP_LINE / 2];
    fp_sink b;
    if (!source || slice_is(source, strlen(source), FP_LABEL))
        return ENOENT;
    fp_conf_format_set(c, keys, sizeof keys);
    b = fp_sink_buffer(buf, len);
    fp_puts(&b, "fragpool: " FP_LABEL " is unset; ");
    if (keys[0]) {
        fp_puts(&b, "taking ");
        fp_puts(&b, keys);
        fp_puts(&b, " from ");
        fp_puts(&b, source);
        fp_puts(&b, " (keys only PyTorch knows are left to PyTorch)");
    } else {
        fp_puts(&b, source);
        fp_puts(&b, " has no key fragpool uses, so fragpool runs with its defaults");
    }
    return fp_sink_error(&b) || len == 0 ? ENOSPC : 0;
}

/* ---- keys that do not act in the segments in force ------------------------
 * Each row says in which segment modes it acts (acts).  A key given for
 * the other mode would change nothing, silently; fp_conf_inert says so,
 * and what would make it act. */

fp_segs fp_conf_segs(const fp_conf *c)
{
    int es = c->pool.expandable_segments;
    return es == FP_VMM_OFF  ? FP_SEGS_CLASSIC
           : es == FP_VMM_ON ? FP_SEGS_VMM_ASKED
                             : FP_SEGS_VMM_DEFAULT;
}

static const char *const fp_segs_said[] = {
    [FP_SEGS_VMM_DEFAULT] = "virtual-memory segments (the default): add "
                            "expandable_segments:False for PyTorch's classic rules",
    [FP_SEGS_VMM_ASKED] = "virtual-memory segments (expandable_segments:True): use "
                          "expandable_segments:False for PyTorch's classic rules",
    [FP_SEGS_CLASSIC] = "classic segments (expandable_segments:False): leave "
                        "expandable_segments out (or set it True) for virtual-memory segments",
    [FP_SEGS_CLASSIC_NO_VMM] = "classic segments (the driver has no virtual memory management "
                               "here): it acts only on a device that has it",
};

static unsigned segs_mode(fp_segs segs)
{
    return segs == FP_SEGS_CLASSIC || segs == FP_SEGS_CLASSIC_NO_VMM ? FP_ACTS_CLASSIC
                                                                     : FP_ACTS_VMM;
}

uint64_t fp_conf_inert_mask(fp_segs segs)
{
    uint64_t m = 0;
    for (size_t i = 0; i < FP_NOPTIONS; i++)
        if (!(fp_options[i].acts & segs_mode(segs)))
            m |= (uint64_t)1 << i;
    return m;
}

int fp_conf_inert(const fp_conf *c, uint64_t mask, fp_segs segs, const char *label,
                  fp_conf_report_fn report, void *ud)
{
    unsigned mode = segs_mode(segs);
    int n = 0;
    for (size_t i = 0; i < FP_NOPTIONS; i++) {
        const fp_option *o = &fp_options[i];
        if (!((mask >> i) & 1) || (o->acts & mode))
            continue;
        char buf[FP_LINE];
        fp_sink b = fp_sink_buffer(buf, sizeof buf);
        fp_puts(&b, "fragpool: ");
        fp_puts(&b, label ? label : FP_LABEL);
        fp_puts(&b, ": ");
        fp_puts(&b, o->name);
        fp_putc(&b, ':');
        o->format(o, c, &b);
        fp_puts(&b, " has no effect with ");
        fp_puts(&b, fp_segs_said[segs]);
        n++;
        if (report)
            report(ud, buf);
    }
    return n;
}
