/* shim_streams.h - the registry of graph captures and the gate that keeps
 * fences out of them (shim_streams.c).  A pure registry: it calls no other
 * file of shim/; the capture wrappers (shim_capture.c) and the context
 * wrappers (shim_ctx_api.c) report to it.
 */
#ifndef FP_SHIM_STREAMS_H
#define FP_SHIM_STREAMS_H

#include "fp_cuda.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A capture as its begin-capture call saw it. */
typedef struct fp_capture_desc {
    CUstream stream;  /* the handle, CU_STREAM_PER_THREAD for a
                                 thread's per-thread stream */
    bool per_thread;  /* stream is the calling thread's own */
    pthread_t thread; /* the thread that began it */
    CUcontext ctx;    /* the context current then (NULL: none) */
    CUdevice dev;
    bool primary; /* ctx is dev's primary context */
    CUstreamCaptureMode mode;
} fp_capture_desc;

/* The captures under way (shim_streams.c's invariant); read through
 * fp_streams_capturing. */
extern atomic_int fp_streams_captures;
/* True while any capture begun through the driver API is under way.
 * Inline, one load: every allocation asks it. */
static inline bool fp_streams_capturing(void)
{
    return atomic_load_explicit(&fp_streams_captures, memory_order_acquire) > 0;
}
/* The gate: read-held while a fence is made, write-held by a begin-capture
 * call (shim_streams.c). */
extern pthread_rwlock_t fp_streams_gate;
/* True (and captures cannot begin until fp_capture_gate_leave) when no
 * capture is under way; false, holding nothing, when one is.  Inline: a
 * reuse that needs a fence passes it (no code of shim_streams.c runs). */
static inline bool fp_capture_gate_enter(void)
{
    pthread_rwlock_rdlock(&fp_streams_gate);
    if (!fp_streams_capturing())
        return true;
    pthread_rwlock_unlock(&fp_streams_gate);
    return false;
}
static inline void fp_capture_gate_leave(void)
{
    pthread_rwlock_unlock(&fp_streams_gate);
}
/* Around a begin-capture call: the gate shut, then opened again with the
 * capture registered when it began (began: NULL when it did not). */
void fp_capture_begin_shut(void);
void fp_capture_begin_open(const fp_capture_desc *began);
/* The capture under way on a stream (per_thread: the calling thread's
 * per-thread stream), as a token for fp_capture_over; 0 when none. */
uint64_t fp_capture_lookup(CUstream stream, bool per_thread);
/* The capture of the token is over (its end succeeded, or the driver says
 * the stream captures no more, or the stream was destroyed).  Token 0
 * with ended: a capture that the full registry did not keep ended. */
void fp_capture_over(uint64_t token, bool ended);
/* Every capture of a destroyed context, or of a device's primary context
 * that was reset or released for good, is over. */
void fp_capture_ctx_gone(CUcontext ctx);
void fp_capture_primary_gone(CUdevice dev);
/* cuThreadExchangeStreamCaptureMode gave the calling thread this mode. */
void fp_capture_thread_mode(CUstreamCaptureMode mode);
/* True when the driver refuses "potentially unsafe" calls (cuMemAlloc,
 * cuMemFree, ...) from the calling thread now: it runs in global mode and
 * a global capture is under way, or it runs in global or thread-local
 * mode and has begun a capture that is not relaxed.  Inline, one atomic
 * load when no capture is under way (then no code of shim_streams.c runs). */
bool fp_capture_refuses_unsafe_slow(void);
static inline bool fp_capture_refuses_unsafe(void)
{
    return fp_streams_capturing() && fp_capture_refuses_unsafe_slow();
}
void fp_capture_gate_fork_prepare(void);
void fp_capture_gate_fork_after(bool child);

#endif
