/* What the SDK's own files share (not for policies): a growable message buffer. */
#ifndef SWITCHYARD_INTERNAL_H
#define SWITCHYARD_INTERNAL_H

#include "switchyard.h"

/* A message being built; on allocation failure it stays short, never wrong. */
typedef struct sy_text {
    char *buf;
    size_t len, cap;
} sy_text;

void sy_text_bytes(sy_text *t, const char *s, size_t n);
void sy_text_str(sy_text *t, const char *s);
void sy_text_u64(sy_text *t, uint64_t v);
/* Hands the message to `err` (which then owns it); returns false like `sy_fail`. */
bool sy_text_fail(sy_text *t, sy_error *err, sy_error_kind kind);

#endif
