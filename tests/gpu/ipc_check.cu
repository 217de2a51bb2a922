// ipc_check.cu - legacy CUDA IPC of buffers that a pool may place inside its
// segments, as a plain CUDA runtime program: the parent allocates pads and
// buffers of several sizes (under fragpool most of them land inside a
// segment), fills each with its own pattern, exports each with
// cudaIpcGetMemHandle and execs a child (itself, "child") that opens every
// handle, checks every word on the GPU, writes a mark into the last word
// and closes it; the parent then checks the marks.  Built twice (static and
// shared cudart) and run by scripts/gpu-check.sh (group ipc).
//
// Which handle an export gave is read from the handle itself: a fragpool
// handle starts with the bytes "fragpool" (docs/shim.md, IPC), anything else
// is the driver's.  Where a buffer sits cannot be read from
// cuMemGetAddressRange (fragpool answers with the block, as the driver does
// for an allocation of its own), so the expectations that depend on it use
// what is certain: a pool segment starts 2 MiB-aligned, so a buffer that is
// not 2 MiB-aligned lies inside a segment.
//
// Usage: ipc_check [--plain-child] [--own-mb N] [--expect KEYWORD]
//   --plain-child  the child runs without LD_PRELOAD and FRAGPOOL_CONF
//   --own-mb N     buffers of N MiB or more must be exported with the
//                  driver's handle and open in any child (own_segment_mb:N)
//   --expect all          every export and every open must succeed
//            refuse-mid   (ipc_export:refuse, classic segments) a buffer not
//                         2 MiB-aligned must be refused with
//                         cudaErrorNotSupported, one at a segment's start may
//                         be either; what is exported is a driver handle and
//                         opens; at least one refused
//            refuse-all   (ipc_export:refuse, virtual-memory segments) every
//                         buffer below --own-mb refused with
//                         cudaErrorNotSupported
//            driver-opens (a child without fragpool) every export succeeds;
//                         a driver handle must open, a fragpool handle may
//                         fail to open (its driver never made it)
//            no-wrong     only: no wrong word (errors are allowed)
// Always: 0 wrong words, and every mark the child wrote is seen.
// Prints "IPC ..." lines, then "CHECK ipc_check OK ..." (exit 0) or
// "CHECK ipc_check FAIL ..." (exit 1); the CHECK line counts the fragpool
// handles and the buffers that are not 2 MiB-aligned.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#define CHECK_NAME "ipc_check"
#include "gpu_check.h"

extern char **environ;

static const uint32_t kMark = 0xC0DE0000u;

struct Rec { // parent -> child, one per exported buffer
    int k;
    size_t bytes;
    uint32_t salt;
    cudaIpcMemHandle_t h;
};

__host__ __device__ static inline uint32_t pattern(size_t i, uint32_t salt)
{
    return (uint32_t)(i * 2654435761u) ^ salt;
}

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, salt);
}

__global__ void verify_kernel(const uint32_t *p, size_t n, uint32_t salt, unsigned long long *bad)
{
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        local += p[i] != pattern(i, salt);
    if (local)
        atomicAdd(bad, local);
}

// ---- the child ----------------------------------------------------------------

