/* shim_framework.c - where the configuration came from, and PyTorch's own
 * cache in front of fragpool.
 *
 * Configuration: FRAGPOOL_CONF, or when it is unset the keys fragpool
 * knows from PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF
 * (fp_conf_from_env).  Taking a PyTorch variable is said in one line at
 * the first CUDA call, so that processes that never use CUDA stay quiet.
 *
 * PyTorch: its caching allocator keeps freed tensors itself and asks the
 * driver only for big segments, so fragpool would see segments, never
 * tensors.  With its cudaMallocAsync backend (backend:cudaMallocAsync in
 * PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF, which fragpool run sets,
 * with FRAGPOOL_PYTORCH_CACHE=async), PyTorch hands every tensor to
 * cudaMallocAsync, and nothing is in front; PyTorch reads that when
 * libc10_cuda.so loads, too early for the shim to set.  With
 * PYTORCH_NO_CUDA_MEMORY_CACHING set, PyTorch hands every tensor to
 * cudaMalloc; it reads the variable at its first allocation, which comes
 * after its first CUDA call, where this runs.  So when libc10_cuda.so is
 * loaded, the backend is the native one and the variable is unset:
 *   - FRAGPOOL_PYTORCH_CACHE=off (fragpool run): set it, say so once;
 *   - FRAGPOOL_PYTORCH_CACHE=keep (--keep-framework-cache): leave it,
 *     and only note it in the summary;
 *   - anything else (a plain LD_PRELOAD): say once what to set, and
 *     note it in the summary.
 * A process that first uses CUDA and only later loads PyTorch is not
 * seen.  The setenv runs once, inside the program's first CUDA call.
 *
 * Invariants: at most one line each on stderr per process (setup runs
 * once); the notes are written before nnotes publishes them.
 */
#include "shim_framework.h"
#include "shim_state.h"
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FP_NO_CACHE_VAR "PYTORCH_NO_CUDA_MEMORY_CACHING"
#define FP_NOTES        2

static const char *conf_source; /* NULL: defaults            */
static char note_text[FP_NOTES][384];
static const char *note_ptr[FP_NOTES];
static atomic_size_t nnotes;

/* PyTorch's allocator settings as PyTorch reads them: PYTORCH_ALLOC_CONF,
 * else PYTORCH_CUDA_ALLOC_CONF. */
static const char *pytorch_conf(void)
{
    const char *v = getenv("PYTORCH_ALLOC_CONF");
    return v ? v : getenv("PYTORCH_CUDA_ALLOC_CONF");
}

/* Whether PyTorch runs its cudaMallocAsync backend, which hands every
 * tensor to cudaMallocAsync: then no cache of PyTorch's is in front. */
static bool async_backend(void)
{
    const char *c = pytorch_conf();
    for (const char *p = c; p && *p;) {
        p += strspn(p, " ,");
        size_t n = strcspn(p, ",");
        if (n >= 23 && !strncmp(p, "backend:cudaMallocAsync", 23))
            return true;
        p += n;
    }
    return false;
}

int fp_fw_read_conf(fp_conf *c, fp_conf_report_fn report, void *ud)
{
    int n = fp_conf_from_env(c, getenv, report, ud, &conf_source);
    const char *mode = getenv("FRAGPOOL_PYTORCH_CACHE"), *pt = pytorch_conf();
    if (conf_source && strcmp(conf_source, "FRAGPOOL_CONF") && mode && !strcmp(mode, "async") &&
        pt && !strcmp(pt, "backend:cudaMallocAsync"))
        conf_source = NULL; /* fragpool run's own setting, nothing of the user's */
    return n;
}

const char *fp_fw_conf_source(void)
{
    return conf_source ? conf_source : "defaults";
}

static void add_note(const char *text)
{
    size_t n = atomic_load(&nnotes);
    if (n == FP_NOTES)
        return;
    snprintf(note_text[n], sizeof note_text[n], "%s", text);
    note_ptr[n] = note_text[n];
    atomic_store(&nnotes, n + 1);
}

size_t fp_fw_notes(const char **notes, size_t max)
{
    size_t n = atomic_load(&nnotes);
    for (size_t i = 0; i < n && i < max; i++)
        notes[i] = note_ptr[i];
    return n < max ? n : max;
}

/* dl_iterate_phdr callback: 1 (stop) at an object named libc10_cuda.so*. */
static int is_c10_cuda(struct dl_phdr_info *info, size_t size, void *ud)
{
    (void)size, (void)ud;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *base = strrchr(name, '/');
    return strncmp(base ? base + 1 : name, "libc10_cuda.so", 14) == 0;
}

static atomic_bool cache_in_front; /* PyTorch's cache serves the tensors */

bool fp_fw_cache_in_front(void)
{
    return atomic_load(&cache_in_front);
}

static void pytorch_cache(void)
{
    if (getenv(FP_NO_CACHE_VAR) || !dl_iterate_phdr(is_c10_cuda, NULL))
        return;
    if (async_backend()) {
        add_note("PyTorch ran its cudaMallocAsync backend: fragpool served every tensor");
        return;
    }
    const char *mode = getenv("FRAGPOOL_PYTORCH_CACHE");
    bool off = mode && strcmp(mode, "off") == 0;
    atomic_store(&cache_in_front, !off);
    if (mode && strcmp(mode, "keep") == 0) {
        add_note("PyTorch's own caching allocator stayed on (--keep-framework-cache): "
                 "fragpool served its segments, not its tensors");
    } else if (mode && strcmp(mode, "off") == 0 && setenv(FP_NO_CACHE_VAR, "1", 1) == 0) {
        fp_say("PyTorch is loaded (libc10_cuda.so): set " FP_NO_CACHE_VAR "=1 for this "
               "process so that its tensors come to fragpool, not to PyTorch's own cache "
               "(fragpool run --keep-framework-cache keeps it)");
        add_note("PyTorch found: fragpool set " FP_NO_CACHE_VAR "=1 at the first CUDA call");
    } else {
        fp_say("PyTorch's own caching allocator is on (libc10_cuda.so is loaded, " FP_NO_CACHE_VAR
               " is unset), so fragpool sees only its segments; set "
               "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (fragpool run does) to have "
               "fragpool serve the tensors");
        add_note("PyTorch's own caching allocator was on: fragpool served its segments, not "
                 "its tensors; set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync");
    }
}

void fp_fw_first_call(const fp_conf *c)
{
    char line[1024];
    if (fp_conf_source_line(c, conf_source, line, sizeof line - 1) != ENOENT) {
        size_t n = strlen(line);
        line[n++] = '\n';
        ssize_t w = write(2, line, n);
        (void)w;
    }
    pytorch_cache();
}
