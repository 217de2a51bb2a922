/* tests/simdev/share.c - shareable handles of VMM memory on the simulated
 * device (sim_vmm.c, sim_vmmfile.c): POSIX file descriptors.
 *
 * In one process: the device attribute; requestedHandleTypes accepted and
 * refused; what may be exported and the errors (a handle made without the
 * POSIX type, unknown or released handles, other types, flags); an export
 * from a thread with no current context; an import of its own export
 * shares the bytes and refuses a mapping past the exported size;
 * descriptors that are not exports (a pipe with nothing in it, /dev/null,
 * a closed number, a regular file, a memfd) refused at once;
 * cuIpcGetMemHandle of VMM memory refused; cuGetProcAddress.
 *
 * Across processes: this program exports two handles and passes the
 * descriptors over a unix socket (SCM_RIGHTS) to a second program
 * ("test_simdev_share import SOCKET", exec'd), which imports and maps
 * them, reads the exporter's pattern and writes a mark the exporter then
 * sees; after the exporter unmapped and released its handles and made new
 * ones (which must not get the exported pages), the importer still reads
 * the pattern and its mark.  Every wait on the socket has a deadline.
 *
 * Under a file-size limit (ulimit -f: this program exec'd with
 * RLIMIT_FSIZE lowered), VMM memory still works, in several smaller
 * files, with one line that says so; a limit too small for any file gives
 * out of memory, never SIGXFSZ.
 */
#include "simdev_test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define G           (2 * MiB)
#define BAD(call)   assert_int_equal((call), CUDA_ERROR_INVALID_VALUE)
#define FD_TYPE     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
#define MARK        0x5eedf00du
#define DEADLINE_MS 20000

static CUmemAllocationProp prop_dev0(CUmemAllocationHandleType types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = types;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static void map_rw(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h)
{
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemMap(va, size, 0, h, 0));
    OK(cuMemSetAccess(va, size, &d, 1));
}

static uint32_t word(uint32_t seed, size_t i)
{
    return seed * 2654435761u + (uint32_t)i;
}

static void fill(CUdeviceptr p, size_t n, uint32_t seed)
{
    uint32_t *v = malloc(n);
    assert_non_null(v);
    for (size_t i = 0; i < n / 4; i++)
        v[i] = word(seed, i);
    OK(cuMemcpyHtoD_v2(p, v, n));
    free(v);
}

/* 1 when [p, p+n) holds seed's pattern, but for the last word when
 * last_is_mark (then it must hold MARK). */
static int holds(CUdeviceptr p, size_t n, uint32_t seed, int last_is_mark)
{
    uint32_t *v = malloc(n);
    int ok = v != NULL && cuMemcpyDtoH_v2(v, p, n) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < n / 4; i++)
        ok = v[i] == (last_is_mark && i == n / 4 - 1 ? MARK : word(seed, i));
    free(v);
    return ok;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the socket: one byte, optionally with a descriptor ------------------------ */