// Reads records on fd 0, writes "k OK|BAD n|ERR name" lines on fd 3.
static int child()
{
    CK(cudaSetDevice(0));
    FILE *out = fdopen(3, "w");
    if (!out)
        return 3;
    unsigned long long *bad;
    CK(cudaMalloc(&bad, sizeof *bad));
    Rec r;
    while (read(0, &r, sizeof r) == (ssize_t)sizeof r) {
        void *p = nullptr;
        cudaError_t e = cudaIpcOpenMemHandle(&p, r.h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            std::fprintf(out, "%d ERR %s\n", r.k, cudaGetErrorName(e));
            cudaGetLastError();
            continue;
        }
        unsigned long long nbad = 0;
        CK(cudaMemset(bad, 0, sizeof *bad));
        verify_kernel<<<256, 256>>>((const uint32_t *)p, r.bytes / 4 - 1, r.salt, bad);
        CK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
        uint32_t m = kMark | (uint32_t)r.k;
        CK(cudaMemcpy((char *)p + r.bytes - 4, &m, 4, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize());
        CK(cudaIpcCloseMemHandle(p));
        if (nbad)
            std::fprintf(out, "%d BAD %llu\n", r.k, nbad);
        else
            std::fprintf(out, "%d OK\n", r.k);
    }
    std::fclose(out);
    return 0;
}

// ---- the parent ---------------------------------------------------------------

struct Buf {
    void *p;
    size_t bytes;
    size_t range_offset; // from the start cuMemGetAddressRange reports
    bool aligned;        // 2 MiB-aligned: may start a pool segment
    bool exported, fp_handle;
    cudaError_t export_error;
    std::string result; // the child's word
};

// What the run expects (--expect, --own-mb).
struct Rules {
    std::string expect;
    size_t own_bytes; // 0: no --own-mb
};

static bool own(const Rules &x, const Buf &b)
{
    return x.own_bytes && b.bytes >= x.own_bytes;
}

// Whether b's export must succeed (1), must be refused (0) or may do either (-1).
static int export_rule(const Rules &x, const Buf &b)
{
    if (own(x, b) || x.expect == "all" || x.expect == "driver-opens")
        return 1;
    if (x.expect == "refuse-all")
        return 0;
    if (x.expect == "refuse-mid")
        return b.aligned ? -1 : 0;
    return -1;
}

// Whether the export of b went as the rules say: the outcome, the kind of
// handle (a driver handle where one is promised) and the refusal's error.
static bool export_as_expected(const Rules &x, const Buf &b)
{
    int want = export_rule(x, b);
    if (want >= 0 && (int)b.exported != want)
        return false;
    bool refusing = x.expect == "refuse-mid" || x.expect == "refuse-all";
    if (b.exported && b.fp_handle && (own(x, b) || refusing))
        return false;
    if (!b.exported && refusing && b.export_error != cudaErrorNotSupported)
        return false;
    return true;
}

// Whether the child's open of exported buffer b must succeed.
static bool must_open(const Rules &x, const Buf &b)
{
    if (own(x, b))
        return true;
    if (x.expect == "no-wrong")
        return false;
    if (x.expect == "driver-opens")
        return !b.fp_handle;
    return true;
}

typedef int (*range_fn)(unsigned long long *, size_t *, unsigned long long);

static size_t offset_in_range(range_fn range, void *p)
{
    unsigned long long base = 0;
    size_t size = 0;
    if (!range || range(&base, &size, (unsigned long long)(uintptr_t)p) != 0)
        return (size_t)-1;
    return (size_t)((uintptr_t)p - base);
}

static std::vector<char *> child_env(bool plain)
{
    std::vector<char *> env;
    for (char **e = environ; *e; e++)
        if (!plain || (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "FRAGPOOL_CONF=", 14)))
            env.push_back(*e);
    env.push_back(nullptr);
    return env;
}

// Runs the child on the records; fills each buffer's result.
static int run_child(const std::vector<Rec> &recs, std::vector<Buf> &bufs, bool plain)
{
    int in[2], res[2];
    if (pipe(in) || pipe(res))
        return -1;
    std::vector<char *> env = child_env(plain);
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(res[1], 3);
        close(in[1]);
        close(res[0]);
        char a0[] = "ipc_check", a1[] = "child";
        char *argv[] = {a0, a1, nullptr};
        execve("/proc/self/exe", argv, env.data());
        _exit(127);
    }
    close(in[0]);
    close(res[1]);
    for (const Rec &r : recs)
        if (write(in[1], &r, sizeof r) != (ssize_t)sizeof r)
            return -1;
    close(in[1]);
    FILE *f = fdopen(res[0], "r");
    char line[256];
    while (f && std::fgets(line, sizeof line, f)) {
        int k = -1, n = 0;
        if (std::sscanf(line, "%d %n", &k, &n) == 1 && k >= 0 && k < (int)bufs.size()) {
            bufs[k].result = std::string(line + n);
            while (!bufs[k].result.empty() && bufs[k].result.back() == '\n')
                bufs[k].result.pop_back();
        }
    }
    if (f)
        std::fclose(f);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static const char *const kUsage = "usage: ipc_check [--plain-child] [--own-mb N] "
                                  "[--expect all|refuse-mid|refuse-all|driver-opens|no-wrong]\n";

