/* shim_trace.h - the trace:PATH recorder (shim_trace.c).
 *
 * Invariant: a trace that could not be written whole is said to be
 * incomplete, in one line on stderr (at exit, by the caller when
 * fp_tracer_flush returns false).
 */
#ifndef FP_SHIM_TRACE_H
#define FP_SHIM_TRACE_H

#include "fp_cuda.h"
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

void fp_tracer_open(void);
bool fp_tracer_on(void);
void fp_tracer_event(char op, uint64_t id, uint64_t size, CUstream s);
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
