/* test_shim_lend.c - lending idle memory between fragpool processes on one
 * simulated GPU (shim_lend.c, shim_lendtab.c; docs/lending.md).
 *
 * The test program runs itself as the processes of each case: a lender
 * ("lender MB KEEP": allocates MB MiB, frees all but KEEP MiB so that the
 * pool holds it idle, says "ready", then waits on its stdin, doing nothing, until the
 * test closes it) and a borrower ("borrower MB": one cuMemAlloc of MB MiB;
 * exit 0 when it got it, 2 on CUDA_ERROR_OUT_OF_MEMORY).  Both see one
 * simulated capacity of CAP_MB (FRAGPOOL_SIM_SHARED) and meet in a
 * private lend_dir.  The cases:
 *  - the lender's idle memory comes back: the borrower succeeds where the
 *    device alone could not serve it, and both summaries say so;
 *  - two processes take most of the device in turn, each needing the
 *    other's idle memory: both complete, each lending and borrowing (one
 *    ask per block past the free memory, each served); with lend:0 the
 *    second one fails;
 *  - lend:0 on either side: the borrower fails, as without lending;
 *  - a peer with too little idle gives it back, and the OOM message names
 *    it with what it gave back and what it still holds;
 *  - a lender's forked child keeps no slot: with the lender gone, only
 *    the other member's slot is held;
 *  - a stopped peer (SIGSTOP) holds its slot but never answers: the ask
 *    ends at lend_wait_ms and the OOM message names it;
 *  - a peer killed with SIGKILL during the ask: the asker sees it gone in
 *    the next slice and does not wait out its (long) bound;
 *  - a slot forged with another user's uid is never asked, and its ask
 *    (forged by this test) is refused: nothing is released for it;
 *  - a request over the borrower's own cap asks nobody;
 *  - a rendezvous file that is not private to the user is refused in one
 *    line, and allocation goes on without lending; so is one whose
 *    directory lock another process holds for good;
 *  - a leftover at the rendezvous name (empty, or of a wrong header) that
 *    nobody holds is made anew without a word; one that a process holds is
 *    refused in one line and left alone;
 *  - where the directory has no O_TMPFILE (the roles' open() refuses it
 *    while FP_TEST_NO_TMPFILE is set), the table is made under a name of
 *    its own, and nothing but the table is left in the directory;
 *  - eight processes started at once all join one table (one publishes
 *    it, the others open it), without a word.
 */
#include "shim_lendtab.h"
#include "child_run.h"
#include "fp_cuda.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define CAP_MB    1024
#define LEND_MB   768
#define BORROW_MB 512

static char dir[64];
static char self[PATH_MAX];

/* ---- open(2), as the roles see it ---------------------------------------------- */

/* With FP_TEST_NO_TMPFILE set, a directory without O_TMPFILE (EOPNOTSUPP,
 * as some file systems answer); else the next open() (libc's, or a
 * sanitizer's).  The shim's calls resolve here first: this program is the
 * executable. */
static int open_as_roles_see_it(const char *name, const char *path, int flags, mode_t mode)
{
    if ((flags & O_TMPFILE) == O_TMPFILE && getenv("FP_TEST_NO_TMPFILE")) {
        errno = EOPNOTSUPP;
        return -1;
    }
    int (*next)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, name);
    return next ? next(path, flags, mode) : (errno = ENOSYS, -1);
}

__attribute__((visibility("default"))) int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return open_as_roles_see_it("open", path, flags, mode);
}

__attribute__((visibility("default"))) int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return open_as_roles_see_it("open64", path, flags, mode);
}

/* ---- the roles (child processes) -------------------------------------------- */

static CUcontext start_cuda(void)
{
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        _exit(4);
    return ctx;
}

