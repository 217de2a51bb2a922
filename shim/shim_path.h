/* shim_path.h - the names of the shim's output files (summary:PATH and
 * trace:PATH, docs/files.md) and the rank they may hold (shim_path.c).
 *
 * Invariant: a pattern that does not expand whole is an error, never a
 * shorter name.
 */
#ifndef FP_SHIM_PATH_H
#define FP_SHIM_PATH_H

#include <stddef.h>

#define FP_OUT_PATH_MAX 4096   /* an expanded name, with its NUL (PATH_MAX) */

/* This process's rank from RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK,
 * PMI_RANK or SLURM_PROCID (the first one set and valid), or -1. */
int fp_path_rank(void);

/* Expands %p (pid), %r (rank, 0 without one), %h (host) and %% (a '%')
 * of pat into out[len].  0; ENAMETOOLONG when the name does not fit; or
 * EINVAL for any other escape, or a '%' at the end.  why[whylen] gets a
 * reason that quotes the pattern.  fp_path_expand takes the rank and the
 * host name from the process; fp_path_expand_as is given them. */
int fp_path_expand(const char *pat, char *out, size_t len, char *why, size_t whylen);
int fp_path_expand_as(const char *pat, int rank, const char *host, char *out, size_t len,
                      char *why, size_t whylen);

#endif
