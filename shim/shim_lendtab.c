/* shim_lendtab.c - the lending rendezvous: the shared file of slots, its
 * locks, and the ask and answer on it (shim_lendtab.h says what it keeps).
 *
 * Locks are open-file-description locks (F_OFD_SETLK) on bytes past the
 * table: byte DIR_BYTE serializes joining and leaving (so the last process
 * to leave removes the file while no one joins it), byte SLOT_BYTE(i) is
 * slot i's ownership.  The kernel drops them when the process ends or
 * execs (the descriptor is close-on-exec), and a forked child closes its
 * copy and unmaps the table (a mapping keeps the description, and so the
 * lock, alive), so only the process that took a slot holds it.
 *
 * Waits are futexes on the shared mapping (not private: other processes
 * wake them): the listener on its slot's bell, an asker on its reply word,
 * in slices of SLICE_MS so that a peer that died mid-ask is seen gone.
 */
#include "shim_lendtab.h"
#include "shim_clock.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DIR_BYTE      ((off_t)sizeof(fp_lend_file))
#define SLOT_BYTE(i)  (DIR_BYTE + 1 + (off_t)(i))
#define SLICE_MS      20
#define DIR_WAIT_MS   1000 /* for the directory lock, joining */
#define LEAVE_WAIT_MS 100  /* for the directory lock, leaving */

_Static_assert(sizeof(fp_lend_slot) % 8 == 0, "slots keep their 64-bit words aligned");
_Static_assert(FP_LEND_SLOTS <= 64, "a slot's asks are one 64-bit mask");

struct fp_lendtab {
    int fd;
    int me; /* our slot */
    uint32_t uid;
    fp_lend_file *f;
    bool dead;         /* a forked child's copy                    */
    uint32_t stopping; /* fp_lendtab_stop was called (local)        */
    char path[256];
};

/* ---- small helpers ------------------------------------------------------ */

static void nap_ms(unsigned ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void futex_wait(uint32_t *w, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, w, FUTEX_WAIT, seen, ns == UINT64_MAX ? NULL : &ts, NULL, 0);
}

static void futex_wake(uint32_t *w)
{
    __atomic_fetch_add(w, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Never waits: 0, or the errno of a byte another description holds. */
static int lock_byte(int fd, off_t at, short type)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &l) == 0 ? 0 : errno;
}

/* The directory lock, tried every 5 ms for up to ms: a process stopped
 * while it held it must not hang this one.  0 or EAGAIN. */
static int lock_dir(const fp_lendtab *t, int ms)
{
    for (int waited = 0; lock_byte(t->fd, DIR_BYTE, F_WRLCK) != 0; waited += 5) {
        if (waited >= ms)
            return EAGAIN;
        nap_ms(5);
    }
    return 0;
}

/* Whether another process holds a byte of [at, at + n) (a slot's owner is
 * alive, or the directory is being joined or left). */
static bool held_by_other(int fd, off_t at, off_t n)
{
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = n};
    return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

static void say(char *why, size_t len, const char *what, int err)
{
    snprintf(why, len, "%s%s%s", what, err ? ": " : "", err ? strerror(err) : "");
}

/* Whether the path still names the file t has open (the last process to
 * leave may have removed it meanwhile). */
static bool still_named(const fp_lendtab *t)
{
    struct stat a, b;
    return stat(t->path, &a) == 0 && fstat(t->fd, &b) == 0 && a.st_ino == b.st_ino &&
           a.st_dev == b.st_dev;
}

/* Under the directory lock: removes the file when no process holds a slot
 * and the name is still its own (the last to leave, or a leftover).  True
 * when it did. */
static bool remove_if_unheld(const fp_lendtab *t)
{
    return !held_by_other(t->fd, SLOT_BYTE(0), FP_LEND_SLOTS) && still_named(t) &&
           unlink(t->path) == 0;
}

/* ---- opening the file --------------------------------------------------- */

/* A table is published whole: it is made without a name (O_TMPFILE) or
 * under a name of its own, sized, given its header, and only then linked
 * at the rendezvous name, so a process that dies while making it leaves
 * nothing there.  A file at the name that is not a whole table and that no
 * process holds (one cut short by an older fragpool, say) is a leftover:
 * it is removed and the table made anew. */

static void name_file(fp_lendtab *t, const char *dir, const unsigned char uuid[16])
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
    snprintf(t->path, sizeof t->path, "%s/fragpool-lend-%u-%s", dir, (unsigned)t->uid, hex);
}