static int lender(size_t mb, size_t keep_mb)
{
    start_cuda();
    const char *gate = getenv("FP_TEST_GATE"); /* start when it exists */
    for (struct timespec nap = {0, 50000}; gate && access(gate, F_OK) != 0;)
        nanosleep(&nap, NULL);
    CUdeviceptr p[64];
    size_t n = 0;
    for (size_t got = 0; got < mb && n < 64; got += 64)
        if (cuMemAlloc_v2(&p[n++], (size_t)64 << 20) != CUDA_SUCCESS)
            return 3;
    for (size_t i = keep_mb / 64; i < n; i++)
        cuMemFree_v2(p[i]);
    if (keep_mb == 1) { /* "lender MB 1": a forked child outlives it */
        pid_t child = fork();
        if (child == 0) {
            struct timespec long_nap = {60, 0};
            nanosleep(&long_nap, NULL);
            _exit(0);
        }
        printf("child %d\n", (int)child);
        fflush(stdout);
    }
    if (write(1, "ready\n", 6) != 6)
        return 3;
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}

static int borrower(size_t mb)
{
    start_cuda();
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, mb << 20);
    if (r == CUDA_SUCCESS)
        cuMemFree_v2(p);
    return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 3;
}

/* "driven MB": one line per command on stdin, one answer line on stdout:
 * "a" allocates MB MiB (in 64 MiB blocks) and answers "ok" or "oom", "f"
 * frees them and answers "ok"; end of input ends it. */
static int driven(size_t mb)
{
    start_cuda();
    CUdeviceptr p[64];
    size_t n = 0;
    char cmd[8];
    FILE *in = fdopen(0, "r");
    while (in && fgets(cmd, sizeof cmd, in)) {
        bool ok = true;
        if (cmd[0] == 'a')
            for (size_t got = 0; ok && got < mb && n < 64; got += 64)
                ok = cuMemAlloc_v2(&p[n++], (size_t)64 << 20) == CUDA_SUCCESS || (n--, false);
        if (cmd[0] == 'f')
            while (n)
                cuMemFree_v2(p[--n]);
        if (write(1, ok ? "ok\n" : "oom\n", ok ? 3 : 4) < 0)
            return 3;
    }
    return 0;
}

/* ---- running them --------------------------------------------------------------- */

typedef struct proc {
    pid_t pid;
    pid_t child; /* a lender's forked child, or 0 */
    int in;      /* its stdin: closing it ends a lender */
    int err;     /* a temp file with its stderr */
} proc;

static char **env_for(const char *conf, const char *summary)
{
    static char c[1024], shared[128], capacity[64];
    const char *mine = getenv("FRAGPOOL_CONF"); /* the variant's segments */
    bool classic = mine && strstr(mine, "expandable_segments:False");
    snprintf(c, sizeof c, "FRAGPOOL_CONF=debug_check:1,lend_dir:%s,summary:%s%s%s%s%s", dir,
             summary ? summary : "off", summary ? ",summary_format:json" : "",
             classic ? ",expandable_segments:False" : "", *conf ? "," : "", conf);
    snprintf(shared, sizeof shared, "FRAGPOOL_SIM_SHARED=%s/capacity", dir);
    snprintf(capacity, sizeof capacity, "FRAGPOOL_SIM_CAPACITY_MB=%d", CAP_MB);
    static const char *const drop[] = {"FRAGPOOL_CONF=", "FRAGPOOL_SIM_", NULL};
    const char *add[] = {c, shared, capacity, NULL};
    return fp_t_hold(fp_t_child_env(drop, add));
}

/* Starts this program as argv's role, its stdin a pipe from us (p->in),
 * its stderr a temp file (p->err); returns its stdout to read. */
static FILE *spawn_role(char *const argv[], const char *conf, const char *summary, proc *p)
{
    int in[2], out[2];
    assert_int_equal(pipe2(in, O_CLOEXEC), 0); /* no other child keeps them */
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    *p = (proc){.err = fp_t_temp_fd("/tmp/fp-lend-err-")};
    char **env = env_for(conf, summary);
    fflush(stdout);
    fflush(stderr);
    p->pid = fork();
    assert_true(p->pid >= 0);
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(p->err, 2);
        execve(self, argv, env);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->in = in[1];
    return fdopen(out[0], "r");
}

