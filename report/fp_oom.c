/* fp_oom.c - the message written when an allocation finally fails: the
 * OOM line in the shape users already search for (PyTorch's older form),
 * then the cause in numbers, then one setting that would have avoided it.
 *
 *   fragpool: CUDA out of memory. Tried to allocate X (GPU n; ...)
 *   fragpool: cause: fragmentation — ...
 *   fragpool: fix: FRAGPOOL_CONF=max_split_size_mb:96 ...
 *
 * Invariants:
 *  - written for every OOM, summary on or off, on the failing path itself:
 *    no allocation, no stdio, fixed stack use;
 *  - exactly three lines; the cause is decided once (fp_oom_cause) and the
 *    advice follows from it and the same numbers;
 *  - every size goes through fp_put_size (PyTorch's format_size).
 */
#include "fp_report.h"

#include <errno.h>

#define FP_DASH " \xe2\x80\x94 "   /* " — " */

enum { FP_CAUSE_CAP, FP_CAUSE_FRAG, FP_CAUSE_DRIVER, FP_CAUSE_EXHAUSTION };

/* What the OOM path knows, gathered once. */
typedef struct fp_oom_ctx {
    const fp_oom_info *o;
    const fp_pool_stats *st;   /* may be NULL */
    const fp_pool_opts *opts;  /* may be NULL */
    size_t total;              /* device bytes, 0 unknown */
    size_t dfree;              /* free per driver, (size_t)-1 unknown */
} fp_oom_ctx;

size_t fp_oom_split_advice_mb(size_t requested)
{
    if (!requested)
        return 0;
    size_t mb = ((requested - 1) / FP_MIB) & ~(size_t)1;
    return mb > 20 ? mb : 0;
}

/* The bytes a block had to hold: the rounded request. */
static size_t fp_oom_need(const fp_oom_info *o)
{
    return o->rounded ? o->rounded : o->requested;
}

/* Enough idle bytes in the cache, but no single free block big enough. */
static int fp_oom_fragmented(const fp_oom_info *o)
{
    size_t need = fp_oom_need(o);
    return o->idle >= need && o->largest_free < need;
}

static int fp_oom_cause(const fp_oom_info *o)
{
    if (o->over_cap)
        return FP_CAUSE_CAP;
    if (fp_oom_fragmented(o))
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
        fp_put_size(s, v);
}

/* ---- line 1 ------------------------------------------------------------------- */

static void fp_oom_headline(fp_sink *s, const fp_oom_ctx *c, int device)
{
    const fp_oom_info *o = c->o;
    fp_puts(s, "fragpool: CUDA out of memory. Tried to allocate ");
    fp_put_size(s, o->requested);
    fp_puts(s, " (GPU ");
    fp_put_i64(s, device);
    fp_puts(s, "; ");
    fp_put_known(s, c->total, 0);
    fp_puts(s, " total capacity; ");
    fp_put_size(s, o->allocated);
    fp_puts(s, " allocated; ");
    fp_put_size(s, o->reserved);
    fp_puts(s, " reserved by fragpool, of which ");
    fp_put_size(s, o->idle);
    fp_puts(s, " idle in cached blocks; ");
    fp_put_known(s, c->dfree, (size_t)-1);
    fp_puts(s, " free on the device; largest free block ");
    fp_put_size(s, o->largest_free);
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
        fp_put_size(s, c->opts->device_total ? c->opts->device_total : c->total);
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
    fp_put_size(s, c->o->idle);
    fp_puts(s, " idle in cached blocks would cover the ");
    fp_put_size(s, c->o->requested);
    fp_puts(s, " request, but the largest free block is ");
    fp_put_size(s, c->o->largest_free);
}

static void fp_cause_frag(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "fragmentation" FP_DASH);
    fp_cause_frag_numbers(s, c);
    int64_t stuck = c->st ? c->st->inactive_split_bytes[FP_ALL].current : 0;
    if (stuck > 0) {
        fp_puts(s, "; ");
        fp_put_size(s, (size_t)stuck);
        fp_puts(s, " of it sits in partly used segments, which cannot be released");
    }
}

static void fp_cause_cap(fp_sink *s, const fp_oom_ctx *c)
{
    const fp_oom_info *o = c->o;
    size_t cap = fp_oom_cap_bytes(c);
    fp_puts(s, "the cap refused" FP_DASH "reserved ");
    fp_put_size(s, o->reserved);
    fp_puts(s, " plus the ");
    fp_put_size(s, o->segment);
    fp_puts(s, " segment it needed would pass the cap");
    if (cap != SIZE_MAX) {
        fp_putc(s, ' ');
        fp_put_size(s, cap);
    }
    fp_puts(s, " (");
    fp_put_cap_setting(s, c);
    fp_putc(s, ')');
    if (fp_oom_fragmented(o)) {
        fp_puts(s, "; fragmentation too: ");
        fp_cause_frag_numbers(s, c);
    }
}

static void fp_cause_exhaustion(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "exhaustion" FP_DASH "live allocations hold ");
    fp_put_size(s, c->o->allocated);
    if (c->total) {
        fp_puts(s, " of ");
        fp_put_size(s, c->total);
    }
    if (c->dfree != (size_t)-1) {
        fp_puts(s, "; the device has ");
        fp_put_size(s, c->dfree);
        fp_puts(s, " free");
    } else {
        fp_puts(s, "; the device's free memory is unknown");
    }
}

static void fp_cause_driver(fp_sink *s, const fp_oom_ctx *c)
{
    fp_puts(s, "driver error" FP_DASH "reserving a ");
    fp_put_size(s, c->o->segment);
    fp_puts(s, " segment failed with error ");
    fp_put_i64(s, c->o->backend_err);
    fp_puts(s, ", not for lack of memory");
}

