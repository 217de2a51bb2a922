/* simdev/sim_nodes.c: graphs built node by node (cuGraphCreate,
 * cuGraphAddNode and its _v2, cuGraphAddMemsetNode, cuGraphAddMemcpyNode,
 * cuGraphNodeSetParams), instantiated (cuGraphInstantiateWithFlags,
 * cuGraphExecNodeSetParams, cuGraphExecDestroy), launched (cuGraphLaunch
 * and _ptsz), and destroyed (cuGraphDestroy, captured graphs too).
 *
 * Nodes: memset (element size 1, 2 or 4, rows of width elements pitch
 * bytes apart), memcpy (one row: Height and Depth at most 1, host, device
 * or unified sides, no arrays) and empty; any other type is
 * CUDA_ERROR_NOT_SUPPORTED.  A launch submits each node's operations to
 * the stream in the order the nodes were added (a node's dependencies are
 * always added before it, so that order respects them).  A captured
 * graph has no nodes here: its launch does nothing.
 *
 * The context of a node, as the driver chooses it: the one given, or
 * when it is NULL the context of the memory the node writes (a memcpy's
 * device side, the destination first).  VMM memory has no context, so a
 * NULL context on VMM memory is CUDA_ERROR_INVALID_VALUE (measured on an
 * H200: cuGraphAddNode of a memset on cuMemMap'd memory with ctx 0); so is
 * memory that is no allocation.  The same rule applies to the typed
 * adders with a NULL ctx (chosen where the documentation is silent).
 *
 * An executable graph holds a copy of the nodes at instantiation;
 * cuGraphExecNodeSetParams changes that copy only.  Lock: g_sim.lock
 * around every list (graphs, nodes, executables).
 */
#include "sim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_node { /* sim.h names it for sim_graph */
    CUgraphNodeType type;
    CUDA_MEMSET_NODE_PARAMS_v2 set; /* MEMSET */
    CUDA_MEMCPY3D copy;             /* MEMCPY */
    CUcontext ctx;                  /* as resolved: never NULL but EMPTY */
    const struct sim_node *orig;    /* an executable's copy: its node */
    struct sim_node *next;
} sim_node;

typedef struct sim_exec {
    sim_node *first;
    struct sim_exec *next;
} sim_exec;

static sim_exec *g_execs; /* live executable graphs (g_sim.lock) */

/* ---- lookups (lock held) ------------------------------------------------- */

static sim_graph *graph_of(CUgraph h)
{
    for (sim_graph *g = g_sim.graphs; g != NULL; g = g->next)
        if ((CUgraph)g == h)
            return g;
    return NULL;
}

static sim_node *node_in(sim_node *first, const void *h, bool by_orig)
{
    for (sim_node *n = first; n != NULL; n = n->next)
        if ((by_orig ? (const void *)n->orig : (const void *)n) == h)
            return n;
    return NULL;
}

static sim_node *node_of(CUgraphNode h)
{
    for (sim_graph *g = g_sim.graphs; g != NULL; g = g->next) {
        sim_node *n = node_in(g->first, h, false);
        if (n != NULL)
            return n;
    }
    return NULL;
}

static sim_exec *exec_of(CUgraphExec h)
{
    for (sim_exec *e = g_execs; e != NULL; e = e->next)
        if ((CUgraphExec)e == h)
            return e;
    return NULL;
}

/* ---- parameters: checked, context resolved (lock held) ------------------- */

/* The context of the memory at p: CUDA_ERROR_INVALID_VALUE for memory
 * that has none (VMM) or no allocation. */
static CUresult memory_ctx(CUdeviceptr p, CUcontext *out)
{
    sim_alloc a;
    if (sim_mem_find(p, &a) != CUDA_SUCCESS || a.ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUcontext)a.ctx;
    return CUDA_SUCCESS;
}

static CUresult node_ctx(CUcontext given, CUdeviceptr mem, CUcontext *out)
{
    if (given == NULL)
        return memory_ctx(mem, out);
    if (!sim_ctx_known((const sim_ctx *)given))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = given;
    return CUDA_SUCCESS;
}

static CUresult memset_ok(const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    size_t e = p->elementSize;
    if ((e != 1 && e != 2 && e != 4) || p->width == 0 || p->height == 0 || p->dst % e != 0 ||
        p->width > SIZE_MAX / e || (p->height > 1 && p->pitch < p->width * e))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t r = 0; r < p->height; r++)
        if (!sim_mem_range_ok(p->dst + r * (p->height > 1 ? p->pitch : 0), p->width * e))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A side of a copy: its address, and whether it is device memory. */
