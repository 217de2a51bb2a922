/* shim_defer.h - deferred reuse (shim_defer.c holds the why): frees that
 * never wait, reuse that the device orders.  fp_defer is opaque: its lock,
 * its event and its counts are made, forgotten and freed only here.
 *
 * Invariant: every block of the pool stamped before the deferral's
 * `covered` clock was freed before a fence the whole context waits for.
 */
#ifndef FP_SHIM_DEFER_H
#define FP_SHIM_DEFER_H

#include "fp_cuda.h"
#include "fp_pool.h"
#include "shim_counts.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct fp_defer fp_defer;
/* Whether the driver has context events (cuCtxRecordEvent, CUDA 12.5). */
bool fp_defer_ctx_events(void);
/* The deferral of a context's pool; NULL when out of memory. */
fp_defer *fp_defer_new(CUcontext ctx);
/* An allocation from pool whose memory no work queued before its free
 * can still touch (s and async: the stream of cuMemAllocAsync; t: the
 * calling thread's cache of pool, or NULL).  A block from t's cache
 * carries its free's stamp and stream and follows the same rule. */
int fp_defer_alloc(fp_defer *f, fp_pool *pool, fp_tcache *t, size_t size, CUstream s, bool async,
                   uint64_t *addr);
/* cuMemFreeAsync(addr, s) gave back a block of size bytes, stamped stamp. */
void fp_defer_freed_async(fp_defer *f, uint64_t addr, size_t size, uint64_t stamp, CUstream s);
/* Stream s is destroyed: its handle orders nothing from now on. */
void fp_defer_stream_gone(fp_defer *f, CUstream s);
/* The context was synchronized; the synchronization began at pool clock. */
void fp_defer_synchronized(fp_defer *f, uint64_t clock);
/* Before pages whose newest free is stamped `stamp` are unmapped: returns
 * 0 once the device has finished all work queued before that free
 * (waiting on the host if needed, counted as unmap_waits), EBUSY while a
 * graph is being captured and it has not, EIO when the driver failed. */
int fp_defer_wait_done(fp_defer *f, uint64_t stamp);
void fp_defer_forget(fp_defer *f);                 /* the context is gone */
void fp_defer_free(fp_defer *f);                   /* the pool is dropped */
void fp_defer_fork_prepare(fp_defer *f);           /* fork: take the lock */
void fp_defer_fork_after(fp_defer *f, bool child); /* give back, or renew */
void fp_defer_counts_get(fp_defer *f, fp_defer_counts *out);
/* Whether f's lock is free this moment (the calling thread does not hold
 * it): the exit handler asks before it reads the counts. */
bool fp_defer_lock_free(fp_defer *f);

#endif