static int send_byte(int s, char b, int fd)
{
    struct iovec io = {&b, 1};
    char cb[CMSG_SPACE(sizeof(int))];
    struct msghdr m;
    memset(&m, 0, sizeof m);
    memset(cb, 0, sizeof cb);
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    if (fd >= 0) {
        m.msg_control = cb;
        m.msg_controllen = sizeof cb;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(s, &m, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* A byte (or -1 past the deadline, or at the end); *fd: a descriptor
 * that came with it, else -1. */
static int recv_byte(int s, int *fd)
{
    struct pollfd pf = {s, POLLIN, 0};
    if (poll(&pf, 1, DEADLINE_MS) != 1)
        return -1;
    char b = 0;
    struct iovec io = {&b, 1};
    char cb[CMSG_SPACE(sizeof(int))];
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = cb;
    m.msg_controllen = sizeof cb;
    if (recvmsg(s, &m, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (fd != NULL)
        *fd = -1;
    if (fd != NULL && c != NULL && c->cmsg_type == SCM_RIGHTS)
        memcpy(fd, CMSG_DATA(c), sizeof *fd);
    return (unsigned char)b;
}

/* ---- the importer (the exec'd program) ------------------------------------------- */

/* Handle k of the exporter: 2 granules, seed 10 + k. */
static char importer_round(CUdeviceptr va, int first)
{
    for (int k = 0; k < 2; k++)
        if (!holds(va + (size_t)k * 2 * G, 2 * G, 10 + (uint32_t)k, !first))
            return first ? 'B' : 'L'; /* bytes wrong; bytes lost */
    if (first)
        for (int k = 0; k < 2; k++) {
            uint32_t m = MARK;
            if (cuMemcpyHtoD_v2(va + (size_t)k * 2 * G + 2 * G - 4, &m, 4) != CUDA_SUCCESS)
                return 'W';
        }
    return 'k';
}

static char importer_map(int s, CUdeviceptr *va)
{
    CUmemGenericAllocationHandle h[2];
    for (int k = 0; k < 2; k++) {
        int fd = -1;
        if (recv_byte(s, &fd) != 'f' || fd < 0)
            return 'R';
        if (cuMemImportFromShareableHandle(&h[k], (void *)(intptr_t)fd, FD_TYPE) != CUDA_SUCCESS)
            return 'I';
        close(fd); /* the import does not own it */
    }
    if (cuMemAddressReserve(va, 6 * G, 0, 0, 0) != CUDA_SUCCESS)
        return 'V';
    if (cuMemMap(*va + 4 * G, 3 * G, 0, h[0], 0) != CUDA_ERROR_INVALID_VALUE)
        return 'P'; /* past the exported size */
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int k = 0; k < 2; k++)
        if (cuMemMap(*va + (size_t)k * 2 * G, 2 * G, 0, h[k], 0) != CUDA_SUCCESS ||
            cuMemRelease(h[k]) != CUDA_SUCCESS)
            return 'M';
    if (cuMemSetAccess(*va, 4 * G, &d, 1) != CUDA_SUCCESS)
        return 'A';
    CUdeviceptr b = 0;
    size_t n = 0;
    if (cuMemGetAddressRange_v2(&b, &n, *va + 2 * G + 100) != CUDA_SUCCESS || b != *va + 2 * G ||
        n != 2 * G ||
        cuPointerGetAttribute(&n, CU_POINTER_ATTRIBUTE_RANGE_SIZE, *va + 8) != CUDA_SUCCESS ||
        n != 6 * G)
        return 'Q'; /* an imported mapping answers as any other */
    return 'k';
}

static int importer(int s)
{
    CUcontext c;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c))
        return 3;
    CUdeviceptr va = 0;
    char r = importer_map(s, &va);
    if (r == 'k')
        r = importer_round(va, 1);
    if (send_byte(s, r, -1) != 0 || r != 'k')
        return 4;
    if (recv_byte(s, NULL) != 'g') /* the exporter released everything */
        return 5;
    r = importer_round(va, 0);
    if (r == 'k' &&
        (cuMemUnmap(va, 4 * G) != CUDA_SUCCESS || cuMemAddressFree(va, 6 * G) != CUDA_SUCCESS))
        r = 'U';
    send_byte(s, r, -1);
    return r == 'k' ? 0 : 6;
}

/* ---- two processes --------------------------------------------------------------- */

static pid_t start_importer(int *sock)
{
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = dup(sp[1]); /* without close-on-exec */
        char arg[16];
        snprintf(arg, sizeof arg, "%d", fd);
        alarm(DEADLINE_MS / 1000 * 2);
        execl("/proc/self/exe", "test_simdev_share", "import", arg, (char *)NULL);
        _exit(127);
    }
    close(sp[1]);
    *sock = sp[0];
    return pid;
}

static void two_processes(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev0(FD_TYPE);
    CUmemGenericAllocationHandle h[2];
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 4 * G, 0, 0, 0));
    for (int k = 0; k < 2; k++) {
        OK(cuMemCreate(&h[k], 2 * G, &p, 0));
        map_rw(va + (size_t)k * 2 * G, 2 * G, h[k]);
        fill(va + (size_t)k * 2 * G, 2 * G, 10 + (uint32_t)k);
    }
    int s = -1;
    pid_t pid = start_importer(&s);
    for (int k = 0; k < 2; k++) {
        int fd = -1;
        OK(cuMemExportToShareableHandle(&fd, h[k], FD_TYPE, 0));
        assert_true(fd >= 0);
        assert_int_equal(send_byte(s, 'f', fd), 0);
        assert_int_equal(close(fd), 0); /* ours to close */
    }
    assert_int_equal(recv_byte(s, NULL), 'k'); /* read ours, wrote its mark */
    for (int k = 0; k < 2; k++)
        assert_true(holds(va + (size_t)k * 2 * G, 2 * G, 10 + (uint32_t)k, 1));

    /* Gone here; new handles must not get the exported pages. */
    size_t before = stats(0).bytes_in_use;
    OK(cuMemUnmap(va, 4 * G));
    OK(cuMemRelease(h[0]));
    OK(cuMemRelease(h[1]));
    assert_int_equal(stats(0).bytes_in_use, before - 4 * G); /* capacity back */
    CUmemGenericAllocationHandle n[2];
    for (int k = 0; k < 2; k++) {
        OK(cuMemCreate(&n[k], 2 * G, &p, 0));
        map_rw(va + (size_t)k * 2 * G, 2 * G, n[k]);
        OK(cuMemsetD8_v2(va + (size_t)k * 2 * G, 0xff, 2 * G));
    }
    assert_int_equal(send_byte(s, 'g', -1), 0);
    assert_int_equal(recv_byte(s, NULL), 'k'); /* still the pattern, the mark */
    close(s);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    OK(cuMemUnmap(va, 4 * G));
    OK(cuMemRelease(n[0]));
    OK(cuMemRelease(n[1]));
    OK(cuMemAddressFree(va, 4 * G));
}

