/* shim_summary.h - what the shim tells the user (shim_summary.c): the
 * summary of every pool, where the summary key says, and the OOM report.
 *
 * Invariant: neither makes a CUDA call but cuMemGetInfo for the OOM
 * report, made while the program is still running; the exit summary
 * reads only what the shim holds in memory.
 */
#ifndef FP_SHIM_SUMMARY_H
#define FP_SHIM_SUMMARY_H

#include "fp_text.h"
#include "shim_pools.h"
#include <stdbool.h>
#include <time.h>

/* The first two lines of the OOM report of d's last failure, on stderr;
 * *o gets the failure they report, *device_free the device's free bytes
 * then ((size_t)-1 unknown). */
void fp_summary_oom(fp_ctx_pool *d, fp_oom_info *o, size_t *device_free);
/* Lines of an OOM report: to stderr, and kept as the text of the latest
 * OOM (first: this one starts a new report). */
void fp_summary_oom_say(const char *text, bool first);
/* OOM reports so far, and the latest one's text in buf[len] (cut short
 * where it does not fit). */
uint64_t fp_summary_oom_text(char *buf, size_t len);
/* The OOM report's note on pinned host memory, when it is large. */
void fp_summary_oom_host(fp_sink *s);
/* One more line for the exit summary's notes (the text stays the
 * caller's; set before fp_summary_write). */
void fp_summary_note(const char *line);
/* At exit (mode: what the driver drives, fp_real_device_kind), waiting for its lock until by at most: false
 * when it could not be had (nothing written; the caller says so). */
bool fp_summary_write(const char *mode, const struct timespec *by);
void fp_summary_dump(unsigned n); /* the n-th SIGUSR1 dump */

/* fork: the summary's lock (the outermost of fragpool's), taken before
 * and given back, or made new in the child, after. */
void fp_summary_fork_prepare(void);
void fp_summary_fork_after(bool child);

#endif
