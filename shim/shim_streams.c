/* shim_streams.c - which streams are being captured into a graph: the
 * registry of captures, the gate that keeps fences out of them, and the
 * driver's rule on "potentially unsafe" calls during a capture.
 *
 * While a capture is under way fragpool makes no fence and synchronizes
 * nothing: cuCtxRecordEvent, cuCtxWaitEvent and cuCtxSynchronize would
 * each break the program's graph.  So the capture calls are wrapped
 * (shim_capture.c) and registered here, and a fence is made only inside
 * the gate: a read lock that the begin-capture wrappers take for writing,
 * so no capture can begin while a fence is being made.
 *
 * A capture is over when its end succeeds or the driver says its stream
 * captures no more (shim_capture.c asks after a failed end), when its
 * stream is destroyed, or when its context is destroyed or reset
 * (shim_ctx_api.c reports those).  Nothing else ends one, so a capture the
 * program never ends keeps fences out for good; the hot path asks the
 * driver nothing.
 *
 * Each capture keeps its mode and thread, and each thread's mode is
 * mirrored from cuThreadExchangeStreamCaptureMode, so that the shim can
 * tell when the driver would refuse cuMemAlloc from this thread and leave
 * the call to the driver (the rule of cuStreamBeginCapture_v2's docs).
 *
 * A pure registry: this file calls no other file of shim/.  Lock order:
 * the gate, then the registry's lock.
 *
 * Invariant: fp_streams_captures == the registered captures + untracked ones (begun
 * while the table was full), all begun through the driver API since
 * fragpool loaded and not yet over.
 */
#include "shim_streams.h"
#include <stdatomic.h>

#define FP_CAPTURES 64

typedef struct capture {
    uint64_t token; /* 0: a free slot */
    fp_capture_desc d;
} capture;

pthread_rwlock_t fp_streams_gate = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* guards the rest */
static capture table[FP_CAPTURES];
static int untracked; /* begun while the table was full */
static uint64_t next_token;
atomic_int fp_streams_captures;
static _Thread_local __attribute__((tls_model("initial-exec"))) CUstreamCaptureMode thread_mode =
    CU_STREAM_CAPTURE_MODE_GLOBAL;

/* fork: no fence is being made, no capture registered, while the process
 * is copied. */
void fp_capture_gate_fork_prepare(void)
{
    pthread_rwlock_wrlock(&fp_streams_gate);
    pthread_mutex_lock(&lock);
}

void fp_capture_gate_fork_after(bool child)
{
    if (child) { /* the writer's thread id is the parent's: start afresh */
        pthread_mutex_init(&lock, NULL);
        pthread_rwlock_init(&fp_streams_gate, NULL);
    } else {
        pthread_mutex_unlock(&lock);
        pthread_rwlock_unlock(&fp_streams_gate);
    }
}

/* ---- the registry (under lock) ------------------------------------------ */

static void add(const fp_capture_desc *d)
{
    for (int i = 0; i < FP_CAPTURES; i++)
        if (!table[i].token) {
            table[i] = (capture){.token = ++next_token, .d = *d};
            return;
        }
    untracked++;
}

static void drop(capture *c)
{
    c->token = 0;
    atomic_fetch_sub(&fp_streams_captures, 1);
}

static bool same_stream(const capture *c, CUstream s, bool per_thread)
{
    return c->token && c->d.stream == s && c->d.per_thread == per_thread &&
           (!per_thread || pthread_equal(c->d.thread, pthread_self()));
}

/* ---- what the wrappers report ------------------------------------------ */

void fp_capture_begin_shut(void)
{
    pthread_rwlock_wrlock(&fp_streams_gate);
}

void fp_capture_begin_open(const fp_capture_desc *began)
{
    if (began) {
        pthread_mutex_lock(&lock);
        add(began);
        atomic_fetch_add(&fp_streams_captures, 1);
        pthread_mutex_unlock(&lock);
    }
    pthread_rwlock_unlock(&fp_streams_gate);
}

uint64_t fp_capture_lookup(CUstream stream, bool per_thread)
{
    if (!fp_streams_capturing())
        return 0;
    uint64_t token = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < FP_CAPTURES && !token; i++)
        if (same_stream(&table[i], stream, per_thread))
            token = table[i].token;
    pthread_mutex_unlock(&lock);
    return token;
}

void fp_capture_over(uint64_t token, bool ended)
{
    if (!ended)
        return;
    pthread_mutex_lock(&lock);
    if (!token && untracked > 0) {
        untracked--;
        atomic_fetch_sub(&fp_streams_captures, 1);
    }
    for (int i = 0; i < FP_CAPTURES && token; i++)
        if (table[i].token == token)
            drop(&table[i]);
    pthread_mutex_unlock(&lock);
}

void fp_capture_ctx_gone(CUcontext ctx)
{
    if (!fp_streams_capturing() || !ctx)
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < FP_CAPTURES; i++)
        if (table[i].token && table[i].d.ctx == ctx)
            drop(&table[i]);
    pthread_mutex_unlock(&lock);
}

void fp_capture_primary_gone(CUdevice dev)
{
    if (!fp_streams_capturing())
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < FP_CAPTURES; i++)
        if (table[i].token && table[i].d.primary && table[i].d.dev == dev)
            drop(&table[i]);
    pthread_mutex_unlock(&lock);
}

/* ---- the driver's rule on potentially unsafe calls ---------------------- */

void fp_capture_thread_mode(CUstreamCaptureMode mode)
{
    thread_mode = mode;
}

bool fp_capture_refuses_unsafe_slow(void)
{
    if (!fp_streams_capturing() || thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    bool global = false, own = false;
    pthread_t me = pthread_self();
    pthread_mutex_lock(&lock);
    for (int i = 0; i < FP_CAPTURES; i++) {
        const fp_capture_desc *d = &table[i].d;
        if (!table[i].token)
            continue;
        global |= d->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        own |= d->mode != CU_STREAM_CAPTURE_MODE_RELAXED && pthread_equal(d->thread, me);
    }
    global |= untracked > 0; /* unknown: let the driver decide */
    pthread_mutex_unlock(&lock);
    return own || (global && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
}
