/* shim_ipc_vmm.h - the channel that carries a virtual-memory block from
 * the process that exports it to one that opens it (shim_ipc_vmm.c).
 *
 * Invariant: a receiver maps exactly the granules that held the block
 * when the exporter answered, or nothing.
 */
#ifndef FP_SHIM_IPC_VMM_H
#define FP_SHIM_IPC_VMM_H

#include "fp_cuda.h"
#include <stddef.h>
#include <stdint.h>

/* What a receiver asks for: a registry slot of the exporter's, as its
 * fragpool handle names it. */
typedef struct fp_ipcv_req {
    uint32_t slot;
    uint64_t serial, check;
} fp_ipcv_req;

/* The block an answer describes: ngran granules of gran bytes from the
 * granule that holds its start; the block starts offset bytes in. */
typedef struct fp_ipcv_block {
    uint64_t ngran, gran, offset, size;
} fp_ipcv_block;

/* The exporter's side, called on the channel's thread: checks q against
 * the registry and fills *b; with n > 0 also exports granules [from,
 * from + n) of the block as new descriptors in fds.  0 or an errno. */
typedef int (*fp_ipcv_answer_fn)(const fp_ipcv_req *q, size_t from, size_t n, int *fds,
                                 fp_ipcv_block *b);

/* Starts this process's channel (once per process; a forked child starts
 * its own), named by nonce.  Called with the registry's lock held.  0 or
 * an errno. */
int fp_ipcv_serve(uint64_t nonce, fp_ipcv_answer_fn answer);

/* A block mapped in the receiver. */
typedef struct fp_ipcv_mapping {
    CUdeviceptr ptr;  /* what the program gets: base + offset    */
    CUdeviceptr base; /* the reservation                         */
    size_t span;      /* its bytes (whole granules)              */
    size_t size;      /* the exported block's bytes              */
} fp_ipcv_mapping;

/* Asks process pid (its channel named by nonce) for the block of q and
 * maps it for device dev, within TIMEOUT_S in all.  0 and *m; ESRCH (no
 * such channel: the exporter ended or runs without it), ESTALE (the
 * block was freed or exported anew), EPERM (the channel's server runs as
 * another user), EACCES (it is not process pid: a forged handle), EPROTO
 * (a malformed answer, or a batch with no granule), ETIMEDOUT, or EIO with
 * the driver's code in *drv. */
int fp_ipcv_open(uint32_t pid, uint64_t nonce, const fp_ipcv_req *q, CUdevice dev,
                 fp_ipcv_mapping *m, CUresult *drv);
/* Unmaps what fp_ipcv_open mapped; the driver's code. */
CUresult fp_ipcv_close(const fp_ipcv_mapping *m);

#endif
