/* shim_trace.h - the trace:PATH recorder (shim_trace.c).
 *
 * Invariant: a trace that could not be written whole is said to be
 * incomplete, in one line on stderr.
 */
#ifndef FP_SHIM_TRACE_H
#define FP_SHIM_TRACE_H

#include "fp_cuda.h"
#include <stdbool.h>
#include <stdint.h>

void fp_trace_open(void);
bool fp_trace_on(void);
void fp_trace_event(char op, uint64_t id, uint64_t size, CUstream s);
void fp_trace_flush(void);
void fp_trace_fork_prepare(void);
void fp_trace_fork_parent(void);
void fp_trace_fork_child(void);

#endif
