/* fp_text.h - the ground floor's text and number unit: sinks (where
 * output goes), integer and fixed-point formatting, printable text, and
 * the lexical helpers every parser uses (trim, the name a typo stands
 * for).  config/, report/, shim/ and cli/
 * all write through these; none of them keeps a copy.
 *
 * Invariants:
 *  - every byte goes through an fp_sink: a caller's fixed buffer, or a file
 *    descriptor fed in chunks from an array inside the sink;
 *  - nothing here allocates, locks, or calls stdio or locale code, so all
 *    of it is safe at exit and in a signal-handed thread;
 *  - a buffer sink keeps its buffer NUL-terminated and records the first
 *    byte it had to drop as ENOSPC; an fd sink records write(2)'s errno;
 *  - an fd sink never raises SIGXFSZ (fp_write_capped): past
 *    RLIMIT_FSIZE its error is EFBIG and the program runs on.
 */
#ifndef FP_TEXT_H
#define FP_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- sink: where output goes ------------------------------------------------ */

#define FP_SINK_CHUNK 1024

/* Fields are private; use the functions.  An fd sink buffers in chunk and
 * writes with write(2); a buffer sink keeps the caller's buffer
 * NUL-terminated and never writes past it. */
typedef struct fp_sink {
    char *buf;                 /* buffer mode: the caller's buffer, or NULL     */
    size_t cap;                /* buffer mode: usable bytes (len - 1 for NUL)   */
    size_t len;                /* bytes held (buffer, or chunk not yet written) */
    size_t total;              /* bytes the emitter was asked to write          */
    int fd;                    /* >= 0: fd mode                                 */
    int err;                   /* first error: ENOSPC, or write's errno         */
    char chunk[FP_SINK_CHUNK]; /* fd mode: bytes not yet written          */
} fp_sink;

fp_sink fp_sink_buffer(char *buf, size_t len);
fp_sink fp_sink_fd(int fd);
/* Write out what an fd sink holds.  Returns the first error: 0, ENOSPC when
 * a buffer sink truncated, or write(2)'s errno. */
int fp_sink_flush(fp_sink *s);
int fp_sink_error(const fp_sink *s);
size_t fp_sink_total(const fp_sink *s);  /* bytes asked for, kept or not */
size_t fp_sink_length(const fp_sink *s); /* buffer mode: bytes kept      */

/* write(2) that never raises SIGXFSZ: to a regular file under a finite
 * RLIMIT_FSIZE, at most the bytes the limit leaves (a short write), and
 * -1 with EFBIG once the file is at the limit, where the kernel would
 * have sent the signal (fatal by default, or the program's handler). */
ssize_t fp_write_capped(int fd, const void *p, size_t n);

/* ---- numbers and text ------------------------------------------------------ */
void fp_put(fp_sink *s, const char *p, size_t n);
void fp_puts(fp_sink *s, const char *str); /* NULL writes nothing */
void fp_putc(fp_sink *s, char c);
void fp_put_pad(fp_sink *s, char c, size_t n);
void fp_put_u64(fp_sink *s, uint64_t v);
/* The decimal digits of v at out, no NUL; returns how many (1..20).  For
 * hot paths that write straight into their own buffer (the shim's trace). */
#define FP_U64_DIGITS 20
size_t fp_fmt_u64(char out[FP_U64_DIGITS], uint64_t v);
void fp_put_i64(fp_sink *s, int64_t v);
void fp_put_hex(fp_sink *s, uint64_t v); /* "0x1f"              */
/* num/den with exactly `decimals` digits, ties to even (as printf rounds
 * an exact binary value); den 0 writes "n/a". */
void fp_put_fixed(fp_sink *s, uint64_t num, uint64_t den, unsigned decimals);
/* 100*num/den with one decimal and a '%', or "n/a" when den is 0. */
void fp_put_percent(fp_sink *s, uint64_t num, uint64_t den);
/* Bytes as printable text: control characters and bytes that are not
 * valid UTF-8 become \n, \t, \r or \xNN. */
void fp_put_visible(fp_sink *s, const char *p, size_t n);
/* Display columns of UTF-8 text (continuation bytes take none). */
size_t fp_text_width(const char *p, size_t n);
/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid
 * (overlong, a surrogate, past U+10FFFF, or cut short by n). */
size_t fp_utf8_len(const unsigned char *p, size_t n);

/* ---- lexical helpers -------------------------------------------------------- */

/* A counted piece of text (not NUL-terminated). */
typedef struct fp_slice {
    const char *p;
    size_t n;
} fp_slice;

/* A key and its value, both NUL-terminated; value NULL when there is none
 * (a config entry as config/ parsed it, for the summary to show). */
typedef struct fp_kv {
    const char *key;
    const char *value;
} fp_kv;

/* ' ', \t, \n, \v, \f, \r: the white space of C's isspace in the C locale. */
int fp_is_space(char c);
/* p[0..n) without the white space at either end. */
fp_slice fp_trim(const char *p, size_t n);
/* The name of names[0..n) that word is a typo of: at most two edits (a
 * byte added, left out, changed, or two neighbours swapped), one for
 * words shorter than 6 bytes; the nearest, the first of equals; NULL when
 * none is that near.  For "did you mean" (config keys, commands). */
const char *fp_closest(fp_slice word, const char *const *names, size_t n);
/* The indices of the k (at most FP_NEAREST_MAX) names of names[0..n)
 * nearest to word, nearest first (edit distance less the longest run of
 * bytes they share; equals in table order), in out.  Returns how many:
 * min(k, n).  For an unknown key that is no typo of any. */
#define FP_NEAREST_MAX 8
size_t fp_nearest(fp_slice word, const char *const *names, size_t n, size_t *out, size_t k);

#endif
