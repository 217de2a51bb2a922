/* shim_streams.h - the registry of graph captures and the gate that keeps
 * fences out of them (shim_streams.c).  A pure registry: it calls no other
 * file of shim/; the capture wrappers (shim_capture.c) report to it.
 */
#ifndef FP_SHIM_STREAMS_H
#define FP_SHIM_STREAMS_H

#include <stdbool.h>

/* True while any capture begun through the driver API is under way. */
bool fp_streams_capturing(void);
/* True (and captures cannot begin until fp_capture_gate_leave) when no
 * capture is under way; false, holding nothing, when one is. */
bool fp_capture_gate_enter(void);
void fp_capture_gate_leave(void);
/* Around a begin-capture call: the gate shut, then opened again with the
 * capture counted when it began. */
void fp_capture_begin_shut(void);
void fp_capture_begin_open(bool began);
/* An end-capture call returned; was: a capture was under way on its
 * stream (it is over, whatever the call returned). */
void fp_capture_ended(bool was);
void fp_capture_gate_fork_prepare(void);
void fp_capture_gate_fork_after(bool child);

#endif
