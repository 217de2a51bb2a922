/* shim_ipc_vmm.c - IPC of virtual-memory blocks: the exporter's channel
 * and the receiver's mapping.
 *
 * A block of a virtual-memory segment has no legacy IPC handle: its
 * memory is one driver handle per granule.  The driver exports such a
 * handle as a POSIX file descriptor, which another process imports
 * (cuMemImportFromShareableHandle) and maps into its own reservation.  A
 * descriptor can only travel over a unix socket (SCM_RIGHTS), so the
 * exporting process answers on one of its own: an abstract SOCK_SEQPACKET
 * socket named "fragpool-ipc-PID-NONCE", served by a thread started at its
 * first export of such a block.  No /proc access and no pidfd_getfd
 * (often forbidden in containers) is needed.
 *
 * One exchange: the receiver sends the slot, serial and check of its
 * fragpool handle; the exporter checks them against its registry (the
 * answer function of shim_ipc.c), replies with the block's layout, then
 * sends the granules' descriptors in batches of BATCH, checking the
 * block again before each batch.  The receiver imports each descriptor,
 * closes it, maps the granules in order, grants its device access, and
 * returns the reservation's start plus the block's offset.
 *
 * Invariants: the exporter never sends a descriptor of a block that is
 * not live (the answer function runs under the registry's lock, which a
 * free of the block waits for); neither side holds more than BATCH
 * descriptors at once; only a peer of the same user (or root) is
 * answered, and a receiver talks only to a server of the same user (or
 * root) that is the process its handle names (SO_PEERCRED: any local user
 * can bind an abstract name); every wait has a deadline (TIMEOUT_S), and
 * a receiver's whole open has one (TIMEOUT_S from its start), so a silent
 * or slow peer never blocks the other side for good; a batch that brings
 * no granule is refused; the receiver undoes everything on any failure.  The channel's thread blocks every signal, calls the driver
 * only through the answer function, and never takes a lock of the
 * program's.
 */
#include "shim_ipc_vmm.h"
#include "shim_real.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAGIC "fpipcreq"
#define REP_MAGIC "fpipcrep"
#define BATCH     64 /* descriptors per message            */
#define TIMEOUT_S 10 /* a silent peer is dropped after this */

typedef struct req_msg {
    char magic[8];
    uint32_t slot, pad;
    uint64_t serial, check;
} req_msg;

typedef struct rep_msg {
    char magic[8];
    int32_t err, pad;
    fp_ipcv_block b;
} rep_msg;

typedef struct batch_msg { /* carries n descriptors (SCM_RIGHTS) */
    uint64_t from, n;
    int32_t err, pad;
} batch_msg;

static void name_of(struct sockaddr_un *a, socklen_t *len, uint32_t pid, uint64_t nonce)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX; /* sun_path[0] = 0: the abstract namespace */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "fragpool-ipc-%u-%016llx",
                     (unsigned)pid, (unsigned long long)nonce);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void wait_at_most(int s, struct timeval tv)
{
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void deadline(int s)
{
    wait_at_most(s, (struct timeval){.tv_sec = TIMEOUT_S});
}

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Lets socket s wait only until end_us, the whole open's deadline:
 * ETIMEDOUT once it has passed. */
static int until(int s, int64_t end_us)
{
    int64_t left = end_us - now_us();
    if (left <= 0)
        return ETIMEDOUT;
    wait_at_most(s, (struct timeval){.tv_sec = left / 1000000, .tv_usec = left % 1000000});
    return 0;
}

static void close_all(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* ---- the exporter's channel ---------------------------------------------- */

static struct {
    pid_t pid; /* the process whose thread serves       */
    int fd;    /* its listening socket, -1 before       */
    fp_ipcv_answer_fn answer;
} chan = {.fd = -1};

static bool peer_ok(int c)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    return getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 &&
           (cr.uid == geteuid() || cr.uid == 0);
}

static bool send_batch(int c, const batch_msg *m, const int *fds)
{
    char cbuf[CMSG_SPACE(sizeof(int) * BATCH)];
    struct iovec io = {.iov_base = (void *)m, .iov_len = sizeof *m};
    struct msghdr h = {.msg_iov = &io, .msg_iovlen = 1};
    if (m->n) {
        memset(cbuf, 0, sizeof cbuf);
        h.msg_control = cbuf;
        h.msg_controllen = CMSG_SPACE(sizeof(int) * m->n);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * m->n);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * m->n);
    }
    return sendmsg(c, &h, MSG_NOSIGNAL) == (ssize_t)sizeof *m;
}

