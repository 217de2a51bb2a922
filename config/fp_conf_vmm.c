/* fp_conf_vmm.c - the line that says a virtual-memory key was clamped.
 *
 * vmm_page_mb and vmm_reserve_mb accept values no device can use (a page
 * larger than the device, a range larger than any address space); the
 * pool uses the most the device allows instead (fp_vmm_size, pool_vmm.c).
 * This file words the one line that says so, for the shim at startup and
 * for the fragpool commands that assume a device size.
 *
 * Invariants: pure (no I/O, no malloc, no globals); the line names each
 * clamped key, the value asked for, the limit and where it comes from.
 */
#include "fp_conf.h"

#include <stdbool.h>

static void put_mib(fp_sink *b, size_t bytes)
{
    fp_put_u64(b, bytes / FP_MIB);
    fp_puts(b, " MiB");
}

/* "at most an eighth of the device's 16384 MiB", or with no size (or one
 * too large to matter) the address space's limit. */
static void put_source(fp_sink *b, size_t total, const char *device, const char *times)
{
    fp_puts(b, "at most ");
    if (!total) {
        fp_puts(b, "4 TiB with no device size known");
        return;
    }
    fp_puts(b, times);
    fp_puts(b, device);
    fp_puts(b, " ");
    put_mib(b, total);
}

int fp_conf_vmm_note(const fp_pool_opts *o, size_t gran, const char *device, char *buf, size_t len)
{
    fp_vmm_sizes z;
    fp_vmm_size(o, gran, &z);
    fp_sink b = fp_sink_buffer(buf, len);
    size_t total = o->device_total;
    size_t by_page = total / FP_VMM_PAGE_SHARE <= FP_VMM_RANGE_MAX ? total : 0;
    size_t by_range = total <= FP_VMM_RANGE_MAX / FP_VMM_RANGE_TIMES ? total : 0;
    if (z.page_clamped) {
        fp_puts(&b, "vmm_page_mb:");
        fp_put_u64(&b, o->vmm_page / FP_MIB);
        fp_puts(&b, " is more than a page may be (");
        put_source(&b, by_page, device, "an eighth of ");
        fp_puts(&b, "); using ");
        put_mib(&b, z.page);
        fp_puts(&b, " pages");
    }
    if (z.range_clamped) {
        fp_puts(&b, z.page_clamped ? "; vmm_reserve_mb:" : "vmm_reserve_mb:");
        fp_put_u64(&b, o->vmm_reserve / FP_MIB);
        fp_puts(&b, " is more address space than a range may take (");
        put_source(&b, by_range, device, "4 times ");
        fp_puts(&b, "); reserving ");
        put_mib(&b, z.range);
        fp_puts(&b, " per range");
    }
    return z.page_clamped || z.range_clamped;
}