/* ---- under a file-size limit (ulimit -f) ------------------------------------------ */

/* The memory file once was one 1 TiB memfd: its ftruncate under ulimit -f
 * was SIGXFSZ, which killed every program that made a VMM handle.  Run
 * exec'd with RLIMIT_FSIZE at limit_mb: 64 MiB gives files of 32 pages, 28
 * of them for handles, so six handles of 20 pages take six files; they
 * keep their bytes, one is exported and imported, and a handle no file
 * can hold fails with out of memory.  4 MiB leaves no room: out of memory
 * at once.  0, or the step that failed. */
static int fsize_child(int limit_mb)
{
    CUcontext c;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c))
        return 3;
    CUmemAllocationProp p = prop_dev0(FD_TYPE);
    CUmemGenericAllocationHandle h[6], big;
    if (limit_mb < 10)
        return cuMemCreate(&big, G, &p, 0) == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 4;
    const size_t n = 40 * MiB;
    CUdeviceptr va, again;
    if (cuMemAddressReserve(&va, 6 * n, 0, 0, 0) || cuMemAddressReserve(&again, n, 0, 0, 0))
        return 5;
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int k = 0; k < 6; k++)
        if (cuMemCreate(&h[k], n, &p, 0) || cuMemMap(va + k * n, n, 0, h[k], 0) ||
            cuMemSetAccess(va + k * n, n, &d, 1) || cuMemsetD32_v2(va + k * n, 0x100u + k, n / 4))
            return 6;
    if (cuMemCreate(&big, 30 * G, &p, 0) != CUDA_ERROR_OUT_OF_MEMORY)
        return 7;
    int fd = -1;
    CUmemGenericAllocationHandle in;
    if (cuMemExportToShareableHandle(&fd, h[5], FD_TYPE, 0) ||
        cuMemImportFromShareableHandle(&in, (void *)(intptr_t)fd, FD_TYPE) ||
        cuMemMap(again, n, 0, in, 0) || cuMemSetAccess(again, n, &d, 1))
        return 8;
    close(fd);
    uint32_t w[2];
    for (int k = 0; k < 6; k++)
        if (cuMemcpyDtoH_v2(w, va + k * n + n - 8, 8) || w[0] != 0x100u + k || w[1] != w[0])
            return 9;
    if (cuMemcpyDtoH_v2(w, again, 4) || w[0] != 0x105u)
        return 10;
    if (cuMemUnmap(again, n) || cuMemRelease(in) || cuMemUnmap(va, 6 * n))
        return 11;
    for (int k = 0; k < 6; k++)
        if (cuMemRelease(h[k]))
            return 12;
    return 0;
}

static void runs_under_file_size_limit(void **state)
{
    (void)state;
    static const int limits[] = {64, 4};
    for (int i = 0; i < 2; i++) {
        char arg[16], err_path[] = "/tmp/fp-simdev-fsize-XXXXXX";
        int err = mkstemp(err_path);
        assert_true(err >= 0);
        unlink(err_path);
        snprintf(arg, sizeof arg, "%d", limits[i]);
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            rlim_t lim = (rlim_t)limits[i] << 20;
            struct rlimit rl = {lim, lim};
            dup2(err, 2);
            alarm(60);
            if (setrlimit(RLIMIT_FSIZE, &rl) == 0)
                execl("/proc/self/exe", "test_simdev_share", "fsize", arg, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        char text[1024] = "";
        ssize_t got = pread(err, text, sizeof text - 1, 0);
        close(err);
        text[got > 0 ? got : 0] = '\0';
        printf("ulimit -f of %d MiB: %s %d; %s", limits[i], WIFSIGNALED(st) ? "signal" : "exit",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), text);
        assert_true(WIFEXITED(st)); /* not SIGXFSZ */
        assert_int_equal(WEXITSTATUS(st), 0);
        const char *line = strstr(text, "fragpool-sim: the file-size limit (ulimit -f: ");
        assert_non_null(line);
        assert_null(strstr(line + 1, "fragpool-sim: the file-size limit")); /* once */
        assert_non_null(strstr(line, limits[i] < 10 ? "leaves no room" : "files of 64 MiB"));
    }
}

