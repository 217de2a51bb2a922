/* shim_snaprec.h - the recorder behind snapshot:PATH and trace_stacks:N
 * (shim_snaprec.c): the ring of recent events and the allocations' frames.
 */
#ifndef FP_SHIM_SNAPREC_H
#define FP_SHIM_SNAPREC_H

#include "fp_cuda.h"
#include "fp_snapshot.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* At setup (first CUDA call): the ring, when snapshot:PATH is set. */
void fp_snap_open(void);
/* Recording on from now (the ring made on first use, with frames of
 * up to frames entries: fixed by the first start), the entries so far
 * dropped when clear.  0, or ENOMEM (recording stays as it was). */
int fp_snap_start(unsigned frames, bool clear);
/* Recording off; the entries stay for the next snapshot. */
void fp_snap_stop(void);
/* Set while snapshot:PATH records (shim_snaprec.c). */
extern atomic_bool fp_snap_recording;
/* Whether the recorder is on.  Inline, one relaxed load: every allocation
 * and free asks it. */
static inline bool fp_snap_on(void)
{
    return atomic_load_explicit(&fp_snap_recording, memory_order_relaxed);
}
/* A block of device dev: op 'a' (allocated; key: its trace id, for its
 * frames) or 'f' (about to be freed; the core records a free inside it
 * instead: fp_snap_freed), its address and requested size. */
void fp_snap_block(int dev, char op, uint64_t addr, size_t size, uint64_t key, CUstream s);
void fp_snap_oom(int dev, size_t size, CUstream s);
/* A block of device dev freed, under its pool's lock (as fp_snap_segment):
 * its pair free_requested + free_completed, ahead of any later use of addr. */
void fp_snap_freed(int dev, uint64_t addr, size_t size, CUstream s);
/* A segment reserved ('s') or released ('r'), or pages of a virtual-memory
 * range mapped ('m') or unmapped ('u'), under its pool's lock. */
void fp_snap_segment(int dev, char op, uint64_t addr, size_t size);
/* trace_stacks: the frames recorded for trace id key, symbolized, one
 * "SYMBOL (OBJECT)" line each into out[len] (NUL-terminated, whole lines
 * only); returns the length, 0 when none. */
size_t fp_snap_stack_text(uint64_t key, char *out, size_t len);

/* For the writer: the ring locked (pending events moved in), its entries
 * as two spans, oldest first, and the frames of a key (fp_snap.frames_of;
 * only while locked). */
void fp_snap_lock(void);
void fp_snap_unlock(void);
void fp_snap_spans(const fp_snap_entry *ev[2], size_t nev[2]);
bool fp_snap_has_stacks(void);
/* Whether the ring's and the pending list's locks are free this moment
 * (the calling thread holds neither): the exit handler asks first. */
bool fp_snap_locks_free(void);
size_t fp_snap_frames(void *ud, uint64_t key, fp_snap_frame *out, size_t max);

/* fork: the ring's mutex (taken before the pools' locks) and the pending
 * list's (a leaf, after them); given back, or made new in the child. */
void fp_snap_fork_prepare(void);
void fp_snap_fork_after(bool child);
void fp_snap_pending_fork_prepare(void);
void fp_snap_pending_fork_after(bool child);

#endif
