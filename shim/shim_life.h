/* shim_life.h - the shim's lifetime (shim_life.c), the one orchestrator:
 * configuration before main, setup on the first CUDA call, fork, exit.
 * Only the interposers (shim_mem.c, shim_ctx_api.c, shim_capture.c,
 * shim_ipc.c, shim_hooks.c, ...) call it; it calls every core file and none of them.
 */
#ifndef FP_SHIM_LIFE_H
#define FP_SHIM_LIFE_H

#include "shim_state.h"
#include <stdbool.h>

/* Runs the one-time setup; true when the pools can be used.  Inline: once
 * the setup has run, a hot path's check is one load of fp_shim (no code of
 * shim_life.c runs); fp_shim_init_slow runs it the first time. */
bool fp_shim_init_slow(void);
static inline bool fp_shim_init(void)
{
    if (atomic_load_explicit(&fp_shim.set_up, memory_order_acquire))
        return fp_shim.ready;
    return fp_shim_init_slow();
}

/* Fills the row name of shim_life.c's ranked list of locks (a row whose
 * locks live in an interposer file), from that file's constructor. */
void fp_life_rank_lock(const char *name, void (*prepare)(void), void (*after)(bool child));

#endif
