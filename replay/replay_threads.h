/* replay_threads.h - the recorded run's threads in a replay
 * (replay_threads.c): each trace thread's cache of the pool's front end.
 *
 * Invariant: a thread has a cache from its 'j' row to its 'l' row (or the
 * end), and only while the replay's thread_cache is not 0.
 */
#ifndef FP_REPLAY_THREADS_H
#define FP_REPLAY_THREADS_H

#include "fp_trace.h"

typedef struct fp_rthreads {
    fp_tcache **tc; /* by the trace's thread index; NULL: not joined */
    size_t n;       /* room in tc: the trace's threads               */
    bool on;        /* the replay's thread_cache is not 0            */
} fp_rthreads;

/* 0, or ENOMEM. */
int fp_rthreads_init(fp_rthreads *r, const fp_trace *t, const fp_pool_opts *opts);
/* Before the pool is destroyed (which frees the caches). */
void fp_rthreads_fini(fp_rthreads *r);
/* A 'j' or 'l' row: the thread joins the pool's front end, or leaves it.
 * 0, or ENOMEM (host memory: the replay measured nothing). */
int fp_rthreads_row(fp_rthreads *r, fp_pool *p, const fp_tracer_event *e);
/* An 'a' row of e's thread, through its cache when it has one. */
int fp_rthreads_alloc(fp_rthreads *r, fp_pool *p, const fp_tracer_event *e, uint64_t *addr);
/* An 'f' row of e's thread: its cache first, when it has one. */
void fp_rthreads_free(fp_rthreads *r, fp_pool *p, const fp_tracer_event *e, uint64_t addr);

#endif
