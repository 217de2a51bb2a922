/* fp_snapshot.c - writes the snapshot model of fp_snapshot.h as a pickle.
 *
 * Field names and meanings follow PyTorch's writer:
 *  - segment: device, address, total_size, allocated_size (bytes of its
 *    allocated blocks), active_size (the same: fragpool has no block that
 *    is freed but still in use, its frees go straight back to best fit),
 *    requested_size (bytes asked for), stream (0: the pool is per context,
 *    not per stream), segment_type "small"/"large", segment_pool_id (0, 0),
 *    is_expandable (virtual-memory segments: one segment per run of
 *    mapped pages, as PyTorch shows expandable ones), frames [], blocks;
 *  - block: address, size, requested_size (0 when free), state
 *    "active_allocated" or "inactive", frames;
 *  - trace entry: action, addr, size, stream, time_us, frames; an oom has
 *    device_free (0: unknown) as PyTorch's does.
 * Invariants: device_traces has one list for every device number from 0
 * to the largest one named (by a pool or an entry; negative devices are
 * left out); the walk of each pool is the pool's own
 * (under its lock), so segments and blocks are a consistent picture.
 */
#include "fp_snapshot.h"
#include <string.h>

#define SNAP_FRAMES 64

static const char *const action_names[FP_SNAP_NACTIONS] = {
    "alloc",         "free_requested", "free_completed",
    "segment_alloc", "segment_free",   "segment_map",
    "segment_unmap", "snapshot",       "oom"};

const char *fp_snapshot_action_name(unsigned action)
{
    return action < FP_SNAP_NACTIONS ? action_names[action] : NULL;
}

typedef struct walk_ctx {
    fp_pk *k;
    const fp_snap *s;
    const fp_snap_device *d;
} walk_ctx;

static void put_frames(fp_pk *k, const fp_snap *s, uint64_t key)
{
    fp_snap_frame f[SNAP_FRAMES];
    size_t n = key && s->frames_of ? s->frames_of(s->ud, key, f, SNAP_FRAMES) : 0;
    fp_pk_key(k, "frames");
    fp_pk_list(k);
    for (size_t i = 0; i < n && i < SNAP_FRAMES; i++) {
        fp_pk_dict(k);
        fp_pk_key(k, "filename");
        fp_pk_str(k, f[i].filename ? f[i].filename : "??");
        fp_pk_key(k, "line");
        fp_pk_int(k, f[i].line);
        fp_pk_key(k, "name");
        fp_pk_str(k, f[i].name ? f[i].name : "??");
        fp_pk_end_dict(k);
    }
    fp_pk_end_list(k);
}

static void put_u(fp_pk *k, const char *key, uint64_t v)
{
    fp_pk_key(k, key);
    fp_pk_uint(k, v);
}

static void put_block(walk_ctx *w, const fp_block_info *b)
{
    fp_pk *k = w->k;
    fp_pk_dict(k);
    put_u(k, "address", b->addr);
    put_u(k, "size", b->size);
    put_u(k, "requested_size", b->state ? b->requested : 0);
    fp_pk_key(k, "state");
    fp_pk_str(k, b->state ? "active_allocated" : "inactive");
    put_frames(k, w->s, b->state ? (w->d->key_base | b->seq) : 0);
    fp_pk_end_dict(k);
}

static void put_segment(void *ud, uint64_t addr, size_t size, int small,
                        const fp_block_info *blocks, size_t nblocks)
{
    walk_ctx *w = ud;
    fp_pk *k = w->k;
    uint64_t allocated = 0, requested = 0;
    for (size_t i = 0; i < nblocks; i++)
        if (blocks[i].state) {
            allocated += blocks[i].size;
            requested += blocks[i].requested;
        }
    fp_pk_dict(k);
    fp_pk_key(k, "device");
    fp_pk_int(k, w->d->device);
    put_u(k, "address", addr);
    put_u(k, "total_size", size);
    put_u(k, "allocated_size", allocated);
    put_u(k, "active_size", allocated);
    put_u(k, "requested_size", requested);
    put_u(k, "stream", 0);
    fp_pk_key(k, "segment_type");
    fp_pk_str(k, small ? "small" : "large");
    fp_pk_key(k, "segment_pool_id");
    fp_pk_tuple(k);
    fp_pk_int(k, 0);
    fp_pk_int(k, 0);
    fp_pk_end_tuple(k);
    fp_pk_key(k, "is_expandable");
    fp_pk_bool(k, fp_pool_is_vmm(w->d->pool));
    put_frames(k, w->s, 0);
    fp_pk_key(k, "blocks");
    fp_pk_list(k);
    for (size_t i = 0; i < nblocks; i++)
        put_block(w, &blocks[i]);
    fp_pk_end_list(k);
    fp_pk_end_dict(k);
}

