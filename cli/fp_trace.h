/* fp_trace.h - allocation traces: loading the CSV interchange format
 * (seq,op,id,size,stream; gzip or plain) and replaying a trace through the
 * pool with a simulated backend.
 *
 * Replay is deterministic: the simulated backend hands out addresses in
 * increasing order, and the same trace and options give the same result.
 */
#ifndef FP_TRACE_H
#define FP_TRACE_H

#include "fp_pool.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fp_trace_event {
    uint64_t id;      /* unique for one allocation's lifetime  */
    uint64_t size;    /* requested bytes                        */
    uint32_t stream;  /* the program's stream number            */
    char op;          /* 'a' allocate, 'f' free                 */
} fp_trace_event;

typedef struct fp_trace {
    fp_trace_event *ev;
    size_t n, cap;
} fp_trace;

/* 0, or an errno with a one-line reason in err (path, line, what). */
int  fp_trace_load(const char *path, fp_trace *t, char *err, size_t errlen);
int  fp_trace_push(fp_trace *t, char op, uint64_t id, uint64_t size, uint32_t stream);
void fp_trace_free(fp_trace *t);

typedef struct fp_replay_result {
    fp_pool_stats stats;     /* the pool's stats at the end                  */
    size_t events;           /* events replayed                              */
    size_t ooms;             /* allocations refused                          */
    size_t first_oom_event;  /* index of the first refused allocation, or n  */
    size_t bad_frees;        /* frees of ids that were never (or no longer) live */
    fp_oom_info first_oom;   /* the pool's view of the first OOM             */
} fp_replay_result;

/* Replays t through a fresh pool with opts.  budget 0 = unlimited device.
 * With keep non-NULL the pool is returned (the caller destroys it). */
int fp_replay(const fp_trace *t, const fp_pool_opts *opts, size_t budget,
              fp_replay_result *r, fp_pool **keep);

#endif
