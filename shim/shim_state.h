/* shim_state.h - the shim's shared state and counters, the leaf every
 * other file of shim/ may read: the configuration, the process flags,
 * fp_say, and the process-wide counters the summary reports.
 *
 * Invariant: shim_state.c calls no other file of shim/ (it sits at the
 * bottom of the folder's graph, docs/design.md).
 */
#ifndef FP_SHIM_STATE_H
#define FP_SHIM_STATE_H

#include "fp_conf.h"
#include "fp_lock.h"
#include "shim_counts.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct fp_shim_state {
    fp_conf conf;           /* effective configuration            */
    char conf_errors[2048]; /* the config problems, one per line  */
    unsigned nconf_errors;
    atomic_bool exiting; /* set by the exit handler            */
    atomic_bool used;    /* this process made a pool call      */
    bool ready;          /* fp_real resolved                   */
    atomic_bool set_up;  /* the first call's setup has run (then
                            ready says how it went); fp_shim_init */
} fp_shim_state;

extern fp_shim_state fp_shim;

/* One line on stderr, prefixed "fragpool: ", built without malloc. */
void fp_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Thread-local data of the shim.  initial-exec: a direct %fs access
 * instead of a __tls_get_addr call on every allocation; the few bytes fit
 * the static TLS that glibc keeps spare for libraries loaded later. */
#define FP_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))

/* Calls passed to the driver, by kind (FP_PT_* of shim_counts.h). */
typedef int fp_pt_kind;
extern atomic_ullong fp_passthrough[FP_PT_NKINDS];
extern atomic_ullong fp_alloc_ticks; /* time in the allocator, fp_ticks */

/* What IPC did (shim_ipc.c counts, the summary reads). */
typedef struct fp_ipc_tally {
    atomic_ullong exports, exports_fragpool, refused, opens, opens_fragpool, closes, own;
} fp_ipc_tally;
extern fp_ipc_tally fp_state_ipc_tallies;
void fp_state_ipc_counts(fp_ipc_counts *out);

#endif
