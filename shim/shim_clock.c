/* shim_clock.c - a cheap clock for "time spent in the allocator".
 *
 * clock_gettime costs tens of nanoseconds, as much as a cached allocation,
 * so the hot path reads the CPU's time-stamp counter where there is one
 * and converts ticks to nanoseconds only when the summary is written,
 * from a calibration against CLOCK_MONOTONIC taken at setup and then.
 */
#include "shim.h"
#include <time.h>

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fp_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return mono_ns();
#endif
}

static uint64_t base_ticks, base_ns;

void fp_clock_start(void)
{
    base_ns = mono_ns();
    base_ticks = fp_ticks();
}

uint64_t fp_ticks_to_ns(uint64_t ticks)
{
    uint64_t dt = fp_ticks() - base_ticks, dn = mono_ns() - base_ns;
    if (dt == 0 || dn == 0)
        return ticks;
    return (uint64_t)((double)ticks * ((double)dn / (double)dt));
}
