/* test_run.c - `fragpool run` and the shim in front of a PyTorch program,
 * on the simulated device.  Each case runs the real `fragpool` command (or
 * the program under a plain LD_PRELOAD) on tests/run/fake_torch.c, built
 * as `python` and as `torchapp`, which loads a fake libc10_cuda.so when
 * told to, makes one allocation and prints what it saw.
 *
 * Checked:
 *  - a Python command (by its name, or a script whose "#!/usr/bin/env
 *    python" line runs it, found on PATH) gets PyTorch's cudaMallocAsync
 *    backend (backend:cudaMallocAsync in PYTORCH_CUDA_ALLOC_CONF) from
 *    fragpool run, which says so in one line, and the summary notes it;
 *    --keep-framework-cache leaves it unset, and the summary notes
 *    PyTorch's cache;
 *  - a program that is not a Python command gets the backend too, without
 *    the line; a backend the user named stays, and with backend:native the
 *    shim sets PYTORCH_NO_CUDA_MEMORY_CACHING=1 before the first
 *    allocation; under a plain LD_PRELOAD the shim says once what to set,
 *    and the summary notes it; without libc10_cuda.so nothing is said;
 *  - with FRAGPOOL_CONF unset, the keys fragpool knows come from
 *    PYTORCH_ALLOC_CONF (else PYTORCH_CUDA_ALLOC_CONF), PyTorch's own keys
 *    make no error, one line says so, and the summary shows the source;
 *    FRAGPOOL_CONF (or --conf) wins when set;
 *  - a key that has no effect with the segments in force (max_split_size_mb
 *    under virtual memory, vmm_page_mb under classic or without the
 *    driver's virtual memory management) is said once, with the fix;
 *  - an unknown option, or --conf without a value,
 *    prints the usage, exits 2 and runs nothing; LD_PRELOAD and
 *    LD_LIBRARY_PATH of 9,000 and 20,000 bytes are passed on whole.
 */
#include "child_run.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 60
#define NO_CACHE      "PYTORCH_NO_CUDA_MEMORY_CACHING"
#define WARN          "fragpool: PyTorch's own caching allocator is on"
#define SHIM_SET      "fragpool: PyTorch is loaded (libc10_cuda.so): set " NO_CACHE "=1"
#define RUN_SET       " is a Python program: PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync..."
#define ASYNC_OUT     "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync\n"
#define ASYNC_NOTE    "| Notes                 | PyTorch ran its cudaMallocAsync backend"
#define UNSET_LINE    "fragpool: FRAGPOOL_CONF is unset; taking "

typedef struct result {
    int status;
    char *out, *err;
} result;

/* Variables of this process that would change what a case sees; the
 * last slot is for a case that sets one more (PATH). */
static const char *drop[] = {"FRAGPOOL_CONF=",
                             "PYTORCH_ALLOC_CONF=",
                             "PYTORCH_CUDA_ALLOC_CONF=",
                             NO_CACHE "=",
                             "FRAGPOOL_PYTORCH_CACHE=",
                             "LD_PRELOAD=",
                             "LD_LIBRARY_PATH=",
                             NULL,
                             NULL};
#define DROP_EXTRA 7

/* Runs argv[0] with argv, this environment less drop, plus add (which
 * replaces this environment's PATH when it holds one). */
static void run_env(result *r, char *const argv[], const char *const *add)
{
    drop[DROP_EXTRA] = NULL;
    for (size_t i = 0; add && add[i]; i++)
        if (!strncmp(add[i], "PATH=", 5))
            drop[DROP_EXTRA] = "PATH=";
    char **env = fp_t_hold(fp_t_child_env(drop, add));
    int out = fp_t_temp_fd("/tmp/fp-run-io-"), err = fp_t_temp_fd("/tmp/fp-run-io-");
    pid_t pid = fp_t_spawn_wait(argv[0], argv, env, out, err, RUN_TIMEOUT_S, &r->status);
    if (pid < 0)
        fail_msg("%s did not finish within %d s", argv[0], RUN_TIMEOUT_S);
    r->out = fp_t_slurp_fd(out);
    r->err = fp_t_slurp_fd(err);
    close(out);
    close(err);
}

