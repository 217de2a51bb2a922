/* simdev/sim_vmmfile.c: the memory files behind the VMM handles of
 * sim_vmm.c, and the POSIX file descriptors that share their pages with
 * other processes (cuMemExportToShareableHandle's).
 *
 * A file is a memfd of the process, sparse, 1 TiB long, its size sealed
 * (it cannot shrink or grow, so a mapping of it never faults).  Under a
 * file-size limit (ulimit -f, RLIMIT_FSIZE), which a memfd obeys too (an
 * ftruncate past it is SIGXFSZ, which kills), a file is only as long as
 * the limit lets it be, and a new file is made when the ones there are
 * have no room for a handle: one line on stderr says so, once.  A limit
 * under HEAD_PAGES + 1 pages leaves no room: cuMemCreate then fails with
 * CUDA_ERROR_OUT_OF_MEMORY, also with one line.
 *
 * A handle is a run of one file's 2 MiB pages.  The first HEAD_PAGES
 * pages of each file are its head: at 0 the magic "fpsimVMM", at
 * TABLE_OFF the export table, one 64-bit entry per page: for a run that
 * was ever exported, the entry of its first page holds its length in
 * pages and its device + 1 (0: never exported).
 *
 * An export is a new open file description of the file (opened through
 * /proc/self/fd, so it has a file position of its own) whose position is
 * the run's first byte.  An importer needs nothing but that descriptor:
 * the position and the table (read with pread, never waiting) say which
 * pages to map, even after the exporter has exited.  A descriptor that is
 * not a regular file of a whole number of pages (HEAD_PAGES + 1 to 1 TiB)
 * with these seals, this magic, a position on a page boundary and a table
 * entry there is refused.
 *
 * Invariants: a page is in at most one live run; pages of a run that was
 * ever exported are never given to another run (an importer may still map
 * them): they stay used, with their bytes, in the sparse file until the
 * process ends (a leak of file space, not of device capacity, which
 * sim_vmm.c gives back at the release).  Table entries are never cleared.
 * No write reaches past a file's size, so none meets the size limit.
 *
 * The page maps are guarded by sim_vmm.c's vmm lock (its callers hold
 * it); the import check touches nothing of this process's state.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_PAGES ((size_t)1 << 19) /* 1 TiB of sparse file, at most */
#define FILE_BYTES ((off_t)(FILE_PAGES * SIM_VMM_GRAN))
#define HEAD_PAGES ((size_t)4) /* magic + table: 8 MiB */
#define MIN_PAGES  (HEAD_PAGES + 1)
#define MAX_FILES  256
#define TABLE_OFF  ((off_t)4096)
#define MAGIC      "fpsimVMM"
#define SIZE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

typedef struct vmm_file {
    int fd;
    size_t pages;   /* its length in pages */
    uint64_t *used; /* bit i: page i belongs to a run */
} vmm_file;

static struct {
    vmm_file f[MAX_FILES];
    int n;
    bool said; /* the line about the size limit */
} g_file;

static bool page_used(const vmm_file *f, size_t i)
{
    return (f->used[i / 64] >> (i % 64)) & 1;
}

static void mark(vmm_file *f, size_t first, size_t n, bool on)
{
    for (size_t i = first; i < first + n; i++) {
        uint64_t bit = (uint64_t)1 << (i % 64);
        f->used[i / 64] = on ? f->used[i / 64] | bit : f->used[i / 64] & ~bit;
    }
}

/* The pages a new file may have: 1 TiB, or what RLIMIT_FSIZE lets a file
 * grow to (said once when that is less). */
static size_t pages_allowed(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur >= (rlim_t)FILE_BYTES)
        return FILE_PAGES;
    size_t pages = (size_t)(rl.rlim_cur / SIM_VMM_GRAN);
    if (!g_file.said) {
        g_file.said = true;
        if (pages < MIN_PAGES)
            sim_warn("the file-size limit (ulimit -f: %llu bytes) leaves no room for the VMM "
                     "memory file (%zu MiB at least); cuMemCreate fails with out of memory",
                     (unsigned long long)rl.rlim_cur, MIN_PAGES * SIM_VMM_GRAN >> 20);
        else
            sim_warn("the file-size limit (ulimit -f: %llu bytes) keeps VMM memory in files of "
                     "%zu MiB, not 1 TiB; a handle of more than %zu MiB fails with out of memory",
                     (unsigned long long)rl.rlim_cur, pages * SIM_VMM_GRAN >> 20,
                     (pages - HEAD_PAGES) * SIM_VMM_GRAN >> 20);
    }
    return pages;
}

/* Makes a file: sized, sealed, the head written, its pages taken; NULL
 * with errno set. */
