/* shim_counts.h - the shim's own counters, each kind one X-list: calls
 * passed to the driver, deferred reuse, legacy IPC.  The list gives the
 * struct fields, the JSON keys and the words of the text summary; the
 * summary (shim_summary.c) turns each list into a group of report/'s
 * metric list, so report/ shows them without knowing what they mean.
 *
 * Adding a counter: one X line here and the place that counts it; the
 * text and JSON summaries follow.  JSON keys never change (scripts read
 * them).
 */
#ifndef SHIM_COUNTS_H
#define SHIM_COUNTS_H

#include <stdint.h>

/* Device calls the shim passed straight to the driver, by kind:
 * X(enum, JSON key) */
#define FP_PT_KINDS(X)                                                                             \
    X(FP_PT_MANAGED, "managed")       /* cuMemAllocManaged                  */                     \
    X(FP_PT_ASYNC_POOL, "async_pool") /* cuMemAllocAsync / FromPoolAsync    */                     \
    X(FP_PT_HOST, "host")             /* cuMemAllocHost / cuMemHostAlloc    */                     \
    X(FP_PT_VMM, "vmm")               /* cuMemCreate / cuMemMap             */                     \
    X(FP_PT_OTHER, "other")           /* anything else not served by a pool */

enum {
#define FP_PT_ENUM(name, key) name,
    FP_PT_KINDS(FP_PT_ENUM)
#undef FP_PT_ENUM
        FP_PT_NKINDS
};

/* Deferred reuse (free_policy:deferred): how freed memory was made safe to
 * hand out again.  X(field, JSON key, text for one, text for many).
 * fences: cuCtxRecordEvent calls; ctx_waits / stream_waits: reuses that
 * made the context / the allocating stream wait for one; stream_reuses:
 * cuMemAllocAsync served by its stream's own cuMemFreeAsync, no call;
 * stream_ordered: cuMemAllocAsync served memory freed before a fence its
 * stream already waited for, no call; fence_joins: reuses covered by a
 * fence (or synchronization) another thread made meanwhile, no call;
 * syncs: reuses that synchronized instead (no context events, or a fence
 * refused); failed: fences the driver refused; unmap_waits: host waits
 * (fence event or context) before VMM pages were unmapped. */
#define FP_DEFER_COUNTS(X)                                                                         \
    X(fences, "fences", " fence", " fences")                                                       \
    X(ctx_waits, "ctx_waits", " context wait", " context waits")                                   \
    X(stream_waits, "stream_waits", " stream wait", " stream waits")                               \
    X(stream_reuses, "stream_reuses", " same-stream reuse", " same-stream reuses")                 \
    X(stream_ordered, "stream_ordered", " reuse after a stream wait",                              \
      " reuses after a stream wait")                                                               \
    X(joins, "fence_joins", " reuse covered by another thread's fence",                            \
      " reuses covered by another thread's fence")                                                 \
    X(syncs, "syncs", " synchronization", " synchronizations")                                     \
    X(failed, "failed_fences", " failed fence", " failed fences")                                  \
    X(unmap_waits, "unmap_waits", " host wait before unmap", " host waits before unmap")

typedef struct fp_defer_counts {
#define FP_DEFER_FIELD(field, key, one, many) uint64_t field;
    FP_DEFER_COUNTS(FP_DEFER_FIELD)
#undef FP_DEFER_FIELD
    int ctx_events; /* 1: the driver has context events         */
} fp_defer_counts;

/* The pool's front end's rows: FP_FRONT_COUNTS, pool/fp_pool.h. */

/* Legacy IPC through the shim (cuIpc*), process-wide.
 * X(field, JSON key, text for one, text for many). */
#define FP_IPC_COUNTS(X)                                                                           \
    X(exports, "exports", " export", " exports") /* cuIpcGetMemHandle */                           \
    X(exports_fragpool, "exports_fragpool", " fragpool handle given", " fragpool handles given")   \
    X(refused, "refused", " refused", " refused") /* a block inside a segment */                   \
    X(opens, "opens", " open", " opens")          /* cuIpcOpenMemHandle */                         \
    X(opens_fragpool, "opens_fragpool", " fragpool handle opened", " fragpool handles opened")     \
    X(closes, "closes", " close", " closes") /* cuIpcCloseMemHandle */                             \
    X(own_segments, "own_segments", " allocation given its own segment",                           \
      " allocations given their own segments") /* own_segment_mb */

typedef struct fp_ipc_counts {
#define FP_IPC_FIELD(field, key, one, many) uint64_t field;
    FP_IPC_COUNTS(FP_IPC_FIELD)
#undef FP_IPC_FIELD
} fp_ipc_counts;

#endif
