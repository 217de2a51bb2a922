/* fp_text.c - the one text and number unit every folder uses: sinks
 * (a caller's fixed buffer or a file descriptor), integers, fixed-point
 * numbers, printable text, and the lexical helpers (white space, trim).
 *
 * Invariants:
 *  - nothing here allocates, locks, or calls stdio or locale code: only
 *    memcpy/memset/strlen and write(2) (with getrlimit, fstat and lseek
 *    under a file size limit), safe at exit and from a thread that a
 *    signal handler handed the work to;
 *  - no write here raises SIGXFSZ: past RLIMIT_FSIZE it fails with EFBIG;
 *  - a buffer sink never writes past its len bytes and keeps the buffer
 *    NUL-terminated (len > 0); a dropped byte sets ENOSPC, never silently;
 *  - the first error sticks: later output is counted in total, not written;
 *  - numbers are formatted by integer arithmetic (no printf, no double), so
 *    the decimal point is always '.', whatever the locale.
 */
#include "fp_text.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- sinks ------------------------------------------------------------------- */

fp_sink fp_sink_buffer(char *buf, size_t len)
{
    fp_sink s = {.fd = -1};
    if (buf && len) {
        s.buf = buf;
        s.cap = len - 1;
        buf[0] = '\0';
    }
    return s;
}

fp_sink fp_sink_fd(int fd)
{
    fp_sink s = {.fd = fd < 0 ? -1 : fd};
    if (fd < 0)
        s.err = EBADF;
    return s;
}

/* The kernel checks pos >= limit before a write to a regular file (and
 * sends SIGXFSZ), else shortens the write to the limit: so we stop first. */
