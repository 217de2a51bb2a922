/* fp_emit.h - the writers under the summaries, on base/'s sinks: the
 * 75-column box of torch.cuda.memory_summary() (fp_emit.c), a JSON writer
 * (fp_emit.c), and PyTorch's size formats (fp_size.c).
 *
 * Invariants: no allocation, no locks, no stdio or locale (safe at exit);
 * a box line is always 77 columns; every JSON string is escaped.
 */
#ifndef FP_EMIT_H
#define FP_EMIT_H

#include <stddef.h>
#include <stdint.h>
#include "fp_text.h"

/* ---- the 75-column box of torch.cuda.memory_summary() ------------------- */
#define FP_TBL_WIDTH 75
#define FP_TBL_LABEL 21
void fp_tbl_rule(fp_sink *s, char c); /* |=====...=|        */
/* Boxed text: indent spaces then text (indent SIZE_MAX: centred); text
 * wider than the box is word-wrapped onto further lines. */
void fp_tbl_text(fp_sink *s, const char *text, size_t n, size_t indent);
/* " label | c0 | c1 | c2 | c3 " with the label padded to 21 columns. */
void fp_tbl_row(fp_sink *s, const char *label, const char *const cells[4]);
/* " label | value" boxed, the value word-wrapped onto further lines. */
void fp_tbl_kv(fp_sink *s, const char *label, const char *value, size_t n);

/* ---- JSON writer ------------------------------------------------------------ */
typedef struct fp_json {
    fp_sink *s;     /* output                                         */
    unsigned depth; /* open containers (at most 63)                   */
    uint64_t more;  /* bit d: depth d already holds a member          */
} fp_json;

void fp_json_init(fp_json *j, fp_sink *s);
/* key is the member name inside an object, NULL inside an array. */
void fp_json_obj(fp_json *j, const char *key);
void fp_json_arr(fp_json *j, const char *key);
void fp_json_end_obj(fp_json *j);
void fp_json_end_arr(fp_json *j);
void fp_json_u64(fp_json *j, const char *key, uint64_t v);
void fp_json_i64(fp_json *j, const char *key, int64_t v);
void fp_json_null(fp_json *j, const char *key);
void fp_json_str(fp_json *j, const char *key, const char *str); /* NULL: null */
void fp_json_strn(fp_json *j, const char *key, const char *p, size_t n);
/* A member from counted strings: "key":"val", or "key":null when val is
 * NULL (only inside an object). */
void fp_json_pair(fp_json *j, const char *key, size_t klen, const char *val, size_t vlen);
void fp_json_hex(fp_json *j, const char *key, uint64_t v); /* "0x.." */
void fp_json_fixed(fp_json *j, const char *key, uint64_t num, uint64_t den,
                   unsigned decimals); /* den 0: null */
/* A JSON string literal: quotes, backslashes and control characters
 * escaped, invalid UTF-8 replaced by \ufffd. */
void fp_emit_json_string(fp_sink *s, const char *p, size_t n);

/* ---- sizes (fp_size.c) ----------------------------------------------------- */

/* PyTorch's format_size (the OOM message): "512 bytes" up to 1024, then two
 * decimals of KiB up to 1 MiB, of MiB up to 1 GiB, else of GiB. */
void fp_format_size(size_t bytes, char out[32]);
void fp_emit_size(fp_sink *s, size_t bytes);
/* memory_summary's table cells, 10 columns: the unit is picked by pref
 * (the "all" row's value), "%6d B  " / KiB / MiB / GiB / TiB / PiB with
 * floor division; counts "%7d   " / K / M by thousands. */
void fp_format_size_col(int64_t v, int64_t pref, char out[24]);
void fp_format_count_col(int64_t v, int64_t pref, char out[24]);
/* A duration: "850 ns", "12.50 µs", "3.20 ms", "1.05 s". */
void fp_emit_duration(fp_sink *s, uint64_t ns);

#endif
