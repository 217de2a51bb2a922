/* shim_lend.h - lending idle device memory between the fragpool processes
 * of one user on one GPU (docs/lending.md): each device's membership of
 * the rendezvous (shim_lendtab.h), its listener thread that answers the
 * peers' asks by giving idle memory back, and the ask an allocation makes
 * before it fails.
 *
 * A process joins a device's rendezvous when its first pool on that
 * device allocates (the inline check below: one relaxed load per
 * allocation, no call once joined), and from then on has one listener
 * thread for the device, blocked in a futex wait until asked.  lend:0: no
 * file, no thread, no ask.
 *
 * Invariants: an ask happens only for a device exhaustion (never for the
 * program's own cap, a host shortage or a request larger than the
 * device), with no lock of fragpool's held; the listener takes a pool's
 * lock only by trylock (a pool's lock may be held across a driver call),
 * releases only idle memory whose last work is done (fp_pool_trim's
 * rules), and makes no driver call once the process is exiting.
 */
#ifndef SHIM_LEND_H
#define SHIM_LEND_H

#include "shim_lendtab.h"
#include "shim_pools.h"
#include "fp_text.h"
#include <stdatomic.h>
#include <stdbool.h>

#define FP_LEND_DEVICES 64

/* What lending did on a device.  X(field, JSON key, text one, text many, row kind) */
#define FP_LEND_COUNTS(X)                                                                          \
    X(asks, "asks", " ask", " asks", FP_ROW_COUNT)                                                 \
    X(asks_served, "asks_served", " served after an ask", NULL, FP_ROW_COUNT)                      \
    X(borrowed, "borrowed_bytes", " released by peers", NULL, FP_ROW_BYTES)                        \
    X(wait_us, "wait_us", " us waiting for answers", NULL, FP_ROW_COUNT)                           \
    X(no_answer, "unanswered", " peer did not answer in time", " peers did not answer in time",    \
      FP_ROW_COUNT)                                                                                \
    X(answers, "answers", " ask answered", " asks answered", FP_ROW_COUNT)                         \
    X(lent, "lent_bytes", " given back to peers", NULL, FP_ROW_BYTES)                              \
    X(refused, "refused", " ask of another user refused", " asks of another user refused",         \
      FP_ROW_COUNT)

typedef struct fp_lend_counts {
#define FP_LEND_FIELD(field, key, one, many, kind) uint64_t field;
    FP_LEND_COUNTS(FP_LEND_FIELD)
#undef FP_LEND_FIELD
} fp_lend_counts;

enum { FP_LEND_NONE = 0, FP_LEND_JOINING, FP_LEND_JOINED, FP_LEND_OFF };

/* Each device's state (FP_LEND_*), read by the inline check. */
extern atomic_int fp_lend_state[FP_LEND_DEVICES];

/* Joins d's device once (slow path of fp_lend_note). */
void fp_lend_join(fp_ctx_pool *d);

static inline void fp_lend_note(fp_ctx_pool *d)
{
    unsigned dev = (unsigned)d->dev;
    if (dev < FP_LEND_DEVICES &&
        atomic_load_explicit(&fp_lend_state[dev], memory_order_relaxed) == FP_LEND_NONE)
        fp_lend_join(d);
}

/* After d's pool refused size bytes with ENOMEM: asks the peers when the
 * device ran out; true when they gave memory back (retry once). */
bool fp_lend_ask(fp_ctx_pool *d, size_t size);
/* The retry after an ask was served: counted, and the OOM forgotten. */
void fp_lend_served(fp_ctx_pool *d);
/* The lines of an OOM message about this thread's last ask on dev (none
 * when it made none for this failure). */
void fp_lend_oom_lines(CUdevice dev, fp_sink *s);
/* dev's counters; false when lending never joined dev. */
bool fp_lend_counts_get(CUdevice dev, fp_lend_counts *out);
/* Exit: every listener stops (an answer under way is waited for, within
 * the exit handler's bound) and every slot is given back.  No driver call. */
void fp_lend_exit(void);
/* fork: the child has no listener and no slot. */
void fp_lend_fork_child(void);

#endif
