/* fp_snapshot.h - the memory snapshot that PyTorch's
 * torch.cuda.memory._dump_snapshot() writes, made from fragpool's own
 * state: a pickle that pytorch.org/memory_viz, `python -m
 * torch.cuda._memory_viz` and the tools that read PyTorch's snapshots open.
 *
 * The layout (PyTorch's torch/csrc/cuda/memory_snapshot.cpp) is a dict:
 *   segments             the pools' segments now, each with its blocks;
 *   device_traces        one list per device of trace entries, oldest first;
 *   allocator_settings   the settings in PyTorch's names;
 *   external_annotations an empty list.
 * Invariant: the segments and blocks are those after the last trace
 * entry, which is what the viewer assumes when it plays the trace back.
 */
#ifndef FP_SNAPSHOT_H
#define FP_SNAPSHOT_H

#include "fp_pickle.h"
#include "fp_pool.h"
#include <stddef.h>
#include <stdint.h>

enum fp_snap_action {
    FP_SNAP_ALLOC,
    FP_SNAP_FREE_REQUESTED,
    FP_SNAP_FREE_COMPLETED,
    FP_SNAP_SEGMENT_ALLOC,
    FP_SNAP_SEGMENT_FREE,
    FP_SNAP_SEGMENT_MAP,
    FP_SNAP_SEGMENT_UNMAP,
    FP_SNAP_SNAPSHOT,
    FP_SNAP_OOM,
    FP_SNAP_NACTIONS
};
/* PyTorch's name of an action ("alloc", ...); NULL out of range. */
const char *fp_snapshot_action_name(unsigned action);

typedef struct fp_snap_entry {
    uint64_t addr;   /* the block or segment (oom: 0)              */
    uint64_t size;   /* bytes (alloc: requested; oom: requested)   */
    uint64_t stream; /* the program's stream number, 0 default     */
    int64_t time_us; /* microseconds                               */
    uint64_t key;    /* frames key (fp_snap.frames_of), 0: none    */
    int32_t device;  /* the device whose trace it is in            */
    uint8_t action;  /* enum fp_snap_action                        */
} fp_snap_entry;

typedef struct fp_snap_frame {
    const char *filename;
    const char *name;
    int64_t line;
} fp_snap_frame;

/* One pool: its device and its segments now. */
typedef struct fp_snap_device {
    int device;
    fp_pool *pool;     /* NULL: no segments                   */
    uint64_t key_base; /* a block's frames key: key_base|seq  */
} fp_snap_device;

typedef struct fp_snap {
    const fp_snap_device *devs; /* several may share a device          */
    size_t ndevs;
    /* The trace entries of every device, oldest first, in up to two spans
     * (a ring: the older part first). */
    const fp_snap_entry *ev[2];
    size_t nev[2];
    const fp_pool_opts *opts; /* for allocator_settings              */
    const char *conf;         /* the settings as text                */
    /* The frames of key (innermost first) into out[max]; returns how many.
     * NULL: no frames anywhere. */
    size_t (*frames_of)(void *ud, uint64_t key, fp_snap_frame *out, size_t max);
    void *ud;
} fp_snap;

/* Writes the snapshot as a pickle.  0, or the sink's error (EINVAL when
 * the writer's containers did not pair: a bug). */
int fp_snapshot_write(const fp_snap *s, fp_sink *out);

#endif
