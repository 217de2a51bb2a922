// bench_alloc.cu - the host cost of one allocate+free pair, as the median of
// a loop (docs/gpu.md, docs/PERFORMANCE.md): cudaMalloc+cudaFree and
// cudaMallocAsync+cudaFreeAsync (default pool, release threshold raised so
// it keeps its memory) for fixed sizes (default 512 B, 1 MiB, 8 MiB, 64 MiB
// and 512 MiB), and for random sizes (log-uniform 512 B .. 64 MiB) with 128
// live blocks, where each step frees a random slot and allocates a new block
// into it; "work32": the same with 32 live blocks of 512 B .. 4 MiB and a
// small kernel writing a live block every 16 pairs (memory the GPU really
// uses, as a training step's); with 1 thread the driver's
// cuMemAlloc+cuMemFree too.
//
// With T threads (the third argument, e.g. "1,8"), every case runs on T
// threads at once, each with its own stream, slots and generator, started
// together; each pair is timed on its own thread, and the line gives the
// median over all threads' pairs plus the pairs per second of all threads
// together.  Run it natively and under fragpool, built with static cudart
// (gpu_bench_alloc) and with shared cudart (gpu_bench_alloc_shared).
//
// Each case runs a warm-up, then up to <iters> timed pairs per thread or
// <budget_ms> of timed pairs (at least 1000 pairs in all), whichever ends first.
// Usage: bench_alloc [iters=20000] [budget_ms=1500] [threads=1] [sizes=512,1048576,...]
//                    [cases=fixed,random,work,driver]
// (cases: which groups run; the driver group runs with 1 thread only)
// Prints "BENCH_INFO ..." once, then per case
//   "BENCH <name> <size_or_random128> <median_us> n=.. p10=.. p90=.. threads=T rate=<pairs/s>"
// and "CHECK bench_alloc OK" at the end.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CHECK_NAME "bench_alloc"
#include "gpu_check.h"

typedef std::chrono::steady_clock clk;

static long max_iters = 20000;
static double budget_s = 1.5;
static const int WARMUP = 200, MIN_ITERS = 1000, LIVE = 128;

// One thread's state in a case.
struct Worker {
    uint64_t rng = 0x853c49e6748fea9bULL;
    cudaStream_t s = nullptr;
    std::vector<void *> slot;
    std::vector<double> us;
    long ops = 0;
    clk::time_point begin, end;
};