int main(int argc, char **argv)
{
    if (argc == 2 && std::strcmp(argv[1], "child") == 0)
        return child();
    bool plain = false;
    Rules rules = {"all", 0};
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--plain-child"))
            plain = true;
        else if (!std::strcmp(argv[i], "--expect") && i + 1 < argc)
            rules.expect = argv[++i];
        else if (!std::strcmp(argv[i], "--own-mb") && i + 1 < argc)
            rules.own_bytes = std::strtoull(argv[++i], nullptr, 10) << 20;
        else {
            std::printf("%s", kUsage);
            return 2;
        }
    }
    const std::string &expect = rules.expect;
    if (expect != "all" && expect != "refuse-mid" && expect != "refuse-all" &&
        expect != "driver-opens" && expect != "no-wrong") {
        std::printf("%s", kUsage);
        return 2;
    }
    CK(cudaSetDevice(0));
    void *range_v = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &range_v, 3020, cudaEnableDefault,
                                        &q));
    range_fn range = (range_fn)range_v;

    // Three ~2 MiB pads first, then buffers between pads.
    const size_t MiB = 1 << 20;
    const size_t sizes[] = {4 * MiB, 1 * MiB + 4096, 3 * MiB, 256 << 10, 4096, 6 * MiB, 12 * MiB};
    std::vector<void *> pads;
    for (int i = 0; i < 3; i++) {
        void *p;
        CK(cudaMalloc(&p, 2 * MiB + 512 * 1024));
        pads.push_back(p);
    }
    std::vector<Buf> bufs;
    for (size_t s : sizes) {
        void *pad;
        CK(cudaMalloc(&pad, 64 << 10));
        pads.push_back(pad);
        Buf b = {};
        CK(cudaMalloc(&b.p, s));
        b.bytes = s;
        fill_kernel<<<256, 256>>>((uint32_t *)b.p, s / 4, 0x1234u * (uint32_t)(bufs.size() + 1));
        bufs.push_back(b);
    }
    CK(cudaDeviceSynchronize());

    std::vector<Rec> recs;
    int refused = 0, unaligned = 0, fp_handles = 0, wrong_export = 0;
    for (size_t k = 0; k < bufs.size(); k++) {
        Buf &b = bufs[k];
        b.range_offset = offset_in_range(range, b.p);
        b.aligned = ((uintptr_t)b.p & (2 * MiB - 1)) == 0;
        unaligned += !b.aligned;
        Rec r = {};
        r.k = (int)k;
        r.bytes = b.bytes;
        r.salt = 0x1234u * (uint32_t)(k + 1);
        b.export_error = cudaIpcGetMemHandle(&r.h, b.p);
        b.exported = b.export_error == cudaSuccess;
        if (!b.exported) {
            cudaGetLastError();
            refused++;
        }
        b.fp_handle = b.exported && std::memcmp(r.h.reserved, "fragpool", 8) == 0;
        fp_handles += b.fp_handle;
        bool as_expected = export_as_expected(rules, b);
        wrong_export += !as_expected;
        std::printf("IPC buffer %zu: %zu B at 0x%llx (%s2 MiB-aligned, +%zu from its range's "
                    "start), export %s%s\n",
                    k, b.bytes, (unsigned long long)(uintptr_t)b.p, b.aligned ? "" : "not ",
                    b.range_offset,
                    !b.exported   ? cudaGetErrorName(b.export_error)
                    : b.fp_handle ? "ok, a fragpool handle"
                                  : "ok, a driver handle",
                    as_expected ? "" : " (NOT AS EXPECTED)");
        if (b.exported)
            recs.push_back(r);
    }
    int rc = run_child(recs, bufs, plain);

    unsigned long long wrong = 0;
    int opened = 0, open_errors = 0, marks_missing = 0, unanswered = 0, wrong_open = 0;
    for (size_t k = 0; k < bufs.size(); k++) {
        Buf &b = bufs[k];
        if (!b.exported)
            continue;
        std::printf("IPC buffer %zu: child %s\n", k,
                    b.result.empty() ? "(no answer)" : b.result.c_str());
        if (b.result.rfind("BAD ", 0) == 0)
            wrong += std::strtoull(b.result.c_str() + 4, nullptr, 10);
        if (b.result.empty())
            unanswered++;
        if (b.result.rfind("ERR", 0) == 0) {
            open_errors++;
            wrong_open += must_open(rules, b);
        }
        if (b.result == "OK" || b.result.rfind("BAD", 0) == 0) {
            opened++;
            uint32_t m = 0;
            CK(cudaMemcpy(&m, (char *)b.p + b.bytes - 4, 4, cudaMemcpyDeviceToHost));
            marks_missing += m != (kMark | (uint32_t)k);
        }
    }
    bool ok = rc == 0 && wrong == 0 && marks_missing == 0 && unanswered == 0 && wrong_export == 0 &&
              wrong_open == 0 && (expect != "refuse-mid" || refused > 0);
    std::printf("CHECK ipc_check %s child %s, exit %d; buffers %zu, not 2 MiB-aligned %d, "
                "fragpool handles %d, exported %zu, refused %d, opened %d, open errors %d, "
                "wrong words %llu, marks missing %d, unexpected exports %d, unexpected open "
                "errors %d (expect %s%s%s)\n",
                ok ? "OK" : "FAIL", plain ? "without fragpool" : "inheriting the environment", rc,
                bufs.size(), unaligned, fp_handles, recs.size(), refused, opened, open_errors,
                wrong, marks_missing, wrong_export, wrong_open, expect.c_str(),
                rules.own_bytes ? ", own from " : "",
                rules.own_bytes ? std::to_string(rules.own_bytes >> 20).append(" MiB").c_str()
                                : "");
    for (void *p : pads)
        CK(cudaFree(p));
    for (Buf &b : bufs)
        CK(cudaFree(b.p));
    return ok ? 0 : 1;
}
