/* replay_segs.h - the recorded run's segment addresses in a replay
 * (replay_segs.c).
 *
 * Invariant: an address it gives never overlaps a segment it gave that
 * is still reserved.
 */
#ifndef FP_REPLAY_SEGS_H
#define FP_REPLAY_SEGS_H

#include "fp_trace.h"

typedef struct fp_rsegs {
    const fp_trace_seg *run; /* the recorded segments, in order */
    size_t n, next;          /* next: the one to hand out next   */
    fp_trace_seg *live;      /* reserved now, from the recording */
    size_t nlive, cap;
    uint64_t top; /* the end of the highest recorded segment */
} fp_rsegs;

void fp_rsegs_init(fp_rsegs *r, const fp_trace *t);
void fp_rsegs_fini(fp_rsegs *r);
/* The address the run got for its next segment, when that one is size
 * bytes and free: true and *addr.  false once the replay reserves
 * anything else (then, for good: the replay has left the run's path). */
bool fp_rsegs_take(fp_rsegs *r, size_t size, uint64_t *addr);
void fp_rsegs_released(fp_rsegs *r, uint64_t addr);
/* The lowest address above every recorded segment: where the replay's own
 * addresses start once it has left the run's path (0: none recorded). */
uint64_t fp_rsegs_top(const fp_rsegs *r);

#endif
