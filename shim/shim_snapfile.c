/* shim_snapfile.c - snapshot:PATH writes PyTorch's memory snapshot (the
 * pickle of torch.cuda.memory._dump_snapshot, report/fp_snapshot.h) at
 * exit, and to PATH.N on the n-th SIGUSR1 with dump_on_sigusr1:1.
 *
 * fp_snapfile_write writes one to a given file at any time, for the C
 * API (torch.cuda.memory._snapshot under fragpool's Python side).
 *
 * The segments and blocks are the pools' own (fp_pool_walk); the trace
 * entries and frames are the recorder's (shim_snaprec.c), whose lock is
 * held through the whole write.
 *
 * Invariants: no CUDA call (it runs in the exit handler); a problem with
 * the name, the open or a write is one line naming the file, and no
 * snapshot (or an incomplete one, said so); a forked child writes nothing;
 * a name that is the trace's or the summary's file moves to PATH.snapshot
 * (fp_path_claim, one line); no write raises SIGXFSZ (past RLIMIT_FSIZE
 * it fails with EFBIG: fp_write_capped).  At exit the caller has made
 * sure no lock this takes is held by the exiting thread.
 */
#include "shim_snapfile.h"
#include "fp_file.h"
#include "fp_snapshot.h"
#include "shim_path.h"
#include "shim_pools.h"
#include "shim_snaprec.h"
#include "shim_state.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FP_SNAP_POOLS 64

/* Writes the snapshot of the pools ds (held while it runs) to *(int *)ud,
 * leaving 0 or an errno there. */
static void write_held(fp_ctx_pool **ds, size_t n, void *ud)
{
    static fp_snap_device devs[FP_SNAP_POOLS];
    static char conf[4096];
    static fp_sink sink;
    size_t k = 0;
    for (size_t i = 0; i < n && k < FP_SNAP_POOLS; i++)
        if (!fp_pools_retired(ds[i]))
            devs[k++] = (fp_snap_device){
                .device = ds[i]->dev, .pool = ds[i]->pool, .key_base = fp_pools_trace_id(ds[i], 0)};
    /* PyTorch's keys only, expandable_segments as it ran: no paths */
    fp_conf_format_pytorch(&fp_shim.conf, k && fp_pool_is_vmm(devs[0].pool), conf, sizeof conf);
    fp_snap s = {.devs = devs,
                 .ndevs = k,
                 .opts = &fp_shim.conf.pool,
                 .conf = conf,
                 .frames_of = fp_snap_has_stacks() ? fp_snap_frames : NULL};
    fp_snap_spans(s.ev, s.nev);
    sink = fp_sink_fd(*(int *)ud);
    *(int *)ud = fp_snapshot_write(&s, &sink);
}

static int write_to(int fd)
{
    fp_pools_all(write_held, &fd);
    return fd;
}

/* dump 0: at exit, to PATH; n: to PATH.n. */
static void write_snapshot(unsigned dump)
{
    static char path[FP_OUT_PATH_MAX], why[FP_OUT_PATH_MAX + 256];
    if (fp_path_expand(fp_shim.conf.snapshot, path, sizeof path, why, sizeof why)) {
        fp_say("snapshot: %s; writing no snapshot", why);
        return;
    }
    size_t len = strlen(path);
    if (dump && snprintf(path + len, sizeof path - len, ".%u", dump) >= (int)(sizeof path - len)) {
        fp_say("snapshot: '%s.%u' is too long a name; writing no snapshot", path, dump);
        return;
    }
    int fd;
    if (fp_path_claim("snapshot", fp_shim.conf.snapshot, path, sizeof path, why, sizeof why)) {
        fp_say("snapshot: %s; writing no snapshot", why);
        return;
    }
    if (fp_file_create(path, &fd, why, sizeof why)) {
        fp_say("snapshot: cannot write '%s': %s; writing no snapshot", path, why);
        return;
    }
    fp_path_claimed("snapshot", fp_shim.conf.snapshot, fd, path);
    int err = write_to(fd);
    if (close(fd) != 0 && !err)
        err = errno;
    if (err)
        fp_say("snapshot: writing '%s' failed: %s; the snapshot is incomplete", path,
               strerror(err));
}

int fp_snapfile_write(const char *path)
{
    char why[FP_OUT_PATH_MAX + 256];
    int fd, err = fp_file_create(path, &fd, why, sizeof why) ? EIO : 0;
    if (err) {
        fp_say("snapshot: cannot write '%s': %s; writing no snapshot", path, why);
        return err;
    }
    fp_snap_lock();
    err = write_to(fd);
    fp_snap_unlock();
    if (close(fd) != 0 && !err)
        err = errno;
    if (err)
        fp_say("snapshot: writing '%s' failed: %s; the snapshot is incomplete", path,
               strerror(err));
    return err;
}

void fp_snapfile_write_exit(void)
{
    const char *path = fp_shim.conf.snapshot;
    if (!fp_snap_on() || !atomic_load(&fp_shim.used) || !path[0] || strcmp(path, "off") == 0)
        return; /* recording only for the C API: no file at exit */
    fp_snap_lock();
    write_snapshot(0); /* recording stays on: the summary's leak report reads it */
    fp_snap_unlock();
}

void fp_snapfile_dump(unsigned n)
{
    const char *path = fp_shim.conf.snapshot;
    if (!fp_snap_on() || !path[0] || strcmp(path, "off") == 0)
        return;
    fp_snap_lock();
    if (!atomic_load(&fp_shim.exiting))
        write_snapshot(n);
    fp_snap_unlock();
}