/* One request on connection c. */
static void answer_one(int c)
{
    req_msg q;
    if (recv(c, &q, sizeof q, 0) != (ssize_t)sizeof q || memcmp(q.magic, REQ_MAGIC, 8) != 0)
        return;
    fp_ipcv_req r = {.slot = q.slot, .serial = q.serial, .check = q.check};
    rep_msg rep = {0};
    memcpy(rep.magic, REP_MAGIC, 8);
    rep.err = chan.answer(&r, 0, 0, NULL, &rep.b);
    if (send(c, &rep, sizeof rep, MSG_NOSIGNAL) != (ssize_t)sizeof rep || rep.err)
        return;
    int fds[BATCH];
    for (uint64_t from = 0; from < rep.b.ngran;) {
        fp_ipcv_block again;
        batch_msg m = {.from = from, .n = rep.b.ngran - from < BATCH ? rep.b.ngran - from : BATCH};
        m.err = chan.answer(&r, from, m.n, fds, &again);
        if (!m.err && (again.ngran != rep.b.ngran || again.offset != rep.b.offset)) {
            close_all(fds, m.n);
            m.err = ESTALE;
        }
        if (m.err)
            m.n = 0;
        bool sent = send_batch(c, &m, fds);
        close_all(fds, m.n);
        if (!sent || m.err)
            return;
        from += m.n;
    }
}

static void *serve(void *arg)
{
    int ls = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno != EINTR && errno != ECONNABORTED)
                nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL); /* EMFILE and such */
            continue;
        }
        deadline(c);
        if (peer_ok(c))
            answer_one(c);
        close(c);
    }
    return NULL;
}

/* The channel's thread, with every signal blocked (the program's handlers
 * never run on it). */
static int start_thread(int ls)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    pthread_t t;
    int err = pthread_create(&t, &at, serve, (void *)(intptr_t)ls);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!err)
        pthread_setname_np(t, "fragpool-ipc");
    return err;
}

int fp_ipcv_serve(uint64_t nonce, fp_ipcv_answer_fn answer)
{
    if (chan.fd >= 0 && chan.pid == getpid())
        return 0;
    if (chan.fd >= 0) /* a forked child: the parent's socket is not its own */
        close(chan.fd);
    chan.fd = -1;
    chan.answer = answer;
    struct sockaddr_un a;
    socklen_t len;
    name_of(&a, &len, (uint32_t)getpid(), nonce);
    int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int err =
        ls < 0 || bind(ls, (struct sockaddr *)&a, len) != 0 || listen(ls, 16) != 0 ? errno : 0;
    if (!err)
        err = start_thread(ls);
    if (err) {
        if (ls >= 0)
            close(ls);
        return err;
    }
    chan.fd = ls;
    chan.pid = getpid();
    return 0;
}

/* ---- the receiver ------------------------------------------------------------ */

/* Whether the channel's server is the process pid names, of this user
 * (or root): any local user can bind an abstract name.  0, EACCES
 * (another process) or EPERM (another user). */
static int server_ok(int s, uint32_t pid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return EPROTO;
    if (cr.uid != geteuid() && cr.uid != 0)
        return EPERM;
    return (uint32_t)cr.pid == pid ? 0 : EACCES;
}

static int dial(uint32_t pid, uint64_t nonce, int64_t end_us)
{
    struct sockaddr_un a;
    socklen_t len;
    name_of(&a, &len, pid, nonce);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    int err = until(s, end_us);
    if (!err && connect(s, (struct sockaddr *)&a, len) != 0)
        err = errno == ECONNREFUSED || errno == ENOENT ? ESRCH
              : errno == EAGAIN                        ? ETIMEDOUT
                                                       : errno;
    if (!err)
        err = server_ok(s, pid);
    if (err) {
        close(s);
        return -err;
    }
    return s;
}

/* The exporter's error as the receiver returns it: never EIO (which
 * says the driver's code is in *drv) nor a value no errno has. */
static int peer_err(int32_t e)
{
    return e > 0 && e < 4096 && e != EIO ? e : EPROTO;
}

/* Receives one batch: its header and n descriptors in fds; 0 or errno. */
static int recv_batch(int s, batch_msg *m, int *fds)
{
    char cbuf[CMSG_SPACE(sizeof(int) * BATCH)];
    struct iovec io = {.iov_base = m, .iov_len = sizeof *m};
    struct msghdr h = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    ssize_t got = recvmsg(s, &h, MSG_CMSG_CLOEXEC);
    if (got < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    size_t nfd = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&h); cm; cm = CMSG_NXTHDR(&h, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            if (nfd + k > BATCH)
                k = BATCH - nfd;
            memcpy(fds + nfd, CMSG_DATA(cm), k * sizeof(int));
            nfd += k;
        }
    int err = got != (ssize_t)sizeof *m || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? EPROTO
              : m->err                      ? peer_err(m->err)
              : m->n != nfd || m->n > BATCH ? EPROTO
                                            : 0;
    if (err)
        close_all(fds, nfd);
    return err;
}

