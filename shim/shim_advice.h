/* shim_advice.h - proven advice (shim_advice.c): the fix after the first
 * OOM, and the exit summary's line on a leaner setting.
 *
 * Invariant: the exit path makes no driver call; the OOM's search runs
 * once per pool.
 */
#ifndef FP_SHIM_ADVICE_H
#define FP_SHIM_ADVICE_H

#include "shim_pools.h"
#include <stdbool.h>

/* The whole OOM report of d's last failure on stderr: the message
 * (shim_summary.c), then the fix a replay of the run proves. */
void fp_advice_oom(fp_ctx_pool *d);
/* Before the exit summary: hands it a note when a replay of the record
 * finds a setting that holds >= 5% less at peak. */
void fp_advice_exit(void);
/* fork: the advice's lock before the pools', then back (or new in the child). */
void fp_advice_fork_prepare(void);
void fp_advice_fork_after(bool child);

#endif
