/* tests/simdev/ipc.c: legacy IPC of the simulated device (sim_ipc.c)
 * on its own, linked as -lcuda, no fragpool.
 *
 * In one process: what may be exported, the errors, and that an export
 * keeps the allocation's bytes and its use.  Across processes: this program
 * exports, and a child ("test_simdev_ipc open FILE", exec'd) opens each
 * handle twice (one pointer, two closes), sees the allocation's start with
 * the exporter's bytes even when the handle came from an interior pointer,
 * writes a mark the exporter then reads, and a handle of a freed allocation
 * is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fp_cuda.h"

#define MiB      ((size_t)1 << 20)
#define OK(call) assert_int_equal((call), CUDA_SUCCESS)
#define MARK     0x5eedf00du

typedef struct rec {
    CUipcMemHandle h;
    uint64_t size;
    uint32_t seed;
} rec;

static uint32_t word(uint32_t seed, size_t i)
{
    return seed * 40503u + (uint32_t)i;
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

static int check(CUdeviceptr p, size_t n, uint32_t seed, size_t upto)
{
    uint32_t *v = malloc(n);
    int bad = !v || cuMemcpyDtoH_v2(v, p, n) != CUDA_SUCCESS;
    for (size_t i = 0; !bad && i < upto / 4; i++)
        bad = v[i] != word(seed, i);
    free(v);
    return !bad;
}

/* ---- the child ------------------------------------------------------------------ */

/* One handle: "OK", or what failed; "GONE" when the open is refused. */
static const char *open_one(const rec *r)
{
    CUdeviceptr a = 0, b = 0, base = 0;
    size_t size = 0;
    CUresult e = cuIpcOpenMemHandle_v2(&a, r->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (e == CUDA_ERROR_INVALID_VALUE)
        return "GONE";
    if (e != CUDA_SUCCESS || cuIpcOpenMemHandle(&b, r->h, 0) != CUDA_SUCCESS || a != b)
        return "OPEN";
    if (cuMemGetAddressRange_v2(&base, &size, a + 8) != CUDA_SUCCESS || base != a ||
        size != r->size)
        return "RANGE";
    if (!check(a, r->size, r->seed, r->size - 4))
        return "BYTES";
    uint32_t m = MARK;
    if (cuMemcpyHtoD_v2(a + r->size - 4, &m, 4) != CUDA_SUCCESS)
        return "WRITE";
    if (cuIpcCloseMemHandle(a) || cuIpcCloseMemHandle(a) ||
        cuIpcCloseMemHandle(a) != CUDA_ERROR_INVALID_VALUE)
        return "CLOSE";
    return "OK";
}

static int child(const char *path)
{
    CUcontext c;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&c, dev) ||
        cuCtxSetCurrent(c))
        return 3;
    FILE *f = fopen(path, "rb");
    rec r;
    while (f && fread(&r, sizeof r, 1, f) == 1)
        printf("%s\n", open_one(&r));
    if (f)
        fclose(f);
    return f ? 0 : 4;
}

/* Runs the child on v[0..n); its output in out. */
static void run_child(const rec *v, size_t n, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fp-simipc-%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(v, sizeof *v, n, f), n);
    fclose(f);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        execl("/proc/self/exe", "test_simdev_ipc", "open", path, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(fds[0], out + got, len - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    unlink(path);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- one process ------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    CUcontext c;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&c, dev))
        return -1;
    return cuCtxSetCurrent(c) == CUDA_SUCCESS ? 0 : -1;
}

static void test_what_exports(void **state)
{
    (void)state;
    CUdeviceptr p, m, q;
    CUipcMemHandle h, h2;
    void *host;
    OK(cuMemAlloc_v2(&p, 4 * MiB));
    fill(p, 4 * MiB, 1);
    OK(cuIpcGetMemHandle(&h, p + MiB)); /* the whole allocation */
    OK(cuIpcGetMemHandle(&h2, p));
    assert_memory_equal(&h, &h2, sizeof h);
    assert_true(check(p, 4 * MiB, 1, 4 * MiB)); /* the bytes stay */
    fill(p, 4 * MiB, 2);                        /* and the memory works */
    assert_true(check(p, 4 * MiB, 2, 4 * MiB));
    assert_int_equal(cuIpcGetMemHandle(NULL, p), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuIpcGetMemHandle(&h2, 0x10), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    assert_int_equal(cuIpcGetMemHandle(&h2, m), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocHost_v2(&host, 4096));
    assert_int_equal(cuIpcGetMemHandle(&h2, (CUdeviceptr)(uintptr_t)host),
                     CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc_v2(&q, 512)); /* small ones too */
    OK(cuIpcGetMemHandle(&h2, q));
    assert_int_equal(cuIpcOpenMemHandle_v2(&m, h, 1), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuIpcOpenMemHandle_v2(&m, h, 2), CUDA_ERROR_INVALID_VALUE);
    memset(&h2, 0x5a, sizeof h2);
    assert_int_equal(cuIpcOpenMemHandle_v2(&m, h2, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(q));
    OK(cuMemFreeHost(host));
    OK(cuMemFree_v2(p));
}

/* ---- two processes --------------------------------------------------------------- */

static void test_two_processes(void **state)
{
    (void)state;
    CUdeviceptr big, small;
    char out[256];
    rec v[2] = {{.size = 6 * MiB, .seed = 7}, {.size = 4096, .seed = 8}};
    OK(cuMemAlloc_v2(&big, v[0].size));
    OK(cuMemAlloc_v2(&small, v[1].size));
    fill(big, v[0].size, 7);
    fill(small, v[1].size, 8);
    OK(cuIpcGetMemHandle(&v[0].h, big + 3 * MiB + 100)); /* interior pointer */
    OK(cuIpcGetMemHandle(&v[1].h, small));
    run_child(v, 2, out, sizeof out);
    assert_string_equal(out, "OK\nOK\n");
    uint32_t m = 0;
    OK(cuMemcpyDtoH_v2(&m, big + v[0].size - 4, 4));
    assert_int_equal(m, MARK);
    OK(cuMemcpyDtoH_v2(&m, small + v[1].size - 4, 4));
    assert_int_equal(m, MARK);
    OK(cuMemFree_v2(big)); /* its handle is dead now */
    run_child(v, 2, out, sizeof out);
    assert_string_equal(out, "GONE\nOK\n");
    OK(cuMemFree_v2(small));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "open") == 0)
        return child(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_exports),
        cmocka_unit_test(test_two_processes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
