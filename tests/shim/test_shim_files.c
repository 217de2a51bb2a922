/* test_shim_files.c - the shim's summary:PATH and trace:PATH files on
 * hostile or broken destinations.  Each case fork/execs tests/shim/exit_paths.c under the shim with
 * its own FRAGPOOL_CONF, with a deadline (a blocking open is a timeout,
 * then a failure), and checks its stderr and the files.
 *
 * Checked:
 *  - a FIFO without a reader, or with one, is refused at once (no block),
 *    for summary and trace, in one line; the summary then goes to stderr;
 *  - a symlink is not followed (its target keeps its bytes), nor is a
 *    file of another user touched (as root: chown'd to 65534); /dev/full
 *    and other devices are refused; each in one line saying where the
 *    summary went instead;
 *  - an existing file of this user is replaced whole (no old tail);
 *  - a write that fails (RLIMIT_FSIZE) is reported in one line, and the
 *    summary then appears on stderr; a trace write that fails says the
 *    trace is incomplete; /proc/version is reported too;
 *  - %x and a lone % are errors, %% is a '%', and a name longer than the
 *    old 399-byte buffer is used whole (not truncated);
 *  - the summary lists the config problems that fit whole and then
 *    "... and N more", never a line cut short;
 *  - paths with [ ] keep every key in the JSON summary's config;
 *  - SIGUSR1 sent to a forked child does not make the parent dump.
 */
#include "shim_test.h"
#include "child_run.h"
#include "fp_report.h"
#include "fp_jread.h"
#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define DEADLINE_S 30
#define STEM       "fp-files"

typedef struct run {
    pid_t pid;
    int status;
    char *out, *err;
} run;

static const char *tmp_name(const char *stem)
{
    static char name[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(name[k], sizeof name[k], "/tmp/" STEM "-%d-%s", (int)getpid(), stem);
    return name[k];
}

/* Reads what a child wrote into the pipe p (whose write end is closed). */
static char *drain(int fd)
{
    size_t cap = 1 << 16, n = 0;
    char *s = fp_t_hold(malloc(cap));
    ssize_t r;
    while ((r = read(fd, s + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    s[n] = '\0';
    return s;
}

/* SIGXFSZ in the child: ignored, or (when set) left at its default, which
 * kills the process: fragpool's writes must then never raise it. */
static bool xfsz_default;

/* exit_paths MODE under FRAGPOOL_CONF=conf; with fsize > 0 under that
 * RLIMIT_FSIZE (SIGXFSZ ignored, or default with xfsz_default), stdout
 * and stderr being pipes.  Under a size limit the pool runs classic
 * segments: the simulated device keeps virtual-memory pages in a file,
 * which the limit would cap too (a GPU's pages are not files). */
static void run_client(run *r, const char *mode, const char *conf, long fsize)
{
    static const char *const drop[] = {
        "FRAGPOOL_CONF=", "RANK=",         "LOCAL_RANK=", "OMPI_COMM_WORLD_RANK=",
        "PMI_RANK=",      "SLURM_PROCID=", NULL};
    char *confvar = fp_t_hold(malloc(strlen(conf) + 64));
    sprintf(confvar, "FRAGPOOL_CONF=%s%s", conf, fsize > 0 ? ",expandable_segments:False" : "");
    const char *add[] = {confvar, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    int po[2], pe[2];
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    struct rlimit old, lim = {(rlim_t)fsize, (rlim_t)fsize};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    void (*oldsig)(int) = signal(SIGXFSZ, xfsz_default ? SIG_DFL : SIG_IGN);
    if (fsize > 0)
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char *argv[] = {(char *)FP_EXIT_PATHS, (char *)mode, NULL};
    pid_t pid = fp_t_spawn_wait(FP_EXIT_PATHS, argv, env, po[1], pe[1], DEADLINE_S, &r->status);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, oldsig);
    close(po[1]);
    close(pe[1]);
    r->out = drain(po[0]);
    r->err = drain(pe[0]);
    close(po[0]);
    close(pe[0]);
    if (pid < 0)
        fail_msg("exit_paths %s (FRAGPOOL_CONF=%s) still running after %d s", mode, conf,
                 DEADLINE_S);
    r->pid = pid;
    if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0)
        fail_msg("exit_paths: status 0x%x\nstderr:\n%s", r->status, r->err);
}

/* Lines of text that start with "fragpool: " and hold needle: exactly 1. */
static void one_line(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < 2047 ? len : 2047), p);
        if (!strncmp(line, "fragpool: ", 10) && strstr(line, needle))
            n++;
        p = nl ? nl + 1 : NULL;
    }
    if (n != 1)
        fail_msg("%d lines with '%s' in:\n%s", n, needle, text);
}

