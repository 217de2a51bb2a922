/* cmd_run.c - `fragpool run` and `fragpool demo`.
 *
 * run: sets LD_PRELOAD (and with --simulate, LD_LIBRARY_PATH to the
 * simulated libcuda.so.1) and executes the command.
 * demo: runs the bundled workload twice, straight on the driver and then
 * under fragpool, on the real GPU when one answers and on the simulated
 * device otherwise, and says which.  The second run ends with fragpool's
 * summary.
 */
#include "cli.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void prepend_env(const char *name, const char *value)
{
    const char *old = getenv(name);
    char buf[8192];
    if (old && *old)
        snprintf(buf, sizeof buf, "%s:%s", value, old);
    else
        snprintf(buf, sizeof buf, "%s", value);
    setenv(name, buf, 1);
}

/* Puts libfragpool.so (and the simulated driver) into the environment. */
static int arm_env(int simulate, const char *conf)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    if (fp_lib_dir(dir, sizeof dir))
        return 1;
    snprintf(path, sizeof path, "%s/libfragpool.so", dir);
    if (access(path, R_OK)) {
        fprintf(stderr, "fragpool: cannot find %s (build it first)\n", path);
        return 1;
    }
    prepend_env("LD_PRELOAD", path);
    if (simulate) {
        snprintf(path, sizeof path, "%s/simdev", dir);
        prepend_env("LD_LIBRARY_PATH", path);
    }
    if (conf)
        setenv("FRAGPOOL_CONF", conf, 1);
    return 0;
}

int fp_cmd_run(int argc, char **argv)
{
    int simulate = 0, i = 1;
    const char *conf = NULL;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--simulate"))
            simulate = 1;
        else if (!strcmp(argv[i], "--conf") && i + 1 < argc)
            conf = argv[++i];
        else
            break;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc) {
        fprintf(stderr, "usage: fragpool run [--simulate] [--conf K:V,...] -- CMD...\n");
        return 2;
    }
    if (arm_env(simulate, conf))
        return 1;
    execvp(argv[i], argv + i);
    fprintf(stderr, "fragpool run: cannot execute '%s'\n", argv[i]);
    return 127;
}

/* True when the system's driver loads and sees a GPU. */
static int have_gpu(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return 0;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int n = 0;
    int ok = init && count && init(0) == 0 && count(&n) == 0 && n > 0;
    return ok;
}

static int run_child(char *const argv[], int with_fragpool, int simulate)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (simulate) {
            char dir[PATH_MAX], sim[PATH_MAX + 16];
            if (fp_lib_dir(dir, sizeof dir) == 0) {
                snprintf(sim, sizeof sim, "%s/simdev", dir);
                prepend_env("LD_LIBRARY_PATH", sim);
            }
        }
        if (with_fragpool && arm_env(0, NULL))
            _exit(1);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int fp_cmd_demo(int argc, char **argv)
{
    (void)argc, (void)argv;
    char dir[PATH_MAX], work[PATH_MAX + 64];
    if (fp_lib_dir(dir, sizeof dir))
        return 1;
    snprintf(work, sizeof work, "%s/../bin/fragpool-demo-workload", dir);
    int gpu = have_gpu();
    printf("fragpool demo: %s\n", gpu ? "a real GPU answered; running on it"
                                      : "no GPU found; running on fragpool's simulated device");
    printf("workload: variable-shape training steps (activations, gradients, "
           "optimizer temporaries), every buffer written and checked\n\n");
    fflush(stdout);
    char *args[] = {work, NULL};
    printf("== 1. straight on the driver (cuMemAlloc/cuMemFree per tensor)\n");
    fflush(stdout);
    int rc = run_child(args, 0, !gpu);
    printf("\n== 2. the same, with fragpool preloaded\n");
    fflush(stdout);
    return rc ? rc : run_child(args, 1, !gpu);
}
