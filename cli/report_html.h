/* report_html.h - the data of `fragpool report` and the one function that
 * writes it as a self-contained HTML page (report_html.c, on the template
 * report_page.html).
 */
#ifndef FP_REPORT_HTML_H
#define FP_REPORT_HTML_H

#include "fp_pool.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FP_HIST_BINS 64 /* bin k: requests in [2^k, 2^(k+1)); 0 B goes in bin 0 */

typedef struct fp_html_block {
    size_t size;      /* block bytes                          */
    size_t requested; /* bytes asked for; 0 when free         */
    int state;        /* 0 free, 1 allocated, 2 pending reuse */
} fp_html_block;

typedef struct fp_html_segment {
    uint64_t addr;   /* device address                        */
    size_t size;     /* segment bytes                         */
    int small;       /* 1: small pool                         */
    size_t first, n; /* its blocks: blocks[first .. first+n)  */
} fp_html_segment;

/* Virtual-memory segments: a reserved range and its runs of pages. */
typedef struct fp_html_run {
    size_t size; /* whole pages                           */
    int mapped;  /* 1: physical pages behind them         */
} fp_html_run;

typedef struct fp_html_range {
    uint64_t addr;   /* the range's first byte                */
    size_t size;     /* its address space                     */
    int small;       /* 1: small pool                         */
    size_t first, n; /* its runs: runs[first .. first+n), in address order */
} fp_html_range;

typedef struct fp_html_page {
    const char *title;    /* the input's file name                       */
    const char *subtitle; /* one line: what was replayed, how            */
    const char *finding;  /* the page's lead: fragmentation, OOMs and the
                                 verdict on the setting; NULL: none          */
    /* trace input only (NULL/0 otherwise) */
    size_t events; /* events replayed                             */
    size_t budget; /* 0 = none                                    */
    size_t step;   /* events per timeline point                   */
    size_t npoints;
    const uint64_t *allocated_max, *reserved_max; /* per point: the highest   */
    const char *snapshot_what;                    /* "peak reserved", ...; NULL = no segment map */
    size_t snapshot_event;                        /* the map is the state after this many events */
    const fp_html_segment *segs;
    size_t nsegs;
    const fp_html_block *blocks;
    const fp_html_range *ranges; /* virtual-memory segments at the same event */
    size_t nranges;
    const fp_html_run *runs;
    const uint64_t *hist_count, *hist_bytes; /* FP_HIST_BINS each, or NULL   */
    /* both inputs */
    const char *summary_json; /* a JSON summary (docs/summary.md), or NULL    */
    size_t summary_json_len;
    const char *summary_text; /* the text summary, or NULL                   */
    size_t summary_text_len;
} fp_html_page;

/* Write the page to f.  0, or an errno (ENOMEM, or the stream's error). */
int fp_html_write(FILE *f, const fp_html_page *pg);

#endif