static int exit_code(const result *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

/* fragpool run --simulate [opts...] -- prog [args...], with add. */
static void run_fp(result *r, const char *const *opts, const char *prog, const char *arg,
                   const char *const *add)
{
    char *argv[16];
    size_t k = 0;
    argv[k++] = (char *)FP_CLI;
    argv[k++] = (char *)"run";
    argv[k++] = (char *)"--simulate";
    for (size_t i = 0; opts && opts[i]; i++)
        argv[k++] = (char *)opts[i];
    argv[k++] = (char *)"--";
    argv[k++] = (char *)prog;
    if (arg)
        argv[k++] = (char *)arg;
    argv[k] = NULL;
    run_env(r, argv, add);
}

static void has(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("missing \"%s\" in:\n%s", needle, hay);
}

static void lacks(const char *hay, const char *needle)
{
    if (strstr(hay, needle))
        fail_msg("unexpected \"%s\" in:\n%s", needle, hay);
}

static void ran_ok(const result *r)
{
    if (exit_code(r) != 0)
        fail_msg("exit %d; stderr:\n%s", exit_code(r), r->err);
    has(r->out, "ran=1\n");
}

/* ---- PyTorch's cache ------------------------------------------------------ */

static void python_gets_async_backend(void **state)
{
    (void)state;
    result r;
    run_fp(&r, NULL, FP_FAKE_PY, "torch", NULL);
    ran_ok(&r);
    has(r.out, NO_CACHE "=(unset)\n");
    has(r.out, ASYNC_OUT);
    assert_int_equal(fp_t_count_of(r.err, RUN_SET), 1);
    lacks(r.err, WARN);
    lacks(r.err, SHIM_SET);
    has(r.err, "Config source         | defaults"); /* run's own setting is not the user's */
    has(r.err, ASYNC_NOTE);
}

/* A script whose #! line runs python through env (the interpreter itself
 * in a sanitizer build), found on PATH. */
static void python_script_gets_async_backend(void **state)
{
    (void)state;
    char dir[] = "/tmp/fp-run-XXXXXX", script[64], path[4200];
    assert_non_null(mkdtemp(dir));
    snprintf(script, sizeof script, "%s/train", dir);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
#if FP_SANITIZED
    /* /usr/bin/env is not built with the sanitizer the preloaded shim
     * needs, so here the #! line names the interpreter itself. */
    fprintf(f, "#!%s/python -u\n", FP_FAKE_PY_DIR);
#else
    fputs("#!/usr/bin/env -S python -u\n", f);
#endif
    fclose(f);
    chmod(script, 0755);
    const char *p = getenv("PATH");
    snprintf(path, sizeof path, "PATH=%s:%s:%s", dir, FP_FAKE_PY_DIR, p ? p : "/usr/bin:/bin");
    const char *add[] = {path, NULL};
    result r;
    run_fp(&r, NULL, "train", NULL, add);
    unlink(script);
    rmdir(dir);
    ran_ok(&r);
    has(r.out, ASYNC_OUT);
    has(r.err, "fragpool run: train" RUN_SET);
}

static void keep_framework_cache(void **state)
{
    (void)state;
    static const char *const opts[] = {"--keep-framework-cache", NULL};
    result r;
    run_fp(&r, opts, FP_FAKE_PY, "torch", NULL);
    ran_ok(&r);
    has(r.out, NO_CACHE "=(unset)\n");
    lacks(r.err, RUN_SET);
    lacks(r.err, WARN);
    lacks(r.err, SHIM_SET);
    has(r.err, "| Notes                 | PyTorch's own caching allocator stayed on");
}

/* Not a Python command, but PyTorch once it runs: the backend, no line. */
static void app_gets_async_backend(void **state)
{
    (void)state;
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, "torch", NULL);
    ran_ok(&r);
    lacks(r.err, RUN_SET);
    lacks(r.err, SHIM_SET);
    has(r.out, ASYNC_OUT);
    has(r.out, NO_CACHE "=(unset)\n");
    has(r.err, ASYNC_NOTE);
}

/* The user named PyTorch's native backend: run leaves it, and the shim
 * turns PyTorch's cache off at the first CUDA call instead. */
static void native_backend_gets_no_cache(void **state)
{
    (void)state;
    const char *add[] = {"PYTORCH_CUDA_ALLOC_CONF=backend:native", NULL};
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, "torch", add);
    ran_ok(&r);
    has(r.out, "PYTORCH_CUDA_ALLOC_CONF=backend:native\n");
    assert_int_equal(fp_t_count_of(r.err, SHIM_SET), 1);
    has(r.out, NO_CACHE "=1\n");
    has(r.err, "| Notes                 | PyTorch found: fragpool set ");
}