static CUresult copy_side(int type, const void *host, CUdeviceptr dev, void *array, size_t x,
                          CUdeviceptr *at, bool *device)
{
    if (array != NULL)
        return CUDA_ERROR_NOT_SUPPORTED; /* arrays are not simulated */
    *device = type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
    if (type == CU_MEMORYTYPE_HOST)
        *at = (CUdeviceptr)(uintptr_t)host + x;
    else if (*device)
        *at = dev + x;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return *at != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult memcpy_ok(const CUDA_MEMCPY3D *c, CUdeviceptr *dst, CUdeviceptr *src,
                          CUdeviceptr *mem)
{
    bool ddev = false, sdev = false;
    CUresult rc = c->Height > 1 || c->Depth > 1 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        rc = copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, dst,
                       &ddev);
    if (rc == CUDA_SUCCESS)
        rc = copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, src,
                       &sdev);
    if (rc == CUDA_SUCCESS && ((ddev && !sim_mem_range_ok(*dst, c->WidthInBytes)) ||
                               (sdev && !sim_mem_range_ok(*src, c->WidthInBytes))))
        rc = CUDA_ERROR_INVALID_VALUE;
    *mem = ddev ? *dst : sdev ? *src : 0;
    return rc;
}

/* Fills n from params (type, checks, context); n is left as it was on
 * error. */
static CUresult node_set(sim_node *n, const CUgraphNodeParams *p)
{
    sim_node t = *n;
    CUdeviceptr dst = 0, src = 0, mem = 0;
    CUresult rc = CUDA_SUCCESS;
    t.type = p->type;
    switch ((int)p->type) {
    case CU_GRAPH_NODE_TYPE_MEMSET:
        t.set = p->u.memset;
        rc = memset_ok(&t.set);
        if (rc == CUDA_SUCCESS)
            rc = node_ctx(t.set.ctx, t.set.dst, &t.ctx);
        break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        t.copy = p->u.memcpy.copyParams;
        rc = p->u.memcpy.flags != 0 ? CUDA_ERROR_INVALID_VALUE
                                    : memcpy_ok(&t.copy, &dst, &src, &mem);
        if (rc == CUDA_SUCCESS)
            rc = node_ctx(p->u.memcpy.copyCtx, mem, &t.ctx);
        break;
    case CU_GRAPH_NODE_TYPE_EMPTY: t.ctx = NULL; break;
    default: rc = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (rc == CUDA_SUCCESS)
        *n = t;
    return rc;
}

/* ---- API: building ---------------------------------------------------------- */

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (phGraph == NULL || flags != 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_graph *g = rc == CUDA_SUCCESS ? calloc(1, sizeof *g) : NULL;
    if (rc != CUDA_SUCCESS || g == NULL)
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    g->id = ++g_sim.next_id;
    g->next = g_sim.graphs;
    g_sim.graphs = g;
    sim_unlock();
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

static CUresult deps_ok(const sim_graph *g, const CUgraphNode *deps, size_t ndeps)
{
    if (ndeps > 0 && deps == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++)
        if (node_in(g->first, deps[i], false) == NULL)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult add_node(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                         const CUgraphNodeParams *p)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (ph == NULL || p == NULL))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_node *n = rc == CUDA_SUCCESS ? calloc(1, sizeof *n) : NULL;
    if (rc != CUDA_SUCCESS || n == NULL)
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    sim_graph *g = graph_of(hg);
    rc = g == NULL ? CUDA_ERROR_INVALID_VALUE : deps_ok(g, deps, ndeps);
    if (rc == CUDA_SUCCESS)
        rc = node_set(n, p);
    if (rc == CUDA_SUCCESS) {
        if (g->last != NULL)
            g->last->next = n;
        else
            g->first = n;
        g->last = n;
        *ph = (CUgraphNode)n;
    }
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        free(n);
    return rc;
}

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                           const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
                           size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    (void)dependencyData; /* edges carry nothing the simulator runs */
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    if (memsetParams == NULL)
        return sim_check_init() != CUDA_SUCCESS ? sim_check_init() : CUDA_ERROR_INVALID_VALUE;
    CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_MEMSET};
    const CUDA_MEMSET_NODE_PARAMS *m = memsetParams;
    p.u.memset = (CUDA_MEMSET_NODE_PARAMS_v2){m->dst,   m->pitch,  m->value, m->elementSize,
                                              m->width, m->height, ctx};
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    if (copyParams == NULL)
        return sim_check_init() != CUDA_SUCCESS ? sim_check_init() : CUDA_ERROR_INVALID_VALUE;
    CUgraphNodeParams p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY};
    p.u.memcpy.copyCtx = ctx;
    p.u.memcpy.copyParams = *copyParams;
    return add_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

/* Sets the parameters of node h, of a graph or of executable e's copy. */
static CUresult set_params(CUgraphExec e, CUgraphNode h, const CUgraphNodeParams *p)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && p == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_exec *x = e != NULL ? exec_of(e) : NULL;
    sim_node *n = e != NULL ? (x != NULL ? node_in(x->first, h, true) : NULL) : node_of(h);
    rc = n == NULL || n->type != p->type ? CUDA_ERROR_INVALID_VALUE : node_set(n, p);
    sim_unlock();
    return rc;
}

CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    return set_params(NULL, hNode, nodeParams);
}

CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                  CUgraphNodeParams *nodeParams)
{
    if (hGraphExec == NULL)
        return sim_check_init() != CUDA_SUCCESS ? sim_check_init() : CUDA_ERROR_INVALID_VALUE;
    return set_params(hGraphExec, hNode, nodeParams);
}

/* ---- API: instantiate, launch, destroy ---------------------------------------- */

static void free_nodes(sim_node *n)
{
    while (n != NULL) {
        sim_node *next = n->next;
        free(n);
        n = next;
    }
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    CUresult rc = sim_check_init();
    if (rc == CUDA_SUCCESS && (phGraphExec == NULL || flags != 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_exec *x = rc == CUDA_SUCCESS ? calloc(1, sizeof *x) : NULL;
    if (rc != CUDA_SUCCESS || x == NULL)
        return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    const sim_graph *g = graph_of(hGraph);
    rc = g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    sim_node **tail = &x->first;
    for (const sim_node *n = g ? g->first : NULL; rc == CUDA_SUCCESS && n != NULL; n = n->next) {
        sim_node *c = malloc(sizeof *c);
        if (c == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        *c = *n;
        c->orig = n;
        c->next = NULL;
        *tail = c;
        tail = &c->next;
    }
    if (rc == CUDA_SUCCESS) {
        x->next = g_execs;
        g_execs = x;
        *phGraphExec = (CUgraphExec)x;
    }
    sim_unlock();
    if (rc != CUDA_SUCCESS) {
        free_nodes(x->first);
        free(x);
    }
    return rc;
}

/* One operation of a node, submitted to s (lock held). */
static CUresult submit_one(sim_stream *s, sim_op_kind kind, CUdeviceptr dst, CUdeviceptr src,
                           unsigned value, size_t n)
{
    sim_op *op = sim_op_new(kind);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (kind == SIM_OP_COPY) {
        op->u.copy.dst = (void *)(uintptr_t)dst;
        op->u.copy.src = (const void *)(uintptr_t)src;
        op->u.copy.n = n;
    } else {
        op->u.set.dst = (void *)(uintptr_t)dst;
        op->u.set.value = value;
        op->u.set.count = n;
    }
    return sim_stream_submit(s, op);
}

static CUresult submit_node(sim_stream *s, const sim_node *n)
{
    CUresult rc = CUDA_SUCCESS;
    if (n->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &n->set;
        sim_op_kind k = m->elementSize == 1   ? SIM_OP_SET8
                        : m->elementSize == 2 ? SIM_OP_SET16
                                              : SIM_OP_SET32;
        for (size_t r = 0; rc == CUDA_SUCCESS && r < m->height; r++)
            rc = submit_one(s, k, m->dst + r * m->pitch, 0, m->value, m->width);
    } else if (n->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
        CUdeviceptr dst = 0, src = 0, mem = 0;
        rc = memcpy_ok(&n->copy, &dst, &src, &mem);
        if (rc == CUDA_SUCCESS)
            rc = submit_one(s, SIM_OP_COPY, dst, src, 0, n->copy.WidthInBytes);
    }
    return rc;
}

static CUresult launch(CUgraphExec e, CUstream h, bool pt)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_stream *s = NULL;
    sim_lock();
    const sim_exec *x = exec_of(e);
    rc = x == NULL ? CUDA_ERROR_INVALID_VALUE : sim_stream_resolve(h, pt, &s, NULL);
    for (const sim_node *n = x ? x->first : NULL; rc == CUDA_SUCCESS && n != NULL; n = n->next)
        rc = submit_node(s, n);
    sim_unlock();
    return rc;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return launch(hGraphExec, hStream, false);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return launch(hGraphExec, hStream, true);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_exec **pp = &g_execs;
    while (*pp != NULL && (CUgraphExec)*pp != hGraphExec)
        pp = &(*pp)->next;
    sim_exec *x = *pp;
    if (x != NULL)
        *pp = x->next;
    sim_unlock();
    if (x == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    free_nodes(x->first);
    free(x);
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_graph **pp = &g_sim.graphs;
    while (*pp != NULL && (CUgraph)*pp != hGraph)
        pp = &(*pp)->next;
    sim_graph *g = *pp;
    if (g != NULL)
        *pp = g->next;
    for (sim_exec *x = g_execs; g != NULL && x != NULL; x = x->next)
        for (sim_node *n = x->first; n != NULL; n = n->next)
            if (node_in(g->first, n->orig, false) != NULL)
                n->orig = NULL; /* its graph is gone; the copy stays */
    sim_unlock();
    if (g != NULL)
        free_nodes(g->first);
    free(g);
    return g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
