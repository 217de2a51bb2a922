/* fp_groups.h - the device's counter groups of the summary: the one table
 * of their JSON keys and text labels, in the order the JSON object of a
 * device and its text summary show them.  The shim and the replay both
 * fill their groups through it (fp_groups.c): neither writes a key, a
 * label or a slot number of its own.
 *
 * Invariants:
 *  - FP_DEV_GROUPS is the only place a device group's key or label is
 *    written (scripts/check_layers.py rule (e): no other string literal
 *    names a key, and no fp_group slot is indexed by a number);
 *  - a device's groups are FP_DEV_NGROUPS slots, FP_GROUP_<ID> in table
 *    order, each under its table key whether or not its caller fills it:
 *    a group no caller fills is absent (rows NULL), so the JSON keeps the
 *    key with null and the text shows no line;
 *  - report/ knows the groups' names and order, never what their rows
 *    mean: the rows are the caller's (shim/shim_counts.h, replay/).
 */
#ifndef FP_GROUPS_H
#define FP_GROUPS_H

#include "fp_report.h"

/* X(ID, key, label, omit): the JSON member of the device, the text row
 * label; omit 1: an absent group leaves no JSON member at all (not null),
 * so that output which never has it (a replay's) stays as it was. */
#define FP_DEV_GROUPS(X)                                                                           \
    X(PASSTHROUGH, "passthrough", "Passed to the driver", 0) /* the shim's pass-through calls */   \
    X(DEFERRED, "deferred", "Deferred reuse", 0)             /* the shim's deferral; null: sync */ \
    X(THREADS, "thread_cache", "Thread caches", 1) /* the pools' front end; absent: off */         \
    X(TRACE, "trace", "Trace problems", 0)         /* a replay's trace problems */                 \
    X(IPC, "ipc", "IPC", 0)                        /* the shim's IPC counters */                   \
    X(LEND, "lending", "Lending", 1)               /* asks between processes; absent: not joined */

typedef enum fp_dev_group_id {
#define FP_DEV_GROUP_ID(id, key, label, omit) FP_GROUP_##id,
    FP_DEV_GROUPS(FP_DEV_GROUP_ID)
#undef FP_DEV_GROUP_ID
        FP_DEV_NGROUPS
} fp_dev_group_id;

/* Every slot of g absent (rows NULL) under its table key and label, and
 * d's groups set to them: a caller then fills the groups it has. */
void fp_report_groups_init(fp_dev_report *d, fp_group g[FP_DEV_NGROUPS]);

/* Group id of g takes with's rows, nrows, per_line, zero and note; its key
 * and label stay the table's (with's, when set, must be the same). */
void fp_report_group_set(fp_group g[FP_DEV_NGROUPS], fp_dev_group_id id, const fp_group *with);

#endif
