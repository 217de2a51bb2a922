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
#include "fp_report.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fp_tracer_event {
    uint64_t id;     /* unique for one allocation's lifetime  */
    uint64_t size;   /* requested bytes; on 'j': the run's thread
                        cache bytes (thread_cache_mb)          */
    uint32_t stream; /* the program's stream number            */
    char op;         /* 'a' allocate, 'f' free, 'o' refused in the
                        run, 'j' the thread joined the front
                        end, 'l' it left (its cache went back)  */
    uint16_t thread; /* the thread, numbered 0, 1, ... in order
                        of first row (0: a trace without them)  */
} fp_tracer_event;

/* A replay keeps what each live id holds in an array, not a hash map:
 * fp_trace_push gives every event the index ("slot") of its id there, so
 * that a replay's working set is the ids live at once, and a lookup is
 * one load.  An allocation's id gets a free slot unless the id is live
 * (then its own slot: the replay refuses a live one as a duplicate, or
 * allocates when its earlier allocation failed); a free takes its id's
 * slot and gives it back; a free of an id not live, and an 'o' row, get
 * FP_TRACE_NO_SLOT. */
#define FP_TRACE_NO_SLOT UINT32_MAX
typedef struct fp_trace_ids fp_trace_ids; /* trace_events.c: push's id -> slot map */

/* A segment the recorded run reserved ('s' rows of the shim's trace), in
 * order: a replay hands out these addresses while it reserves what the
 * run reserved (replay_segs.c). */
typedef struct fp_trace_seg {
    uint64_t addr, size;
} fp_trace_seg;

typedef struct fp_trace {
    fp_tracer_event *ev;
    size_t n, cap;
    uint32_t *slot;     /* slot[i]: event i's slot (fp_trace_push)          */
    size_t slot_cap;    /* room in slot                                     */
    size_t nslots;      /* slots used: the most ids live at once, in a sense */
    fp_trace_ids *ids;  /* while pushing; freed by fp_trace_free            */
    const char *format; /* "fragpool CSV", "RMM log", "PyTorch snapshot" */
    /* Readers that map addresses to ids (RMM, snapshots): frees of an
     * address with no live allocation (made before the log began), skipped;
     * allocations at a live address, whose old one was freed first. */
    size_t dropped_frees, reused_live;
    int device; /* a snapshot's device read; 0 otherwise     */
    /* Nonzero: a CLOCK_MONOTONIC time in ns past which a replay of this
     * trace stops (checked every FP_REPLAY_CHECK_EVERY events) and returns
     * ETIMEDOUT: the OOM search's bound (advice_budget_ms). */
    uint64_t deadline_ns;
    /* Threads ('j', 'l' rows and the thread column; docs/replay.md,
     * "Threads"): how many the rows name (0 or 1: one thread), and the
     * thread cache bytes of the recorded run (0: no thread joined).  A
     * replay of t uses thread_cache, whatever its opts say (the caller
     * may set it: `--conf thread_cache_mb:N`). */
    size_t threads, thread_cache;
    fp_trace_seg *segs; /* the run's segments, in order (none: 0)       */
    size_t nsegs, segs_cap;
} fp_trace;

/* The most threads a trace may name. */
#define FP_TRACE_MAX_THREADS 65536

#define FP_REPLAY_CHECK_EVERY 4096
/* 1 once t->deadline_ns is set and has passed. */
int fp_trace_past_deadline(const fp_trace *t);

/* 0, or an errno with a one-line reason in err (path, line, what): a file
 * that is not a regular file, a read or gzip error (cut short, corrupt),
 * a malformed row, or no events at all.  Never a partial trace. */
int fp_trace_load(const char *path, fp_trace *t, char *err, size_t errlen);
/* Appends one event, with its slot: 0, or ENOMEM (or EOVERFLOW past
 * 2^32 - 2 ids live at once), the trace as it was. */
int fp_trace_push(fp_trace *t, char op, uint64_t id, uint64_t size, uint32_t stream);
/* The last event pushed was made by the recorded run's thread `thread`
 * (any number): it gets that thread's index, a new one in order of first
 * use.  0, ENOMEM, or E2BIG past FP_TRACE_MAX_THREADS threads. */
int fp_trace_set_thread(fp_trace *t, uint64_t thread);
/* The recorded run reserved size bytes at addr (an 's' row): 0 or ENOMEM. */
int fp_trace_push_segment(fp_trace *t, uint64_t addr, uint64_t size);
void fp_trace_free(fp_trace *t);

