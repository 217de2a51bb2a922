/* trace_pickle.c - a PyTorch memory snapshot (the pickle of
 * torch.cuda.memory._dump_snapshot, or of `fragpool snapshot`) as a trace.
 *
 * The snapshot is a dict whose 'device_traces' holds one list per device
 * of trace entries, oldest first, each a dict with 'action', 'addr',
 * 'size' and 'stream'.  The device read is the first with an 'alloc'.
 * Used, as scripts/snapshot_to_trace.py did:
 *  - 'alloc'          -> an `a` row: a new id for the address, its size;
 *  - 'free_completed' -> an `f` row (the block is back in the pool); or,
 *    when the device's trace has no 'free_completed' at all,
 *    'free_requested' and 'free' (older PyTorch) instead;
 *  - 'oom'            -> an `o` row of its size.
 * Segment events and 'snapshot' are skipped: the replay makes its own
 * segments.  Streams are numbered 0, 1, 2, ... in order of first use.
 * Invariants: the pickle is read by fp_unpickle (plain data only, nothing
 * runs); an entry without an integer addr or size, or an action that is
 * not a string, stops the load with its device and index; frees of an
 * address with no live allocation (the ring buffer began after it) are
 * skipped and counted, an alloc at a live address frees the old one first.
 */
#include "fp_unpickle.h"
#include "fp_hmap.h"
#include "trace_read.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct conv {
    fp_reader *r;
    const fp_pdoc *d;
    fp_trace *t;
    fp_hmap live, streams;
    uint64_t next_id;
    size_t dev;
    int use_requested; /* no free_completed: free_requested frees */
} conv;

static int bad_entry(conv *c, size_t i, const char *what)
{
    snprintf(c->r->err, c->r->errlen, "%s: device_traces[%zu][%zu]: %s", c->r->path, c->dev, i,
             what);
    return EINVAL;
}

static bool has_action(const fp_pdoc *d, const fp_pv *list, const char *action)
{
    for (size_t i = 0; i < list->n; i++)
        if (fp_pdoc_str_is(d, fp_pdoc_get(d, fp_pdoc_item(d, list, i), "action"), action))
            return true;
    return false;
}

static int stream_of(conv *c, const fp_pv *e, uint32_t *out)
{
    const fp_pv *s = fp_pdoc_get(c->d, e, "stream");
    uint64_t v = 0;
    if (s && s->type != FP_PV_NONE && fp_pdoc_u64(s, &v))
        return EINVAL;
    if (!v) {
        *out = 0;
        return 0;
    }
    size_t i = fp_hmap_slot(&c->streams, v);
    if (!fp_hmap_at(&c->streams, i) && fp_trace_map_set(&c->streams, v, c->streams.count + 1))
        return ENOMEM;
    *out = (uint32_t)fp_hmap_at(&c->streams, fp_hmap_slot(&c->streams, v));
    return 0;
}

/* 'a' 'f' or 'o' for the entry's action, 0 to skip it. */
static int op_of(conv *c, const fp_pv *action)
{
    const fp_pdoc *d = c->d;
    if (fp_pdoc_str_is(d, action, "alloc"))
        return 'a';
    if (fp_pdoc_str_is(d, action, "oom"))
        return 'o';
    if (c->use_requested
            ? fp_pdoc_str_is(d, action, "free_requested") || fp_pdoc_str_is(d, action, "free")
            : fp_pdoc_str_is(d, action, "free_completed"))
        return 'f';
    return 0;
}

