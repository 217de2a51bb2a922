/* shim_lendtab.h - the rendezvous of the fragpool processes of one user
 * on one GPU: a shared file of slots, one per process, through which a
 * process about to run out of memory asks the others to give idle memory
 * back (docs/lending.md).  Only shared memory, futexes and file locks: no
 * CUDA, no pool.  The caller (shim_lend.c) decides what to release.
 *
 * The file lives in the lend_dir directory (default /dev/shm), named
 * fragpool-lend-<uid>-<GPU UUID>, mode 0600, owned by the user: any other
 * owner or mode is refused, with a line.  A table appears at that name
 * only whole (made aside, then linked there); a file of another size or
 * header is removed when no process holds it (a leftover) and refused,
 * with a line, when one does.  A slot belongs to
 * the process that holds a write lock (an open-file-description lock, so
 * it ends with the process, and with an exec) on the slot's byte past the
 * end of the table; a slot whose byte nobody locks is free, whatever it
 * says (a crashed process's slot is simply taken by the next one).
 *
 * Invariants:
 *  - an ask reaches only slots that are locked by a live process and carry
 *    the caller's uid; an ask read by a listener is answered only when its
 *    asker's slot carries the listener's uid (the others are counted as
 *    refused);
 *  - every wait is bounded by the asker's own wait_ms, and each slice of
 *    it checks that the peers it waits for still hold their slots;
 *  - the table is written only by atomics: a peer never waits for a lock
 *    of another process (the file lock of the directory is held only to
 *    join and leave, never across anything else, and tried for at most a
 *    second: a process stopped while holding it costs a joiner that second
 *    and its lending, never a hang).
 */
#ifndef SHIM_LENDTAB_H
#define SHIM_LENDTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FP_LEND_SLOTS 64

typedef struct fp_lend_answer {
    uint32_t round; /* the asker's round this answers                 */
    uint32_t pad;
    uint64_t released; /* bytes the answerer gave back                   */
    uint64_t idle;     /* idle bytes it still held after                 */
} fp_lend_answer;

typedef struct fp_lend_slot {
    uint32_t bell;  /* futex: an asker rang (the owner's listener waits) */
    uint32_t reply; /* futex: an answer came (the owner waits, asking)   */
    uint32_t round; /* the owner's ask round                             */
    uint32_t uid;   /* the owner's effective uid                         */
    int32_t pid;    /* the owner's pid; 0 while the slot is set up       */
    uint32_t pad;
    uint64_t asks;                     /* bit i: slot i asked since the last answer         */
    uint64_t want;                     /* the largest ask since the last answer, bytes      */
    fp_lend_answer ans[FP_LEND_SLOTS]; /* answers to the owner, by answerer */
} fp_lend_slot;

typedef struct fp_lend_file {
    uint32_t magic, version, nslots, slot_size;
    fp_lend_slot slot[FP_LEND_SLOTS];
} fp_lend_file;

#define FP_LEND_MAGIC   0x66706c64u /* "fpld" */
#define FP_LEND_VERSION 1u

typedef struct fp_lendtab fp_lendtab;

/* One peer's part in an ask. */
typedef struct fp_lend_peer {
    int32_t pid;
    bool answered;
    uint64_t released, idle;
} fp_lend_peer;

/* What one ask found. */
typedef struct fp_lend_round {
    uint64_t want;                    /* bytes asked for                               */
    unsigned asked;                   /* peers rung                                    */
    unsigned answered;                /* of them, those that answered in time          */
    unsigned ignored;                 /* slots of another user, passed over            */
    uint64_t released;                /* bytes the answers gave back                   */
    uint64_t waited_ns;               /* from the first ring to the end of the wait    */
    unsigned wait_ms;                 /* the bound it ran under                        */
    fp_lend_peer peer[FP_LEND_SLOTS]; /* the asked peers, [0, asked)      */
} fp_lend_round;

/* Asks read by a listener. */
typedef struct fp_lend_asks {
    uint64_t askers;  /* slots whose asks stand (the asker's uid checked)   */
    uint64_t want;    /* the largest ask, bytes                             */
    unsigned refused; /* asks from slots of another user, dropped           */
} fp_lend_asks;

/* Joins the rendezvous of the GPU uuid in dir: opens (or creates) the file
 * and takes a slot.  0, or an errno with why (one clause) filled. */
int fp_lendtab_join(const char *dir, const unsigned char uuid[16], fp_lendtab **out, char *why,
                    size_t len);
/* Gives the slot back, removes the file when no other process holds one,
 * and frees t.  Never waits for the directory lock longer than ~100 ms. */
void fp_lendtab_leave(fp_lendtab *t);
/* Rings every live peer of the caller's uid for want bytes and waits
 * until all answered, their answers reach want, or wait_ms passed. */
void fp_lendtab_ask(fp_lendtab *t, uint64_t want, unsigned wait_ms, fp_lend_round *r);
/* The listener: blocks until asked (0, *a filled: askers may be 0 when
 * every ask was refused) or told to stop (ESHUTDOWN). */
int fp_lendtab_wait(fp_lendtab *t, fp_lend_asks *a);
/* Answers the asks of a: released bytes given back, idle still held. */
void fp_lendtab_answer(fp_lendtab *t, const fp_lend_asks *a, uint64_t released, uint64_t idle);
/* Wakes the listener of t for good: its fp_lendtab_wait returns ESHUTDOWN. */
void fp_lendtab_stop(fp_lendtab *t);
/* In a forked child: the parent's slot is not the child's (its lock stays
 * the parent's); t is left unusable, every call a no-op. */
void fp_lendtab_fork_child(fp_lendtab *t);

#endif
