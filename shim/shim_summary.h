/* shim_summary.h - what the shim tells the user (shim_summary.c): the
 * summary of every pool, where the summary key says, and the OOM report.
 *
 * Invariant: neither makes a CUDA call but cuMemGetInfo for the OOM
 * report, made while the program is still running; the exit summary
 * reads only what the shim holds in memory.
 */
#ifndef FP_SHIM_SUMMARY_H
#define FP_SHIM_SUMMARY_H

#include "shim_pools.h"

/* The OOM report of d's last failure, on stderr. */
void fp_summary_oom(fp_ctx_pool *d);
void fp_summary_write(const char *mode);   /* at exit: mode "shim" */
void fp_summary_dump(unsigned n);          /* the n-th SIGUSR1 dump */

#endif