#define SUMMARY_HEAD "fragpool memory summary, device ID 0"

static void summary_on_stderr(const run *r)
{
    if (fp_t_count_of(r->err, SUMMARY_HEAD) != 1)
        fail_msg("no summary on stderr:\n%s", r->err);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* ---- FIFOs (item 3) ------------------------------------------------------ */

static void fifo_never_blocks(void **state)
{
    (void)state;
    const char *fifo = tmp_name("fifo");
    char conf[512];
    assert_int_equal(mkfifo(fifo, 0644), 0);
    run r;
    snprintf(conf, sizeof conf, "summary:%s", fifo);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a FIFO without a reader, not a regular file; writing the summary on "
                    "stderr instead");
    summary_on_stderr(&r);
    snprintf(conf, sizeof conf, "trace:%s,summary:off", fifo);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "trace: cannot write");
    one_line(r.err, "recording nothing");
    int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* now with a reader */
    assert_true(rd >= 0);
    snprintf(conf, sizeof conf, "summary:%s", fifo);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a FIFO, not a regular file; writing the summary on stderr instead");
    summary_on_stderr(&r);
    char c;
    assert_true(read(rd, &c, 1) <= 0); /* nothing was written into it */
    close(rd);
}

/* ---- symlinks, other users, devices (item 5) ----------------------------- */

static void symlink_not_followed(void **state)
{
    (void)state;
    const char *victim = tmp_name("victim"), *link = tmp_name("link");
    write_text(victim, "precious\n");
    assert_int_equal(symlink(victim, link), 0);
    char conf[512];
    run r;
    snprintf(conf, sizeof conf, "summary:%s", link);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a symbolic link (not followed); writing the summary on stderr instead");
    summary_on_stderr(&r);
    snprintf(conf, sizeof conf, "trace:%s,summary:off", link);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a symbolic link (not followed); recording nothing");
    assert_string_equal(fp_t_slurp_path(victim), "precious\n");
    /* a dangling link: nothing is created through it */
    unlink(victim);
    snprintf(conf, sizeof conf, "summary:%s", link);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a symbolic link (not followed)");
    assert_true(access(victim, F_OK) != 0);
}

static void other_users_file_untouched(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* only root can make a file of another user */
    const char *path = tmp_name("other");
    write_text(path, "theirs\n");
    assert_int_equal(chown(path, 65534, 65534), 0);
    char conf[512];
    run r;
    snprintf(conf, sizeof conf, "summary:%s", path);
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a file of another user (not overwritten); writing the summary on "
                    "stderr instead");
    summary_on_stderr(&r);
    assert_string_equal(fp_t_slurp_path(path), "theirs\n");
}

static void own_file_replaced_whole(void **state)
{
    (void)state;
    const char *path = tmp_name("own");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 20000; i++)
        fputs("old old old\n", f);
    fclose(f);
    char conf[512];
    run r;
    snprintf(conf, sizeof conf, "summary:%s", path);
    run_client(&r, "return", conf, 0);
    assert_null(strstr(r.err, "fragpool: summary"));
    char *text = fp_t_slurp_path(path);
    assert_non_null(strstr(text, SUMMARY_HEAD));
    assert_null(strstr(text, "old old"));
}

