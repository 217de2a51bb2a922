/* shim_clock.h - time spent in the allocator (shim_clock.c).
 *
 * Invariant: a thread's ticks reach fp_alloc_ticks (shim_state.h) every
 * few calls and when it writes a summary (fp_time_flush).
 */
#ifndef FP_SHIM_CLOCK_H
#define FP_SHIM_CLOCK_H

#include <stdint.h>

uint64_t fp_ticks(void);
void fp_clock_start(void);
uint64_t fp_ticks_to_ns(uint64_t ticks);
/* Time in the allocator: t0 = fp_time_begin() on entry, fp_time_slow()
 * where the call starts to wait for the device or the driver, and
 * fp_time_end(t0) on the way out. */
uint64_t fp_time_begin(void);
void fp_time_slow(void);
void fp_time_end(uint64_t t0);
void fp_time_flush(void); /* this thread's ticks into fp_alloc_ticks */

#endif
