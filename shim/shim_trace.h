/* shim_trace.h - the trace:PATH recorder (shim_trace.c).
 *
 * Invariant: a trace that could not be written whole is said to be
 * incomplete, in one line on stderr (at exit, by the caller when
 * fp_tracer_flush returns false).
 */
#ifndef FP_SHIM_TRACE_H
#define FP_SHIM_TRACE_H

#include "fp_cuda.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

void fp_tracer_open(void);
/* The trace file, -1 when none is being written (shim_trace.c). */
extern atomic_int fp_tracer_fd;
/* Whether a trace is being recorded.  Inline, one relaxed load: every
 * allocation and free asks it. */
static inline bool fp_tracer_on(void)
{
    return atomic_load_explicit(&fp_tracer_fd, memory_order_relaxed) >= 0;
}
void fp_tracer_event(char op, uint64_t id, uint64_t size, CUstream s);
/* The order lock (shim_trace.c, "Order"): true, and held, while a trace
 * records; pass the result to fp_tracer_order_end.  Inline: untraced, the
 * allocation path pays one relaxed load. */
bool fp_tracer_order_lock(void);
void fp_tracer_order_unlock(void);
static inline bool fp_tracer_order_begin(void)
{
    return fp_tracer_on() && fp_tracer_order_lock();
}
static inline void fp_tracer_order_end(bool held)
{
    if (held)
        fp_tracer_order_unlock();
}
void fp_tracer_order_fork_prepare(void);
void fp_tracer_order_fork_after(bool child);
/* At exit: flush and close, waiting for the lock until by at most;
 * false when it could not be had (the rows are lost). */
bool fp_tracer_flush(const struct timespec *by);
/* Whether the lock is free this moment (the calling thread does not hold
 * it): the exit handler asks first. */
bool fp_tracer_lock_free(void);
void fp_tracer_fork_prepare(void);
void fp_tracer_fork_parent(void);
void fp_tracer_fork_child(void);

#endif
