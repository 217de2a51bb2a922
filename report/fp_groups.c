/* fp_groups.c - a device's counter groups, filled from the one table of
 * their keys and labels (FP_DEV_GROUPS in fp_groups.h).
 *
 * Invariants: a slot's key and label are only ever the table's row of
 * its FP_GROUP_<ID>; the slots are in table order, the order the JSON and
 * the text show.  Neither function allocates, locks or calls stdio, so
 * both are safe at exit (the shim fills its groups there).
 */
#include "fp_groups.h"
#include "fp_assert.h"
#include <string.h>

typedef struct group_name {
    const char *key;   /* JSON member of the device */
    const char *label; /* text row label            */
    bool omit;         /* JSON: no member when absent */
} group_name;

static const group_name group_names[FP_DEV_NGROUPS] = {
#define FP_DEV_GROUP_NAME(id, key, label, omit) [FP_GROUP_##id] = {key, label, omit},
    FP_DEV_GROUPS(FP_DEV_GROUP_NAME)
#undef FP_DEV_GROUP_NAME
};

void fp_report_groups_init(fp_dev_report *d, fp_group g[FP_DEV_NGROUPS])
{
    for (size_t i = 0; i < FP_DEV_NGROUPS; i++)
        g[i] = (fp_group){
            .key = group_names[i].key, .label = group_names[i].label, .omit = group_names[i].omit};
    d->groups = g;
    d->ngroups = FP_DEV_NGROUPS;
}

void fp_report_group_set(fp_group g[FP_DEV_NGROUPS], fp_dev_group_id id, const fp_group *with)
{
    fp_assert((unsigned)id < FP_DEV_NGROUPS, "a row of FP_DEV_GROUPS");
    const group_name *n = &group_names[id];
    fp_assert(!with->key || strcmp(with->key, n->key) == 0, "a caller's own key is the table's");
    fp_assert(!with->label || strcmp(with->label, n->label) == 0,
              "a caller's own label is the table's");
    g[id] = *with;
    g[id].key = n->key;
    g[id].label = n->label;
    g[id].omit = n->omit;
}
