/* shim_path.h - the names of the shim's output files (summary:PATH,
 * trace:PATH and snapshot:PATH, docs/files.md), the rank they may hold,
 * and the claims that keep two outputs off one file (shim_path.c).
 *
 * Invariants: a pattern that does not expand whole is an error, never a
 * shorter name; no output of this process empties another's file.
 */
#ifndef FP_SHIM_PATH_H
#define FP_SHIM_PATH_H

#include <stdbool.h>
#include <stddef.h>

#define FP_OUT_PATH_MAX 4096 /* an expanded name, with its NUL (PATH_MAX) */

/* This process's rank from RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK,
 * PMI_RANK or SLURM_PROCID (the first one set and valid), or -1. */
int fp_path_rank(void);

/* Expands %p (pid), %r (rank, 0 without one), %h (host) and %% (a '%')
 * of pat into out[len].  0; ENAMETOOLONG when the name does not fit; or
 * EINVAL for any other escape, or a '%' at the end.  why[whylen] gets a
 * reason that quotes the pattern.  fp_path_expand takes the rank and the
 * host name from the process; fp_path_expand_as is given them. */
int fp_path_expand(const char *pat, char *out, size_t len, char *why, size_t whylen);
int fp_path_expand_as(const char *pat, int rank, const char *host, char *out, size_t len, char *why,
                      size_t whylen);

/* Before key ("trace", "snapshot" or "summary") creates path[len], the
 * expansion of pattern pat: when the file is one another key of this
 * process wrote (same name, or the same inode), path becomes
 * "path.KEY"; in a forked child, when pat has no %p, path becomes
 * "path.PID" (the parent's file is kept).  Each is one line on stderr.
 * 0: create path; else an errno, with why[whylen] quoting the names, when
 * there is no other name: the caller does not create path, and says so. */
int fp_path_claim(const char *key, const char *pat, char *path, size_t len, char *why,
                  size_t whylen);
/* After key opened path as fd: the file is key's from now on.  When pat
 * (the key's value, may be NULL) holds an escape, the first time says on
 * stderr which file it named: "fragpool: trace: writing /tmp/t-4242.csv
 * (trace:/tmp/t-%p.csv)". */
void fp_path_claimed(const char *key, const char *pat, int fd, const char *path);

/* fork: the claims' lock (a leaf), taken before and given back, or made
 * new in the child, after. */
void fp_path_fork_prepare(void);
void fp_path_fork_after(bool child);

#endif