/* ---- one process ----------------------------------------------------------------- */

static void properties(void **state)
{
    (void)state;
    int v = 0;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            0));
    assert_int_equal(v, 1);
    CUmemAllocationProp p = prop_dev0(FD_TYPE);
    size_t g = 0;
    OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    assert_int_equal(g, G);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, G, &p, 0));
    OK(cuMemRelease(h));
    p.requestedHandleTypes = (CUmemAllocationHandleType)2; /* a Win32 handle */
    BAD(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    BAD(cuMemCreate(&h, G, &p, 0));
}

static void export_errors(void **state)
{
    (void)state;
    CUmemAllocationProp none = prop_dev0(CU_MEM_HANDLE_TYPE_NONE);
    CUmemAllocationProp fdp = prop_dev0(FD_TYPE);
    CUmemGenericAllocationHandle plain, h;
    int fd = -1;
    OK(cuMemCreate(&plain, G, &none, 0));
    OK(cuMemCreate(&h, G, &fdp, 0));
    BAD(cuMemExportToShareableHandle(&fd, plain, FD_TYPE, 0)); /* no POSIX type */
    BAD(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 1));
    BAD(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_NONE, 0));
    BAD(cuMemExportToShareableHandle(&fd, h, (CUmemAllocationHandleType)2, 0));
    BAD(cuMemExportToShareableHandle(NULL, h, FD_TYPE, 0));
    BAD(cuMemExportToShareableHandle(&fd, (CUmemGenericAllocationHandle)12345, FD_TYPE, 0));
    assert_int_equal(fd, -1);
    int a = -1, b = -1;
    OK(cuMemExportToShareableHandle(&a, h, FD_TYPE, 0));
    OK(cuMemExportToShareableHandle(&b, h, FD_TYPE, 0));
    assert_true(a >= 0 && b >= 0 && a != b); /* a new descriptor each time */
    close(a);
    close(b);
    OK(cuMemRelease(h));
    BAD(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0)); /* released */
    OK(cuMemRelease(plain));
    BAD(cuMemImportFromShareableHandle(NULL, (void *)(intptr_t)0, FD_TYPE));
}

static void *export_without_context(void *arg)
{
    CUcontext c = (CUcontext)(uintptr_t)1;
    int fd = -1;
    if (cuCtxGetCurrent(&c) != CUDA_SUCCESS || c != NULL)
        return (void *)(uintptr_t)1;
    CUresult rc =
        cuMemExportToShareableHandle(&fd, *(CUmemGenericAllocationHandle *)arg, FD_TYPE, 0);
    if (fd >= 0)
        close(fd);
    return (void *)(uintptr_t)(rc == CUDA_SUCCESS && fd >= 0 ? 0 : 2);
}

static void from_a_thread(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev0(FD_TYPE);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, G, &p, 0));
    pthread_t t;
    void *res = NULL;
    assert_int_equal(pthread_create(&t, NULL, export_without_context, &h), 0);
    assert_int_equal(pthread_join(t, &res), 0);
    assert_ptr_equal(res, NULL);
    OK(cuMemRelease(h));
}

static void import_own_export(void **state)
{
    (void)state;
    CUmemAllocationProp p = prop_dev0(FD_TYPE);
    CUmemGenericAllocationHandle h, i;
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 8 * G, 0, 0, 0));
    OK(cuMemCreate(&h, 2 * G, &p, 0));
    map_rw(va, 2 * G, h);
    fill(va, 2 * G, 3);
    int fd = -1;
    OK(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0));
    size_t before = stats(0).bytes_in_use;
    OK(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)fd, FD_TYPE));
    assert_int_equal(close(fd), 0);
    assert_int_equal(stats(0).bytes_in_use, before); /* not charged twice */
    BAD(cuMemMap(va + 4 * G, 4 * G, 0, i, 0));       /* past its size */
    BAD(cuMemMap(va + 4 * G, 2 * G, 2 * G, i, 0));
    map_rw(va + 4 * G, 2 * G, i);
    assert_true(holds(va + 4 * G, 2 * G, 3, 0));
    OK(cuMemsetD32_v2(va + 4 * G + G, MARK, 1));
    uint32_t w = 0;
    OK(cuMemcpyDtoH_v2(&w, va + G, 4));
    assert_int_equal(w, MARK);
    CUipcMemHandle ih; /* natively refused */
    BAD(cuIpcGetMemHandle(&ih, va));
    BAD(cuIpcGetMemHandle(&ih, va + 4 * G));
    /* An imported handle exports again, to the same pages. */
    CUmemGenericAllocationHandle j;
    int fd2 = -1;
    OK(cuMemExportToShareableHandle(&fd2, i, FD_TYPE, 0));
    OK(cuMemImportFromShareableHandle(&j, (void *)(intptr_t)fd2, FD_TYPE));
    close(fd2);
    map_rw(va + 6 * G, 2 * G, j);
    OK(cuMemcpyDtoH_v2(&w, va + 6 * G + G, 4));
    assert_int_equal(w, MARK);
    OK(cuMemUnmap(va, 2 * G));
    OK(cuMemUnmap(va + 4 * G, 4 * G));
    OK(cuMemRelease(h));
    OK(cuMemRelease(i));
    OK(cuMemRelease(j));
    OK(cuMemAddressFree(va, 8 * G));
}

