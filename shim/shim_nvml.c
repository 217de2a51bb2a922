/* shim_nvml.c - which processes hold a GPU, as NVML sees them: the seeds'
 * step 4 ("rule out the others") for an OOM that no setting fixes
 * (docs/advice.md).
 *
 * libnvidia-ml.so.1 is opened with dlopen when first needed and stays
 * loaded; the device is found by its PCI bus id (cuDeviceGetPCIBusId), as
 * CUDA and NVML number devices differently.  A process's memory reads
 * "unknown" when NVML will not say (another user's process), and its pid
 * is NVML's, which is the host's when the program runs in a container.
 *
 * The query itself runs in a child process (fork), which writes what NVML
 * said into a pipe and leaves with _exit: a libnvidia-ml that hangs is
 * killed at FP_NVML_WAIT_MS, and one that crashes takes only the child,
 * so neither can turn the program's failing allocation into a hang or a
 * crash.  The child makes no CUDA call and allocates nothing of the
 * program's.  NVML's INSUFFICIENT_SIZE (more processes than the buffer)
 * grows the buffer to the count it names, up to FP_NVML_MAX.
 *
 * Invariants: the caller holds no lock of fragpool's (the fork handlers
 * take them all); any failure writes at most one line and changes
 * nothing; NVML is initialised and shut down around each use; at most
 * FP_NVML_SHOWN processes are named, the rest counted.
 */
#include "shim_nvml.h"
#include "fp_advise.h"
#include "fp_nvml.h"
#include "shim_real.h"
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FP_NVML_FIRST   64   /* entries asked for first                  */
#define FP_NVML_MAX     4096 /* at most this many processes are read    */
#define FP_NVML_SHOWN   8
#define FP_NVML_WAIT_MS 2000 /* the child's answer, or it is killed      */

typedef struct nvml {
    fp_PFN_nvmlInit_v2 init;
    fp_PFN_nvmlShutdown shutdown;
    fp_PFN_nvmlDeviceGetHandleByPciBusId_v2 by_bus;
    fp_PFN_nvmlDeviceGetComputeRunningProcesses_v3 processes;
} nvml;

static int load(nvml *n)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return -1;
    n->init = (fp_PFN_nvmlInit_v2)fp_real_dlsym(lib, "nvmlInit_v2");
    n->shutdown = (fp_PFN_nvmlShutdown)fp_real_dlsym(lib, "nvmlShutdown");
    n->by_bus = (fp_PFN_nvmlDeviceGetHandleByPciBusId_v2)fp_real_dlsym(
        lib, "nvmlDeviceGetHandleByPciBusId_v2");
    n->processes = (fp_PFN_nvmlDeviceGetComputeRunningProcesses_v3)fp_real_dlsym(
        lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    return n->init && n->shutdown && n->by_bus && n->processes ? 0 : -1;
}

/* ---- in the child ------------------------------------------------------- */

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3);
        c += w;
        n -= (size_t)w;
    }
}

/* The processes on the device with this bus id into fd: their count (-1
 * when NVML cannot say), then the entries; the buffer grows once to the
 * count NVML names when it was too small. */
static void query(const nvml *n, const char *bus, int fd)
{
    int count = -1;
    fp_nvmlProcessInfo *v = NULL;
    fp_nvmlDevice dev;
    if (n->init() == FP_NVML_SUCCESS) {
        unsigned cap = FP_NVML_FIRST, got = 0;
        for (int round = 0; round < 3 && count < 0; round++) {
            fp_nvmlProcessInfo *nv = realloc(v, cap * sizeof *v);
            if (!nv)
                break;
            v = nv;
            got = cap;
            fp_nvmlReturn r = n->by_bus(bus, &dev) == FP_NVML_SUCCESS ? n->processes(dev, &got, v)
                                                                      : (fp_nvmlReturn)-1;
            if (r == FP_NVML_SUCCESS)
                count = (int)(got < cap ? got : cap);
            else if (r == FP_NVML_INSUFFICIENT_SIZE && got > cap && cap < FP_NVML_MAX)
                cap = got + 16 < FP_NVML_MAX ? got + 16 : FP_NVML_MAX;
            else
                break;
        }
        n->shutdown();
    }
    write_all(fd, &count, sizeof count);
    if (count > 0)
        write_all(fd, v, (size_t)count * sizeof *v);
    _exit(0);
}

/* ---- in the program -------------------------------------------------------- */

static long ms_left(const struct timespec *end)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (end->tv_sec - now.tv_sec) * 1000 + (end->tv_nsec - now.tv_nsec) / 1000000;
}