static void devices_refused(void **state)
{
    (void)state;
    run r;
    run_client(&r, "return", "summary:/dev/full", 0);
    one_line(r.err, "summary: cannot write '/dev/full': a character device, not a regular "
                    "file; writing the summary on stderr instead");
    summary_on_stderr(&r);
    run_client(&r, "return", "trace:/dev/full,summary:off", 0);
    one_line(r.err, "trace: cannot write '/dev/full': a character device");
    run_client(&r, "return", "summary:/proc/version", 0);
    one_line(r.err, "'/proc/version'");
    one_line(r.err, "writing the summary on stderr instead");
    summary_on_stderr(&r);
}

/* ---- failed writes (item 6) ----------------------------------------------- */

static void failed_writes_reported(void **state)
{
    (void)state;
    const char *path = tmp_name("fsize");
    char conf[512];
    run r;
    snprintf(conf, sizeof conf, "summary:%s", path);
    run_client(&r, "return", conf, 1000);
    one_line(r.err, "failed: File too large; writing the summary on stderr instead");
    summary_on_stderr(&r);
    snprintf(conf, sizeof conf, "trace:%s,summary:off", tmp_name("fsize-trace"));
    run_client(&r, "workload", conf, 1000);
    one_line(r.err, "File too large; the trace is incomplete");
}

/* With SIGXFSZ at its default (fatal), a file size limit costs the run
 * nothing but the file: the same lines, status 0, the file cut at the
 * limit. */
static void size_limit_no_signal(void **state)
{
    (void)state;
    char conf[512];
    run r;
    struct stat st;
    xfsz_default = true;
    snprintf(conf, sizeof conf, "summary:%s", tmp_name("xfsz-summary"));
    run_client(&r, "return", conf, 1000);
    one_line(r.err, "failed: File too large; writing the summary on stderr instead");
    summary_on_stderr(&r);
    const char *trace = tmp_name("xfsz-trace");
    snprintf(conf, sizeof conf, "trace:%s,summary:off", trace);
    run_client(&r, "workload", conf, 1000);
    one_line(r.err, "File too large; the trace is incomplete");
    assert_int_equal(stat(trace, &st), 0);
    assert_int_equal(st.st_size, 1000);
    snprintf(conf, sizeof conf, "snapshot:%s,summary:off", tmp_name("xfsz-snap"));
    run_client(&r, "workload", conf, 1000);
    one_line(r.err, "File too large; the snapshot is incomplete");
    xfsz_default = false;
}

/* ---- two outputs on one file ---------------------------------------------------- */

static void outputs_on_one_path(void **state)
{
    (void)state;
    const char *path = tmp_name("same");
    char conf[1024], other[1100];
    snprintf(conf, sizeof conf, "summary:%s,trace:%s,snapshot:%s", path, path, path);
    run r;
    run_client(&r, "workload", conf, 0);
    char *trace = fp_t_slurp_path(path);
    assert_non_null(trace);
    assert_int_equal(strncmp(trace, "seq,op,id,size,stream,thread\n", 29), 0);
    assert_true(fp_t_count_of(trace, "\n") > 1000);
    snprintf(other, sizeof other, "%s.snapshot", path);
    char *snap = fp_t_slurp_path(other);
    assert_non_null(snap);
    assert_int_equal((unsigned char)snap[0], 0x80); /* a pickle */
    snprintf(other, sizeof other, "%s.summary", path);
    char *sum = fp_t_slurp_path(other);
    assert_non_null(sum);
    assert_non_null(strstr(sum, SUMMARY_HEAD));
    snprintf(other, sizeof other, "snapshot: '%s' is also the trace file", path);
    one_line(r.err, other);
    snprintf(other, sizeof other, "summary: '%s' is also the trace file", path);
    one_line(r.err, other);
}

/* A forked child's summary, its name without %p: the parent's file keeps
 * the parent's summary, the child's goes to PATH.PID. */
static void forked_child_keeps_parent_file(void **state)
{
    (void)state;
    const char *path = tmp_name("forked");
    char conf[1024], child[1100], pid_text[64];
    snprintf(conf, sizeof conf, "summary:%s", path);
    run r;
    run_client(&r, "fork-cuda", conf, 0);
    const char *cp = strstr(r.out, "child-pid=");
    assert_non_null(cp);
    int cpid = atoi(cp + 10);
    char *parent = fp_t_slurp_path(path);
    assert_non_null(parent);
    snprintf(pid_text, sizeof pid_text, "; pid %d ", (int)r.pid);
    assert_non_null(strstr(parent, pid_text));
    snprintf(child, sizeof child, "%s.%d", path, cpid);
    char *mine = fp_t_slurp_path(child);
    assert_non_null(mine);
    snprintf(pid_text, sizeof pid_text, "; pid %d ", cpid);
    assert_non_null(strstr(mine, pid_text));
    one_line(r.err, "has no %p and this is a forked child");
}