static uint64_t rnd(Worker &w)
{
    uint64_t x = w.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w.rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

// log-uniform in [512 B, 512 B << doublings]
static size_t random_size(Worker &w, int doublings = 17)
{
    double u = (double)(rnd(w) >> 11) / 9007199254740992.0;
    size_t top = (size_t)512 << doublings;
    size_t sz = (size_t)(512.0 * std::exp2(u * doublings));
    return sz < 512 ? 512 : (sz > top ? top : sz);
}

static const int WORK_LIVE = 32, WORK_DOUBLINGS = 13, WORK_EVERY = 16; // 512 B .. 4 MiB

__global__ void touch(unsigned char *p)
{
    p[threadIdx.x] = (unsigned char)threadIdx.x;
}

static double since_us(clk::time_point t0)
{
    return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
}

static void report(const char *name, const char *mode, int threads, std::vector<Worker> &ws)
{
    std::vector<double> us;
    clk::time_point b = ws[0].begin, e = ws[0].end;
    for (Worker &w : ws) {
        us.insert(us.end(), w.us.begin(), w.us.end());
        b = std::min(b, w.begin);
        e = std::max(e, w.end);
    }
    std::sort(us.begin(), us.end());
    size_t n = us.size();
    double wall = std::chrono::duration<double>(e - b).count();
    std::printf("BENCH %s %s %.3f n=%zu p10=%.3f p90=%.3f threads=%d rate=%.0f\n", name, mode,
                us[n / 2], n, us[n / 10], us[n * 9 / 10], threads, wall > 0 ? n / wall : 0.0);
    std::fflush(stdout);
}

// One timed case on `threads` threads: setup(w) once per thread, step(w)
// does one pair and returns its cost in microseconds, teardown(w) at the end.
template <class Setup, class Step, class Teardown>
static void run_case(const char *name, const char *mode, int threads, Setup setup, Step step,
                     Teardown teardown)
{
    std::vector<Worker> ws(threads);
    std::atomic<int> ready(0);
    long min_iters = (MIN_ITERS + threads - 1) / threads;
    auto body = [&](int k) {
        Worker &w = ws[k];
        w.rng ^= 0x9E3779B97F4A7C15ULL * (uint64_t)(k + 1);
        CK(cudaSetDevice(0));
        CK(cudaStreamCreateWithFlags(&w.s, cudaStreamNonBlocking));
        setup(w);
        for (int i = 0; i < WARMUP; i++)
            step(w);
        w.us.reserve(max_iters);
        ready.fetch_add(1);
        while (ready.load() < threads) {
        }
        w.begin = clk::now();
        clk::time_point stop = w.begin + std::chrono::duration_cast<clk::duration>(
                                             std::chrono::duration<double>(budget_s));
        for (long i = 0; i < max_iters; i++) {
            w.us.push_back(step(w));
            if (i + 1 >= min_iters && (i & 63) == 63 && clk::now() > stop)
                break;
        }
        w.end = clk::now();
        teardown(w);
        CK(cudaStreamSynchronize(w.s));
        CK(cudaStreamDestroy(w.s));
    };
    if (threads == 1) {
        body(0);
    } else {
        std::vector<std::thread> ts;
        for (int k = 0; k < threads; k++)
            ts.emplace_back(body, k);
        for (auto &t : ts)
            t.join();
    }
    report(name, mode, threads, ws);
}

static void nothing(Worker &)
{
}

static void fixed_cases(const std::vector<size_t> &sizes, int threads)
{
    char mode[32];
    for (size_t sz : sizes) {
        std::snprintf(mode, sizeof mode, "%zu", sz);
        run_case(
            "malloc_free", mode, threads, nothing,
            [sz](Worker &) {
                void *p;
                clk::time_point t0 = clk::now();
                CK(cudaMalloc(&p, sz));
                CK(cudaFree(p));
                return since_us(t0);
            },
            nothing);
    }
    for (size_t sz : sizes) {
        std::snprintf(mode, sizeof mode, "%zu", sz);
        run_case(
            "mallocasync_freeasync", mode, threads, nothing,
            [sz](Worker &w) {
                void *p;
                clk::time_point t0 = clk::now();
                CK(cudaMallocAsync(&p, sz, w.s));
                CK(cudaFreeAsync(p, w.s));
                return since_us(t0);
            },
            nothing);
    }
}

static void random_cases(int threads)
{
    run_case(
        "malloc_free", "random128", threads,
        [](Worker &w) {
            w.slot.resize(LIVE);
            for (auto &p : w.slot)
                CK(cudaMalloc(&p, random_size(w)));
        },
        [](Worker &w) {
            int j = (int)(rnd(w) % LIVE);
            size_t sz = random_size(w);
            clk::time_point t0 = clk::now();
            CK(cudaFree(w.slot[j]));
            CK(cudaMalloc(&w.slot[j], sz));
            return since_us(t0);
        },
        [](Worker &w) {
            for (auto p : w.slot)
                CK(cudaFree(p));
        });
    run_case(
        "mallocasync_freeasync", "random128", threads,
        [](Worker &w) {
            w.slot.resize(LIVE);
            for (auto &p : w.slot)
                CK(cudaMallocAsync(&p, random_size(w), w.s));
        },
        [](Worker &w) {
            int j = (int)(rnd(w) % LIVE);
            size_t sz = random_size(w);
            clk::time_point t0 = clk::now();
            CK(cudaFreeAsync(w.slot[j], w.s));
            CK(cudaMallocAsync(&w.slot[j], sz, w.s));
            return since_us(t0);
        },
        [](Worker &w) {
            for (auto p : w.slot)
                CK(cudaFreeAsync(p, w.s));
        });
}

// The thread-scaling workload: 32 live blocks per thread, a kernel on the
// thread's stream writing one of them every 16 pairs; rate= is the figure.
static void work_cases(int threads)
{
    auto setup = [](Worker &w) {
        w.slot.resize(WORK_LIVE);
        for (auto &p : w.slot)
            CK(cudaMalloc(&p, random_size(w, WORK_DOUBLINGS)));
    };
    auto teardown = [](Worker &w) {
        CK(cudaStreamSynchronize(w.s));
        for (auto p : w.slot)
            CK(cudaFree(p));
    };
    run_case(
        "malloc_free", "work32", threads, setup,
        [](Worker &w) {
            int j = (int)(rnd(w) % WORK_LIVE);
            size_t sz = random_size(w, WORK_DOUBLINGS);
            clk::time_point t0 = clk::now();
            CK(cudaFree(w.slot[j]));
            CK(cudaMalloc(&w.slot[j], sz));
            if (++w.ops % WORK_EVERY == 0)
                touch<<<1, 32, 0, w.s>>>((unsigned char *)w.slot[j]);
            return since_us(t0);
        },
        teardown);
    run_case(
        "mallocasync_freeasync", "work32", threads,
        [](Worker &w) {
            w.slot.resize(WORK_LIVE);
            for (auto &p : w.slot)
                CK(cudaMallocAsync(&p, random_size(w, WORK_DOUBLINGS), w.s));
        },
        [](Worker &w) {
            int j = (int)(rnd(w) % WORK_LIVE);
            size_t sz = random_size(w, WORK_DOUBLINGS);
            clk::time_point t0 = clk::now();
            CK(cudaFreeAsync(w.slot[j], w.s));
            CK(cudaMallocAsync(&w.slot[j], sz, w.s));
            if (++w.ops % WORK_EVERY == 0)
                touch<<<1, 32, 0, w.s>>>((unsigned char *)w.slot[j]);
            return since_us(t0);
        },
        [](Worker &w) {
            for (auto p : w.slot)
                CK(cudaFreeAsync(p, w.s));
        });
}

/* The driver's entry points, fetched the way libraries fetch them
 * (cudaGetDriverEntryPointByVersion): the host cost without cudart's
 * own layer.  One thread. */
static void driver_cases(const std::vector<size_t> &sizes)
{
    typedef int (*alloc_fn)(unsigned long long *, size_t);
    typedef int (*free_fn)(unsigned long long);
    void *fa = nullptr, *ff = nullptr;
    cudaDriverEntryPointQueryResult qa, qf;
    if (cudaGetDriverEntryPointByVersion("cuMemAlloc", &fa, 3020, cudaEnableDefault, &qa) !=
            cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuMemFree", &ff, 3020, cudaEnableDefault, &qf) !=
            cudaSuccess ||
        !fa || !ff) {
        cudaGetLastError();
        return;
    }
    alloc_fn da = (alloc_fn)fa;
    free_fn df = (free_fn)ff;
    char mode[32];
    for (size_t sz : sizes) {
        std::snprintf(mode, sizeof mode, "%zu", sz);
        run_case(
            "cumemalloc_free", mode, 1, nothing,
            [=](Worker &) {
                unsigned long long p;
                clk::time_point t0 = clk::now();
                if (da(&p, sz) || df(p)) {
                    std::printf("CHECK bench_alloc FAIL cuMemAlloc/cuMemFree of %zu B\n", sz);
                    std::exit(1);
                }
                return since_us(t0);
            },
            nothing);
    }
}

// "a,b,c" -> {"a", "b", "c"} (an empty item stays, for the callers to refuse).
static std::vector<std::string> split_commas(const char *s)
{
    std::vector<std::string> items;
    std::string str(s);
    size_t at = 0, comma;
    while ((comma = str.find(',', at)) != std::string::npos) {
        items.push_back(str.substr(at, comma - at));
        at = comma + 1;
    }
    items.push_back(str.substr(at));
    return items;
}

// "1,8" -> {1, 8}; every item must be a number in [lo, hi].
static std::vector<size_t> parse_list(const char *what, const char *s, size_t lo, size_t hi)
{
    std::vector<size_t> v;
    for (const std::string &item : split_commas(s)) {
        char *end = nullptr;
        unsigned long long x = std::strtoull(item.c_str(), &end, 10);
        if (item.empty() || *end || x < lo || x > hi) {
            std::printf("CHECK bench_alloc FAIL the %s list '%s' wants numbers from %zu to %zu "
                        "separated by commas; nothing was run\n",
                        what, s, lo, hi);
            std::exit(2);
        }
        v.push_back((size_t)x);
    }
    return v;
}

enum { G_FIXED = 1, G_RANDOM = 2, G_WORK = 4, G_DRIVER = 8 };

// "fixed,work" -> G_FIXED | G_WORK; an unknown name stops the program.
static unsigned parse_groups(const char *s)
{
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {{"fixed", G_FIXED}, {"random", G_RANDOM}, {"work", G_WORK}, {"driver", G_DRIVER}};
    unsigned groups = 0;
    for (const std::string &item : split_commas(s)) {
        unsigned bit = 0;
        for (const auto &k : known)
            if (item == k.name)
                bit = k.bit;
        if (!bit) {
            std::printf("CHECK bench_alloc FAIL the cases list '%s' wants names from fixed, "
                        "random, work, driver separated by commas; nothing was run\n",
                        s);
            std::exit(2);
        }
        groups |= bit;
    }
    return groups;
}

int main(int argc, char **argv)
{
    if (argc > 1 && std::atol(argv[1]) > 0)
        max_iters = std::atol(argv[1]);
    if (argc > 2 && std::atol(argv[2]) > 0)
        budget_s = std::atol(argv[2]) / 1000.0;
    std::vector<size_t> threads = parse_list("threads", argc > 3 ? argv[3] : "1", 1, 64);
    std::vector<size_t> sizes = parse_list(
        "sizes", argc > 4 ? argv[4] : "512,1048576,8388608,67108864,536870912", 1, (size_t)1 << 36);
    unsigned groups = parse_groups(argc > 5 ? argv[5] : "fixed,random,work,driver");
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int rt = 0, drv = 0;
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaDriverGetVersion(&drv));
    std::printf(
        "BENCH_INFO device \"%s\" iters %ld budget %.1f s live %d cudart %d driver_api %d\n",
        prop.name, max_iters, budget_s, LIVE, rt, drv);
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    cudaGetLastError();

    for (size_t t : threads) {
        if (groups & G_FIXED)
            fixed_cases(sizes, (int)t);
        if (groups & G_RANDOM)
            random_cases((int)t);
        if (groups & G_WORK)
            work_cases((int)t);
        if (t == 1 && (groups & G_DRIVER))
            driver_cases(sizes);
    }
    CK(cudaDeviceSynchronize());
    std::printf("CHECK bench_alloc OK\n");
    return 0;
}
