/* shim_state.c - the shim's shared state and counters (shim_state.h).
 *
 * The leaf of shim/: it calls no other file of the folder, so any file
 * may use it without making a circle.  fp_say formats into a stack
 * buffer and writes once: no malloc, safe in the exit path.
 */
#include "shim_state.h"
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

fp_shim_state fp_shim;
atomic_ullong fp_passthrough[FP_PT_NKINDS];
atomic_ullong fp_alloc_ticks;
fp_ipc_tally fp_state_ipc_tallies;

void fp_say(const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "fragpool: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

void fp_state_ipc_counts(fp_ipc_counts *out)
{
    const fp_ipc_tally *t = &fp_state_ipc_tallies;
    *out = (fp_ipc_counts){
        atomic_load(&t->exports), atomic_load(&t->exports_fragpool), atomic_load(&t->refused),
        atomic_load(&t->opens),   atomic_load(&t->opens_fragpool),   atomic_load(&t->closes),
        atomic_load(&t->own)};
}