/* ---- names (item 14) -------------------------------------------------------- */

static void name_escapes(void **state)
{
    (void)state;
    char conf[512];
    run r;
    snprintf(conf, sizeof conf, "summary:%s", tmp_name("x%x"));
    run_client(&r, "return", conf, 0);
    /* refused by config/ already, as `fragpool config` refuses it: the
     * summary stays on stderr */
    one_line(r.err, "unknown escape %x (the escapes are %p pid, %r rank, %h host, "
                    "%% a '%'); must be off, stderr, or a file path");
    summary_on_stderr(&r);
    assert_true(access(tmp_name("x"), F_OK) != 0 && access(tmp_name("xx"), F_OK) != 0);
    snprintf(conf, sizeof conf, "summary:%s", tmp_name("lone%"));
    run_client(&r, "return", conf, 0);
    one_line(r.err, "a lone '%' at the end (write %% for a '%')");
    snprintf(conf, sizeof conf, "trace:%s,summary:off", tmp_name("t%q"));
    run_client(&r, "return", conf, 0);
    one_line(r.err, "'trace:");
    one_line(r.err, "unknown escape %q");
    snprintf(conf, sizeof conf, "summary:%s", tmp_name("pct%%p"));
    run_client(&r, "return", conf, 0);
    assert_non_null(strstr(fp_t_slurp_path(tmp_name("pct%p")), SUMMARY_HEAD));
}

/* 40 directories named by %r: the name expands to 420+ bytes, past the
 * old 399-byte buffer, and is used whole. */