/* A plain LD_PRELOAD in front of PyTorch: one line says what to set. */
static void preload_warns_once(void **state)
{
    (void)state;
    const char *add[] = {"LD_PRELOAD=" FP_SHIM, "LD_LIBRARY_PATH=" FP_SIMDEV_DIR, NULL};
    char *argv[] = {(char *)FP_FAKE_APP, (char *)"torch", NULL};
    result r;
    run_env(&r, argv, add);
    ran_ok(&r);
    has(r.out, NO_CACHE "=(unset)\n");
    assert_int_equal(fp_t_count_of(r.err, WARN), 1);
    has(r.err, "set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (fragpool run does) to have "
               "fragpool serve the tensors");
    has(r.err, "| Notes                 | PyTorch's own caching allocator was on");
}

static void no_torch_no_word(void **state)
{
    (void)state;
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, NULL, NULL);
    ran_ok(&r);
    has(r.out, NO_CACHE "=(unset)\n");
    lacks(r.err, "PyTorch");
    lacks(r.err, "| Notes");
}

/* ---- PyTorch's configuration ------------------------------------------------ */

static void pytorch_alloc_conf(void **state)
{
    (void)state;
    const char *add[] = {"PYTORCH_ALLOC_CONF=max_split_size_mb:512,expandable_segments:True,"
                         "garbage_collection_threshold:0.6",
                         "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256", NULL};
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, NULL, add);
    ran_ok(&r);
    assert_int_equal(fp_t_count_of(r.err, UNSET_LINE), 1);
    has(r.err, UNSET_LINE "max_split_size_mb:512,garbage_collection_threshold:0.6,"
                          "expandable_segments:1 from "
                          "PYTORCH_ALLOC_CONF (keys only PyTorch knows are left to PyTorch)\n");
    has(r.err, "| Configuration         | max_split_size_mb:512 ");
    has(r.err, "| Config errors         | none ");
    has(r.err, "| Config source         | PYTORCH_ALLOC_CONF ");
}

static void pytorch_cuda_alloc_conf(void **state)
{
    (void)state;
    const char *add[] = {"PYTORCH_CUDA_ALLOC_CONF=backend:native,max_split_size_mb:256,bogus:1",
                         NULL};
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, NULL, add);
    ran_ok(&r);
    has(r.err, UNSET_LINE "max_split_size_mb:256 from PYTORCH_CUDA_ALLOC_CONF");
    /* A key nobody knows is still a problem, under the variable's name. */
    assert_int_equal(fp_t_count_of(r.err, "fragpool: PYTORCH_CUDA_ALLOC_CONF: unknown key "
                                          "'bogus'"),
                     1);
    lacks(r.err, "'backend");
    has(r.err, "| Config source         | PYTORCH_CUDA_ALLOC_CONF ");
    /* taken, and said to do nothing under the default segments */
    assert_int_equal(fp_t_count_of(r.err,
                                   "fragpool: PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb:256 "
                                   "has no effect with virtual-memory segments (the "
                                   "default): add expandable_segments:False"),
                     1);
}

/* A key that does not act in the segments in force is said once, under
 * the name it was given by, with what would make it act; a key that acts
 * says nothing. */
#define INERT_MSS                                                                                  \
    "fragpool: FRAGPOOL_CONF: max_split_size_mb:128 has no effect with virtual-memory "            \
    "segments (the default): add expandable_segments:False for PyTorch's classic rules\n"
static void inert_keys_said_once(void **state)
{
    (void)state;
    result r;
    static const char *const vmm[] = {"--conf", "max_split_size_mb:128", NULL};
    run_fp(&r, vmm, FP_FAKE_APP, NULL, NULL);
    ran_ok(&r);
    assert_int_equal(fp_t_count_of(r.err, INERT_MSS), 1);
    has(r.err, "| Config source         | FRAGPOOL_CONF "); /* not run's own backend */
    /* the driver's free memory, as seen when the pool last grew or shrank */
    has(r.err, "| Free on the device    | ");
    lacks(r.err, "| Free on the device    | unknown");
    static const char *const classic[] = {
        "--conf", "expandable_segments:False,max_split_size_mb:128,vmm_page_mb:4", NULL};
    run_fp(&r, classic, FP_FAKE_APP, NULL, NULL);
    ran_ok(&r);
    lacks(r.err, "max_split_size_mb:128 has no effect");
    lacks(r.err, "| Free on the device    | unknown"); /* classic segments too */
    assert_int_equal(fp_t_count_of(r.err, "fragpool: FRAGPOOL_CONF: vmm_page_mb:4 has no effect "
                                          "with classic segments (expandable_segments:False)"),
                     1);
    /* a driver without virtual memory management: classic, and said why */
    static const char *const page[] = {"--conf", "vmm_page_mb:4", NULL};
    const char *no_vmm[] = {"FRAGPOOL_SIM_VMM=0", NULL};
    run_fp(&r, page, FP_FAKE_APP, NULL, no_vmm);
    ran_ok(&r);
    assert_int_equal(fp_t_count_of(r.err, "vmm_page_mb:4 has no effect with classic segments "
                                          "(the driver has no virtual memory management here)"),
                     1);
}