/* A lender that has freed all but keep_mb of its memory and waits (its
 * summary to summary). */
static proc start_lender_keeping(size_t keep_mb, const char *conf, const char *summary)
{
    char mb[16], keep[16];
    snprintf(mb, sizeof mb, "%d", LEND_MB);
    snprintf(keep, sizeof keep, "%zu", keep_mb);
    char *argv[] = {self, "lender", mb, keep, NULL};
    proc l;
    FILE *out = spawn_role(argv, conf, summary, &l);
    char line[64] = "";
    while (out && fgets(line, sizeof line, out) && strncmp(line, "child ", 6) == 0)
        l.child = (pid_t)atoi(line + 6);
    if (out)
        fclose(out);
    if (strcmp(line, "ready\n") != 0)
        fail_msg("the lender did not get ready: %s", fp_t_read_fd(l.err));
    return l;
}

static int stop_lender(proc *l);

typedef struct driven_proc {
    proc p;
    FILE *out;
} driven_proc;

static driven_proc start_driven(size_t mb, const char *conf, const char *summary)
{
    char arg[16];
    snprintf(arg, sizeof arg, "%zu", mb);
    char *argv[] = {self, "driven", arg, NULL};
    driven_proc d;
    d.out = spawn_role(argv, conf, summary, &d.p);
    return d;
}

/* Sends one command; true when the answer is "ok". */
static bool command(driven_proc *d, const char *cmd)
{
    char line[16] = "";
    if (write(d->p.in, cmd, strlen(cmd)) < 0 || !fgets(line, sizeof line, d->out))
        fail_msg("pid %d gave no answer to %s: %s", (int)d->p.pid, cmd, fp_t_read_fd(d->p.err));
    return strcmp(line, "ok\n") == 0;
}

static int stop_driven(driven_proc *d)
{
    fclose(d->out);
    return stop_lender(&d->p);
}

static proc start_lender(const char *conf, const char *summary)
{
    return start_lender_keeping(0, conf, summary);
}

/* SIGSTOP, then waits until every thread of pid is stopped: kill() only
 * starts a group stop, which a busy machine may finish much later. */
static void stop_all_threads(pid_t pid)
{
    kill(pid, SIGSTOP);
    char dir_path[64];
    snprintf(dir_path, sizeof dir_path, "/proc/%d/task", (int)pid);
    for (int tries = 0; tries < 5000; tries++) {
        DIR *d = opendir(dir_path);
        struct dirent *e;
        bool all = d != NULL;
        while (d && all && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[384], buf[512] = "";
            snprintf(path, sizeof path, "%s/%s/stat", dir_path, e->d_name);
            FILE *f = fopen(path, "r");
            if (f && fgets(buf, sizeof buf, f)) {
                const char *st = strrchr(buf, ')'); /* the state follows the name */
                all = st && st[1] == ' ' && (st[2] == 'T' || st[2] == 't');
            }
            if (f)
                fclose(f);
        }
        if (d)
            closedir(d);
        if (all)
            return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    fail_msg("pid %d did not stop in 5 s", (int)pid);
}

static int stop_lender(proc *l)
{
    close(l->in);
    int st = 0;
    waitpid(l->pid, &st, 0);
    return st;
}

/* Runs a borrower of mb MiB; its exit code, its stderr in *err, and the
 * seconds it ran in *secs. */
static int run_borrower(size_t mb, const char *conf, const char *summary, char **err, double *secs)
{
    char arg[16];
    snprintf(arg, sizeof arg, "%zu", mb);
    char *argv[] = {self, "borrower", arg, NULL};
    int efd = fp_t_temp_fd("/tmp/fp-lend-err-"), st = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fp_t_spawn_wait(self, argv, env_for(conf, summary), -1, efd, 60, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    *err = fp_t_slurp_fd(efd);
    close(efd);
    if (pid < 0)
        fail_msg("the borrower did not end in 60 s: %s", *err);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char *summary_path(const char *who)
{
    static char paths[4][128];
    static int k;
    char *p = paths[k++ % 4];
    snprintf(p, 128, "%s/%s.json", dir, who);
    return p;
}

/* The value of "key": in the "lending" object of a JSON summary, or -1. */
static long long lending_value(const char *json, const char *key)
{
    const char *g = json ? strstr(json, "\"lending\"") : NULL;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *k = g ? strstr(g, pat) : NULL;
    return k ? strtoll(k + strlen(pat), NULL, 10) : -1;
}

/* ---- the table, as another user would forge it -------------------------------- */

typedef struct table {
    int fd;
    fp_lend_file *f;
} table;

/* The path of the rendezvous file in dir, or "" (and how many other
 * files than the table and the summaries there are, in *others). */
static void find_table(char *path, size_t len, int *others)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    path[0] = '\0';
    *others = 0;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "fragpool-lend-", 14) == 0 && !strstr(e->d_name, ".new-"))
            snprintf(path, len, "%s/%s", dir, e->d_name);
        else
            *others += e->d_name[0] != '.' && !strstr(e->d_name, ".json") &&
                       strcmp(e->d_name, "capacity") != 0 && strcmp(e->d_name, "gate") != 0;
    }
    if (d)
        closedir(d);
}

