/* shim_pools.h - one pool per CUDA context, and the pointer routing
 * (shim_pools.c).
 *
 * Invariant: a retired pool (its context destroyed or reset) is never
 * used for allocation again; its stats stay for the summary.  A pool
 * handed out by fp_pools_current, _current_existing, _find or _owner is
 * held: its slot is not rebuilt until the caller gives it back with
 * fp_pools_put.  A holder never waits for the pools' grow lock (nothing
 * here does while holding).
 */
#ifndef FP_SHIM_POOLS_H
#define FP_SHIM_POOLS_H

#include "fp_cuda.h"
#include "fp_pool.h"
#include "shim_defer.h"
#include "shim_pages.h"
#include "shim_state.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A slot's state (shim_pools.c, "Slots"). */
enum {
    FP_SLOT_EMPTY,      /* no pool: its making failed                     */
    FP_SLOT_LIVE,       /* serving its context                           */
    FP_SLOT_RETIRING,   /* context gone, its segments being forgotten    */
    FP_SLOT_RETIRED,    /* forgotten; stats kept; may be rebuilt         */
    FP_SLOT_REBUILDING, /* being destroyed and made for a new context    */
};

/* The threads holding a pool, counted on FP_USER_SHARDS cache lines: a
 * thread always counts itself on the same one, so threads that allocate
 * from one pool at once do not write one line.  The pool is free of users
 * when every shard reads 0. */
#define FP_USER_SHARDS 16
typedef struct fp_user_shard {
    _Alignas(64) atomic_int n;
} fp_user_shard;

typedef struct fp_ctx_pool {
    CUcontext ctx; /* the context its segments live in   */
    CUdevice dev;
    fp_pool *pool;
    fp_defer *defer;                     /* deferred reuse of its frees        */
    fp_pages *vmm;                       /* its VMM backend (expandable_segments) */
    int segments_asked;                  /* expandable_segments as set (FP_VMM_*) */
    size_t total;                        /* device memory, bytes               */
    char name[64];                       /* device name, for the summary       */
    atomic_size_t free_seen;             /* the driver's free bytes when the pool
                                            last took or gave back memory; SIZE_MAX:
                                            not known (the summary's "free on the
                                            device": no driver call at exit)     */
    atomic_int state;                    /* FP_SLOT_*                          */
    fp_user_shard users[FP_USER_SHARDS]; /* threads holding it now    */
    bool forked;                         /* this process is a fork of the one
                                     that made the pool                 */
    fp_pool_stats at_fork;               /* its stats at the (last) fork        */
    atomic_uintptr_t threads;            /* who allocates (fp_pools_tcache)     */
} fp_ctx_pool;

/* The pool of the calling thread's current context, created on first use;
 * NULL when there is no current context (the caller forwards the call).
 * Held: give it back with fp_pools_put. */
fp_ctx_pool *fp_pools_current(void);
/* The pool of the current context if it has one already, or NULL (held). */
fp_ctx_pool *fp_pools_current_existing(void);
/* Calls fn on every pool in use until it returns true; returns that pool
 * (held). */
fp_ctx_pool *fp_pools_find(bool (*fn)(fp_ctx_pool *d, void *ud), void *ud);
/* The pool whose segments hold addr, or NULL (held). */
fp_ctx_pool *fp_pools_owner(uint64_t addr);
/* Gives back a pool one of the calls above handed out; NULL is ignored. */
void fp_pools_put(fp_ctx_pool *d);
/* Whether d's context is gone (d serves no allocation). */
bool fp_pools_retired(fp_ctx_pool *d);
/* Forgets every pool of ctx (or of dev's primary context when ctx NULL). */
void fp_pools_retire(CUcontext ctx, CUdevice dev, bool by_device);
/* Synchronizes the context of d, from any thread. */
int fp_pools_sync(fp_ctx_pool *d);
/* set_per_process_memory_fraction: the cap of every pool of device dev,
 * now and for pools made later, becomes fraction x the device's memory
 * (0: no fraction).  0, EINVAL outside [0, 1], or ENODEV past 64 devices. */
int fp_pools_set_fraction(CUdevice dev, double fraction);
/* The fraction in force on dev: the program's, else the configuration's. */
double fp_pools_fraction(CUdevice dev);
/* Idle cached bytes of every pool of device dev. */
size_t fp_pools_idle(CUdevice dev);
/* fork: every lock of the pools, taken in the order the shim nests them
 * (the capture gate; per pool: the pool, its deferral, its VMM state), then given back in the
 * parent or made new in the child. */
void fp_pools_fork_prepare(void);
void fp_pools_fork_after(bool child);
/* Visits every pool, retired ones too, each held while fn runs. */
void fp_pools_each(void (*fn)(fp_ctx_pool *d, void *ud), void *ud);
/* Calls fn once with every pool, retired ones too, all held while it runs
 * (for a caller that keeps pointers into several pools at once). */
void fp_pools_all(void (*fn)(fp_ctx_pool **ds, size_t n, void *ud), void *ud);
/* ---- threads (pool/'s front end) -------------------------------------
 * d->threads is 0 until a thread allocates from d, then that thread's
 * token (the address of its fp_pools_me) while no other thread has, then
 * FP_POOL_THREADS for good.  Until then the hot path is this one relaxed
 * load and compare: a single-threaded program never joins a front end. */
#define FP_POOL_THREADS ((uintptr_t)1)
extern FP_THREAD_LOCAL char fp_pools_me;
/* Set for good once any pool has seen a second thread: before that, no
 * free can be in a thread's cache (fp_pools_free_cached is skipped). */
extern atomic_bool fp_pools_threads;
fp_tcache *fp_pools_tcache_slow(fp_ctx_pool *d, uintptr_t seen);
/* The calling thread's cache of d's pool, joined on first use once a
 * second thread allocates from d; NULL while one thread does, or when the
 * front end is off (free_policy:sync, thread_cache_mb:0, or a snapshot
 * recording, whose ring is not in the trace's order), or the thread
 * already follows FP_THREAD_POOLS pools. */
static inline fp_tcache *fp_pools_tcache(fp_ctx_pool *d)
{
    uintptr_t seen = atomic_load_explicit(&d->threads, memory_order_relaxed);
    return seen == (uintptr_t)&fp_pools_me ? NULL : fp_pools_tcache_slow(d, seen);
}
/* A free of addr on stream s (NULL: cuMemFree) that the calling thread's
 * own cache took: the pool (held), *size and *stamp as the pool's free
 * gives them; NULL when no cache took it (the caller frees in the pool). */
fp_ctx_pool *fp_pools_free_cached_slow(uint64_t addr, CUstream s, size_t *size, uint64_t *stamp);
static inline fp_ctx_pool *fp_pools_free_cached(uint64_t addr, CUstream s, size_t *size,
                                                uint64_t *stamp)
{
    if (!atomic_load_explicit(&fp_pools_threads, memory_order_relaxed))
        return NULL;
    return fp_pools_free_cached_slow(addr, s, size, stamp);
}

/* The driver's error of the last failed backend call on this thread. */
CUresult fp_pools_last_error(void);
/* A trace id for a block of d with the pool's allocation number seq. */
uint64_t fp_pools_trace_id(const fp_ctx_pool *d, uint64_t seq);

#endif