ssize_t fp_write_capped(int fd, const void *p, size_t n)
{
    struct rlimit rl;
    struct stat st;
    if (n == 0 || getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return write(fd, p, n);
    int fl = fcntl(fd, F_GETFL);
    off_t pos = fl >= 0 && (fl & O_APPEND) ? st.st_size : lseek(fd, 0, SEEK_CUR);
    if (pos < 0)
        return write(fd, p, n);
    if ((uint64_t)pos >= (uint64_t)rl.rlim_cur) {
        errno = EFBIG;
        return -1;
    }
    if ((uint64_t)n > (uint64_t)rl.rlim_cur - (uint64_t)pos)
        n = (size_t)((uint64_t)rl.rlim_cur - (uint64_t)pos);
    return write(fd, p, n);
}

/* write(2) everything the chunk holds; retries EINTR and short writes.
 * The caller's errno is left as it was. */
static void fp_sink_drain(fp_sink *s)
{
    int saved = errno;
    size_t off = 0;
    while (off < s->len && !s->err) {
        ssize_t w = fp_write_capped(s->fd, s->chunk + off, s->len - off);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else
            s->err = w < 0 ? errno : EIO;
    }
    s->len = 0;
    errno = saved;
}

int fp_sink_flush(fp_sink *s)
{
    if (s->fd >= 0 && s->len)
        fp_sink_drain(s);
    return s->err;
}

int fp_sink_error(const fp_sink *s)
{
    return s->err;
}

size_t fp_sink_total(const fp_sink *s)
{
    return s->total;
}

size_t fp_sink_length(const fp_sink *s)
{
    return s->fd >= 0 ? 0 : s->len;
}

static void fp_put_buf(fp_sink *s, const char *p, size_t n)
{
    size_t room = s->cap - s->len;
    size_t k = n < room ? n : room;
    if (k) {
        memcpy(s->buf + s->len, p, k);
        s->len += k;
    }
    if (s->buf)
        s->buf[s->len] = '\0';
    if (k < n)
        s->err = ENOSPC;
}

static void fp_put_fd(fp_sink *s, const char *p, size_t n)
{
    while (n && !s->err) {
        size_t room = FP_SINK_CHUNK - s->len;
        size_t k = n < room ? n : room;
        memcpy(s->chunk + s->len, p, k);
        s->len += k;
        p += k;
        n -= k;
        if (s->len == FP_SINK_CHUNK)
            fp_sink_drain(s);
    }
}

void fp_put(fp_sink *s, const char *p, size_t n)
{
    s->total += n;
    if (s->err || !n)
        return;
    if (s->fd >= 0)
        fp_put_fd(s, p, n);
    else
        fp_put_buf(s, p, n);
}

void fp_puts(fp_sink *s, const char *str)
{
    if (str)
        fp_put(s, str, strlen(str));
}

void fp_putc(fp_sink *s, char c)
{
    fp_put(s, &c, 1);
}

void fp_put_pad(fp_sink *s, char c, size_t n)
{
    char run[32];
    memset(run, c, sizeof run);
    while (n) {
        size_t k = n < sizeof run ? n : sizeof run;
        fp_put(s, run, k);
        n -= k;
    }
}

/* ---- numbers ------------------------------------------------------------------ */

size_t fp_fmt_u64(char out[FP_U64_DIGITS], uint64_t v)
{
    char d[FP_U64_DIGITS];
    size_t i = sizeof d;
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(out, d + i, sizeof d - i);
    return sizeof d - i;
}

void fp_put_u64(fp_sink *s, uint64_t v)
{
    char d[FP_U64_DIGITS];
    fp_put(s, d, fp_fmt_u64(d, v));
}

void fp_put_i64(fp_sink *s, int64_t v)
{
    if (v < 0) {
        fp_putc(s, '-');
        fp_put_u64(s, (uint64_t)0 - (uint64_t)v);
    } else {
        fp_put_u64(s, (uint64_t)v);
    }
}

void fp_put_hex(fp_sink *s, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char d[18];
    size_t i = sizeof d;
    do {
        d[--i] = hex[v & 15];
        v >>= 4;
    } while (v);
    d[--i] = 'x';
    d[--i] = '0';
    fp_put(s, d + i, sizeof d - i);
}

/* Round the digits of num/den up by one unit in the last place; returns
 * the carry out of the fraction. */
static int fp_round_up(char *digits, unsigned n)
{
    while (n--) {
        if (digits[n] != '9') {
            digits[n]++;
            return 0;
        }
        digits[n] = '0';
    }
    return 1;
}

void fp_put_fixed(fp_sink *s, uint64_t num, uint64_t den, unsigned decimals)
{
    char digits[19];
    if (!den) {
        fp_puts(s, "n/a");
        return;
    }
    if (decimals > sizeof digits)
        decimals = sizeof digits;
    while (den > UINT64_MAX / 10) { /* keep rem * 10 from overflowing */
        num >>= 1;
        den >>= 1;
    }
    uint64_t ip = num / den, rem = num % den;
    for (unsigned i = 0; i < decimals; i++) {
        rem *= 10;
        digits[i] = (char)('0' + rem / den);
        rem %= den;
    }
    int last_odd = decimals ? (digits[decimals - 1] - '0') & 1 : (int)(ip & 1);
    uint64_t rest = den - rem; /* ties go to the even digit */
    if (rem > rest || (rem == rest && last_odd))
        ip += (uint64_t)fp_round_up(digits, decimals);
    fp_put_u64(s, ip);
    if (decimals) {
        fp_putc(s, '.');
        fp_put(s, digits, decimals);
    }
}

void fp_put_percent(fp_sink *s, uint64_t num, uint64_t den)
{
    if (!den) {
        fp_puts(s, "n/a");
        return;
    }
    while (num > UINT64_MAX / 100) {
        num >>= 1;
        den >>= 1;
    }
    fp_put_fixed(s, num * 100, den, 1);
    fp_putc(s, '%');
}

/* ---- text -------------------------------------------------------------------- */

size_t fp_text_width(const char *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += ((unsigned char)p[i] & 0xC0) != 0x80;
    return w;
}

size_t fp_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (len <= 1)
        return len;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) || (c == 0xF0 && p[1] < 0x90) ||
        (c == 0xF4 && p[1] > 0x8F))
        return 0; /* overlong, surrogate, > U+10FFFF */
    return len;
}