/* Reads up to len bytes from fd until the deadline; the bytes read, or -1
 * past the deadline. */
static ssize_t read_until(int fd, void *buf, size_t len, const struct timespec *end)
{
    size_t got = 0;
    while (got < len) {
        long left = ms_left(end);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0)
            return -1;
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? -1 : (ssize_t)got;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the child is gone */
        got += (size_t)n;
    }
    return (ssize_t)got;
}

typedef enum { ASKED_OK, ASKED_SILENT, ASKED_LATE, ASKED_DIED } asked;

/* The child's answer into *v (malloc'd) and *count; how it went. */
static asked ask(const nvml *n, const char *bus, fp_nvmlProcessInfo **v, int *count)
{
    int fd[2];
    if (pipe(fd))
        return ASKED_SILENT;
    pid_t pid = fork();
    if (pid == 0) { /* the program's crash handlers are not for the child */
        static const int crash[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        for (size_t i = 0; i < sizeof crash / sizeof *crash; i++)
            signal(crash[i], SIG_DFL);
        close(fd[0]);
        query(n, bus, fd[1]);
    }
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        return ASKED_SILENT;
    }
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += FP_NVML_WAIT_MS / 1000;
    end.tv_nsec += (FP_NVML_WAIT_MS % 1000) * 1000000L;
    asked how = ASKED_SILENT;
    *count = -1;
    ssize_t r = read_until(fd[0], count, sizeof *count, &end);
    if (r != (ssize_t)sizeof *count) {
        how = r < 0 ? ASKED_LATE : ASKED_DIED;
    } else if (*count <= 0 || *count > FP_NVML_MAX) {
        how = *count == 0 ? ASKED_OK : ASKED_SILENT;
    } else if ((*v = malloc((size_t)*count * sizeof **v)) != NULL) {
        size_t want = (size_t)*count * sizeof **v;
        r = read_until(fd[0], *v, want, &end);
        how = r == (ssize_t)want ? ASKED_OK : r < 0 ? ASKED_LATE : ASKED_DIED;
    } /* else no memory for the list: nothing said (ASKED_SILENT) */
    close(fd[0]);
    if (how == ASKED_LATE)
        kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (how == ASKED_DIED && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        how = ASKED_SILENT;
    return how;
}

static void put_one(fp_sink *s, const fp_nvmlProcessInfo *p, int first)
{
    fp_puts(s, first ? " pid " : ", pid ");
    fp_put_u64(s, p->pid);
    if ((pid_t)p->pid == getpid())
        fp_puts(s, " (this process)");
    fp_putc(s, ' ');
    if (p->usedGpuMemory == FP_NVML_VALUE_NOT_AVAILABLE) {
        fp_puts(s, "unknown");
    } else {
        fp_advise_put_mib(s, (size_t)p->usedGpuMemory);
    }
}

static void put_list(fp_sink *s, const fp_nvmlProcessInfo *v, int k)
{
    fp_puts(s, "fragpool: processes on this GPU (NVML):");
    for (int i = 0; i < k && i < FP_NVML_SHOWN; i++)
        put_one(s, &v[i], i == 0);
    if (k > FP_NVML_SHOWN) {
        fp_puts(s, ", and ");
        fp_put_u64(s, (uint64_t)(k - FP_NVML_SHOWN));
        fp_puts(s, " more");
    }
    fp_putc(s, '\n');
}

void fp_nvml_put_processes(CUdevice dev, fp_sink *s)
{
    static nvml n;
    static int loaded; /* 0 not tried, 1 loaded, -1 unavailable */
    char bus[64];
    if (!fp_real.cuDeviceGetPCIBusId ||
        fp_real.cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != CUDA_SUCCESS)
        return;
    if (!loaded)
        loaded = load(&n) ? -1 : 1;
    if (loaded != 1)
        return;
    fp_nvmlProcessInfo *v = NULL;
    int k = -1;
    asked how = ask(&n, bus, &v, &k);
    if (how == ASKED_OK && k > 0)
        put_list(s, v, k);
    else if (how == ASKED_LATE)
        fp_puts(s, "fragpool: processes on this GPU: NVML did not answer within 2 s; its query "
                   "was stopped (nvidia-smi lists them)\n");
    else if (how == ASKED_DIED)
        fp_puts(s, "fragpool: processes on this GPU: NVML's query failed (it died in a child "
                   "process; nvidia-smi lists them)\n");
    free(v);
}