static void long_name_whole(void **state)
{
    (void)state;
    char dir[1024], pat[1100];
    snprintf(dir, sizeof dir, "%s", tmp_name("deep"));
    snprintf(pat, sizeof pat, "summary:%s", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    for (int i = 0; i < 40; i++) {
        strcat(dir, "/123456789");
        strcat(pat, "/%r");
        assert_int_equal(mkdir(dir, 0755), 0);
    }
    strcat(dir, "/summary.txt");
    strcat(pat, "/summary.txt");
    assert_true(strlen(dir) > 420);
    setenv("RANK", "123456789", 1);
    static const char *const drop[] = {"FRAGPOOL_CONF=", NULL};
    char confvar[1200];
    snprintf(confvar, sizeof confvar, "FRAGPOOL_CONF=%s", pat);
    const char *add[] = {confvar, NULL};
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    unsetenv("RANK");
    int err = fp_t_temp_fd("/tmp/" STEM "-io-");
    char *argv[] = {(char *)FP_EXIT_PATHS, "return", NULL};
    int st;
    assert_true(fp_t_spawn_wait(FP_EXIT_PATHS, argv, env, -1, err, DEADLINE_S, &st) > 0);
    char *text = fp_t_slurp_path(dir);
    if (!text)
        fail_msg("no summary at the whole name; stderr:\n%s", fp_t_slurp_fd(err));
    assert_non_null(strstr(text, SUMMARY_HEAD));
    close(err);
    for (int i = 0; i <= 40; i++) { /* clean up, deepest first */
        unlink(dir);
        *strrchr(dir, '/') = '\0';
        rmdir(dir);
    }
}

/* ---- config problems (item 15) and the config round trip (item 13) ---------- */

static void config_problems_and_more(void **state)
{
    (void)state;
    char conf[4096] = "";
    for (int i = 0; i < 40; i++)
        snprintf(conf + strlen(conf), sizeof conf - strlen(conf), "%sunknown_key_number_%02d:1",
                 i ? "," : "", i);
    run r;
    run_client(&r, "return", conf, 0);
    summary_on_stderr(&r);
    const char *box = strstr(r.err, "| Config errors ");
    assert_non_null(box);
    int shown = fp_t_count_of(box, "fragpool: FRAGPOOL_CONF: unknown key");
    assert_true(shown > 0 && shown < 40);
    char more[64];
    snprintf(more, sizeof more, "... and %d more", 40 - shown);
    if (!strstr(box, more))
        fail_msg("want '%s' after %d problems:\n%s", more, shown, box);
    /* every listed problem is whole: its last word is there (one word, which
     * the box's word wrap cannot split) */
    assert_int_equal(fp_t_count_of(box, "applies"), shown);
}

static void bracket_paths_keep_every_key(void **state)
{
    (void)state;
    char conf[1024];
    const char *sum = tmp_name("[a"), *tr = tmp_name("b]");
    snprintf(conf, sizeof conf, "trace:%s,summary:%s,summary_format:json", tr, sum);
    run r;
    run_client(&r, "return", conf, 0);
    char *text = fp_t_slurp_path(sum);
    assert_non_null(text);
    assert_non_null(fp_t_slurp_path(tr));
    fp_jtok tok[4096];
    fp_jdoc d;
    size_t pos;
    assert_int_equal(fp_jdoc_parse(&d, text, strlen(text), tok, 4096, &pos), 0);
    int c = fp_jdoc_path(&d, "config");
    assert_true(c >= 0);
    assert_int_equal(d.tok[c].n, 34); /* every key of the table, none swallowed */
    char val[512];
    fp_jdoc_str(&d, fp_jdoc_get(&d, c, "summary_format"), val, sizeof val);
    assert_string_equal(val, "json");
    fp_jdoc_str(&d, fp_jdoc_get(&d, c, "trace"), val, sizeof val);
    assert_non_null(strstr(val, "b%5D"));
}

/* ---- SIGUSR1 to a forked child (item 12) ------------------------------------ */

static void sigusr1_child_not_parent(void **state)
{
    (void)state;
    char conf[512];
    snprintf(conf, sizeof conf, "dump_on_sigusr1:1,summary:%s", tmp_name("%p.txt"));
    run r;
    run_client(&r, "sigusr1-child", conf, 0);
    char parent_dump[256];
    snprintf(parent_dump, sizeof parent_dump, "%s.1", tmp_name(""));
    snprintf(parent_dump, sizeof parent_dump, "/tmp/" STEM "-%d-%d.txt.1", (int)getpid(),
             (int)r.pid);
    if (access(parent_dump, F_OK) == 0)
        fail_msg("the parent dumped on its child's SIGUSR1: %s", parent_dump);
    char exit_summary[256];
    snprintf(exit_summary, sizeof exit_summary, "/tmp/" STEM "-%d-%d.txt", (int)getpid(),
             (int)r.pid);
    assert_non_null(fp_t_slurp_path(exit_summary));
}

static int cleanup(void **state)
{
    (void)state;
    fp_t_remove_own_tmp(STEM);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(fifo_never_blocks, fp_t_release_held),
        cmocka_unit_test_teardown(symlink_not_followed, fp_t_release_held),
        cmocka_unit_test_teardown(other_users_file_untouched, fp_t_release_held),
        cmocka_unit_test_teardown(own_file_replaced_whole, fp_t_release_held),
        cmocka_unit_test_teardown(devices_refused, fp_t_release_held),
        cmocka_unit_test_teardown(failed_writes_reported, fp_t_release_held),
        cmocka_unit_test_teardown(name_escapes, fp_t_release_held),
        cmocka_unit_test_teardown(long_name_whole, fp_t_release_held),
        cmocka_unit_test_teardown(config_problems_and_more, fp_t_release_held),
        cmocka_unit_test_teardown(bracket_paths_keep_every_key, fp_t_release_held),
        cmocka_unit_test_teardown(sigusr1_child_not_parent, fp_t_release_held),
        cmocka_unit_test_teardown(size_limit_no_signal, fp_t_release_held),
        cmocka_unit_test_teardown(outputs_on_one_path, fp_t_release_held),
        cmocka_unit_test_teardown(forked_child_keeps_parent_file, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
