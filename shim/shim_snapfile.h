/* shim_snapfile.h - snapshot:PATH, PyTorch's memory snapshot written by
 * the shim (shim_snapfile.c), from the pools and the recorder.
 */
#ifndef FP_SHIM_SNAPFILE_H
#define FP_SHIM_SNAPFILE_H

/* At exit (no CUDA call), and the n-th SIGUSR1 dump (PATH.n). */
void fp_snapfile_write_exit(void);
void fp_snapfile_dump(unsigned n);
/* Now, to path (a new file, or the caller's own regular one), whether or
 * not snapshot:PATH is set: the segments and blocks of every pool, and the
 * recorder's entries when it ever recorded.  A problem is one line naming
 * the file; 0, or its errno (EIO when the file could not be opened). */
int fp_snapfile_write(const char *path);

#endif
