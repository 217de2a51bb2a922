/* shim_snapshot.h - snapshot:PATH, PyTorch's memory snapshot written by
 * the shim (shim_snapshot.c), from the pools and the recorder.
 */
#ifndef FP_SHIM_SNAPSHOT_H
#define FP_SHIM_SNAPSHOT_H

/* At exit (no CUDA call), and the n-th SIGUSR1 dump (PATH.n). */
void fp_snapshot_write_exit(void);
void fp_snapshot_dump(unsigned n);

#endif
