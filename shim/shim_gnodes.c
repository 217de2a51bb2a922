/* shim_gnodes.c - graph memset and memcpy nodes on pooled memory get a
 * context (cuGraphAddNode and _v2, cuGraphNodeSetParams,
 * cuGraphExecNodeSetParams, cuGraphAddMemsetNode, cuGraphAddMemcpyNode).
 *
 * A node whose context is NULL runs in the context of the memory it
 * writes: the driver takes it from the allocation.  Memory of cudaMalloc
 * has one; virtual memory has none, so on a block of a virtual-memory
 * segment the driver refuses the node (CUDA_ERROR_INVALID_VALUE, measured
 * on an H200) where a cudaMalloc's would be accepted.  So when such a
 * node's context is NULL and the memory it names (a memset's dst; a
 * memcpy's device destination, else its device source) lies in a pool,
 * the driver is given a copy of the parameters with the context of the
 * pool that owns it: the context the block was allocated in, which is
 * the one the driver picks for a cudaMalloc.  Everything else reaches the
 * driver untouched (the caller's own parameters, for the out-parameters
 * of other node types).
 *
 * An interposer (docs/design.md): each function keeps the driver's
 * contract and calls fp_shim_init first; no core file calls it.
 */
#include "shim_life.h"
#include "shim_pools.h"
#include "shim_real.h"
#include <stdbool.h>

/* The context of the pool whose segments hold p, or NULL. */
static CUcontext pool_ctx(CUdeviceptr p)
{
    if (!p || !fp_shim_init())
        return NULL;
    fp_ctx_pool *d = fp_pools_owner(p);
    CUcontext c = d ? d->ctx : NULL;
    fp_pools_put(d);
    return c;
}

static bool on_device(int type)
{
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

/* The context for a memcpy whose own is NULL: its device side's pool's. */
static CUcontext copy_ctx(const CUDA_MEMCPY3D *c)
{
    CUcontext ctx = on_device(c->dstMemoryType) ? pool_ctx(c->dstDevice) : NULL;
    return ctx || !on_device(c->srcMemoryType) ? ctx : pool_ctx(c->srcDevice);
}

/* p, or *copy filled from p with the pool's context where the node needs
 * one: the parameters to give the driver. */
static CUgraphNodeParams *with_ctx(CUgraphNodeParams *p, CUgraphNodeParams *copy)
{
    CUcontext c = NULL;
    if (p && p->type == CU_GRAPH_NODE_TYPE_MEMSET && !p->u.memset.ctx)
        c = pool_ctx(p->u.memset.dst);
    else if (p && p->type == CU_GRAPH_NODE_TYPE_MEMCPY && !p->u.memcpy.copyCtx)
        c = copy_ctx(&p->u.memcpy.copyParams);
    if (!c)
        return p;
    *copy = *p;
    if (p->type == CU_GRAPH_NODE_TYPE_MEMSET)
        copy->u.memset.ctx = c;
    else
        copy->u.memcpy.copyCtx = c;
    return copy;
}

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    CUgraphNodeParams copy;
    CUgraphNodeParams *p = with_ctx(nodeParams, &copy);
    if (!fp_real.cuGraphAddNode)
        return CUDA_ERROR_NOT_SUPPORTED;
    return fp_real.cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies, p);
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                           const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
                           size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    CUgraphNodeParams copy;
    CUgraphNodeParams *p = with_ctx(nodeParams, &copy);
    if (!fp_real.cuGraphAddNode_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    return fp_real.cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, dependencyData,
                                     numDependencies, p);
}

CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    CUgraphNodeParams copy;
    CUgraphNodeParams *p = with_ctx(nodeParams, &copy);
    if (!fp_real.cuGraphNodeSetParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    return fp_real.cuGraphNodeSetParams(hNode, p);
}

CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                  CUgraphNodeParams *nodeParams)
{
    CUgraphNodeParams copy;
    CUgraphNodeParams *p = with_ctx(nodeParams, &copy);
    if (!fp_real.cuGraphExecNodeSetParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    return fp_real.cuGraphExecNodeSetParams(hGraphExec, hNode, p);
}

CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    if (!ctx && memsetParams)
        ctx = pool_ctx(memsetParams->dst);
    if (!fp_real.cuGraphAddMemsetNode)
        return CUDA_ERROR_NOT_SUPPORTED;
    return fp_real.cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies,
                                        memsetParams, ctx);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    if (!ctx && copyParams)
        ctx = copy_ctx(copyParams);
    if (!fp_real.cuGraphAddMemcpyNode)
        return CUDA_ERROR_NOT_SUPPORTED;
    return fp_real.cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies,
                                        copyParams, ctx);
}
