/* fp_oom.c - the message written when an allocation finally fails: the
 * OOM line in the shape users already search for (PyTorch's older form),
 * then the cause in numbers.
 *
 *   fragpool: CUDA out of memory. Tried to allocate X (GPU n; ...)
 *   fragpool: cause: fragmentation — ...
 *
 * The fix that follows is not a rule of thumb here: it is what a replay of
 * the run proves (replay/fp_advise.c, printed by the shim and by
 * `fragpool replay`).
 *
 * Invariants:
 *  - written for every OOM, summary on or off, on the failing path itself:
 *    no allocation, no stdio, fixed stack use;
 *  - exactly two lines; the cause is decided once (fp_oom_cause); a
 *    request over 2^48 - 1 bytes, which the pool refuses before looking at
 *    a cap or the device, is said as too large, never as exhaustion;
 *  - every size goes through fp_emit_size (PyTorch's format_size).
 */
#include "fp_report.h"

#include <errno.h>

#define FP_DASH " \xe2\x80\x94 " /* " — " */

enum { FP_CAUSE_TOO_LARGE, FP_CAUSE_CAP, FP_CAUSE_FRAG, FP_CAUSE_DRIVER, FP_CAUSE_EXHAUSTION };

/* What the OOM path knows, gathered once. */
typedef struct fp_oom_ctx {
    const fp_oom_info *o;
    const fp_pool_stats *st;  /* may be NULL */
    const fp_pool_opts *opts; /* may be NULL */
    size_t total;             /* device bytes, 0 unknown */
    size_t dfree;             /* free per driver, (size_t)-1 unknown */
} fp_oom_ctx;

/* The bytes a block had to hold: the rounded request. */
static size_t fp_oom_need(const fp_oom_info *o)
{
    return o->rounded ? o->rounded : o->requested;
}

enum { FP_FRAG_NONE, FP_FRAG_IDLE, FP_FRAG_WITH_FREE };

/* No single free block big enough, though the idle bytes in the cache
 * would cover the request (FP_FRAG_IDLE), or would together with the
 * device's free memory cover the segment it needed (FP_FRAG_WITH_FREE:
 * the idle bytes sit in segments that cannot be released). */
static int fp_oom_fragmented(const fp_oom_ctx *c)
{
    const fp_oom_info *o = c->o;
    size_t need = fp_oom_need(o);
    if (o->largest_free >= need || !o->idle)
        return FP_FRAG_NONE;
    if (o->idle >= need)
        return FP_FRAG_IDLE;
    if (c->dfree != (size_t)-1 && c->dfree < o->segment && o->idle + c->dfree >= o->segment)
        return FP_FRAG_WITH_FREE;
    return FP_FRAG_NONE;
}

static int fp_oom_cause(const fp_oom_ctx *c)
{
    const fp_oom_info *o = c->o;
    if (o->requested > FP_MAX_REQUEST)
        return FP_CAUSE_TOO_LARGE; /* refused before any cap or device */
    if (o->over_cap)
        return FP_CAUSE_CAP;
    if (fp_oom_fragmented(c))
        return FP_CAUSE_FRAG;
    if (o->backend_err && o->backend_err != ENOMEM)
        return FP_CAUSE_DRIVER;
    return FP_CAUSE_EXHAUSTION;
}

static void fp_put_known(fp_sink *s, size_t v, size_t unknown)
{
    if (v == unknown)
        fp_puts(s, "unknown");
    else
        fp_emit_size(s, v);
}

/* ---- line 1 ------------------------------------------------------------------- */

static void fp_oom_headline(fp_sink *s, const fp_oom_ctx *c, int device)
{
    const fp_oom_info *o = c->o;
    fp_puts(s, "fragpool: CUDA out of memory. Tried to allocate ");
    fp_emit_size(s, o->requested);
    fp_puts(s, " (GPU ");
    fp_put_i64(s, device);
    fp_puts(s, "; ");
    fp_put_known(s, c->total, 0);
    fp_puts(s, " total capacity; ");
    fp_emit_size(s, o->allocated);
    fp_puts(s, " allocated; ");
    fp_emit_size(s, o->reserved);
    fp_puts(s, " reserved by fragpool, of which ");
    fp_emit_size(s, o->idle);
    fp_puts(s, " idle in cached blocks; ");
    fp_put_known(s, c->dfree, (size_t)-1);
    fp_puts(s, " free on the device; largest free block ");
    fp_emit_size(s, o->largest_free);
    fp_puts(s, ")\n");
}

/* ---- the cap ----------------------------------------------------------------------- */

/* The fraction cap in bytes, SIZE_MAX when none or unknown. */
static size_t fp_fraction_cap(const fp_oom_ctx *c)
{
    const fp_pool_opts *p = c->opts;
    size_t total = p && p->device_total ? p->device_total : c->total;
    if (!p || p->memory_fraction <= 0 || !total)
        return SIZE_MAX;
    return (size_t)(p->memory_fraction * (double)total);
}

/* 1 when per_process_memory_fraction, not max_reserved_mb, binds. */
static int fp_cap_is_fraction(const fp_oom_ctx *c)
{
    size_t mr = c->opts && c->opts->max_reserved ? c->opts->max_reserved : SIZE_MAX;
    size_t fr = fp_fraction_cap(c);
    return fr != SIZE_MAX && fr < mr;
}

/* A fraction in (0, 1]: two decimals; one that would read "0.00" gets as
 * many more (up to 15) as show two significant digits ("0.00012"). */
