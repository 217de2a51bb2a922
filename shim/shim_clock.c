/* shim_clock.c - "time spent in the allocator", cheaply.
 *
 * clock_gettime costs tens of nanoseconds, as much as a cached allocation,
 * so the hot path reads the CPU's time-stamp counter where there is one
 * and converts ticks to nanoseconds only when the summary is written,
 * from a calibration against CLOCK_MONOTONIC taken at setup and then.
 * Even the counter costs 8-21 ns a read on the machines we measured
 * (docs/shim.md, "Measured: the shim's host cost on the simulated device"),
 * so a thread times one call in FP_TIME_EVERY and counts it that many
 * times, while a call that waits for the device or the driver
 * (fp_time_slow: a fence, a synchronization, a segment reserved or
 * released) has that part timed exactly, every time.
 *
 * Invariant: a thread's ticks reach fp_alloc_ticks every FP_TIME_FLUSH
 * calls and when it writes a summary (fp_time_flush); another thread's
 * last few calls before it exits may go uncounted.
 *
 * The per-call functions are static inline in shim_clock.h (every
 * allocation and free runs them); this file holds the thread's counters
 * they use and the calibration.
 */
#include "shim_clock.h"
#include "shim_state.h"
#include <time.h>

FP_THREAD_LOCAL uint64_t fp_time_tl_ticks;
FP_THREAD_LOCAL unsigned fp_time_tl_calls;
FP_THREAD_LOCAL uint64_t fp_time_tl_slow_t0;

uint64_t fp_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t base_ticks, base_ns;

void fp_clock_start(void)
{
    base_ns = fp_clock_mono_ns();
    base_ticks = fp_ticks();
}

uint64_t fp_ticks_to_ns(uint64_t ticks)
{
    uint64_t dt = fp_ticks() - base_ticks, dn = fp_clock_mono_ns() - base_ns;
    if (dt == 0 || dn == 0)
        return ticks;
    return (uint64_t)((double)ticks * ((double)dn / (double)dt));
}
