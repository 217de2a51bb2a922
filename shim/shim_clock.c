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
 */
#include "shim_clock.h"
#include "shim_state.h"
#include <time.h>

#define FP_TIME_EVERY 8
#define FP_TIME_FLUSH 32

static FP_THREAD_LOCAL uint64_t tl_ticks; /* not yet in fp_alloc_ticks  */
static FP_THREAD_LOCAL unsigned tl_calls;
static FP_THREAD_LOCAL uint64_t tl_slow_t0; /* start of this call's wait  */

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

uint64_t fp_time_begin(void)
{
    tl_slow_t0 = 0;
    return ++tl_calls % FP_TIME_EVERY == 0 ? fp_ticks() : 0;
}

void fp_time_slow(void)
{
    if (!tl_slow_t0)
        tl_slow_t0 = fp_ticks();
}

/* t0: fp_time_begin's value.  A sampled call's part before any wait
 * stands for FP_TIME_EVERY calls; the wait counts once. */
void fp_time_end(uint64_t t0)
{
    uint64_t slow = tl_slow_t0, end = t0 || slow ? fp_ticks() : 0;
    if (slow)
        tl_ticks += end - slow;
    if (t0)
        tl_ticks += FP_TIME_EVERY * ((slow ? slow : end) - t0);
    if (tl_calls % FP_TIME_FLUSH == 0)
        fp_time_flush();
}

void fp_time_flush(void)
{
    if (tl_ticks) {
        atomic_fetch_add_explicit(&fp_alloc_ticks, tl_ticks, memory_order_relaxed);
        tl_ticks = 0;
    }
}
