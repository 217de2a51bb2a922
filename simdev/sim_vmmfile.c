/* simdev/sim_vmmfile.c: the memory file behind the VMM handles of
 * sim_vmm.c, and the POSIX file descriptors that share its pages with
 * other processes (cuMemExportToShareableHandle's).
 *
 * The file is one memfd per process, sparse, 1 TiB long, its size sealed
 * (it cannot shrink or grow, so a mapping of it never faults).  A handle
 * is a run of its 2 MiB pages.  The first HEAD_PAGES pages are the head:
 * at 0 the magic "fpsimVMM", at TABLE_OFF the export table, one 64-bit
 * entry per page: for a run that was ever exported, the entry of its
 * first page holds its length in pages and its device + 1 (0: never
 * exported).
 *
 * An export is a new open file description of the file (opened through
 * /proc/self/fd, so it has a file position of its own) whose position is
 * the run's first byte.  An importer needs nothing but that descriptor:
 * the position and the table (read with pread, never waiting) say which
 * pages to map, even after the exporter has exited.  A descriptor that is
 * not a regular file of the right size with these seals, this magic, a
 * position on a page boundary and a table entry there is refused.
 *
 * Invariants: a page is in at most one live run; pages of a run that was
 * ever exported are never given to another run (an importer may still map
 * them): they stay used, with their bytes, in the sparse file until the
 * process ends (a leak of file space, not of device capacity, which
 * sim_vmm.c gives back at the release).  Table entries are never cleared.
 *
 * The page map is guarded by sim_vmm.c's vmm lock (its callers hold it);
 * the import check touches nothing of this process's state.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_PAGES ((size_t)1 << 19) /* 1 TiB of sparse file */
#define FILE_BYTES ((off_t)(FILE_PAGES * SIM_VMM_GRAN))
#define HEAD_PAGES ((size_t)4) /* magic + table: 8 MiB */
#define TABLE_OFF  ((off_t)4096)
#define MAGIC      "fpsimVMM"
#define SIZE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static struct {
    int fd;                         /* -1 until the first handle */
    uint64_t used[FILE_PAGES / 64]; /* bit i: page i belongs to a run */
} g_file = {.fd = -1};

static bool page_used(size_t i)
{
    return (g_file.used[i / 64] >> (i % 64)) & 1;
}

static void mark(size_t first, size_t n, bool on)
{
    for (size_t i = first; i < first + n; i++) {
        uint64_t bit = (uint64_t)1 << (i % 64);
        g_file.used[i / 64] = on ? g_file.used[i / 64] | bit : g_file.used[i / 64] & ~bit;
    }
}

/* Makes the file: sized, sealed, the head written, its pages taken. */
static int file_make(void)
{
    int fd = memfd_create("fpsim-vmm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return errno;
    if (ftruncate(fd, FILE_BYTES) != 0 || fcntl(fd, F_ADD_SEALS, SIZE_SEALS | F_SEAL_SEAL) != 0 ||
        pwrite(fd, MAGIC, 8, 0) != 8) {
        int e = errno ? errno : EIO;
        close(fd);
        return e;
    }
    g_file.fd = fd;
    mark(0, HEAD_PAGES, true);
    return 0;
}

int sim_vmmfile_take(size_t n, size_t *first, int *fd)
{
    int e = g_file.fd < 0 ? file_make() : 0;
    if (e != 0)
        return e;
    size_t run = 0;
    for (size_t i = HEAD_PAGES; n > 0 && i < FILE_PAGES; i++) {
        run = page_used(i) ? 0 : run + 1;
        if (run == n) {
            *first = i + 1 - n;
            *fd = g_file.fd;
            mark(*first, n, true);
            return 0;
        }
    }
    return ENOMEM;
}

void sim_vmmfile_give(size_t first, size_t n, bool exported)
{
    if (exported)
        return; /* kept for importers, never reused (see the top) */
    fallocate(g_file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(first * SIM_VMM_GRAN),
              (off_t)(n * SIM_VMM_GRAN));
    mark(first, n, false);
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

/* fd is a file of ours: regular, our size, our seals, our magic. */
static bool ours(int fd)
{
    struct stat st;
    char magic[8];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != FILE_BYTES)
        return false;
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & SIZE_SEALS) == SIZE_SEALS &&
           pread(fd, magic, sizeof magic, 0) == (ssize_t)sizeof magic &&
           memcmp(magic, MAGIC, sizeof magic) == 0;
}

int sim_vmmfile_import(int fd, int *own, size_t *first, size_t *n, int *dev)
{
    if (fd < 0 || !ours(fd))
        return EINVAL;
    off_t pos = lseek(fd, 0, SEEK_CUR);
    uint64_t entry = 0;
    if (pos < 0 || pos % (off_t)SIM_VMM_GRAN != 0)
        return EINVAL;
    size_t f = (size_t)pos / SIM_VMM_GRAN, len = 0;
    if (f < HEAD_PAGES || f >= FILE_PAGES ||
        pread(fd, &entry, sizeof entry, TABLE_OFF + (off_t)(f * 8)) != (ssize_t)sizeof entry)
        return EINVAL;
    len = (size_t)(entry & 0xffffffffu);
    if (len == 0 || len > FILE_PAGES - f || (entry >> 32) == 0)
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