static table open_table(void)
{
    char path[PATH_MAX];
    int others;
    find_table(path, sizeof path, &others);
    table t = {.fd = open(path, O_RDWR)};
    if (t.fd < 0)
        fail_msg("no rendezvous file in %s", dir);
    t.f = mmap(NULL, sizeof *t.f, PROT_READ | PROT_WRITE, MAP_SHARED, t.fd, 0);
    assert_true(t.f != MAP_FAILED);
    return t;
}

/* The table's lock bytes, as shim_lendtab.c places them: the directory's
 * just past the table (byte -1 here), then one per slot. */
static struct flock lock_of(int slot)
{
    return (struct flock){.l_type = F_WRLCK,
                          .l_whence = SEEK_SET,
                          .l_start = (off_t)sizeof(fp_lend_file) + 1 + slot,
                          .l_len = 1};
}

/* Takes a free slot as uid would: its lock held by this process. */
static int forge_slot(table *t, uint32_t uid)
{
    for (int i = 0; i < FP_LEND_SLOTS; i++) {
        struct flock l = lock_of(i);
        if (fcntl(t->fd, F_OFD_SETLK, &l) == 0) {
            t->f->slot[i].uid = uid;
            t->f->slot[i].pid = getpid();
            return i;
        }
    }
    fail_msg("no free slot to forge");
    return -1;
}

/* How many slots' bytes are locked, by any other open file description. */
static int slots_held(table *t)
{
    int held = 0;
    for (int i = 0; i < FP_LEND_SLOTS; i++) {
        struct flock fl = lock_of(i);
        assert_int_equal(fcntl(t->fd, F_OFD_GETLK, &fl), 0);
        held += fl.l_type != F_UNLCK;
    }
    return held;
}

static void close_table(table *t)
{
    munmap(t->f, sizeof *t->f);
    close(t->fd);
}

/* ---- the cases ------------------------------------------------------------------------ */

/* A borrower's stderr holds exactly one lending line, and it says what. */
static void one_lend_line(const char *err, const char *what)
{
    if (fp_t_count_of(err, "fragpool: lend: ") != 1 || !strstr(err, what))
        fail_msg("want one lending line saying \"%s\": %s", what, err);
}

static int fresh_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/fp-lend-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int remove_dir(void **state)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
    return fp_t_release_held(state);
}

