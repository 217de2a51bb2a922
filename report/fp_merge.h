/* fp_merge.h - `fragpool merge`: one table of the JSON summaries of several
 * ranks (fp_merge.c).
 *
 * Invariant: reads only what the summary's JSON holds (fp_jread.h); the
 * files are read whole through fp_file_open_read (regular files only).
 */
#ifndef FP_MERGE_H
#define FP_MERGE_H

#include <stddef.h>
#include "fp_jread.h"
#include "fp_text.h"

/* Read the JSON summaries at paths and write one row per rank and device
 * (rank, pid, device, peak allocated, peak reserved, fragmentation, OOMs,
 * retries), sorted by rank, then a total row: sums, with fragmentation
 * recomputed from the summed peaks.  0, or an errno with a message in err
 * ("PATH: what"). */
int fp_merge_json(const char *const *paths, size_t n, fp_sink *out, char *err, size_t errlen);
/* The checks merge makes of one summary, parsed (d): an object, "version"
 * the number 1, "devices" an array, and every member merge reads an
 * integer in range or absent.  0, or EINVAL with "PATH: what" in err.
 * `fragpool report` checks a summary with it too, so the two commands
 * take and refuse the same files. */
int fp_merge_check(const fp_jdoc *d, const char *path, char *err, size_t errlen);

#endif