static vmm_file *file_make(void)
{
    size_t pages = pages_allowed();
    if (pages < MIN_PAGES || g_file.n == MAX_FILES) {
        errno = ENOMEM;
        return NULL;
    }
    vmm_file *f = &g_file.f[g_file.n];
    f->used = calloc((pages + 63) / 64, sizeof *f->used);
    int fd = f->used ? memfd_create("fpsim-vmm", MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)(pages * SIM_VMM_GRAN)) != 0 ||
        fcntl(fd, F_ADD_SEALS, SIZE_SEALS | F_SEAL_SEAL) != 0 || pwrite(fd, MAGIC, 8, 0) != 8) {
        int e = errno ? errno : EIO;
        if (fd >= 0)
            close(fd);
        free(f->used);
        f->used = NULL;
        errno = e;
        return NULL;
    }
    f->fd = fd;
    f->pages = pages;
    mark(f, 0, HEAD_PAGES, true);
    g_file.n++;
    return f;
}

/* First fit of n free pages in f: 0 and *first, or ENOMEM. */
static int fit(vmm_file *f, size_t n, size_t *first)
{
    size_t run = 0;
    for (size_t i = HEAD_PAGES; n > 0 && i < f->pages; i++) {
        run = page_used(f, i) ? 0 : run + 1;
        if (run == n) {
            *first = i + 1 - n;
            mark(f, *first, n, true);
            return 0;
        }
    }
    return ENOMEM;
}

int sim_vmmfile_take(size_t n, size_t *first, int *fd)
{
    for (int i = 0; i < g_file.n; i++)
        if (fit(&g_file.f[i], n, first) == 0) {
            *fd = g_file.f[i].fd;
            return 0;
        }
    if (g_file.n && g_file.f[0].pages - HEAD_PAGES < n)
        return ENOMEM; /* no file could hold it */
    vmm_file *f = file_make();
    if (!f)
        return errno;
    if (fit(f, n, first) != 0)
        return ENOMEM;
    *fd = f->fd;
    return 0;
}

void sim_vmmfile_give(int fd, size_t first, size_t n, bool exported)
{
    if (exported)
        return; /* kept for importers, never reused (see the top) */
    for (int i = 0; i < g_file.n; i++)
        if (g_file.f[i].fd == fd) {
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(first * SIM_VMM_GRAN),
                      (off_t)(n * SIM_VMM_GRAN));
            mark(&g_file.f[i], first, n, false);
        }
}

int sim_vmmfile_export(int fd, size_t first, size_t n, int dev)
{
    uint64_t entry = (uint64_t)n | ((uint64_t)(dev + 1) << 32);
    if (pwrite(fd, &entry, sizeof entry, TABLE_OFF + (off_t)(first * 8)) != (ssize_t)sizeof entry)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int out = open(path, O_RDWR | O_CLOEXEC);
    if (out >= 0 && lseek(out, (off_t)(first * SIM_VMM_GRAN), SEEK_SET) < 0) {
        int e = errno;
        close(out);
        errno = e;
        out = -1;
    }
    return out;
}

/* fd is a file of ours: regular, a size of ours (*pages), our seals, our
 * magic. */
static bool ours(int fd, size_t *pages)
{
    struct stat st;
    char magic[8];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > FILE_BYTES ||
        st.st_size < (off_t)(MIN_PAGES * SIM_VMM_GRAN) || st.st_size % (off_t)SIM_VMM_GRAN)
        return false;
    *pages = (size_t)st.st_size / SIM_VMM_GRAN;
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & SIZE_SEALS) == SIZE_SEALS &&
           pread(fd, magic, sizeof magic, 0) == (ssize_t)sizeof magic &&
           memcmp(magic, MAGIC, sizeof magic) == 0;
}

int sim_vmmfile_import(int fd, int *own, size_t *first, size_t *n, int *dev)
{
    size_t pages = 0;
    if (fd < 0 || !ours(fd, &pages))
        return EINVAL;
    off_t pos = lseek(fd, 0, SEEK_CUR);
    uint64_t entry = 0;
    if (pos < 0 || pos % (off_t)SIM_VMM_GRAN != 0)
        return EINVAL;
    size_t f = (size_t)pos / SIM_VMM_GRAN, len = 0;
    if (f < HEAD_PAGES || f >= pages ||
        pread(fd, &entry, sizeof entry, TABLE_OFF + (off_t)(f * 8)) != (ssize_t)sizeof entry)
        return EINVAL;
    len = (size_t)(entry & 0xffffffffu);
    if (len == 0 || len > pages - f || (entry >> 32) == 0)
        return EINVAL;
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0)
        return errno == EMFILE || errno == ENFILE ? ENOMEM : EINVAL;
    *own = dup_fd;
    *first = f;
    *n = len;
    *dev = (int)(entry >> 32) - 1;
    return 0;
}