static int take_entry(conv *c, const fp_pv *e, size_t i)
{
    const fp_pv *action = fp_pdoc_get(c->d, e, "action");
    if (!action || action->type != FP_PV_STR)
        return bad_entry(c, i, "not a dict with a string 'action'");
    int op = op_of(c, action);
    if (!op)
        return 0;
    uint64_t addr = 0, size;
    uint32_t stream;
    if (op != 'o' && fp_pdoc_u64(fp_pdoc_get(c->d, e, "addr"), &addr))
        return bad_entry(c, i, "'addr' is missing or not an integer from 0 to 2^64-1");
    if (fp_pdoc_u64(fp_pdoc_get(c->d, e, "size"), &size))
        return bad_entry(c, i, "'size' is missing or not an integer from 0 to 2^64-1");
    int rc = stream_of(c, e, &stream);
    if (rc)
        return rc == ENOMEM ? ENOMEM : bad_entry(c, i, "'stream' is not an integer or None");
    fp_trace *t = c->t;
    if (op == 'o')
        return fp_trace_push(t, 'o', 0, size, stream);
    size_t slot = fp_hmap_slot(&c->live, addr);
    if (op == 'f') {
        if (!fp_hmap_at(&c->live, slot)) {
            t->dropped_frees++;
            return 0;
        }
        uint64_t id = fp_hmap_at(&c->live, slot);
        fp_hmap_erase(&c->live, slot);
        return fp_trace_push(t, 'f', id, size, stream);
    }
    if (fp_hmap_at(&c->live, slot)) { /* its free fell outside what is used: close it first */
        if (fp_trace_push(t, 'f', fp_hmap_at(&c->live, slot), 0, stream))
            return ENOMEM;
        t->reused_live++;
    }
    uint64_t id = ++c->next_id;
    if (fp_trace_map_set(&c->live, addr, id))
        return ENOMEM;
    return fp_trace_push(t, 'a', id, size, stream);
}

/* The device to read: the first whose trace has an 'alloc'. */
static int pick_device(conv *c, const fp_pv *traces, const fp_pv **list)
{
    for (size_t i = 0; i < traces->n; i++) {
        const fp_pv *l = fp_pdoc_item(c->d, traces, i);
        if (!l || l->type != FP_PV_LIST) {
            snprintf(c->r->err, c->r->errlen, "%s: device_traces[%zu] is not a list", c->r->path,
                     i);
            return EINVAL;
        }
        if (has_action(c->d, l, "alloc")) {
            c->dev = i;
            *list = l;
            return 0;
        }
    }
    snprintf(c->r->err, c->r->errlen,
             "%s: the snapshot records no allocation on any of its "
             "%u device%s (was torch.cuda.memory._record_memory_history() on?)",
             c->r->path, traces->n, traces->n == 1 ? "" : "s");
    return EINVAL;
}

static int convert(conv *c)
{
    const fp_pv *root = fp_pdoc_node(c->d, c->d->root);
    const fp_pv *traces = fp_pdoc_get(c->d, root, "device_traces");
    if (!traces || traces->type != FP_PV_LIST) {
        snprintf(c->r->err, c->r->errlen,
                 "%s: a pickle, but not a PyTorch memory snapshot "
                 "(no list 'device_traces'); write one with "
                 "torch.cuda.memory._dump_snapshot(path)",
                 c->r->path);
        return EINVAL;
    }
    const fp_pv *list;
    int rc = pick_device(c, traces, &list);
    if (rc)
        return rc;
    c->t->device = (int)c->dev;
    c->use_requested = !has_action(c->d, list, "free_completed");
    for (size_t i = 0; !rc && i < list->n; i++)
        rc = take_entry(c, fp_pdoc_item(c->d, list, i), i);
    if (rc == ENOMEM)
        snprintf(c->r->err, c->r->errlen, "%s: out of memory after %zu events", c->r->path,
                 c->t->n);
    return rc;
}

int fp_trace_read_pickle(fp_reader *r, fp_trace *t)
{
    unsigned char *data;
    size_t len;
    int rc = fp_reader_all(r, &data, &len);
    if (rc)
        return rc;
    fp_pdoc d;
    rc = fp_unpickle(data, len, r->path, &d, r->err, r->errlen);
    if (!rc) {
        conv c = {.r = r, .d = &d, .t = t};
        rc = fp_hmap_init(&c.live, 4096) || fp_hmap_init(&c.streams, 64) ? ENOMEM : 0;
        if (rc)
            snprintf(r->err, r->errlen, "%s: out of memory", r->path);
        else
            rc = convert(&c);
        fp_hmap_fini(&c.live);
        fp_hmap_fini(&c.streams);
        fp_pdoc_free(&d);
    }
    free(data);
    return rc;
}
