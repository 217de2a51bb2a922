/* fp_file.h - how fragpool opens the files it reads and writes, in one
 * place (docs/files.md): the shim's summary and trace, the CLI's inputs.
 *
 * Invariants:
 *  - nothing here blocks on a FIFO or a device: every open is O_NONBLOCK,
 *    and anything that is not a regular file is refused before a byte is
 *    read or written;
 *  - a file is created with O_EXCL; an existing name is reused only when it
 *    is a regular file of this user (not a symlink: O_NOFOLLOW) and is
 *    truncated through the descriptor that was checked, so no other file
 *    can be clobbered;
 *  - every descriptor is O_CLOEXEC;
 *  - no allocation, no stdio, no locks: safe at exit and in the shim's dump
 *    thread.  Errors come back as an errno plus a short reason.
 */
#ifndef FP_FILE_H
#define FP_FILE_H

#include <stddef.h>

/* Opens path for reading: 0 and *fd, or an errno with why ("is a
 * directory, not a regular file", strerror, ...) in why[len]. */
int fp_file_open_read(const char *path, int *fd, char *why, size_t len);

/* Creates path for writing (mode 0644), or reuses it as said above
 * (emptied).  0 and *fd, or an errno with why in why[len]. */
int fp_file_create(const char *path, int *fd, char *why, size_t len);

/* "a directory", "a FIFO", "a symbolic link", ... for st_mode. */
const char *fp_file_kind(unsigned mode);

#endif