static void test_idle_memory_comes_back(void **state)
{
    (void)state;
    char *ls = summary_path("lender"), *bs = summary_path("borrower"), *err;
    double secs;
    proc l = start_lender("", ls);
    int rc = run_borrower(BORROW_MB, "", bs, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    if (rc != 0)
        fail_msg("the borrower failed (%d) though the lender held %d MiB idle: %s", rc, LEND_MB,
                 err);
    char *lj = fp_t_slurp_path(ls), *bj = fp_t_slurp_path(bs);
    assert_int_equal(lending_value(bj, "asks"), 1);
    assert_int_equal(lending_value(bj, "asks_served"), 1);
    assert_true(lending_value(bj, "borrowed_bytes") >= (long long)BORROW_MB << 20);
    assert_int_equal(lending_value(lj, "answers"), 1);
    assert_true(lending_value(lj, "lent_bytes") >= (long long)(BORROW_MB - (CAP_MB - LEND_MB))
                                                       << 20);
    assert_null(strstr(bj, "\"num_ooms\":1"));
    /* the last to leave removed the rendezvous */
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        assert_true(strncmp(e->d_name, "fragpool-lend-", 14) != 0);
    closedir(d);
}

/* Each takes 768 MiB of 1024 in turn, then frees it: each turn needs the
 * other's idle memory, so each process lends and borrows. */
static void both_ways(const char *conf, bool lending)
{
    char *ps = summary_path("p"), *qs = summary_path("q");
    driven_proc p = start_driven(LEND_MB, conf, ps), q = start_driven(LEND_MB, conf, qs);
    bool p1 = command(&p, "a\n"), pf = command(&p, "f\n");
    bool q1 = command(&q, "a\n"), qf = command(&q, "f\n");
    bool p2 = command(&p, "a\n");
    assert_int_equal(stop_driven(&p), 0);
    assert_int_equal(stop_driven(&q), 0);
    assert_true(p1 && pf && qf);
    assert_int_equal(q1, lending);
    if (!lending)
        return;
    assert_true(p2);
    char *pj = fp_t_slurp_path(ps), *qj = fp_t_slurp_path(qs);
    /* one ask per 64 MiB block past the free 256 MiB, each served */
    for (int i = 0; i < 2; i++) {
        const char *j = i ? qj : pj, *other = i ? pj : qj;
        assert_int_equal(lending_value(j, "asks"), (LEND_MB - (CAP_MB - LEND_MB)) / 64);
        assert_int_equal(lending_value(j, "asks_served"), lending_value(j, "asks"));
        assert_int_equal(lending_value(other, "answers"), lending_value(j, "asks"));
    }
}

static void test_both_ways(void **state)
{
    (void)state;
    both_ways("", true);
}

static void test_both_ways_off(void **state)
{
    (void)state;
    both_ways("lend:0", false);
}

static void test_off_on_the_borrower(void **state)
{
    (void)state;
    char *err;
    double secs;
    proc l = start_lender("", NULL);
    int rc = run_borrower(BORROW_MB, "lend:0", NULL, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 2);
    assert_null(strstr(err, "lending:"));
}

static void test_off_on_the_lender(void **state)
{
    (void)state;
    char *err;
    double secs;
    proc l = start_lender("lend:0", NULL);
    int rc = run_borrower(BORROW_MB, "", NULL, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 2);
    assert_null(strstr(err, "lending:")); /* nobody to ask: no line */
}

/* The lender keeps 512 MiB live and 256 MiB idle: it gives the 256 back,
 * which is not enough for 768 MiB, and the OOM message says so. */
static void test_not_enough_names_the_peer(void **state)
{
    (void)state;
    char *err;
    double secs;
    proc l = start_lender_keeping(512, "", NULL);
    int rc = run_borrower(768, "", NULL, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 2);
    char pat[128];
    snprintf(pat, sizeof pat, "pid %d gave back 256 MiB and holds 0 MiB idle", (int)l.pid);
    if (!strstr(err, "fragpool: lending: asked 1 other fragpool process on this GPU for 768 MiB") ||
        !strstr(err, pat))
        fail_msg("the OOM message does not say what the peer gave back (%s): %s", pat, err);
}

/* A forked child of the lender keeps no slot: once the lender is killed
 * (no exit handler unlocks anything), only the other member's slot is
 * held. */
static void test_forked_child_keeps_no_slot(void **state)
{
    (void)state;
    driven_proc other = start_driven(64, "", NULL);
    assert_true(command(&other, "a\n")); /* joined: its slot keeps the table */
    proc l = start_lender_keeping(1, "", NULL);
    assert_true(l.child > 0);
    kill(l.pid, SIGKILL); /* no exit handler gives its slot back */
    stop_lender(&l);
    table t = open_table();
    int held = 0;
    for (int ms = 0; ms < 5000 && (held = slots_held(&t)) != 1; ms++) {
        struct timespec one = {0, 1000000}; /* the child closes its copy as it starts */
        nanosleep(&one, NULL);
    }
    close_table(&t);
    kill(l.child, SIGKILL);
    assert_int_equal(stop_driven(&other), 0);
    assert_int_equal(held, 1);
}

static void test_stopped_peer_is_waited_for_boundedly(void **state)
{
    (void)state;
    char *err;
    double secs;
    proc l = start_lender("", NULL);
    stop_all_threads(l.pid);
    char *bs = summary_path("borrower");
    int rc = run_borrower(BORROW_MB, "lend_wait_ms:300", bs, &err, &secs);
    kill(l.pid, SIGCONT);
    assert_int_equal(stop_lender(&l), 0);
    if (rc != 2) {
        char *j = fp_t_slurp_path(bs), *g = j ? strstr(j, "\"lending\"") : NULL;
        fail_msg("the borrower got memory from a stopped peer (%d): %s %.300s", rc, err,
                 g ? g : "(no lending)");
    }
    char pat[64];
    snprintf(pat, sizeof pat, "pid %d did not answer in 300 ms", (int)l.pid);
    if (!strstr(err, pat))
        fail_msg("the OOM message does not name the silent peer (%s): %s", pat, err);
    assert_true(secs < 30); /* the bound is 0.3 s; 30 s is only against a hang */
}

static void test_peer_killed_mid_ask(void **state)
{
    (void)state;
    proc l = start_lender("", NULL);
    stop_all_threads(l.pid);
    pid_t killer = fork();
    assert_true(killer >= 0);
    if (killer == 0) {
        struct timespec half = {0, 500000000};
        nanosleep(&half, NULL);
        kill(l.pid, SIGKILL);
        _exit(0);
    }
    char *err;
    double secs;
    int rc = run_borrower(BORROW_MB, "lend_wait_ms:60000", NULL, &err, &secs);
    waitpid(killer, NULL, 0);
    close(l.in);
    waitpid(l.pid, NULL, 0);
    assert_true(rc == 0 || rc == 2);
    if (secs >= 30)
        fail_msg("the ask waited %.1f s for a peer killed after 0.5 s", secs);
}

static void test_other_user_is_ignored_and_refused(void **state)
{
    (void)state;
    char *ls = summary_path("lender"), *err;
    double secs;
    proc l = start_lender("", ls);
    table t = open_table();
    int forged = forge_slot(&t, (uint32_t)geteuid() + 1);
    int lslot = -1;
    for (int i = 0; i < FP_LEND_SLOTS; i++)
        if (t.f->slot[i].pid == l.pid)
            lslot = i;
    assert_true(lslot >= 0);
    /* the forged slot asks the lender for everything */
    fp_lend_slot *ls_slot = &t.f->slot[lslot];
    __atomic_store_n(&ls_slot->want, (uint64_t)CAP_MB << 20, __ATOMIC_SEQ_CST);
    __atomic_fetch_or(&ls_slot->asks, (uint64_t)1 << forged, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&ls_slot->bell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &ls_slot->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    struct timespec nap = {0, 300000000};
    nanosleep(&nap, NULL);
    assert_int_equal(__atomic_load_n(&t.f->slot[forged].ans[lslot].round, __ATOMIC_SEQ_CST), 0);
    /* a borrower asks the lender, not the forged slot */
    int rc = run_borrower(BORROW_MB, "", NULL, &err, &secs);
    assert_int_equal(__atomic_load_n(&t.f->slot[forged].asks, __ATOMIC_SEQ_CST), 0);
    close_table(&t);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 0);
    char *lj = fp_t_slurp_path(ls);
    assert_int_equal(lending_value(lj, "refused"), 1);
    assert_int_equal(lending_value(lj, "answers"), 1); /* the borrower's only */
}

static void test_own_cap_asks_nobody(void **state)
{
    (void)state;
    char *ls = summary_path("lender"), *err;
    double secs;
    proc l = start_lender("", ls);
    int rc = run_borrower(BORROW_MB, "per_process_memory_fraction:0.25", NULL, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 2);
    char *lj = fp_t_slurp_path(ls);
    assert_int_equal(lending_value(lj, "answers"), 0);
    assert_int_equal(lending_value(lj, "lent_bytes"), 0);
}

static void test_shared_file_refused(void **state)
{
    (void)state;
    char *err;
    double secs;
    proc l = start_lender("", NULL);
    table t = open_table();
    fchmod(t.fd, 0644);
    close_table(&t);
    int rc = run_borrower(64, "", NULL, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 0); /* fits without anyone's help */
    one_lend_line(err, "not a private file of this user");
}

/* A process that holds the table's directory lock and never lets go (a
 * stopped joiner, or a hostile one) costs a new member a second and its
 * lending, never a hang: one line, and the allocation goes on. */
static void test_dir_lock_held(void **state)
{
    (void)state;
    char *err;
    double secs;
    proc l = start_lender("", NULL);
    table t = open_table();
    struct flock fl = lock_of(-1); /* the directory's */
    assert_int_equal(fcntl(t.fd, F_OFD_SETLK, &fl), 0);
    int rc = run_borrower(64, "", NULL, &err, &secs);
    close_table(&t);
    assert_int_equal(stop_lender(&l), 0);
    assert_int_equal(rc, 0);
    one_lend_line(err, "held its lock for a second");
    assert_true(secs < 30);
}

/* Where this case's members meet: a member that starts and ends (the last
 * to leave removes the file) shows the name. */
static void rendezvous_path(char *path, size_t len)
{
    proc l = start_lender("", NULL);
    int others;
    find_table(path, len, &others);
    assert_int_equal(stop_lender(&l), 0);
    assert_true(path[0] != '\0');
}

/* Puts a leftover at path: empty, or table-sized with no header. */
static int make_leftover(const char *path, bool sized)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    if (sized)
        assert_int_equal(ftruncate(fd, (off_t)sizeof(fp_lend_file)), 0);
    return fd;
}

