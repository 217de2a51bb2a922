/* shim_clock.h - time spent in the allocator (shim_clock.c).
 *
 * Invariant: a thread's ticks reach fp_alloc_ticks (shim_state.h) every
 * few calls and when it writes a summary (fp_time_flush).
 *
 * The calls every allocation and free makes (fp_ticks, fp_time_begin,
 * fp_time_slow, fp_time_end, fp_time_flush) are static inline here, over
 * the thread's counters that shim_clock.c defines: a hot path runs no code
 * of shim_clock.c.
 */
#ifndef FP_SHIM_CLOCK_H
#define FP_SHIM_CLOCK_H

#include "shim_state.h"
#include <stdint.h>

#define FP_TIME_EVERY 8
#define FP_TIME_FLUSH 32

extern FP_THREAD_LOCAL uint64_t fp_time_tl_ticks;   /* not yet in fp_alloc_ticks */
extern FP_THREAD_LOCAL unsigned fp_time_tl_calls;   /* calls timed or counted    */
extern FP_THREAD_LOCAL uint64_t fp_time_tl_slow_t0; /* start of this call's wait */

uint64_t fp_clock_mono_ns(void);
static inline uint64_t fp_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return fp_clock_mono_ns();
#endif
}

void fp_clock_start(void);
uint64_t fp_ticks_to_ns(uint64_t ticks);

/* this thread's ticks into fp_alloc_ticks */
static inline void fp_time_flush(void)
{
    if (fp_time_tl_ticks) {
        atomic_fetch_add_explicit(&fp_alloc_ticks, fp_time_tl_ticks, memory_order_relaxed);
        fp_time_tl_ticks = 0;
    }
}

/* Time in the allocator: t0 = fp_time_begin() on entry, fp_time_slow()
 * where the call starts to wait for the device or the driver, and
 * fp_time_end(t0) on the way out. */
static inline uint64_t fp_time_begin(void)
{
    fp_time_tl_slow_t0 = 0;
    return ++fp_time_tl_calls % FP_TIME_EVERY == 0 ? fp_ticks() : 0;
}

static inline void fp_time_slow(void)
{
    if (!fp_time_tl_slow_t0)
        fp_time_tl_slow_t0 = fp_ticks();
}

/* t0: fp_time_begin's value.  A sampled call's part before any wait
 * stands for FP_TIME_EVERY calls; the wait counts once. */
static inline void fp_time_end(uint64_t t0)
{
    uint64_t slow = fp_time_tl_slow_t0, end = t0 || slow ? fp_ticks() : 0;
    if (slow)
        fp_time_tl_ticks += end - slow;
    if (t0)
        fp_time_tl_ticks += FP_TIME_EVERY * ((slow ? slow : end) - t0);
    if (fp_time_tl_calls % FP_TIME_FLUSH == 0)
        fp_time_flush();
}

#endif
