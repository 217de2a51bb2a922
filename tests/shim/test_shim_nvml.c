/* test_shim_nvml.c - the OOM report's list of the GPU's processes, from a
 * stand-in libnvidia-ml.so.1 (fake_nvml.c) on the simulated device (whose
 * cuDeviceGetPCIBusId names the device), for an OOM no setting fixes:
 * - NVML answers: "processes on this GPU (NVML): pid ... (this process)";
 * - more processes than the first buffer (NVML_ERROR_INSUFFICIENT_SIZE):
 *   the buffer grows, and the line counts all 100 ("and 92 more");
 * - NVML hangs: the OOM returns within the 2 s bound (well under 10 s)
 *   with a line saying NVML did not answer;
 * - NVML crashes: the program lives on, the OOM returns, one line says so.
 * Each OOM asks a request of a new size, so that each gets its own search
 * (a repeated size repeats the first one's lines).  The text is read
 * through the C API's fragpool_last_oom.
 */
#include "shim_test.h"
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define GB ((size_t)1 << 30)

static uint64_t (*last_oom)(char *, size_t);
static CUdeviceptr held;

static int setup(void **state)
{
    (void)state;
    *(void **)&last_oom = dlsym(RTLD_DEFAULT, "fragpool_last_oom");
    assert_non_null(last_oom);
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuMemAlloc_v2(&held, 12 * GB)); /* live: what no setting can pack away */
    return 0;
}

/* An OOM of size bytes under FAKE_NVML=mode; its text in out, and the
 * seconds the failing call took. */
static double oom_with(const char *mode, size_t size, char *out, size_t len)
{
    if (mode)
        setenv("FAKE_NVML", mode, 1);
    else
        unsetenv("FAKE_NVML");
    struct timespec a, b;
    CUdeviceptr p;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(cuMemAlloc_v2(&p, size), CUDA_ERROR_OUT_OF_MEMORY);
    clock_gettime(CLOCK_MONOTONIC, &b);
    last_oom(out, len);
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

static void names_processes(void **state)
{
    (void)state;
    char t[8192], me[64];
    oom_with(NULL, 6 * GB, t, sizeof t);
    snprintf(me, sizeof me, "processes on this GPU (NVML): pid %d (this process) 1 MiB",
             (int)getpid());
    assert_non_null(strstr(t, me));
    assert_non_null(strstr(t, "pid 40002 unknown"));
}

static void many_processes(void **state)
{
    (void)state;
    char t[8192];
    oom_with("many", 6 * GB + 512, t, sizeof t);
    assert_non_null(strstr(t, ", and 92 more\n"));
}

static void hang_is_bounded(void **state)
{
    (void)state;
    char t[8192];
    double s = oom_with("hang", 6 * GB + 1024, t, sizeof t);
    assert_true(s < 10.0);
    assert_non_null(strstr(t, "NVML did not answer within 2 s"));
}

static void crash_is_contained(void **state)
{
    (void)state;
    char t[8192];
    oom_with("crash", 6 * GB + 1536, t, sizeof t);
    assert_non_null(strstr(t, "NVML's query failed"));
    CUdeviceptr p; /* the program goes on */
    CU(cuMemAlloc_v2(&p, 4096));
    CU(cuMemFree_v2(p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_processes),
        cmocka_unit_test(many_processes),
        cmocka_unit_test(hang_is_bounded),
        cmocka_unit_test(crash_is_contained),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
