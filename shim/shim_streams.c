/* shim_streams.c - whether any stream is being captured into a graph:
 * the registry of captures and the gate that keeps fences out of them.
 *
 * While a capture is under way fragpool makes no fence and synchronizes
 * nothing: cuCtxRecordEvent, cuCtxWaitEvent and cuCtxSynchronize would
 * each break the program's graph.  So the capture calls are wrapped
 * (shim_capture.c) and counted here, and a fence is made only inside the
 * gate: a read lock that the begin-capture wrappers take for writing, so
 * no capture can begin while a fence is being made.  A pure registry: this
 * file calls no other file of shim/.
 *
 * Invariant: captures counts the captures begun through the driver API
 * since fragpool loaded and not yet ended.
 */
#include "shim_streams.h"
#include <pthread.h>
#include <stdatomic.h>

static pthread_rwlock_t gate = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int captures;

bool fp_streams_capturing(void)
{
    return atomic_load_explicit(&captures, memory_order_acquire) > 0;
}

bool fp_capture_gate_enter(void)
{
    pthread_rwlock_rdlock(&gate);
    if (!fp_streams_capturing())
        return true;
    pthread_rwlock_unlock(&gate);
    return false;
}

void fp_capture_gate_leave(void)
{
    pthread_rwlock_unlock(&gate);
}

/* fork: no fence is being made while the process is copied. */
void fp_capture_gate_fork_prepare(void)
{
    pthread_rwlock_wrlock(&gate);
}

void fp_capture_gate_fork_after(bool child)
{
    if (child) /* the writer's thread id is the parent's: start afresh */
        pthread_rwlock_init(&gate, NULL);
    else
        pthread_rwlock_unlock(&gate);
}

/* ---- what the capture wrappers report -------------------------------- */

void fp_capture_begin_shut(void)
{
    pthread_rwlock_wrlock(&gate);
}

void fp_capture_begin_open(bool began)
{
    if (began)
        atomic_fetch_add(&captures, 1);
    pthread_rwlock_unlock(&gate);
}

/* A capture that was under way is over whatever the result: an
 * invalidated capture ends with an error. */
void fp_capture_ended(bool was)
{
    if (was && atomic_load(&captures) > 0)
        atomic_fetch_sub(&captures, 1);
}
