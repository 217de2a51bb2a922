/* shim_out.h - the names of the shim's output files (summary:PATH and
 * trace:PATH, docs/files.md).  Declared apart from shim.h: only
 * shim_summary.c and shim_trace.c use it.
 *
 * Invariant: a pattern that does not expand whole is an error, never a
 * shorter name.
 */
#ifndef FP_SHIM_OUT_H
#define FP_SHIM_OUT_H

#include <stddef.h>

#define FP_OUT_PATH_MAX 4096   /* an expanded name, with its NUL (PATH_MAX) */

/* Expands %p (pid), %r (rank, 0 without one), %h (host) and %% (a '%')
 * of pat into out[len].  0; ENAMETOOLONG when the name does not fit; or
 * EINVAL for any other escape, or a '%' at the end.  why[whylen] gets a
 * reason that quotes the pattern. */
int fp_path_expand(const char *pat, char *out, size_t len, char *why, size_t whylen);

#endif
