/* The few <stdlib.h> declarations the generated bindings use, for a build with no libc.
 * Defined by the Switchyard C SDK: the allocator in switchyard_alloc.c, abort in
 * switchyard.c. */
#ifndef SWITCHYARD_FREESTANDING_STDLIB_H
#define SWITCHYARD_FREESTANDING_STDLIB_H

#include <stddef.h>

void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void free(void *ptr);
_Noreturn void abort(void);

#endif