/* The lender's idle memory serves the borrower, and neither says a word
 * about lending. */
static void lending_works_silently(void)
{
    char *ls = summary_path("lender"), *bs = summary_path("borrower"), *err;
    double secs;
    proc l = start_lender("", ls);
    int rc = run_borrower(BORROW_MB, "", bs, &err, &secs);
    assert_int_equal(stop_lender(&l), 0);
    char *lerr = fp_t_read_fd(l.err);
    assert_int_equal(rc, 0);
    if (fp_t_count_of(err, "fragpool: lend: ") || fp_t_count_of(lerr, "fragpool: lend: "))
        fail_msg("want no lending line: borrower: %s lender: %s", err, lerr);
    assert_int_equal(lending_value(fp_t_slurp_path(bs), "asks_served"), 1);
    free(lerr);
}

static void test_leftover_made_anew(void **state)
{
    (void)state;
    char path[PATH_MAX];
    rendezvous_path(path, sizeof path);
    for (int sized = 0; sized < 2; sized++) {
        close(make_leftover(path, sized));
        lending_works_silently();
        struct stat st;
        assert_int_equal(stat(path, &st), -1); /* the last to leave removed the new one */
    }
}

static void test_held_leftover_refused(void **state)
{
    (void)state;
    char path[PATH_MAX], *err;
    double secs;
    rendezvous_path(path, sizeof path);
    int fd = make_leftover(path, false);
    struct flock fl = lock_of(0); /* a live process's slot, of another version */
    assert_int_equal(fcntl(fd, F_OFD_SETLK, &fl), 0);
    int rc = run_borrower(64, "", NULL, &err, &secs);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(stat(path, &st), 0); /* still there */
    close(fd);
    assert_int_equal(rc, 0); /* fits without anyone's help */
    one_lend_line(err, "its size is not a lending table's");
}