static void fp_put_fraction(fp_sink *s, double f)
{
    unsigned dec = 2;
    uint64_t den = 100;
    while (f > 0 && f * 100.0 < 0.5 && f * (double)den < 9.95 && dec < 15) {
        dec++;
        den *= 10;
    }
    uint64_t v = f <= 0 ? 0 : f >= 1 ? den : (uint64_t)(f * (double)den + 0.5);
    fp_put_fixed(s, v, den, dec);
}

/* "max_reserved_mb:4096" or "per_process_memory_fraction:0.50 of 80.00 GiB". */
static void fp_put_cap_setting(fp_sink *s, const fp_oom_ctx *c)
{
    if (!c->opts) {
        fp_puts(s, "the configured cap");
    } else if (fp_cap_is_fraction(c)) {
        fp_puts(s, "per_process_memory_fraction:");
        fp_put_fraction(s, c->opts->memory_fraction);
        fp_puts(s, " of ");
        fp_emit_size(s, c->opts->device_total ? c->opts->device_total : c->total);
    } else {
        fp_puts(s, "max_reserved_mb:");
        fp_put_u64(s, c->opts->max_reserved / FP_MIB);
    }
}

static size_t fp_oom_cap_bytes(const fp_oom_ctx *c)
{
    if (c->o->cap != SIZE_MAX && c->o->cap)
        return c->o->cap;
    return c->opts ? fp_pool_opts_cap(c->opts) : SIZE_MAX;
}

/* ---- line 2: the cause ---------------------------------------------------------- */

static void fp_cause_frag_numbers(fp_sink *s, const fp_oom_ctx *c)
{
    fp_emit_size(s, c->o->idle);
    if (fp_oom_fragmented(c) == FP_FRAG_WITH_FREE) {
        fp_puts(s, " idle in cached blocks and the ");
        fp_emit_size(s, c->dfree);
        fp_puts(s, " free on the device would cover the ");
        fp_emit_size(s, c->o->segment);
        fp_puts(s, " segment the ");
    } else {
        fp_puts(s, " idle in cached blocks would cover the ");
    }
    fp_emit_size(s, c->o->requested);
    fp_puts(s, " request");
    fp_puts(s, fp_oom_fragmented(c) == FP_FRAG_WITH_FREE ? " needed" : "");
    fp_puts(s, ", but the largest free block is ");
    fp_emit_size(s, c->o->largest_free);
}

static void fp_cause_frag(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "fragmentation" FP_DASH);
    fp_cause_frag_numbers(s, c);
    int64_t stuck = c->st ? c->st->inactive_split_bytes[FP_ALL].current : 0;
    if (stuck > 0) {
        fp_puts(s, "; ");
        fp_emit_size(s, (size_t)stuck);
        fp_puts(s, " of it sits in partly used segments, which cannot be released");
    }
}

static void fp_cause_cap(fp_sink *s, const fp_oom_ctx *c)
{
    const fp_oom_info *o = c->o;
    size_t cap = fp_oom_cap_bytes(c);
    fp_puts(s, "the cap refused" FP_DASH "reserved ");
    fp_emit_size(s, o->reserved);
    fp_puts(s, " plus the ");
    fp_emit_size(s, o->segment);
    fp_puts(s, " segment it needed would pass the cap");
    if (cap != SIZE_MAX) {
        fp_putc(s, ' ');
        fp_emit_size(s, cap);
    }
    fp_puts(s, " (");
    fp_put_cap_setting(s, c);
    fp_putc(s, ')');
    if (fp_oom_fragmented(c) == FP_FRAG_IDLE) {
        fp_puts(s, "; fragmentation too: ");
        fp_cause_frag_numbers(s, c);
    }
}

static void fp_cause_exhaustion(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "exhaustion" FP_DASH "live allocations hold ");
    fp_emit_size(s, c->o->allocated);
    if (c->total) {
        fp_puts(s, " of ");
        fp_emit_size(s, c->total);
    }
    if (c->dfree != (size_t)-1) {
        fp_puts(s, "; the device has ");
        fp_emit_size(s, c->dfree);
        fp_puts(s, " free");
    } else {
        fp_puts(s, "; the device's free memory is unknown");
    }
}

static void fp_cause_too_large(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "a request too large" FP_DASH);
    fp_put_u64(s, c->o->requested);
    fp_puts(s, " bytes is more than the 281474976710655 (2^48 - 1) that fragpool serves in "
               "one request, so it is refused as out of memory whatever the device holds; "
               "check the size the program computes");
}

static void fp_cause_driver(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "driver error" FP_DASH "reserving a ");
    fp_emit_size(s, c->o->segment);
    fp_puts(s, " segment failed with error ");
    fp_put_i64(s, c->o->backend_err);
    fp_puts(s, ", not for lack of memory");
}

static void fp_oom_cause_line(fp_sink *s, const fp_oom_ctx *c, int cause)
{
    fp_puts(s, "fragpool: cause: ");
    if (cause == FP_CAUSE_TOO_LARGE)
        fp_cause_too_large(s, c);
    else if (cause == FP_CAUSE_CAP)
        fp_cause_cap(s, c);
    else if (cause == FP_CAUSE_FRAG)
        fp_cause_frag(s, c);
    else if (cause == FP_CAUSE_DRIVER)
        fp_cause_driver(s, c);
    else
        fp_cause_exhaustion(s, c);
    fp_putc(s, '\n');
}

int fp_oom_message(const fp_oom_info *o, const fp_pool_stats *st, const fp_pool_opts *opts,
                   int device, size_t total_capacity, size_t device_free, fp_sink *out)
{
    fp_oom_ctx c = {o, st, opts, total_capacity, device_free};
    if (!c.total && opts)
        c.total = opts->device_total;
    int cause = fp_oom_cause(&c);
    fp_oom_headline(out, &c, device);
    fp_oom_cause_line(out, &c, cause);
    return fp_sink_flush(out);
}