static void fragpool_conf_wins(void **state)
{
    (void)state;
    const char *add[] = {"PYTORCH_ALLOC_CONF=max_split_size_mb:512",
                         "FRAGPOOL_CONF=max_split_size_mb:64", NULL};
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, NULL, add);
    ran_ok(&r);
    lacks(r.err, UNSET_LINE);
    has(r.err, "| Configuration         | max_split_size_mb:64 ");
    has(r.err, "| Config source         | FRAGPOOL_CONF ");
    /* --conf is FRAGPOOL_CONF for the command. */
    static const char *const opts[] = {"--conf", "max_split_size_mb:96", NULL};
    const char *add2[] = {"PYTORCH_ALLOC_CONF=max_split_size_mb:512", NULL};
    run_fp(&r, opts, FP_FAKE_APP, NULL, add2);
    ran_ok(&r);
    has(r.err, "| Configuration         | max_split_size_mb:96 ");
    has(r.err, "| Config source         | FRAGPOOL_CONF ");
}

/* ---- usage errors --------------------------------------------------------------- */

static void usage_errors_run_nothing(void **state)
{
    (void)state;
    static const char *const bad[][4] = {
        {"--bogus", "--", FP_FAKE_APP, NULL},
        {"--conf", NULL},
        {"--conf", "--", FP_FAKE_APP, NULL},
        {"--", NULL},
    };
    static const char *const why[] = {"unknown option '--bogus'", "--conf needs a value",
                                      "--conf needs a value", "no command given"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[8] = {(char *)FP_CLI, (char *)"run"};
        for (size_t k = 0; bad[i][k]; k++)
            argv[2 + k] = (char *)bad[i][k];
        result r;
        run_env(&r, argv, NULL);
        assert_int_equal(exit_code(&r), 2);
        assert_string_equal(r.out, "");
        has(r.err, why[i]);
        has(r.err, "nothing was run\nusage: fragpool run ");
    }
}

static void long_paths_whole(void **state)
{
    (void)state;
    static char pre[9000 + 16], lib[20000 + 32], want[128];
    memcpy(pre, "LD_PRELOAD=", 11);
    memset(pre + 11, ' ', 9000);
    memcpy(lib, "LD_LIBRARY_PATH=", 16);
    for (size_t i = 0; i < 20000; i += 10)
        memcpy(lib + 16 + i, "/nonexist:", 10);
    const char *add[] = {pre, lib, NULL};
    result r;
    run_fp(&r, NULL, FP_FAKE_APP, "nocuda", add);
    ran_ok(&r);
    snprintf(want, sizeof want, "LD_PRELOAD.len=%zu LD_LIBRARY_PATH.len=%zu\n",
             strlen(FP_SHIM) + 1 + 9000, strlen(FP_SIMDEV_DIR) + 1 + 20000);
    has(r.out, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(python_gets_async_backend, fp_t_release_held),
        cmocka_unit_test_teardown(python_script_gets_async_backend, fp_t_release_held),
        cmocka_unit_test_teardown(keep_framework_cache, fp_t_release_held),
        cmocka_unit_test_teardown(app_gets_async_backend, fp_t_release_held),
        cmocka_unit_test_teardown(native_backend_gets_no_cache, fp_t_release_held),
        cmocka_unit_test_teardown(preload_warns_once, fp_t_release_held),
        cmocka_unit_test_teardown(no_torch_no_word, fp_t_release_held),
        cmocka_unit_test_teardown(pytorch_alloc_conf, fp_t_release_held),
        cmocka_unit_test_teardown(pytorch_cuda_alloc_conf, fp_t_release_held),
        cmocka_unit_test_teardown(fragpool_conf_wins, fp_t_release_held),
        cmocka_unit_test_teardown(inert_keys_said_once, fp_t_release_held),
        cmocka_unit_test_teardown(usage_errors_run_nothing, fp_t_release_held),
        cmocka_unit_test_teardown(long_paths_whole, fp_t_release_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