/* fd is refused at once (well under a second). */
static void refused(int fd)
{
    CUmemGenericAllocationHandle h = 0;
    int64_t t0 = now_ms();
    BAD(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, FD_TYPE));
    assert_true(now_ms() - t0 < 1000);
    assert_int_equal(h, 0);
}

static void bad_descriptors(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    refused(pfd[0]); /* empty: a read would wait */
    refused(pfd[1]);
    int dn = open("/dev/null", O_RDWR);
    assert_true(dn >= 0);
    refused(dn);
    int closed = dup(dn);
    close(closed);
    refused(closed);
    refused(-1);
    refused(1 << 30);
    char path[] = "/tmp/fp-simshare-XXXXXX";
    int reg = mkstemp(path);
    assert_true(reg >= 0);
    unlink(path);
    assert_int_equal(ftruncate(reg, (off_t)8 * G), 0);
    refused(reg); /* a regular file */
    int mf = memfd_create("not-ours", MFD_CLOEXEC);
    assert_true(mf >= 0);
    assert_int_equal(ftruncate(mf, (off_t)1 << 40), 0); /* our size, no seals */
    refused(mf);
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    refused(sp[0]);
    /* Our own file, at a position that is no export. */
    CUmemAllocationProp p = prop_dev0(FD_TYPE);
    CUmemGenericAllocationHandle h;
    int fd = -1;
    OK(cuMemCreate(&h, G, &p, 0));
    OK(cuMemExportToShareableHandle(&fd, h, FD_TYPE, 0));
    off_t at = lseek(fd, 0, SEEK_CUR);
    assert_true(lseek(fd, at + (off_t)1000 * G, SEEK_SET) > 0);
    refused(fd); /* a page never exported */
    assert_true(lseek(fd, at + 4096, SEEK_SET) > 0);
    refused(fd); /* not on a page */
    assert_true(lseek(fd, 0, SEEK_SET) == 0);
    refused(fd); /* the head */
    assert_true(lseek(fd, at, SEEK_SET) == at);
    CUmemGenericAllocationHandle i;
    OK(cuMemImportFromShareableHandle(&i, (void *)(intptr_t)fd, FD_TYPE));
    OK(cuMemRelease(i));
    close(fd);
    OK(cuMemRelease(h));
    close(sp[0]);
    close(sp[1]);
    close(mf);
    close(reg);
    close(dn);
    close(pfd[0]);
    close(pfd[1]);
}

static void found_by_get_proc_address(void **state)
{
    (void)state;
    static const char *const names[] = {"cuMemExportToShareableHandle",
                                        "cuMemImportFromShareableHandle"};
    for (size_t i = 0; i < 2; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2(names[i], &fn, 10020, 0, &st));
        assert_non_null(fn);
        assert_int_equal(cuGetProcAddress_v2(names[i], &fn, 10010, 0, &st), CUDA_ERROR_NOT_FOUND);
    }
}

int main(int argc, char **argv)
{
    simdev_env();
    if (argc == 3 && strcmp(argv[1], "import") == 0)
        return importer(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "fsize") == 0)
        return fsize_child(atoi(argv[2]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(properties),
        cmocka_unit_test(export_errors),
        cmocka_unit_test(from_a_thread),
        cmocka_unit_test(import_own_export),
        cmocka_unit_test(bad_descriptors),
        cmocka_unit_test(two_processes),
        cmocka_unit_test(found_by_get_proc_address),
        cmocka_unit_test(runs_under_file_size_limit),
    };
    return cmocka_run_group_tests(tests, simdev_setup, NULL);
}
