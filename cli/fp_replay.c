/* fp_replay.c - runs a trace through the pool on a simulated device.
 *
 * The simulated backend is a bump allocator over a 2 MiB-aligned address
 * space, with an optional budget: a reserve that would take the bytes in
 * use past it fails with ENOMEM, as a full device would.  Trace ids map to
 * addresses through an open-addressing table.
 */
#include "fp_trace.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct sim_dev {
    uint64_t next;     /* next address to hand out   */
    size_t in_use;     /* bytes reserved now         */
    size_t budget;     /* 0 = unlimited              */
} sim_dev;

static int sim_reserve(void *ctx, size_t size, uint64_t *addr)
{
    sim_dev *d = ctx;
    if (d->budget && (size > d->budget || d->in_use > d->budget - size))
        return ENOMEM;
    *addr = d->next;
    d->next += (size + FP_ROUND_LARGE - 1) & ~(uint64_t)(FP_ROUND_LARGE - 1);
    d->in_use += size;
    return 0;
}

static int sim_release(void *ctx, uint64_t addr, size_t size)
{
    sim_dev *d = ctx;
    (void)addr;
    d->in_use -= size;
    return 0;
}

/* id -> address; 0 marks an empty slot (ids are stored +1). */
typedef struct idmap {
    uint64_t *key, *val;
    size_t mask, count;
} idmap;

static size_t slot_of(const idmap *m, uint64_t key)
{
    size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull >> 17) & m->mask;
    while (m->key[i] && m->key[i] != key)
        i = (i + 1) & m->mask;
    return i;
}

static int idmap_init(idmap *m, size_t n)
{
    size_t cap = 1024;
    while (cap < n * 2)
        cap *= 2;
    m->key = calloc(cap, sizeof *m->key);
    m->val = calloc(cap, sizeof *m->val);
    m->mask = cap - 1;
    m->count = 0;
    return m->key && m->val ? 0 : ENOMEM;
}

static void idmap_fini(idmap *m)
{
    free(m->key);
    free(m->val);
}

/* Backward-shift delete keeps probe runs intact. */
static void idmap_erase(idmap *m, size_t i)
{
    m->key[i] = 0;
    for (size_t j = (i + 1) & m->mask; m->key[j]; j = (j + 1) & m->mask) {
        size_t home = (size_t)(m->key[j] * 0x9E3779B97F4A7C15ull >> 17) & m->mask;
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            m->key[i] = m->key[j];
            m->val[i] = m->val[j];
            m->key[j] = 0;
            i = j;
        }
    }
    m->count--;
}

static void replay_event(fp_pool *p, idmap *m, const fp_trace_event *e, size_t idx,
                         fp_replay_result *r)
{
    size_t i = slot_of(m, e->id + 1);
    if (e->op == 'a') {
        uint64_t addr;
        if (m->key[i] || fp_pool_alloc(p, e->size, &addr)) {
            if (!m->key[i] && r->ooms++ == 0) {
                r->first_oom_event = idx;
                fp_pool_last_oom(p, &r->first_oom);
            }
            return;
        }
        m->key[i] = e->id + 1;
        m->val[i] = addr;
        m->count++;
        return;
    }
    if (!m->key[i]) {
        r->bad_frees++;
        return;
    }
    fp_pool_free(p, m->val[i]);
    idmap_erase(m, i);
}

int fp_replay(const fp_trace *t, const fp_pool_opts *opts, size_t budget,
              fp_replay_result *r, fp_pool **keep)
{
    return fp_replay_ex(t, opts, budget, NULL, r, keep);
}

/* Stops at the hook's request or, with stop_at_oom, at the first refusal. */
static void replay_all(fp_pool *p, idmap *m, const fp_trace *t, const fp_replay_hook *h,
                       fp_replay_result *r)
{
    size_t i = 0;
    while (i < t->n) {
        size_t ooms = r->ooms;
        replay_event(p, m, &t->ev[i], i, r);
        i++;
        if (h && h->stop_at_oom && r->ooms != ooms)
            break;
        if (h && h->after_event && h->after_event(h->ud, p, i - 1, r->ooms != ooms))
            break;
    }
    r->events = i;
}

int fp_replay_ex(const fp_trace *t, const fp_pool_opts *opts, size_t budget,
                 const fp_replay_hook *h, fp_replay_result *r, fp_pool **keep)
{
    sim_dev dev = {.next = 0x7f0000000000ull, .budget = budget};
    fp_backend be = {.ctx = &dev, .reserve = sim_reserve, .release = sim_release};
    fp_pool_opts o = *opts;
    if (!o.device_total)
        o.device_total = budget;
    fp_pool *p;
    int err = fp_pool_create(&o, &be, &p);
    if (err)
        return err;
    idmap m;
    if (idmap_init(&m, t->n)) {
        idmap_fini(&m);
        fp_pool_destroy(p, 0);
        return ENOMEM;
    }
    memset(r, 0, sizeof *r);
    r->first_oom_event = t->n;
    replay_all(p, &m, t, h, r);
    fp_pool_get_stats(p, &r->stats);
    idmap_fini(&m);
    if (keep)
        *keep = p;
    else
        fp_pool_destroy(p, 1);
    return 0;
}

/* One pass with the id table holding rounded sizes instead of addresses. */
size_t fp_trace_peak_live(const fp_trace *t, const fp_pool_opts *opts)
{
    idmap m;
    if (idmap_init(&m, t->n)) {
        idmap_fini(&m);
        return 0;
    }
    size_t live = 0, peak = 0;
    for (size_t k = 0; k < t->n; k++) {
        const fp_trace_event *e = &t->ev[k];
        size_t i = slot_of(&m, e->id + 1);
        if (e->op == 'a' && !m.key[i]) {
            m.key[i] = e->id + 1;
            m.val[i] = fp_round_size(opts, (size_t)e->size);
            m.count++;
            live += (size_t)m.val[i];
            peak = live > peak ? live : peak;
        } else if (e->op == 'f' && m.key[i]) {
            live -= (size_t)m.val[i];
            idmap_erase(&m, i);
        }
    }
    idmap_fini(&m);
    return peak;
}
