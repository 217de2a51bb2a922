/* cli_replay_report.c - the summary of a replay as the shim would write
 * it (fp_cli_replay_report, cli.h): the glue between replay/'s result and
 * report/'s summary that `fragpool replay` prints and `fragpool report`
 * embeds in its page.  Its own file so that each command calls it here
 * and no cmd_*.c calls into another.
 *
 * Invariants: both commands get the summary from this one function, so
 * the page's summary is the one `fragpool replay` prints for the same
 * trace, settings and budget; the device is the simulated one, with the
 * budget as its capacity; the shim's groups are null in a replay and keep
 * their keys, filled by id through report/fp_groups.h (never by slot
 * number); the settings listed are those a replay reads (thread_cache_mb
 * only when the trace's threads joined the front end: then the "Thread
 * caches" group is there too, filled as the shim fills it).
 */
#include "cli.h"
#include "fp_groups.h"
#include "fp_report.h"
#include "fp_trace.h"
#include <string.h>

/* Drops the settings a replay does not read from the n entries e:
 * thread_cache_mb unless the trace's threads joined the front end. */
static size_t replayed_only(fp_kv *e, unsigned char *set, size_t n, bool threads)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (threads || strcmp(e[i].key, "thread_cache_mb") != 0) {
            set[k] = set[i];
            e[k++] = e[i];
        }
    return k;
}

void fp_cli_replay_report(fp_pool *p, const fp_replay_result *r, const fp_conf *c, size_t budget,
                          fp_replay_report *out)
{
    out->dev = (fp_dev_report){.device = 0,
                               .device_name = "replay (simulated device)",
                               .total_capacity = budget,
                               .device_free = (size_t)-1,
                               .replay = 1};
    fp_report_fill_pool(&out->dev, p, &r->stats, out->leaks);
    out->dev.segments_why = fp_segments_why(c->pool.expandable_segments, fp_pool_is_vmm(p));
    /* The shim's groups are null in a replay (no driver, no deferral, no
     * IPC): report/'s table keeps their keys, as in the shim's summary. */
    fp_report_groups_init(&out->dev, out->groups);
    fp_group trace;
    fp_replay_trace_group(r, out->trace_rows, &trace);
    fp_report_group_set(out->groups, FP_GROUP_TRACE, &trace);
    fp_group front;
    bool threads = fp_replay_front_group(p, out->front_rows, &front);
    if (threads)
        fp_report_group_set(out->groups, FP_GROUP_THREADS, &front);
    size_t n = fp_conf_entries(c, out->entries, FP_CONF_MAX_OPTIONS, out->conf, sizeof out->conf);
    for (size_t i = 0; i < n; i++)
        out->set[i] = !fp_conf_is_default(c, i);
    n = replayed_only(out->entries, out->set, n, threads);
    out->run = (fp_run_report){.pid = 0,
                               .rank = -1,
                               .config = out->entries,
                               .nconfig = n,
                               .config_set = out->set,
                               .mode = "replay",
                               .devs = &out->dev,
                               .ndevs = 1};
}