static void fp_oom_cause_line(fp_sink *s, const fp_oom_ctx *c, int cause)
{
    fp_puts(s, "fragpool: cause: ");
    if (cause == FP_CAUSE_CAP)
        fp_cause_cap(s, c);
    else if (cause == FP_CAUSE_FRAG)
        fp_cause_frag(s, c);
    else if (cause == FP_CAUSE_DRIVER)
        fp_cause_driver(s, c);
    else
        fp_cause_exhaustion(s, c);
    fp_putc(s, '\n');
}

/* ---- line 3: the fix ------------------------------------------------------------ */

static void fp_fix_tune(fp_sink *s)
{
    fp_puts(s, "; check it offline with `fragpool tune TRACE`");
}

/* max_split_size_mb just under the request; something else below 20 MiB. */
static void fp_fix_frag(fp_sink *s, const fp_oom_ctx *c)
{
    size_t mb = fp_oom_split_advice_mb(c->o->requested);
    int capped = c->opts && fp_pool_opts_cap(c->opts) != SIZE_MAX;
    if (mb && c->opts && c->opts->max_split_size == mb * FP_MIB)
        mb = 0; /* already on: never advise a setting in force */
    if (mb) {
        fp_puts(s, "FRAGPOOL_CONF=max_split_size_mb:");
        fp_put_u64(s, mb);
        fp_puts(s, " (just under the ");
        fp_put_size(s, c->o->requested);
        fp_puts(s, " request, so blocks that large stay whole for requests like it");
        if (c->opts && c->opts->max_split_size != SIZE_MAX) {
            fp_puts(s, "; now max_split_size_mb:");
            fp_put_u64(s, c->opts->max_split_size / FP_MIB);
        }
        fp_putc(s, ')');
    } else if (capped) {
        fp_puts(s, "FRAGPOOL_CONF=garbage_collection_threshold:0.8, or release cached "
                   "blocks between phases (torch.cuda.empty_cache()); the ");
        fp_put_size(s, c->o->requested);
        fp_puts(s, " request is too small for max_split_size_mb, which must be over 20");
    } else {
        fp_puts(s, "release cached blocks between phases (torch.cuda.empty_cache()), or "
                   "FRAGPOOL_CONF=roundup_power2_divisions:4 so freed blocks fit later "
                   "requests; the ");
        fp_put_size(s, c->o->requested);
        fp_puts(s, " request is too small for max_split_size_mb, which must be over 20");
    }
    fp_fix_tune(s);
}

/* Raise the binding cap to reserved + the segment it needed. */
static void fp_fix_cap(fp_sink *s, const fp_oom_ctx *c)
{
    const fp_oom_info *o = c->o;
    size_t need = o->reserved + o->segment;
    size_t total = c->opts && c->opts->device_total ? c->opts->device_total : c->total;
    if (c->opts && fp_cap_is_fraction(c)) {
        uint64_t pct = ((uint64_t)need * 100 + total - 1) / total;
        if (pct > 100) {
            fp_puts(s, "no cap fits: reserved plus the segment exceed the device; "
                       "reduce the working set (e.g. the batch size)");
            return;
        }
        fp_puts(s, "FRAGPOOL_CONF=per_process_memory_fraction:");
        fp_put_fixed(s, pct, 100, 2);
    } else {
        fp_puts(s, "FRAGPOOL_CONF=max_reserved_mb:");
        fp_put_u64(s, (need + FP_MIB - 1) / FP_MIB);
    }
    fp_puts(s, " (reserved ");
    fp_put_size(s, o->reserved);
    fp_puts(s, " + the ");
    fp_put_size(s, o->segment);
    fp_puts(s, " segment it needed)");
    size_t mb = fp_oom_split_advice_mb(o->requested);
    if (fp_oom_fragmented(o) && mb) {
        fp_puts(s, ", or FRAGPOOL_CONF=max_split_size_mb:");
        fp_put_u64(s, mb);
        fp_puts(s, " to reuse the idle bytes");
    }
}

static void fp_fix_exhaustion(fp_sink *s, const fp_oom_ctx *c)
{
    const fp_oom_info *o = c->o;
    fp_puts(s, "reduce the working set (e.g. the batch size)");
    if (c->dfree != (size_t)-1 && c->dfree < o->segment) {
        fp_puts(s, ": ");
        fp_put_size(s, o->segment - c->dfree);
        fp_puts(s, " more are needed for the ");
        fp_put_size(s, o->segment);
        fp_puts(s, " segment");
    } else {
        fp_puts(s, "; the request needed a new ");
        fp_put_size(s, o->segment);
        fp_puts(s, " segment");
    }
}

static void fp_oom_fix_line(fp_sink *s, const fp_oom_ctx *c, int cause)
{
    fp_puts(s, "fragpool: fix: ");
    if (cause == FP_CAUSE_CAP)
        fp_fix_cap(s, c);
    else if (cause == FP_CAUSE_FRAG)
        fp_fix_frag(s, c);
    else if (cause == FP_CAUSE_DRIVER)
        fp_puts(s, "no allocator setting; the driver refused for another reason");
    else
        fp_fix_exhaustion(s, c);
    fp_putc(s, '\n');
}

int fp_oom_message(const fp_oom_info *o, const fp_pool_stats *st,
                   const fp_pool_opts *opts, int device, size_t total_capacity,
                   size_t device_free, fp_sink *out)
{
    fp_oom_ctx c = {o, st, opts, total_capacity, device_free};
    if (!c.total && opts)
        c.total = opts->device_total;
    int cause = fp_oom_cause(o);
    fp_oom_headline(out, &c, device);
    fp_oom_cause_line(out, &c, cause);
    fp_oom_fix_line(out, &c, cause);
    return fp_sink_flush(out);
}
