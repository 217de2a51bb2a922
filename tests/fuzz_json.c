/* fuzz_json.c - libFuzzer harness for the JSON reader behind `fragpool
 * report SUMMARY.json` and `fragpool merge` (report/fp_merge.c).
 *
 * Checked on every input: fp_jdoc_parse returns 0, EINVAL with the bad
 * byte inside the text, or ENOMEM; on success every token lies inside the
 * text and every string unescapes to the length it reports; and merge of
 * the same bytes (from a memfd) either writes a table or fails with one
 * line that names the file.
 */
#include "fp_report.h"
#include "fp_merge.h"
#include "fp_jread.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void check_doc(const fp_jdoc *d, size_t len)
{
    static char buf[1 << 16];
    for (int i = 0; i < d->ntok; i++) {
        const fp_jtok *t = &d->tok[i];
        if (t->start > t->end || t->end > len || t->next <= i || t->next > d->ntok)
            abort();
        if (t->type == FP_JSTR) {
            size_t n = fp_jdoc_str(d, i, buf, sizeof buf);
            if (n < sizeof buf && strlen(buf) > n)
                abort();
        }
        int64_t v;
        if (t->type != FP_JNUM && fp_jdoc_int(d, i, &v) == 0)
            abort();
    }
}

static void check_merge(const unsigned char *data, size_t size)
{
    int fd = memfd_create("fuzz_json", MFD_CLOEXEC);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) {
        if (fd >= 0)
            close(fd);
        return;
    }
    char path[64], err[512] = "";
    static char out[1 << 16];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const char *paths[1] = {path};
    fp_sink s = fp_sink_buffer(out, sizeof out);
    int rc = fp_merge_json(paths, 1, &s, err, sizeof err);
    close(fd);
    if (rc && rc != ENOSPC && (!strstr(err, path) || strchr(err, '\n')))
        abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    size_t cap = size / 2 + 2, pos = 0;
    fp_jtok *tok = malloc(cap * sizeof *tok);
    if (!tok)
        return 0;
    fp_jdoc d;
    int rc = fp_jdoc_parse(&d, (const char *)data, size, tok, cap, &pos);
    if (rc == 0)
        check_doc(&d, size);
    else if (rc == EINVAL && pos > size)
        abort();
    else if (rc != EINVAL && rc != ENOMEM)
        abort();
    free(tok);
    check_merge(data, size);
    return 0;
}
