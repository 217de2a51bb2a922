// bench_alloc.cu - the host cost of one allocate+free pair, as the median of
// a loop (docs/gpu.md, the ANCHORS §1 baselines): cudaMalloc+cudaFree and
// cudaMallocAsync+cudaFreeAsync (default pool, release threshold raised so
// it keeps its memory) for fixed sizes of 512 B, 1 MiB, 8 MiB, 64 MiB and 512 MiB, and
// for random sizes (log-uniform 512 B .. 64 MiB) with 128 live blocks, where
// each step frees a random slot and allocates a new block into it.
//
// Each case runs a warm-up, then up to <iters> timed pairs or <budget_ms>
// of timed pairs (at least 1000), whichever ends first.
// Usage: bench_alloc [iters=20000] [budget_ms=1500]
// Prints one line per case: "BENCH <name> <size_or_mode> <median_us> n=.. p10=.. p90=.."
// and "CHECK bench_alloc OK" at the end.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                 \
    do {                                                                         \
        cudaError_t e_ = (call);                                                 \
        if (e_ != cudaSuccess) {                                                 \
            std::printf("CHECK bench_alloc FAIL %s:%d: %s returned %s (%s)\n",   \
                        __FILE__, __LINE__, #call, cudaGetErrorName(e_),         \
                        cudaGetErrorString(e_));                                 \
            std::fflush(stdout);                                                 \
            std::exit(1);                                                        \
        }                                                                        \
    } while (0)

typedef std::chrono::steady_clock clk;

static long max_iters = 20000;
static double budget_s = 1.5;
static const int WARMUP = 200, MIN_ITERS = 1000, LIVE = 128;

static uint64_t rng_state = 0x853c49e6748fea9bULL;
static uint64_t rnd()
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

// log-uniform in [512 B, 64 MiB]
static size_t random_size()
{
    double u = (double)(rnd() >> 11) / 9007199254740992.0;
    size_t sz = (size_t)(512.0 * std::exp2(u * 17.0));
    return sz < 512 ? 512 : (sz > (64u << 20) ? (64u << 20) : sz);
}

static void report(const char *name, const char *mode, std::vector<double> &us)
{
    std::sort(us.begin(), us.end());
    size_t n = us.size();
    std::printf("BENCH %s %s %.3f n=%zu p10=%.3f p90=%.3f\n", name, mode, us[n / 2], n,
                us[n / 10], us[n * 9 / 10]);
    std::fflush(stdout);
}

// One timed case: step() does one pair; returns its cost in microseconds.
template <class F> static void run_case(const char *name, const char *mode, F step)
{
    for (int i = 0; i < WARMUP; i++)
        step();
    std::vector<double> us;
    us.reserve(max_iters);
    clk::time_point end = clk::now() + std::chrono::duration_cast<clk::duration>(
                                           std::chrono::duration<double>(budget_s));
    for (long i = 0; i < max_iters; i++) {
        us.push_back(step());
        if (i + 1 >= MIN_ITERS && (i & 63) == 63 && clk::now() > end)
            break;
    }
    report(name, mode, us);
}

static double since_us(clk::time_point t0)
{
    return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
}

int main(int argc, char **argv)
{
    if (argc > 1 && std::atol(argv[1]) > 0)
        max_iters = std::atol(argv[1]);
    if (argc > 2 && std::atol(argv[2]) > 0)
        budget_s = std::atol(argv[2]) / 1000.0;
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("BENCH_INFO device \"%s\" iters %ld budget %.1f s live %d\n", prop.name, max_iters,
                budget_s, LIVE);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    cudaGetLastError();

    static const size_t sizes[] = {512, 1u << 20, 8u << 20, 64u << 20, 512u << 20};
    char mode[32];
    for (size_t sz : sizes) {
        std::snprintf(mode, sizeof mode, "%zu", sz);
        run_case("malloc_free", mode, [&] {
            void *p;
            clk::time_point t0 = clk::now();
            CK(cudaMalloc(&p, sz));
            CK(cudaFree(p));
            return since_us(t0);
        });
    }
    {
        std::vector<void *> slot(LIVE);
        for (auto &p : slot)
            CK(cudaMalloc(&p, random_size()));
        run_case("malloc_free", "random128", [&] {
            int j = (int)(rnd() % LIVE);
            size_t sz = random_size();
            clk::time_point t0 = clk::now();
            CK(cudaFree(slot[j]));
            CK(cudaMalloc(&slot[j], sz));
            return since_us(t0);
        });
        for (auto p : slot)
            CK(cudaFree(p));
    }
    /* The driver's entry points, fetched the way libraries fetch them
     * (cudaGetDriverEntryPointByVersion): the host cost without cudart's
     * own layer. */
    typedef int (*alloc_fn)(unsigned long long *, size_t);
    typedef int (*free_fn)(unsigned long long);
    void *fa = nullptr, *ff = nullptr;
    cudaDriverEntryPointQueryResult qa, qf;
    if (cudaGetDriverEntryPointByVersion("cuMemAlloc", &fa, 3020, cudaEnableDefault, &qa) == cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuMemFree", &ff, 3020, cudaEnableDefault, &qf) == cudaSuccess &&
        fa && ff) {
        alloc_fn da = (alloc_fn)fa;
        free_fn df = (free_fn)ff;
        for (size_t sz : sizes) {
            std::snprintf(mode, sizeof mode, "%zu", sz);
            run_case("cumemalloc_free", mode, [&] {
                unsigned long long p;
                clk::time_point t0 = clk::now();
                if (da(&p, sz) || df(p))
                    std::exit(1);
                return since_us(t0);
            });
        }
    }
    for (size_t sz : sizes) {
        std::snprintf(mode, sizeof mode, "%zu", sz);
        run_case("mallocasync_freeasync", mode, [&] {
            void *p;
            clk::time_point t0 = clk::now();
            CK(cudaMallocAsync(&p, sz, s));
            CK(cudaFreeAsync(p, s));
            return since_us(t0);
        });
    }
    {
        std::vector<void *> slot(LIVE);
        for (auto &p : slot)
            CK(cudaMallocAsync(&p, random_size(), s));
        run_case("mallocasync_freeasync", "random128", [&] {
            int j = (int)(rnd() % LIVE);
            size_t sz = random_size();
            clk::time_point t0 = clk::now();
            CK(cudaFreeAsync(slot[j], s));
            CK(cudaMallocAsync(&slot[j], sz, s));
            return since_us(t0);
        });
        for (auto p : slot)
            CK(cudaFreeAsync(p, s));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    std::printf("CHECK bench_alloc OK\n");
    return 0;
}
