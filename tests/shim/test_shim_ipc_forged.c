/* test_shim_ipc_forged.c - a forged virtual-memory IPC handle against a
 * forged channel server, on the simulated device under the shim.
 *
 * A fragpool handle of a virtual-memory block names the exporter's pid
 * and nonce; the receiver dials the abstract socket those name.  Any
 * local process can bind that name first.  Here a forked child does, and
 * misbehaves; this test, the receiver, opens a handle naming the socket
 * with cuIpcOpenMemHandle.  What must hold, for every server:
 *   wrong pid  the handle names another process (our parent) than the
 *              one serving: refused at once (SO_PEERCRED), before any
 *              exchange, with a line that says the channel is another
 *              process's;
 *   empty      a sane answer, then batches of no descriptor, as fast as
 *              the socket takes them: refused at once (a batch must bring
 *              a granule), where the receiver once looped for good;
 *   silence    it accepts and says nothing: refused after the deadline
 *              (TIMEOUT_S, 10 s, of shim_ipc_vmm.c);
 *   drip       a sane answer for 64 granules, then one real descriptor
 *              every 2 s (each wait well under the deadline): refused
 *              when the whole open's deadline passes, where the receiver
 *              once waited 128 s.
 * Each returns CUDA_ERROR_INVALID_VALUE (as the bare driver does for
 * bytes it never made), leaves the pointer 0 and writes one line.  An
 * alarm fails a receiver that blocks.
 */
#include "shim_test.h"
#include "child_run.h"
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>

#define MIB    ((size_t)1 << 20)
#define GRAN   (2 * MIB)
#define NONCE  0x5eed5eed5eed5eedull
#define DRIP_N 64

/* The channel's messages (shim_ipc_vmm.c), as a forger would copy them. */
typedef struct req_msg {
    char magic[8];
    uint32_t slot, pad;
    uint64_t serial, check;
} req_msg;
typedef struct rep_msg {
    char magic[8];
    int32_t err, pad;
    uint64_t ngran, gran, offset, size;
} rep_msg;
typedef struct batch_msg {
    uint64_t from, n;
    int32_t err, pad;
} batch_msg;

enum { WRONG_PID, EMPTY, SILENT, DRIP };

static CUcontext ctx;
static int drip_fd = -1; /* a real exported granule, for the drip */

static void name_of(struct sockaddr_un *a, socklen_t *len, uint32_t pid)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "fragpool-ipc-%u-%016llx",
                     (unsigned)pid, (unsigned long long)NONCE);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void send_fd_batch(int c, uint64_t from, int fd)
{
    batch_msg m = {.from = from, .n = 1};
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec io = {.iov_base = &m, .iov_len = sizeof m};
    struct msghdr h = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(c, &h, MSG_NOSIGNAL) != (ssize_t)sizeof m)
        _exit(0);
}

/* The forger, in the child: binds the name of pid, says it is ready on
 * the pipe, then serves one connection the way mode says. */
static void forger(uint32_t pid, int mode, int ready)
{
    struct sockaddr_un a;
    socklen_t len;
    name_of(&a, &len, pid);
    int ls = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, len) != 0 || listen(ls, 4) != 0)
        _exit(3);
    if (write(ready, "r", 1) != 1)
        _exit(4);
    int c = accept(ls, NULL, NULL);
    if (c < 0)
        _exit(5);
    if (mode == SILENT)
        for (;;)
            pause();
    req_msg q;
    if (recv(c, &q, sizeof q, 0) != (ssize_t)sizeof q)
        _exit(0);
    rep_msg rep = {.ngran = mode == DRIP ? DRIP_N : 4, .gran = GRAN, .size = MIB};
    memcpy(rep.magic, "fpipcrep", 8);
    if (send(c, &rep, sizeof rep, MSG_NOSIGNAL) != (ssize_t)sizeof rep)
        _exit(0);
    for (uint64_t i = 0; mode == DRIP && i < DRIP_N; i++) {
        sleep(2);
        send_fd_batch(c, i, drip_fd);
    }
    batch_msg empty = {0};
    while (send(c, &empty, sizeof empty, MSG_NOSIGNAL) == (ssize_t)sizeof empty)
        continue;
    _exit(0);
}

/* Starts a forger that binds the name of pid (0: its own) and waits until
 * it listens; its pid in *child.  The pid the handle must name. */
static uint32_t start_forger(uint32_t pid, int mode, pid_t *child)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        close(p[0]);
        forger(pid ? pid : (uint32_t)getpid(), mode, p[1]);
    }
    close(p[1]);
    char r;
    assert_int_equal(read(p[0], &r, 1), 1);
    close(p[0]);
    *child = c;
    return pid ? pid : (uint32_t)c;
}

static CUipcMemHandle forged(uint32_t pid)
{
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    uint32_t slot = 0, version = 2; /* KIND_VMM */
    int32_t fd = -1;
    uint64_t nonce = NONCE, serial = 1, size = MIB;
    memcpy(h.reserved, "fragpool", 8);
    memcpy(h.reserved + 8, &pid, 4);
    memcpy(h.reserved + 12, &fd, 4);
    memcpy(h.reserved + 16, &nonce, 8);
    memcpy(h.reserved + 24, &slot, 4);
    memcpy(h.reserved + 28, &version, 4);
    memcpy(h.reserved + 32, &serial, 8);
    memcpy(h.reserved + 48, &size, 8);
    return h;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Opens a handle naming pid's channel, served by the forger in mode;
 * checks the refusal and its one line (which must contain why); the
 * seconds it took. */
static double refused(uint32_t name_pid, int mode, const char *why)
{
    pid_t child;
    uint32_t pid = start_forger(name_pid, mode, &child);
    int err = fp_t_temp_fd("/tmp/fp-ipcf-err-"), saved = dup(2);
    fflush(stderr);
    dup2(err, 2);
    CUdeviceptr p = 0;
    alarm(60);
    double t0 = now_s();
    CUresult r = cuIpcOpenMemHandle_v2(&p, forged(pid), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    double took = now_s() - t0;
    alarm(0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    char *msg = fp_t_slurp_fd(err);
    close(err);
    printf("mode %d: %d after %.2f s: %s", mode, (int)r, took, msg);
    assert_int_equal(r, CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(p, 0);
    assert_int_equal(fp_t_count_of(msg, "\n"), 1);
    assert_non_null(strstr(msg, "fragpool: cuIpcOpenMemHandle: "));
    assert_non_null(strstr(msg, why));
    return took;
}

static void wrong_pid(void **state)
{
    (void)state;
    assert_true(refused((uint32_t)getppid(), EMPTY, "served by another process") < 5);
}

static void empty_batches(void **state)
{
    (void)state;
    assert_true(refused(0, EMPTY, "answer was malformed") < 5);
}

static void silence(void **state)
{
    (void)state;
    double took = refused(0, SILENT, "did not answer in time");
    assert_true(took > 5 && took < 30);
}

static void drip(void **state)
{
    (void)state;
    double took = refused(0, DRIP, "did not answer in time");
    assert_true(took > 5 && took < 30); /* one deadline, not 64 waits of 2 s */
}

static int setup(void **state)
{
    (void)state;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemGenericAllocationHandle h;
    if (cuMemCreate(&h, GRAN, &prop, 0) ||
        cuMemExportToShareableHandle(&drip_fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
        return -1;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(wrong_pid, fp_t_release_held),
        cmocka_unit_test_teardown(empty_batches, fp_t_release_held),
        cmocka_unit_test_teardown(silence, fp_t_release_held),
        cmocka_unit_test_teardown(drip, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
