/* fp_emit.c - the two writers on top of base/'s sinks: the 75-column box
 * of torch.cuda.memory_summary() and a JSON writer, so the human table and
 * the JSON document are written by one set of functions.
 *
 * Invariants:
 *  - nothing here allocates, locks, or calls stdio or locale code (as in
 *    base/fp_text.c), so both are safe at exit;
 *  - every line of the box is 77 columns, "|...|" (wide text wraps);
 *  - the JSON writer keeps a comma state per open container (depth <= 63)
 *    and escapes every string (RFC 8259), invalid UTF-8 as \ufffd.
 */
#include "fp_report.h"

#include <string.h>

/* ---- the box -------------------------------------------------------------------- */

void fp_tbl_rule(fp_sink *s, char c)
{
    fp_putc(s, '|');
    fp_put_pad(s, c, FP_TBL_WIDTH);
    fp_put(s, "|\n", 2);
}

/* Bytes of p[0..n) that fit in width columns: all of it, else up to the
 * last space that fits, else as many whole characters as fit. */
static size_t fp_wrap_take(const char *p, size_t n, size_t width)
{
    size_t cols = 0, space = 0, i = 0;
    for (; i < n; i++) {
        int lead = ((unsigned char)p[i] & 0xC0) != 0x80;
        if (lead && cols == width)
            break;
        cols += (size_t)lead;
        if (p[i] == ' ')
            space = i;
    }
    if (i == n)
        return n;
    return space ? space : i;
}

/* The rest of p after a wrapped line: leading spaces dropped. */
static void fp_wrap_skip(const char **p, size_t *n, size_t take)
{
    *p += take;
    *n -= take;
    while (*n && **p == ' ') {
        (*p)++;
        (*n)--;
    }
}

static void fp_tbl_line(fp_sink *s, const char *text, size_t n, size_t indent)
{
    size_t w = fp_text_width(text, n), left = 0, right = 0;
    if (w < FP_TBL_WIDTH) {
        size_t room = FP_TBL_WIDTH - w;
        left = indent == SIZE_MAX ? room / 2 : indent < room ? indent : room;
        right = room - left;
    }
    fp_putc(s, '|');
    fp_put_pad(s, ' ', left);
    fp_put(s, text, n);
    fp_put_pad(s, ' ', right);
    fp_put(s, "|\n", 2);
}

void fp_tbl_text(fp_sink *s, const char *text, size_t n, size_t indent)
{
    do {
        size_t take = fp_wrap_take(text, n, FP_TBL_WIDTH);
        fp_tbl_line(s, text, take, indent);
        fp_wrap_skip(&text, &n, take);
    } while (n);
}

static void fp_put_label(fp_sink *s, const char *label)
{
    size_t n = label ? strlen(label) : 0;
    size_t w = fp_text_width(label ? label : "", n);
    fp_putc(s, ' ');
    fp_put(s, label ? label : "", n);
    fp_put_pad(s, ' ', w < FP_TBL_LABEL ? FP_TBL_LABEL - w : 0);
}

void fp_tbl_row(fp_sink *s, const char *label, const char *const cells[4])
{
    fp_putc(s, '|');
    fp_put_label(s, label);
    for (int i = 0; i < 4; i++) {
        fp_put(s, " | ", 3);
        fp_puts(s, cells[i]);
    }
    fp_put(s, " |\n", 3);
}

/* Columns left for a value after "| label | " and before " |". */
#define FP_KV_VALUE (FP_TBL_WIDTH - FP_TBL_LABEL - 5)

static void fp_kv_line(fp_sink *s, const char *label, const char *p, size_t n)
{
    size_t w = fp_text_width(p, n);
    fp_putc(s, '|');
    fp_put_label(s, label);
    fp_put(s, " | ", 3);
    fp_put(s, p, n);
    fp_put_pad(s, ' ', w < FP_KV_VALUE ? FP_KV_VALUE - w : 0);
    fp_put(s, " |\n", 3);
}

void fp_tbl_kv(fp_sink *s, const char *label, const char *value, size_t n)
{
    do {
        size_t take = fp_wrap_take(value, n, FP_KV_VALUE);
        fp_kv_line(s, label, value, take);
        label = NULL;
        fp_wrap_skip(&value, &n, take);
    } while (n);
}