typedef struct fp_replay_result {
    fp_pool_stats stats;    /* the pool's stats at the end                  */
    size_t events;          /* events replayed                              */
    size_t ooms;            /* allocations refused                          */
    size_t first_oom_event; /* index of the first refused allocation, or n  */
    size_t bad_frees;       /* frees of ids that were never (or no longer)
                                live: skipped                                */
    size_t dup_allocs;      /* allocations of an id that is live: refused,
                                the live allocation stays (not an OOM)       */
    size_t first_bad_free;  /* event index of the first of each, or n       */
    size_t first_dup_alloc;
    size_t recorded_ooms;    /* 'o' rows: requests the recorded run failed on */
    size_t recorded_refused; /* of which this replay refused too             */
    fp_oom_info first_oom;   /* the pool's view of the first OOM             */
    size_t host_fails;       /* allocations refused for lack of host memory  */
    /* Every budget in [budget_from, budget_below) would have seen each of
     * this replay's reserves and maps succeed or be refused as it did: the
     * most bytes in use after one that succeeded, and the least a refused
     * one asked for (SIZE_MAX: none refused).  Where nothing else reads
     * the budget (fp_tune.c, "budgets that replay alike"), such a budget
     * replays the same way, event for event. */
    size_t budget_from, budget_below;
} fp_replay_result;

/* Replays t through a fresh pool with opts.  budget 0 = unlimited device.
 * With keep non-NULL the pool is returned (the caller destroys it).
 * ETIMEDOUT, nothing kept, once t->deadline_ns has passed; ENOMEM when
 * host memory ran out, for the pool's own bookkeeping too: such a replay
 * measured nothing (no pool is kept). */
int fp_replay(const fp_trace *t, const fp_pool_opts *opts, size_t budget, fp_replay_result *r,
              fp_pool **keep);

/* Optional per-event control of a replay (fragpool tune, fragpool report). */
typedef struct fp_replay_hook {
    /* Called after event i with the pool; refused is 1 when the event was an
     * allocation the pool refused.  Nonzero stops the replay there.  May be
     * NULL. */
    int (*after_event)(void *ud, fp_pool *p, size_t i, int refused);
    void *ud;
    int stop_at_oom; /* 1: stop right after the first refused allocation */
    /* Called for each change the replay makes, in order, during event
     * `event`: kind FP_REPLAY_*, the block or segment and its bytes (alloc
     * and free: the requested size; oom: addr 0).  May be NULL. */
    void (*on_change)(void *ud, int kind, uint64_t addr, uint64_t size, size_t event);
} fp_replay_hook;

enum {
    FP_REPLAY_ALLOC,
    FP_REPLAY_FREE,
    FP_REPLAY_OOM,
    FP_REPLAY_SEGMENT_ALLOC,
    FP_REPLAY_SEGMENT_FREE,
    FP_REPLAY_SEGMENT_MAP,
    FP_REPLAY_SEGMENT_UNMAP
};

/* fp_replay with a hook (may be NULL).  r->events counts the events
 * replayed, fewer than t->n when the hook stopped the replay. */
int fp_replay_ex(const fp_trace *t, const fp_pool_opts *opts, size_t budget,
                 const fp_replay_hook *h, fp_replay_result *r, fp_pool **keep);

/* The summary's "trace" group of a replay: its frees of unknown ids and
 * its allocations of live ids, as two rows of report/'s metric list
 * (rows has room for 2; the group points into it). */
void fp_replay_trace_group(const fp_replay_result *r, fp_row rows[2], fp_group *g);

/* The summary's "Thread caches" group of a replay's pool p (the threads
 * that joined its front end, what their caches served, what went back
 * before growth), as the shim fills it: 1 with rows (room for
 * FP_REPLAY_FRONT_ROWS) and g set, 0 when no thread joined (the group
 * stays absent, as in a replay of a trace without threads). */
#define FP_REPLAY_FRONT_ROWS 5
int fp_replay_front_group(fp_pool *p, fp_row rows[FP_REPLAY_FRONT_ROWS], fp_group *g);

/* The most bytes ever live at once, each request rounded by opts
 * (fp_round_size), a refused request ('o') counted at its moment: a lower
 * bound on reserved memory under any budget.  Requests no pool serves
 * (over 2^48 - 1 bytes) are left out; the sum saturates at SIZE_MAX.
 * 0 when out of memory. */
size_t fp_trace_peak_live(const fp_trace *t, const fp_pool_opts *opts);

#endif
