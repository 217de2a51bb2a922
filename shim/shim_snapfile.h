/* shim_snapfile.h - snapshot:PATH, PyTorch's memory snapshot written by
 * the shim (shim_snapfile.c), from the pools and the recorder.
 */
#ifndef FP_SHIM_SNAPFILE_H
#define FP_SHIM_SNAPFILE_H

/* At exit (no CUDA call), and the n-th SIGUSR1 dump (PATH.n). */
void fp_snapfile_write_exit(void);
void fp_snapfile_dump(unsigned n);

#endif
