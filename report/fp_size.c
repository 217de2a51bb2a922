/* fp_size.c - sizes, counts and durations as PyTorch users read them.
 *
 * Two size styles, both PyTorch's own:
 *  - fp_format_size: format_size() of CUDACachingAllocator.cpp, used in
 *    its OOM message: up to 1024 "N bytes", else two decimals of KiB (up
 *    to 1 MiB), MiB (up to 1 GiB) or GiB, so "1024 bytes", "1.50 KiB",
 *    "1024.00 KiB", "20.00 MiB", "8.00 GiB";
 *  - fp_format_size_col / fp_format_count_col: _format_size and
 *    _format_count of torch.cuda.memory_summary(): whole units picked by
 *    the row's "all" value (below 768 KiB keep the unit, else divide), 10
 *    columns wide.
 *
 * Invariants: integer arithmetic only (ties round to even, as printf does
 * on these exact binary values), no allocation, output always terminated.
 */
#include "fp_report.h"

#include <string.h>

void fp_emit_size(fp_sink *s, size_t bytes)
{
    static const char *const unit[] = {" KiB", " MiB", " GiB"};
    uint64_t b = bytes, div = 1024;
    int u = 0;
    if (b <= 1024) {
        fp_put_u64(s, b);
        fp_puts(s, " bytes");
        return;
    }
    while (u < 2 && b > div * 1024) {
        div *= 1024;
        u++;
    }
    fp_put_fixed(s, b, div, 2);
    fp_puts(s, unit[u]);
}

void fp_format_size(size_t bytes, char out[32])
{
    fp_sink s = fp_sink_buffer(out, 32);
    fp_emit_size(&s, bytes);
}

/* Python's floor division by a positive divisor. */
static int64_t fp_floordiv(int64_t v, int64_t d)
{
    int64_t q = v / d;
    return (v % d != 0 && v < 0) ? q - 1 : q;
}

/* Right-align v in width columns. */
static void fp_put_right(fp_sink *s, int64_t v, size_t width)
{
    char tmp[24];
    fp_sink t = fp_sink_buffer(tmp, sizeof tmp);
    fp_put_i64(&t, v);
    size_t n = fp_sink_length(&t);
    fp_put_pad(s, ' ', n < width ? width - n : 0);
    fp_put(s, tmp, n);
}

/* Scale v while pref is at least limit, at most nunits - 1 times.  Python
 * divides pref as a float; for an integer limit, floor(pref / base^u) >=
 * limit is the same test. */
static int fp_scale(int64_t *v, int64_t pref, int64_t limit, int64_t base, int nunits)
{
    int u = 0;
    while (u + 1 < nunits && pref >= limit) {
        *v = fp_floordiv(*v, base);
        pref = fp_floordiv(pref, base);
        u++;
    }
    return u;
}

void fp_format_size_col(int64_t v, int64_t pref, char out[24])
{
    static const char *const unit[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
    fp_sink s = fp_sink_buffer(out, 24);
    int u = fp_scale(&v, pref, 768 * 1024, 1024, 6);
    fp_put_right(&s, v, 6);
    fp_putc(&s, ' ');
    fp_puts(&s, unit[u]);
}

void fp_format_count_col(int64_t v, int64_t pref, char out[24])
{
    static const char *const unit[] = {" ", "K", "M"};
    fp_sink s = fp_sink_buffer(out, 24);
    int u = fp_scale(&v, pref, 750 * 1000, 1000, 3);
    fp_put_right(&s, v, 7);
    fp_putc(&s, ' ');
    fp_puts(&s, unit[u]);
    fp_putc(&s, ' ');
}

void fp_emit_duration(fp_sink *s, uint64_t ns)
{
    if (ns < 1000) {
        fp_put_u64(s, ns);
        fp_puts(s, " ns");
    } else if (ns < 1000000) {
        fp_put_fixed(s, ns, 1000, 2);
        fp_puts(s, " \xc2\xb5s");
    } else if (ns < 1000000000) {
        fp_put_fixed(s, ns, 1000000, 2);
        fp_puts(s, " ms");
    } else {
        fp_put_fixed(s, ns, 1000000000, 2);
        fp_puts(s, " s");
    }
}