static void put_entry(fp_pk *k, const fp_snap *s, const fp_snap_entry *e)
{
    const char *name = fp_snapshot_action_name(e->action);
    fp_pk_dict(k);
    fp_pk_key(k, "action");
    fp_pk_str(k, name ? name : "snapshot");
    put_u(k, "addr", e->addr);
    if (e->action == FP_SNAP_OOM)
        put_u(k, "device_free", 0);
    put_u(k, "size", e->size);
    put_u(k, "stream", e->stream);
    fp_pk_key(k, "time_us");
    fp_pk_int(k, e->time_us);
    put_frames(k, s, e->key);
    fp_pk_end_dict(k);
}

static void put_traces(fp_pk *k, const fp_snap *s)
{
    int ndev = 0;
    for (size_t i = 0; i < s->ndevs; i++)
        if (s->devs[i].device >= ndev)
            ndev = s->devs[i].device + 1;
    for (int span = 0; span < 2; span++)
        for (size_t j = 0; j < s->nev[span]; j++)
            if (s->ev[span][j].device >= ndev)
                ndev = s->ev[span][j].device + 1;
    fp_pk_key(k, "device_traces");
    fp_pk_list(k);
    for (int dev = 0; dev < ndev; dev++) {
        fp_pk_list(k);
        for (int span = 0; span < 2; span++)
            for (size_t j = 0; j < s->nev[span]; j++)
                if (s->ev[span][j].device == dev)
                    put_entry(k, s, &s->ev[span][j]);
        fp_pk_end_list(k);
    }
    fp_pk_end_list(k);
}

static void put_settings(fp_pk *k, const fp_snap *s)
{
    const fp_pool_opts *o = s->opts;
    fp_pk_key(k, "allocator_settings");
    fp_pk_dict(k);
    fp_pk_key(k, "PYTORCH_CUDA_ALLOC_CONF");
    fp_pk_str(k, s->conf ? s->conf : "");
    fp_pk_key(k, "max_split_size"); /* PyTorch's "off" is SIZE_MAX as int64: -1 */
    fp_pk_int(k, !o || o->max_split_size == SIZE_MAX ? -1 : (int64_t)o->max_split_size);
    fp_pk_key(k, "garbage_collection_threshold");
    fp_pk_float(k, o ? o->gc_threshold : 0.0);
    fp_pk_key(k, "expandable_segments"); /* as it ran: auto is no PyTorch value */
    fp_pk_bool(k, s->ndevs ? fp_pool_is_vmm(s->devs[0].pool) : o && o->expandable_segments);
    fp_pk_key(k, "pinned_num_register_threads");
    fp_pk_int(k, 1);
    fp_pk_key(k, "release_lock_on_cudamalloc");
    fp_pk_bool(k, false);
    fp_pk_key(k, "pinned_use_cuda_host_register");
    fp_pk_bool(k, false);
    fp_pk_key(k, "roundup_power2_divisions"); /* "1", "2", "4", ... MiB */
    fp_pk_dict(k);
    for (int i = 0; i < FP_ROUNDUP_INTERVALS; i++) {
        char key[8];
        unsigned v = 1u << i, n = 0;
        char tmp[8];
        do
            tmp[n++] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        for (unsigned j = 0; j < n; j++)
            key[j] = tmp[n - 1 - j];
        fp_pk_strn(k, key, n);
        fp_pk_int(k, o ? o->roundup_divisions[i] : 0);
    }
    fp_pk_end_dict(k);
    fp_pk_end_dict(k);
}

int fp_snapshot_write(const fp_snap *s, fp_sink *out)
{
    fp_pk k;
    fp_pk_begin(&k, out);
    fp_pk_dict(&k);
    fp_pk_key(&k, "segments");
    fp_pk_list(&k);
    for (size_t i = 0; i < s->ndevs; i++) {
        walk_ctx w = {&k, s, &s->devs[i]};
        if (s->devs[i].pool)
            fp_pool_walk(s->devs[i].pool, put_segment, &w);
    }
    fp_pk_end_list(&k);
    put_traces(&k, s);
    put_settings(&k, s);
    fp_pk_key(&k, "external_annotations");
    fp_pk_list(&k);
    fp_pk_end_list(&k);
    fp_pk_end_dict(&k);
    return fp_pk_done(&k);
}
