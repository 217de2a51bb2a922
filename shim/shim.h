/* shim.h - the map of shim/ (libfragpool.so), and its whole interface.
 *
 * Each file's interface is its own header; a file of the shim includes
 * only the headers it uses.  This one includes them all, for a reader or
 * a tool that wants the whole.  From the bottom of the folder's graph up
 * (a file calls only files listed before it; docs/design.md draws it, and
 * scripts/check_layers.py checks it):
 *
 *   core, which calls no interposer:
 *   shim_funcs.h      the one list of driver functions: hooked, forwarded;
 *   shim_state.c      shared state (fp_shim), fp_say, the counters;
 *   shim_sanitizer.c  an injected CUDA tool (compute-sanitizer): passthrough;
 *   shim_real.c       the driver's own functions, from libcuda.so.1;
 *   shim_clock.c      time in the allocator;
 *   shim_path.c       output file names (%p, %r, %h) and the rank;
 *   shim_streams.c    the registry of graph captures and the fence gate;
 *   shim_framework.c  where the config came from; PyTorch's own cache;
 *   shim_trace.c      the trace:PATH recorder;
 *   shim_snaprec.c    the snapshot's recorder: recent events, frames;
 *   shim_defer.c      deferred reuse: fences, behind the opaque fp_defer;
 *   shim_pages.c        the VMM backend: ranges, pages mapped on demand, peers;
 *   shim_ipc_vmm.c    IPC of VMM blocks: descriptors over a socket, mapping;
 *   shim_pools.c      one pool per context, its backend, pointer routing;
 *   shim_lendtab.c    the lending rendezvous: a shared file of slots, futexes;
 *   shim_lend.c       lending idle memory to other processes on the GPU;
 *   shim_host.c       pinned host memory: its pool, fences, live blocks;
 *   shim_summary.c    the exit summary, SIGUSR1 dumps, the OOM report;
 *   shim_nvml.c       the other processes on a GPU, from NVML;
 *   shim_advice.c     the fix a replay of the run proves (replay/fp_advise);
 *   shim_snapfile.c   snapshot:PATH, PyTorch's memory snapshot;
 *   shim_life.c       the orchestrator: config before main, setup on the
 *                     first call, fork, exit (fp_shim_init);
 *   interposers, the exported driver entry points, over the core:
 *   shim_ipc.c        legacy IPC on pool memory (cuIpc*);
 *   shim_capture.c    cuStreamBeginCapture* / cuStreamEndCapture*;
 *   shim_host_api.c   cuMemHostAlloc, cuMemAllocHost, cuMemFreeHost, queries;
 *   shim_ranges.c     cuMemGetAddressRange, cuPointerGetAttribute(s): blocks;
 *                     what tells virtual memory from a cudaMalloc;
 *   shim_gnodes.c     graph memset/memcpy nodes with a NULL context;
 *   shim_mempool.c    the stream-ordered pool API (cuMemPool*, syncs);
 *   shim_core.c       the allocation core: what is served, and how;
 *   shim_mem.c        allocation and free (cuMemAlloc*, cuMemFree*): translates;
 *   shim_ctx_api.c    memory info, counted pass-throughs, peers, contexts;
 *   shim_hooks.c      dlsym and cuGetProcAddress hand out the wrappers.
 *
 * The shim never calls through its own exported symbols: every driver call
 * goes through fp_real, so nothing recurses.  Internal functions return 0
 * or an errno-style code; only the interposers speak CUresult to callers.
 */
#ifndef FP_SHIM_H
#define FP_SHIM_H

#include "shim_funcs.h"
#include "shim_state.h"
#include "shim_sanitizer.h"
#include "shim_real.h"
#include "shim_clock.h"
#include "shim_path.h"
#include "shim_streams.h"
#include "shim_framework.h"
#include "shim_trace.h"
#include "shim_snaprec.h"
#include "shim_defer.h"
#include "shim_pages.h"
#include "shim_ipc_vmm.h"
#include "shim_pools.h"
#include "shim_lendtab.h"
#include "shim_lend.h"
#include "shim_host.h"
#include "shim_summary.h"
#include "shim_nvml.h"
#include "shim_advice.h"
#include "shim_snapfile.h"
#include "shim_life.h"
#include "shim_ipc.h"
#include "shim_mempool.h"
#include "shim_core.h"

#endif
