/* simdev/sim_share.c: one simulated capacity shared by several processes
 * (FRAGPOOL_SIM_SHARED=PATH), as processes share one real GPU.
 *
 * Every process that names the same PATH maps it: a table of up to
 * SIM_SHARE_SLOTS processes, each with the bytes it holds on each device,
 * and each device's total.  A charge is a compare-and-swap on the total
 * that never takes it past the capacity; the process's own row follows.
 * A process that died holds nothing (the real driver frees a dead
 * process's memory): a charge that does not fit first takes back the rows
 * of processes that are gone (kill(pid, 0) says ESRCH), then tries again.
 * A row with the caller's own pid is one its earlier image left before an
 * exec: taken back when the row is claimed.
 *
 * The device's identity follows: processes that share PATH see the same
 * device UUIDs (a hash of PATH); without it each process has devices of
 * its own (the pid in the UUID), so unrelated processes never look like
 * neighbours on one GPU.
 *
 * Invariants: a device's total equals the sum of its live rows' bytes
 * plus what dead rows still hold until they are taken back; a total never
 * exceeds the capacity by a charge; only this file touches the table.
 * Layer 1: no lock (atomics on the shared mapping); only sim_warn below it.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_SHARE_SLOTS 64
#define SIM_SHARE_MAGIC 0x66707368u /* "fpsh" */

typedef struct share_row {
    int32_t pid; /* 0: free */
    uint32_t pad;
    uint64_t bytes[SIM_MAX_DEVICES];
} share_row;

typedef struct share_file {
    uint32_t magic, pad;
    uint64_t total[SIM_MAX_DEVICES];
    share_row row[SIM_SHARE_SLOTS];
} share_file;

static share_file *g_file; /* NULL: not shared */
static int g_row = -1;     /* this process's row, claimed at the first charge */
static uint64_t g_path_hash;

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void sim_share_setup(void)
{
    const char *path = getenv("FRAGPOOL_SIM_SHARED");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    share_file *f = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, sizeof *f) == 0)
        f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (f == MAP_FAILED) {
        sim_warn("FRAGPOOL_SIM_SHARED=\"%s\": cannot map it (%s); this process has a "
                 "device of its own",
                 path, strerror(errno));
        return;
    }
    uint32_t zero = 0; /* a new file is all zeros: mark it, once */
    __atomic_compare_exchange_n(&f->magic, &zero, SIM_SHARE_MAGIC, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&f->magic, __ATOMIC_SEQ_CST) != SIM_SHARE_MAGIC) {
        sim_warn("FRAGPOOL_SIM_SHARED=\"%s\": not a shared-capacity file; this process has a "
                 "device of its own",
                 path);
        munmap(f, sizeof *f);
        return;
    }
    g_path_hash = hash_text(path);
    g_file = f;
}

bool sim_share_on(void)
{
    return g_file != NULL;
}

/* What identifies the process's devices: PATH's hash when shared, else the pid. */
uint64_t sim_share_identity(void)
{
    return g_file ? g_path_hash : (uint64_t)getpid();
}

static bool gone(int32_t pid)
{
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* Takes row r back from its owner (dead, or this process's image before
 * an exec): its bytes leave the totals. */
static void take_back(int r, int32_t owner)
{
    share_row *w = &g_file->row[r];
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        uint64_t b = __atomic_exchange_n(&w->bytes[d], 0, __ATOMIC_SEQ_CST);
        __atomic_fetch_sub(&g_file->total[d], b, __ATOMIC_SEQ_CST);
    }
    __atomic_compare_exchange_n(&w->pid, &owner, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static void reap(void)
{
    int32_t me = getpid();
    for (int r = 0; r < SIM_SHARE_SLOTS; r++) {
        int32_t pid = __atomic_load_n(&g_file->row[r].pid, __ATOMIC_SEQ_CST);
        if (r != g_row && (gone(pid) || pid == me))
            take_back(r, pid);
    }
}

static int my_row(void)
{
    int32_t me = getpid();
    if (g_row >= 0 && __atomic_load_n(&g_file->row[g_row].pid, __ATOMIC_SEQ_CST) == me)
        return g_row;
    g_row = -1;
    reap();
    for (int r = 0; r < SIM_SHARE_SLOTS; r++) {
        int32_t free_pid = 0;
        if (__atomic_compare_exchange_n(&g_file->row[r].pid, &free_pid, me, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return g_row = r;
    }
    return -1;
}

static bool try_charge(int dev, size_t bytes, size_t capacity)
{
    uint64_t t = __atomic_load_n(&g_file->total[dev], __ATOMIC_SEQ_CST);
    do {
        if (bytes > capacity || t > capacity - bytes)
            return false;
    } while (!__atomic_compare_exchange_n(&g_file->total[dev], &t, t + bytes, false,
                                          __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return true;
}

bool sim_share_charge(int dev, size_t bytes, size_t capacity)
{
    int r = my_row();
    if (r < 0)
        return false; /* more processes than rows: as a full device */
    if (!try_charge(dev, bytes, capacity)) {
        reap();
        if (!try_charge(dev, bytes, capacity))
            return false;
    }
    __atomic_fetch_add(&g_file->row[r].bytes[dev], bytes, __ATOMIC_SEQ_CST);
    return true;
}

void sim_share_uncharge(int dev, size_t bytes)
{
    if (g_row < 0)
        return;
    __atomic_fetch_sub(&g_file->row[g_row].bytes[dev], bytes, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&g_file->total[dev], bytes, __ATOMIC_SEQ_CST);
}

size_t sim_share_used(int dev)
{
    return (size_t)__atomic_load_n(&g_file->total[dev], __ATOMIC_SEQ_CST);
}

/* A forked child holds nothing of the parent's (it cannot use CUDA). */
void sim_share_fork_child(void)
{
    g_row = -1;
}
