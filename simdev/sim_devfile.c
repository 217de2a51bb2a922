/* simdev/sim_devfile.c: the process's shared "device file", which backs
 * the device memory that IPC exports (sim_ipc.c has the handles and the
 * calls).
 *
 * The file is a memfd, sparse, 128 TiB long, made at the first export: an
 * allocation's pages live at the file offset equal to its address, moved
 * there (bytes copied, the file mapped over the same address) when it is
 * first exported, and given private pages again before it is freed
 * (sim_registry.c decides when, under the mem lock).  Layout: at 0 a head
 * (magic, a nonce that tells this file from one of a process that reused
 * the pid), at LIVE_OFF a table of LIVE_SLOTS ids (slot id % LIVE_SLOTS
 * holds id while that allocation is shared, 0 after), so an importer
 * refuses a handle of a freed allocation or of another file.
 *
 * Calls no other file of simdev/ but sim_warn (sim_state.c).
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FILE_MAGIC "fpsimIPC"       /* the head's (as the handle's) */
#define FILE_SIZE  ((off_t)1 << 47) /* the user address space */
#define LIVE_OFF   ((off_t)4096)    /* the live-id table       */
#define LIVE_SLOTS 65536u
#define LOW_END    ((CUdeviceptr)1 << 20) /* no allocation below this */

typedef struct file_head {
    char magic[8];
    uint64_t nonce;
} file_head;

static struct {
    pthread_once_t once;
    int fd; /* -1: no device file (exports fail)     */
    uint64_t nonce;
} g_file = {PTHREAD_ONCE_INIT, -1, 0};

static void file_open(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                     ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&ts;
    int fd = memfd_create("fpsim-device", MFD_CLOEXEC);
    file_head h = {.nonce = nonce | 1};
    memcpy(h.magic, FILE_MAGIC, 8);
    if (fd >= 0 &&
        (ftruncate(fd, FILE_SIZE) != 0 || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        sim_warn("IPC: no shared device file (memfd_create failed); "
                 "cuIpcGetMemHandle will fail");
    g_file.fd = fd;
    g_file.nonce = h.nonce;
}

static int file_fd(void)
{
    pthread_once(&g_file.once, file_open);
    return g_file.fd;
}

static void set_live(unsigned long long id, uint64_t v)
{
    off_t off = LIVE_OFF + (off_t)(id % LIVE_SLOTS) * 8;
    if (pwrite(g_file.fd, &v, sizeof v, off) != (ssize_t)sizeof v)
        sim_warn("IPC: cannot update the live table");
}

int sim_devfile_share_pages(CUdeviceptr base, size_t span, unsigned long long id)
{
    int fd = file_fd();
    if (fd < 0 || base < LOW_END || base % 4096 || span % 4096)
        return EINVAL;
    void *p = (void *)(uintptr_t)base;
    void *t = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)base);
    if (t == MAP_FAILED)
        return ENOMEM;
    memcpy(t, p, span);
    void *q = mmap(p, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)base);
    munmap(t, span);
    if (q == MAP_FAILED)
        return ENOMEM;
    set_live(id, id);
    return 0;
}

void sim_devfile_unshare_pages(CUdeviceptr base, size_t span, unsigned long long id)
{
    void *p = (void *)(uintptr_t)base;
    if (mmap(p, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED)
        sim_warn("IPC: cannot give %p private pages back", p);
    set_live(id, 0);
    fallocate(g_file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)base, (off_t)span);
}

/* The file's descriptor (-1: none) and nonce, for a handle. */
void sim_devfile_identity(int *fd, uint64_t *nonce)
{
    *fd = g_file.fd;
    *nonce = g_file.nonce;
}

/* Another process's device file (its pid and descriptor), checked: its
 * head carries nonce and its live table allocation id; an fd, or -1. */
int sim_devfile_open(uint32_t pid, int fd_there, uint64_t nonce, uint64_t id)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", (unsigned)pid, fd_there);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    file_head h;
    uint64_t live = 0;
    off_t off = LIVE_OFF + (off_t)(id % LIVE_SLOTS) * 8;
    bool ok = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
              memcmp(h.magic, FILE_MAGIC, 8) == 0 && h.nonce == nonce &&
              pread(fd, &live, sizeof live, off) == (ssize_t)sizeof live && live == id;
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}