static void fp_put_escape(fp_sink *s, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
    if (c == '\n' || c == '\t' || c == '\r') {
        e[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        fp_put(s, e, 2);
        return;
    }
    fp_put(s, e, 4);
}

void fp_put_visible(fp_sink *s, const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t run = 0, i = 0;
    while (i < n) {
        size_t k = fp_utf8_len(u + i, n - i);
        if (k && u[i] >= 0x20 && u[i] != 0x7f) {
            i += k;
            continue;
        }
        fp_put(s, p + run, i - run);
        fp_put_escape(s, u[i]);
        run = ++i;
    }
    fp_put(s, p + run, n - run);
}

/* ---- lexical helpers --------------------------------------------------------- */

int fp_is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r'); /* \t \n \v \f \r */
}

fp_slice fp_trim(const char *p, size_t n)
{
    while (n && fp_is_space(*p)) {
        p++;
        n--;
    }
    while (n && fp_is_space(p[n - 1]))
        n--;
    return (fp_slice){p, n};
}

/* ---- typos ------------------------------------------------------------------ */

/* The edit distance of w and name (insert, delete, replace, or swap two
 * neighbours: one each), or SIZE_MAX when either is too long for a typo. */
static size_t distance(fp_slice w, const char *name)
{
    enum { MAXLEN = 48 };
    size_t m = strlen(name);
    if (w.n >= MAXLEN || m >= MAXLEN)
        return SIZE_MAX;
    size_t d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= w.n; i++)
        for (size_t j = 0; j <= m; j++) {
            if (!i || !j) {
                d[i][j] = i + j;
                continue;
            }
            size_t v = d[i - 1][j - 1] + (w.p[i - 1] != name[j - 1]);
            v = d[i - 1][j] + 1 < v ? d[i - 1][j] + 1 : v;
            v = d[i][j - 1] + 1 < v ? d[i][j - 1] + 1 : v;
            if (i > 1 && j > 1 && w.p[i - 1] == name[j - 2] && w.p[i - 2] == name[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[w.n][m];
}

const char *fp_closest(fp_slice word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t least = word.n < 6 ? 1 : 2;
    for (size_t i = 0; i < n; i++) {
        size_t dist = distance(word, names[i]);
        if (dist <= least && (!best || dist < least)) {
            best = names[i];
            least = dist;
        }
    }
    return best;
}

/* The longest run of bytes w and name share (at most 48 of w are looked at). */
static size_t common_run(fp_slice w, const char *name)
{
    size_t m = strlen(name), best = 0, wn = w.n < 48 ? w.n : 48;
    for (size_t i = 0; i < wn; i++)
        for (size_t j = 0; j < m; j++) {
            size_t k = 0;
            while (i + k < wn && j + k < m && w.p[i + k] == name[j + k])
                k++;
            best = k > best ? k : best;
        }
    return best;
}

/* Lower is nearer: the edit distance less the longest shared run, so
 * that a word that is part of a name ("split_size") finds it. */
static long nearness(fp_slice w, const char *name)
{
    size_t d = distance(w, name);
    if (d == SIZE_MAX)
        d = w.n + strlen(name);
    return (long)d - (long)common_run(w, name);
}

size_t fp_nearest(fp_slice word, const char *const *names, size_t n, size_t *out, size_t k)
{
    size_t got = 0;
    long score[FP_NEAREST_MAX];
    k = k < FP_NEAREST_MAX ? k : FP_NEAREST_MAX;
    for (size_t i = 0; i < n && k; i++) {
        long s = nearness(word, names[i]);
        size_t at = got;
        while (at > 0 && score[at - 1] > s) /* equals keep table order */
            at--;
        if (at >= k)
            continue;
        got = got < k ? got + 1 : k;
        for (size_t j = got - 1; j > at; j--) {
            score[j] = score[j - 1];
            out[j] = out[j - 1];
        }
        score[at] = s;
        out[at] = i;
    }
    return got;
}