static void test_without_tmpfile(void **state)
{
    (void)state;
    setenv("FP_TEST_NO_TMPFILE", "1", 1);
    lending_works_silently();
    unsetenv("FP_TEST_NO_TMPFILE");
    char path[PATH_MAX];
    int others;
    find_table(path, sizeof path, &others);
    assert_string_equal(path, ""); /* the last to leave removed it */
    assert_int_equal(others, 0);   /* and no file it was made under is left */
}

/* Processes that start at once (released by one gate file) race to
 * publish the table: one wins, the others open its table, and all of them
 * hold slots in it. */
static void test_many_join_at_once(void **state)
{
    (void)state;
    enum { N = 8 };
    char *argv[] = {self, "lender", "64", "0", NULL}, gate[128];
    proc l[N];
    FILE *out[N];
    snprintf(gate, sizeof gate, "%s/gate", dir);
    setenv("FP_TEST_GATE", gate, 1);
    for (int i = 0; i < N; i++)
        out[i] = spawn_role(argv, "", NULL, &l[i]);
    unsetenv("FP_TEST_GATE");
    struct timespec settle = {0, 200000000}; /* all of them at the gate */
    nanosleep(&settle, NULL);
    close(open(gate, O_CREAT | O_WRONLY, 0600));
    for (int i = 0; i < N; i++) {
        char line[64] = "";
        if (!out[i] || !fgets(line, sizeof line, out[i]) || strcmp(line, "ready\n") != 0)
            fail_msg("member %d did not get ready: %s", i, fp_t_read_fd(l[i].err));
        fclose(out[i]);
    }
    table t = open_table();
    int held = slots_held(&t);
    close_table(&t);
    for (int i = 0; i < N; i++) {
        assert_int_equal(stop_lender(&l[i]), 0);
        char *e = fp_t_read_fd(l[i].err);
        if (fp_t_count_of(e, "fragpool: lend: "))
            fail_msg("member %d said: %s", i, e);
        free(e);
    }
    assert_int_equal(held, N);
    char path[PATH_MAX];
    int others;
    find_table(path, sizeof path, &others);
    assert_string_equal(path, ""); /* the last to leave removed it */
    assert_int_equal(others, 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "lender") == 0)
        return lender(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
    if (argc == 3 && strcmp(argv[1], "driven") == 0)
        return driven(strtoull(argv[2], NULL, 10));
    if (argc == 3 && strcmp(argv[1], "borrower") == 0)
        return borrower(strtoull(argv[2], NULL, 10));
    if (!realpath("/proc/self/exe", self))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idle_memory_comes_back, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_both_ways, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_both_ways_off, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_off_on_the_borrower, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_off_on_the_lender, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_not_enough_names_the_peer, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_forked_child_keeps_no_slot, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_stopped_peer_is_waited_for_boundedly, fresh_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(test_peer_killed_mid_ask, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_other_user_is_ignored_and_refused, fresh_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(test_own_cap_asks_nobody, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_shared_file_refused, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_dir_lock_held, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_leftover_made_anew, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_held_leftover_refused, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_without_tmpfile, fresh_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_many_join_at_once, fresh_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