/* ---- JSON --------------------------------------------------------------------- */

static void fp_json_escape(fp_sink *s, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    const char *two = c == '"'    ? "\\\""
                      : c == '\\' ? "\\\\"
                      : c == '\n' ? "\\n"
                      : c == '\t' ? "\\t"
                      : c == '\r' ? "\\r"
                      : c == '\b' ? "\\b"
                      : c == '\f' ? "\\f"
                                  : NULL;
    if (two)
        fp_put(s, two, 2);
    else
        fp_put(s, e, 6);
}

void fp_emit_json_string(fp_sink *s, const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t run = 0, i = 0;
    fp_putc(s, '"');
    while (i < n) {
        size_t k = fp_utf8_len(u + i, n - i);
        if (k && u[i] >= 0x20 && u[i] != '"' && u[i] != '\\' && u[i] != 0x7f) {
            i += k;
            continue;
        }
        fp_put(s, p + run, i - run);
        if (k)
            fp_json_escape(s, u[i]);
        else
            fp_put(s, "\\ufffd", 6);
        run = ++i;
    }
    fp_put(s, p + run, n - run);
    fp_putc(s, '"');
}

void fp_json_init(fp_json *j, fp_sink *s)
{
    j->s = s;
    j->depth = 0;
    j->more = 0;
}

/* The comma before a member and its "key": (key NULL inside arrays). */
static void fp_json_sepn(fp_json *j, const char *key, size_t klen)
{
    uint64_t bit = (uint64_t)1 << (j->depth & 63);
    if (j->more & bit)
        fp_putc(j->s, ',');
    j->more |= bit;
    if (key) {
        fp_emit_json_string(j->s, key, klen);
        fp_putc(j->s, ':');
    }
}

static void fp_json_sep(fp_json *j, const char *key)
{
    fp_json_sepn(j, key, key ? strlen(key) : 0);
}

static void fp_json_open(fp_json *j, const char *key, char c)
{
    fp_json_sep(j, key);
    fp_putc(j->s, c);
    if (j->depth < 63)
        j->depth++;
    j->more &= ~((uint64_t)1 << j->depth);
}

static void fp_json_close(fp_json *j, char c)
{
    if (j->depth)
        j->depth--;
    fp_putc(j->s, c);
}

void fp_json_obj(fp_json *j, const char *key)
{
    fp_json_open(j, key, '{');
}

void fp_json_arr(fp_json *j, const char *key)
{
    fp_json_open(j, key, '[');
}

void fp_json_end_obj(fp_json *j)
{
    fp_json_close(j, '}');
}

void fp_json_end_arr(fp_json *j)
{
    fp_json_close(j, ']');
}

void fp_json_u64(fp_json *j, const char *key, uint64_t v)
{
    fp_json_sep(j, key);
    fp_put_u64(j->s, v);
}

void fp_json_i64(fp_json *j, const char *key, int64_t v)
{
    fp_json_sep(j, key);
    fp_put_i64(j->s, v);
}

void fp_json_null(fp_json *j, const char *key)
{
    fp_json_sep(j, key);
    fp_put(j->s, "null", 4);
}

void fp_json_strn(fp_json *j, const char *key, const char *p, size_t n)
{
    fp_json_sep(j, key);
    fp_emit_json_string(j->s, p, n);
}

void fp_json_str(fp_json *j, const char *key, const char *str)
{
    if (str)
        fp_json_strn(j, key, str, strlen(str));
    else
        fp_json_null(j, key);
}

void fp_json_hex(fp_json *j, const char *key, uint64_t v)
{
    fp_json_sep(j, key);
    fp_putc(j->s, '"');
    fp_put_hex(j->s, v);
    fp_putc(j->s, '"');
}

void fp_json_fixed(fp_json *j, const char *key, uint64_t num, uint64_t den, unsigned decimals)
{
    if (!den) {
        fp_json_null(j, key);
        return;
    }
    fp_json_sep(j, key);
    fp_put_fixed(j->s, num, den, decimals);
}

void fp_json_pair(fp_json *j, const char *key, size_t klen, const char *val, size_t vlen)
{
    fp_json_sepn(j, key, klen);
    if (val)
        fp_emit_json_string(j->s, val, vlen);
    else
        fp_put(j->s, "null", 4);
}