/* Sizes the file fd and writes the header, the magic last. */
static int set_up(int fd, fp_lend_file **out)
{
    struct rlimit fs; /* past RLIMIT_FSIZE, ftruncate would raise SIGXFSZ */
    if (getrlimit(RLIMIT_FSIZE, &fs) == 0 && fs.rlim_cur != RLIM_INFINITY &&
        fs.rlim_cur < sizeof **out)
        return EFBIG;
    if (ftruncate(fd, (off_t)sizeof **out) != 0)
        return errno;
    fp_lend_file *f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED)
        return errno;
    f->version = FP_LEND_VERSION;
    f->nslots = FP_LEND_SLOTS;
    f->slot_size = sizeof(fp_lend_slot);
    __atomic_store_n(&f->magic, FP_LEND_MAGIC, __ATOMIC_RELEASE);
    *out = f;
    return 0;
}

/* A new file for the table, not yet at t->path: unnamed when the directory
 * allows it (then *tmp stays empty), else under a name made for it. */
static int new_file(const fp_lendtab *t, bool unnamed, char *tmp, size_t len)
{
    tmp[0] = '\0';
    if (unnamed) {
        char dir[sizeof t->path];
        snprintf(dir, sizeof dir, "%s", t->path);
        *strrchr(dir, '/') = '\0'; /* name_file put one there */
        return open(dir[0] ? dir : "/", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    }
    snprintf(tmp, len, "%s.new-%d-%llx", t->path, (int)getpid(),
             (unsigned long long)fp_clock_mono_ns());
    return open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* Makes a whole table and links it at t->path: 0 (t has it open and
 * mapped), EEXIST when another process published one first, or an errno. */
static int publish(fp_lendtab *t, bool unnamed)
{
    char tmp[sizeof t->path + 48], proc[48];
    int fd = new_file(t, unnamed, tmp, sizeof tmp);
    if (fd < 0)
        return errno;
    fp_lend_file *f = NULL;
    int err = set_up(fd, &f);
    if (!err && tmp[0])
        err = link(tmp, t->path) == 0 ? 0 : errno;
    else if (!err) {
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        err = linkat(AT_FDCWD, proc, AT_FDCWD, t->path, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
    }
    if (tmp[0])
        unlink(tmp);
    if (err) {
        if (f)
            munmap(f, sizeof *f);
        close(fd);
        return err;
    }
    t->fd = fd;
    t->f = f;
    return 0;
}

/* A leftover that no process holds is removed, under the directory lock
 * and only while the name is still its own: EAGAIN (open anew).  One that
 * a process holds is refused: EINVAL, with why. */
static int leftover(fp_lendtab *t, char *why, size_t len, const char *what)
{
    bool removed = false;
    if (!held_by_other(t->fd, DIR_BYTE, 1 + FP_LEND_SLOTS) && lock_dir(t, DIR_WAIT_MS) == 0) {
        removed = remove_if_unheld(t);
        lock_byte(t->fd, DIR_BYTE, F_UNLCK);
    }
    if (removed)
        return EAGAIN;
    say(why, len, what, 0);
    return EINVAL;
}

/* Someone else's file: it must be ours in every sense before it is used. */
static int check_existing(fp_lendtab *t, char *why, size_t len)
{
    struct stat st;
    if (fstat(t->fd, &st) != 0)
        return say(why, len, "cannot stat it", errno), errno;
    if (!S_ISREG(st.st_mode) || st.st_uid != t->uid || (st.st_mode & 077)) {
        say(why, len, "it is not a private file of this user (owner, type or mode)", 0);
        return EPERM;
    }
    if (st.st_size != (off_t)sizeof *t->f)
        return leftover(t, why, len, "its size is not a lending table's");
    t->f = mmap(NULL, sizeof *t->f, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
    if (t->f == MAP_FAILED)
        return say(why, len, "cannot map it", errno), errno;
    if (__atomic_load_n(&t->f->magic, __ATOMIC_ACQUIRE) != FP_LEND_MAGIC ||
        t->f->version != FP_LEND_VERSION || t->f->nslots != FP_LEND_SLOTS ||
        t->f->slot_size != sizeof(fp_lend_slot))
        return leftover(t, why, len, "its header is not this version's lending table");
    return 0;
}

/* Opens the table at t->path, publishing one when there is none: 0, EAGAIN
 * when the name changed meanwhile (try again), or an errno with why. */
static int open_file(fp_lendtab *t, char *why, size_t len)
{
    t->fd = open(t->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (t->fd >= 0)
        return check_existing(t, why, len);
    if (errno != ENOENT)
        return say(why, len, "cannot open it", errno), errno;
    int err = publish(t, true);
    if (err && err != EEXIST && err != EFBIG)
        err = publish(t, false); /* no O_TMPFILE here, or no /proc */
    if (err == EEXIST)
        return EAGAIN; /* another process published first: open its table */
    if (err == EFBIG)
        say(why, len, "the file size limit (ulimit -f) is below the table's size", 0);
    else if (err)
        say(why, len, "cannot create it", err);
    return err;
}

static void close_file(fp_lendtab *t)
{
    if (t->f && t->f != MAP_FAILED)
        munmap(t->f, sizeof *t->f);
    if (t->fd >= 0)
        close(t->fd);
    t->f = NULL;
    t->fd = -1;
}

/* ---- slots ------------------------------------------------------------------ */

static int claim_slot(fp_lendtab *t)
{
    for (int i = 0; i < FP_LEND_SLOTS; i++) {
        if (lock_byte(t->fd, SLOT_BYTE(i), F_WRLCK) != 0)
            continue;
        fp_lend_slot *s = &t->f->slot[i];
        __atomic_store_n(&s->pid, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->asks, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->want, 0, __ATOMIC_SEQ_CST);
        for (int j = 0; j < FP_LEND_SLOTS; j++)
            __atomic_store_n(&s->ans[j].round, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->round, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->uid, t->uid, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->pid, (int32_t)getpid(), __ATOMIC_SEQ_CST);
        t->me = i;
        return 0;
    }
    return EAGAIN;
}

/* Slot i as a peer: 1 a live process of ours, 0 none, -1 another user's. */
static int peer_kind(const fp_lendtab *t, int i)
{
    if (i == t->me || !held_by_other(t->fd, SLOT_BYTE(i), 1))
        return 0;
    const fp_lend_slot *s = &t->f->slot[i];
    if (__atomic_load_n(&s->pid, __ATOMIC_SEQ_CST) <= 0)
        return 0; /* being set up */
    return __atomic_load_n(&s->uid, __ATOMIC_SEQ_CST) == t->uid ? 1 : -1;
}

/* One try at joining: open, lock the directory, check the name, take a
 * slot.  EAGAIN when the name changed meanwhile (try again). */
static int join_once(fp_lendtab *t, char *why, size_t len)
{
    t->fd = -1;
    int err = open_file(t, why, len);
    if (err)
        return err;
    if (lock_dir(t, DIR_WAIT_MS) != 0) {
        say(why, len, "another process held its lock for a second (stopped while joining?)", 0);
        return ETIMEDOUT;
    }
    if (!still_named(t))
        err = EAGAIN; /* removed by the last to leave: open it anew */
    else if (claim_slot(t) != 0)
        say(why, len, "all its slots are taken", 0), err = ENOSPC;
    lock_byte(t->fd, DIR_BYTE, F_UNLCK);
    return err;
}

int fp_lendtab_join(const char *dir, const unsigned char uuid[16], fp_lendtab **out, char *why,
                    size_t len)
{
    fp_lendtab *t = calloc(1, sizeof *t);
    if (!t)
        return say(why, len, "no host memory", ENOMEM), ENOMEM;
    t->uid = (uint32_t)geteuid();
    name_file(t, dir, uuid);
    int err = EAGAIN;
    for (int tries = 0; tries < 5 && err == EAGAIN; tries++)
        if ((err = join_once(t, why, len)) != 0)
            close_file(t);
    if (err == EAGAIN)
        say(why, len, "it kept changing while joining", 0);
    if (err) {
        free(t);
        return err;
    }
    *out = t;
    return 0;
}

void fp_lendtab_leave(fp_lendtab *t)
{
    if (!t)
        return;
    if (!t->dead) {
        __atomic_store_n(&t->f->slot[t->me].pid, 0, __ATOMIC_SEQ_CST);
        bool dir = lock_dir(t, LEAVE_WAIT_MS) == 0;
        lock_byte(t->fd, SLOT_BYTE(t->me), F_UNLCK);
        if (dir)
            remove_if_unheld(t);
    }
    close_file(t); /* drops the directory lock with the descriptor */
    free(t);
}

/* ---- asking ----------------------------------------------------------------- */

static void ring(fp_lendtab *t, int i, uint64_t want)
{
    fp_lend_slot *s = &t->f->slot[i];
    uint64_t w = __atomic_load_n(&s->want, __ATOMIC_SEQ_CST);
    while (w < want && !__atomic_compare_exchange_n(&s->want, &w, want, false, __ATOMIC_SEQ_CST,
                                                    __ATOMIC_SEQ_CST)) {
    }
    __atomic_fetch_or(&s->asks, (uint64_t)1 << t->me, __ATOMIC_SEQ_CST);
    futex_wake(&s->bell);
}

/* Tallies the answers of this round; true when there is nothing left to
 * wait for (all answered or gone, or want reached). */
static bool tally(fp_lendtab *t, uint32_t round, const int *slots, fp_lend_round *r)
{
    const fp_lend_slot *me = &t->f->slot[t->me];
    bool waiting = false;
    r->answered = 0;
    r->released = 0;
    for (unsigned k = 0; k < r->asked; k++) {
        const fp_lend_answer *a = &me->ans[slots[k]];
        fp_lend_peer *p = &r->peer[k];
        p->answered = __atomic_load_n(&a->round, __ATOMIC_ACQUIRE) == round;
        if (p->answered) {
            p->released = __atomic_load_n(&a->released, __ATOMIC_RELAXED);
            p->idle = __atomic_load_n(&a->idle, __ATOMIC_RELAXED);
            r->answered++;
            r->released += p->released;
        } else if (held_by_other(t->fd, SLOT_BYTE(slots[k]), 1)) {
            waiting = true;
        }
    }
    return !waiting || r->released >= r->want;
}

void fp_lendtab_ask(fp_lendtab *t, uint64_t want, unsigned wait_ms, fp_lend_round *r)
{
    memset(r, 0, sizeof *r);
    r->want = want;
    r->wait_ms = wait_ms;
    if (!t || t->dead)
        return;
    fp_lend_slot *me = &t->f->slot[t->me];
    uint32_t round = __atomic_add_fetch(&me->round, 1, __ATOMIC_SEQ_CST);
    int slots[FP_LEND_SLOTS];
    uint64_t t0 = fp_clock_mono_ns(), end = t0 + (uint64_t)wait_ms * 1000000ull;
    for (int i = 0; i < FP_LEND_SLOTS; i++) {
        int kind = peer_kind(t, i);
        r->ignored += kind < 0;
        if (kind != 1)
            continue;
        slots[r->asked] = i;
        r->peer[r->asked++].pid = __atomic_load_n(&t->f->slot[i].pid, __ATOMIC_SEQ_CST);
        ring(t, i, want);
    }
    for (;;) {
        uint32_t seen = __atomic_load_n(&me->reply, __ATOMIC_SEQ_CST);
        uint64_t now = fp_clock_mono_ns();
        if (tally(t, round, slots, r) || now >= end)
            break;
        uint64_t slice = (uint64_t)SLICE_MS * 1000000ull;
        futex_wait(&me->reply, seen, end - now < slice ? end - now : slice);
    }
    r->waited_ns = fp_clock_mono_ns() - t0;
}

/* ---- answering ------------------------------------------------------------- */

int fp_lendtab_wait(fp_lendtab *t, fp_lend_asks *a)
{
    fp_lend_slot *me = &t->f->slot[t->me];
    for (;;) {
        uint32_t seen = __atomic_load_n(&me->bell, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&t->stopping, __ATOMIC_SEQ_CST))
            return ESHUTDOWN;
        memset(a, 0, sizeof *a);
        uint64_t asks = __atomic_exchange_n(&me->asks, 0, __ATOMIC_SEQ_CST);
        a->want = __atomic_exchange_n(&me->want, 0, __ATOMIC_SEQ_CST);
        for (int i = 0; i < FP_LEND_SLOTS; i++) {
            if (!(asks >> i & 1))
                continue;
            const fp_lend_slot *s = &t->f->slot[i];
            bool ours = i != t->me && __atomic_load_n(&s->uid, __ATOMIC_SEQ_CST) == t->uid &&
                        __atomic_load_n(&s->pid, __ATOMIC_SEQ_CST) > 0;
            a->refused += !ours;
            a->askers |= ours ? (uint64_t)1 << i : 0;
        }
        if (asks)
            return 0;
        futex_wait(&me->bell, seen, UINT64_MAX);
    }
}

void fp_lendtab_answer(fp_lendtab *t, const fp_lend_asks *a, uint64_t released, uint64_t idle)
{
    for (int i = 0; i < FP_LEND_SLOTS; i++) {
        if (!(a->askers >> i & 1))
            continue;
        fp_lend_slot *s = &t->f->slot[i];
        fp_lend_answer *ans = &s->ans[t->me];
        uint32_t round = __atomic_load_n(&s->round, __ATOMIC_SEQ_CST);
        __atomic_store_n(&ans->released, released, __ATOMIC_RELAXED);
        __atomic_store_n(&ans->idle, idle, __ATOMIC_RELAXED);
        __atomic_store_n(&ans->round, round, __ATOMIC_RELEASE);
        futex_wake(&s->reply);
    }
}

void fp_lendtab_stop(fp_lendtab *t)
{
    if (!t || t->dead)
        return;
    __atomic_store_n(&t->stopping, 1, __ATOMIC_SEQ_CST);
    futex_wake(&t->f->slot[t->me].bell);
}

void fp_lendtab_fork_child(fp_lendtab *t)
{
    if (!t)
        return;
    t->dead = true;
    close_file(t); /* the mapping too: it holds the description, and with it the lock */
}