/* Imports one descriptor and maps it at va; the descriptor is closed. */
static CUresult map_one(int fd, CUdeviceptr va, size_t gran)
{
    CUmemGenericAllocationHandle h = 0;
    CUresult r = fp_real.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    r = fp_real.cuMemMap(va, gran, 0, h, 0);
    fp_real.cuMemRelease(h); /* the mapping keeps the memory */
    return r;
}

/* Maps every granule the exporter sends, until end_us at most; *mapped
 * counts those mapped.  A batch must bring at least one granule: a peer
 * that sends empty ones is refused, not waited for. */
static int map_batches(int s, const fp_ipcv_block *b, CUdeviceptr va, size_t *mapped, CUresult *drv,
                       int64_t end_us)
{
    int fds[BATCH];
    while (*mapped < b->ngran) {
        batch_msg m;
        int err = until(s, end_us);
        if (err)
            return err;
        err = recv_batch(s, &m, fds);
        if (!err && (m.from != *mapped || m.n == 0 || m.n > b->ngran - *mapped)) {
            close_all(fds, m.n);
            err = EPROTO;
        }
        if (err)
            return err;
        for (size_t i = 0; i < m.n; i++) {
            if (*drv != CUDA_SUCCESS) {
                close(fds[i]);
                continue;
            }
            *drv = map_one(fds[i], va + *mapped * b->gran, b->gran);
            *mapped += *drv == CUDA_SUCCESS;
        }
        if (*drv != CUDA_SUCCESS)
            return EIO;
    }
    return 0;
}

static int ask(int s, const fp_ipcv_req *q, fp_ipcv_block *b)
{
    req_msg m = {.slot = q->slot, .serial = q->serial, .check = q->check};
    memcpy(m.magic, REQ_MAGIC, 8);
    rep_msg rep;
    if (send(s, &m, sizeof m, MSG_NOSIGNAL) != (ssize_t)sizeof m)
        return errno == EAGAIN ? ETIMEDOUT : EPROTO;
    ssize_t got = recv(s, &rep, sizeof rep, 0);
    if (got < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    if (got != (ssize_t)sizeof rep || memcmp(rep.magic, REP_MAGIC, 8) != 0)
        return EPROTO;
    if (rep.err)
        return peer_err(rep.err);
    *b = rep.b;
    bool sane = b->gran && !(b->gran & (b->gran - 1)) && b->ngran && b->offset < b->gran &&
                b->size && b->size <= b->ngran * b->gran - b->offset &&
                b->ngran <= ((uint64_t)1 << 46) / b->gran;
    return sane ? 0 : EPROTO;
}

static void unmap(CUdeviceptr va, size_t mapped, size_t gran, size_t span)
{
    if (mapped)
        fp_real.cuMemUnmap(va, mapped * gran);
    fp_real.cuMemAddressFree(va, span);
}

int fp_ipcv_open(uint32_t pid, uint64_t nonce, const fp_ipcv_req *q, CUdevice dev,
                 fp_ipcv_mapping *m, CUresult *drv)
{
    *drv = CUDA_SUCCESS;
    if (!fp_real.cuMemImportFromShareableHandle || !fp_real.cuMemAddressReserve ||
        !fp_real.cuMemMap || !fp_real.cuMemSetAccess)
        return ENOTSUP;
    int64_t end_us = now_us() + (int64_t)TIMEOUT_S * 1000000;
    int s = dial(pid, nonce, end_us);
    if (s < 0)
        return -s;
    fp_ipcv_block b = {0};
    int err = until(s, end_us);
    if (!err)
        err = ask(s, q, &b);
    CUdeviceptr va = 0;
    size_t span = err ? 0 : b.ngran * b.gran, mapped = 0;
    if (!err && (*drv = fp_real.cuMemAddressReserve(&va, span, b.gran, 0, 0)) != CUDA_SUCCESS)
        err = EIO;
    if (!err)
        err = map_batches(s, &b, va, &mapped, drv, end_us);
    close(s);
    CUmemAccessDesc d = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!err && (*drv = fp_real.cuMemSetAccess(va, span, &d, 1)) != CUDA_SUCCESS)
        err = EIO;
    if (err && va)
        unmap(va, mapped, b.gran, span);
    if (!err)
        *m = (fp_ipcv_mapping){.ptr = va + b.offset, .base = va, .span = span, .size = b.size};
    return err;
}

CUresult fp_ipcv_close(const fp_ipcv_mapping *m)
{
    CUresult r = fp_real.cuMemUnmap(m->base, m->span);
    CUresult f = fp_real.cuMemAddressFree(m->base, m->span);
    return r != CUDA_SUCCESS ? r : f;
}
