/* shim_host.h - pinned host memory from a pool: what the
 * wrappers of shim_host_api.c, the summary and shim_life.c ask of
 * shim_host.c.  Functions return 0 or an errno; the wrappers speak CUresult.
 *
 * Invariant: a pointer fp_host_alloc handed out is a live block until
 * fp_host_free takes it, and no work queued before a block's free can
 * still touch it when fp_host_alloc hands its memory out again.
 */
#ifndef FP_SHIM_HOST_H
#define FP_SHIM_HOST_H

#include "fp_cuda.h"
#include "fp_report.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A pinned block of bytesize bytes asked with flags: 0 and *out; ENOENT
 * when the pool does not serve it (the caller goes to the driver); ENOMEM
 * or another errno with the driver's code in fp_host_last_error. */
int fp_host_alloc(size_t bytesize, unsigned flags, void **out);
/* 0: p went back to the pool; ENOENT: p is not the pool's (to the
 * driver); EINVAL: inside a segment but no live block's start (one line
 * said, nothing freed); EIO: free_policy:sync could not synchronize. */
int fp_host_free(void *p);
/* A live pinned block of the pool, as the program asked for it. */
typedef struct fp_host_found {
    uint64_t addr;  /* its start                 */
    size_t size;    /* the bytes asked for       */
    unsigned flags; /* the flags asked with      */
} fp_host_found;
/* 0 and *out for p inside a live block; EINVAL: inside a segment of the
 * pool, in no live block; ENOENT: not the pool's. */
int fp_host_lookup(uint64_t p, fp_host_found *out);
/* The driver's error behind the last failed fp_host_alloc of this thread. */
CUresult fp_host_last_error(void);
/* A pinned request passed to the driver, counted for the summary. */
void fp_host_passed(void);
/* The numbers for the summary; false when nothing was pinned. */
bool fp_host_report_get(fp_host_report *out);
/* fork: the host pool's locks, taken before the pools' (a fence pass
 * holds host_lock while it enters the capture gate), given back after. */
void fp_host_fork_prepare(void);
/* Whether the locks fp_host_report_get takes are free this moment (the
 * calling thread holds none of them): the exit handler asks first. */
bool fp_host_locks_free(void);
void fp_host_fork_after(bool child);

#endif
