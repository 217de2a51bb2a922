/* report_html.c - writes the page of `fragpool report`.
 *
 * The page is the template cli/report_page.html, compiled into the binary
 * as bytes (cli/CMakeLists.txt turns it into report_page.inc).  The writer
 * copies it and replaces each marker "<!--fp:NAME-->" with generated text:
 * TITLE, SUBTITLE and FINDING (HTML-escaped), TEXT (the text summary, HTML-escaped)
 * and DATA (JSON blocks in <script type="application/json">, read by the
 * page's own script).  The data is written with report/'s JSON writer.
 *
 * Why '<' becomes \u003c inside the JSON blocks: a string holding
 * "</script>" (a file name, a device name) would otherwise end the block
 * early.  In JSON '<' can only occur inside strings, where \u003c means
 * the same character, so the rewrite never changes the data.
 */
#include "report_html.h"
#include "fp_vec.h"
#include "fp_report.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char page_template[] = {
#include "report_page.inc"
    0};

static void put_html_text(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (p[i]) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(p[i], f);
        }
    }
}

static void put_script_json(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '<')
            fputs("\\u003c", f);
        else
            fputc(p[i], f);
    }
}

/* ---- the data block --------------------------------------------------------- */

static void emit_u64s(fp_json *j, const char *key, const uint64_t *v, size_t n)
{
    fp_json_arr(j, key);
    for (size_t i = 0; i < n; i++)
        fp_json_u64(j, NULL, v[i]);
    fp_json_end_arr(j);
}

static void emit_segment(fp_json *j, const fp_html_page *pg, const fp_html_segment *s)
{
    fp_json_obj(j, NULL);
    fp_json_hex(j, "a", s->addr);
    fp_json_u64(j, "s", s->size);
    fp_json_u64(j, "p", (uint64_t)s->small);
    fp_json_arr(j, "b"); /* size, state, requested; per block */
    for (size_t i = s->first; i < s->first + s->n; i++) {
        fp_json_u64(j, NULL, pg->blocks[i].size);
        fp_json_u64(j, NULL, (uint64_t)pg->blocks[i].state);
        fp_json_u64(j, NULL, pg->blocks[i].requested);
    }
    fp_json_end_arr(j);
    fp_json_end_obj(j);
}

/* A range: its runs of mapped and unmapped pages up to its last mapped
 * one ("r": size, mapped; per run), and "t", the address space after it
 * that was never needed. */
static void emit_range(fp_json *j, const fp_html_page *pg, const fp_html_range *r)
{
    size_t n = r->n, used = 0;
    while (n && !pg->runs[r->first + n - 1].mapped)
        n--;
    fp_json_obj(j, NULL);
    fp_json_hex(j, "a", r->addr);
    fp_json_u64(j, "s", r->size);
    fp_json_u64(j, "p", (uint64_t)r->small);
    fp_json_arr(j, "r");
    for (size_t i = r->first; i < r->first + n; i++) {
        fp_json_u64(j, NULL, pg->runs[i].size);
        fp_json_u64(j, NULL, (uint64_t)pg->runs[i].mapped);
        used += pg->runs[i].size;
    }
    fp_json_end_arr(j);
    fp_json_u64(j, "t", r->size - used);
    fp_json_end_obj(j);
}

static void emit_trace_parts(fp_json *j, const fp_html_page *pg)
{
    if (pg->npoints) {
        fp_json_obj(j, "timeline");
        fp_json_u64(j, "step", pg->step);
        emit_u64s(j, "allocated", pg->allocated_max, pg->npoints);
        emit_u64s(j, "reserved", pg->reserved_max, pg->npoints);
        fp_json_end_obj(j);
    }
    if (pg->snapshot_what) {
        fp_json_obj(j, "snapshot");
        fp_json_str(j, "what", pg->snapshot_what);
        fp_json_u64(j, "event", pg->snapshot_event);
        fp_json_end_obj(j);
        fp_json_arr(j, "segments");
        for (size_t i = 0; i < pg->nsegs; i++)
            emit_segment(j, pg, &pg->segs[i]);
        fp_json_end_arr(j);
        if (pg->nranges) {
            fp_json_arr(j, "ranges");
            for (size_t i = 0; i < pg->nranges; i++)
                emit_range(j, pg, &pg->ranges[i]);
            fp_json_end_arr(j);
        }
    }
    if (pg->hist_count && pg->hist_bytes) {
        fp_json_obj(j, "histogram");
        emit_u64s(j, "count", pg->hist_count, FP_HIST_BINS);
        emit_u64s(j, "bytes", pg->hist_bytes, FP_HIST_BINS);
        fp_json_end_obj(j);
    }
}

static void emit_data(fp_sink *s, const fp_html_page *pg)
{
    fp_json j;
    fp_json_init(&j, s);
    fp_json_obj(&j, NULL);
    fp_json_str(&j, "kind", pg->events ? "trace" : "summary");
    fp_json_str(&j, "title", pg->title);
    fp_json_u64(&j, "events", pg->events);
    if (pg->budget)
        fp_json_u64(&j, "budget", pg->budget);
    else
        fp_json_null(&j, "budget");
    emit_trace_parts(&j, pg);
    fp_json_end_obj(&j);
}

static int render_page_data(const void *pg, fp_sink *s)
{
    emit_data(s, pg);
    return fp_sink_error(s);
}

/* The data block in a malloc'd buffer (fp_render_alloc). */
static int render_data(const fp_html_page *pg, char **out, size_t *len)
{
    return fp_render_alloc(render_page_data, pg, 1 << 16, out, len);
}

/* ---- the page ----------------------------------------------------------------- */

static void put_str(FILE *f, const char *s)
{
    if (s)
        put_html_text(f, s, strlen(s));
}

static void put_data(FILE *f, const fp_html_page *pg, const char *data, size_t dlen)
{
    fputs("<script type=\"application/json\" id=\"fp-data\">", f);
    put_script_json(f, data, dlen);
    fputs("</script>\n", f);
    if (pg->summary_json) {
        fputs("<script type=\"application/json\" id=\"fp-summary\">", f);
        put_script_json(f, pg->summary_json, pg->summary_json_len);
        fputs("</script>\n", f);
    }
}

static void put_marker(FILE *f, const char *name, size_t n, const fp_html_page *pg,
                       const char *data, size_t dlen)
{
    if (n == 5 && !memcmp(name, "TITLE", 5))
        put_str(f, pg->title);
    else if (n == 8 && !memcmp(name, "SUBTITLE", 8))
        put_str(f, pg->subtitle);
    else if (n == 7 && !memcmp(name, "FINDING", 7) && pg->finding)
        put_str(f, pg->finding);
    else if (n == 4 && !memcmp(name, "TEXT", 4) && pg->summary_text)
        put_html_text(f, pg->summary_text, pg->summary_text_len);
    else if (n == 4 && !memcmp(name, "DATA", 4))
        put_data(f, pg, data, dlen);
}

int fp_html_write(FILE *f, const fp_html_page *pg)
{
    char *data;
    size_t dlen;
    int err = render_data(pg, &data, &dlen);
    if (err)
        return err;
    static const char open[] = "<!--fp:";
    const char *p = page_template;
    for (const char *m; (m = strstr(p, open));) {
        const char *name = m + sizeof open - 1, *close = strstr(name, "-->");
        if (!close)
            break;
        fwrite(p, 1, (size_t)(m - p), f);
        put_marker(f, name, (size_t)(close - name), pg, data, dlen);
        p = close + 3;
    }
    fputs(p, f);
    free(data);
    return ferror(f) ? (errno ? errno : EIO) : 0;
}
