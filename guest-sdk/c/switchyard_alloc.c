/* The guest's allocator: malloc, calloc, realloc and free with no libc, on the memory
 * wasm-ld leaves above the stack and data (`__heap_base`) and `memory.grow`.
 *
 * The canonical ABI calls `cabi_realloc` (the generated bindings' weak definition calls
 * `realloc`) for every list and string the host passes in, and the bindings `free` them
 * when a call ends (`score`'s answers are kept and reused: `switchyard.c`, `call`). Those sizes repeat call after call, so blocks
 * come in power-of-two size classes, each with its own free list: a freed block is
 * handed back for the next request of its class in a few instructions, and the heap of a
 * steady workload stops growing after its first call.
 *
 * Layout of a block: a 16-byte header holding its class k, then 2^k usable bytes (k >= 4),
 * 16-byte aligned: more than any WIT type needs (8), so that the lists the host copies in
 * start on a vector's boundary and a policy's `v128.load`s of them split fewer cache lines
 * (the C default policy's selection over 1,024 candidates: no slower than with 8-byte
 * alignment, and faster within noise, `--bench ratio -- c`). A block is never split, merged
 * or returned to the host: a policy's memory stays within the instance's limit
 * (`max_memory_bytes`), and growth past it traps (the host's setting). */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every function of this file is compiled for size, whatever the flags: none runs per
 * candidate, and a guest built in one clang command (docs/writing-policies-c.md's) at -O3 would
 * otherwise be ~2 KB larger. A policy's own code keeps its flags. */
#pragma clang attribute push(__attribute__((minsize)), apply_to = function)

#define PAGE 65536u
#define HEADER 16u
#define MIN_CLASS 4u
#define CLASSES 32u

extern unsigned char __heap_base;

/* Free blocks of each class, linked through their first bytes (class 4 holds 16). */
static void *free_lists[CLASSES];
/* The unused memory between the last block carved and the end of memory. */
static uintptr_t heap_next, heap_end;

/* The smallest class whose blocks hold `size` bytes; CLASSES if none does. */
static unsigned class_of(size_t size) {
    unsigned k = MIN_CLASS;
    while (k < CLASSES && ((size_t)1 << k) < size) k++;
    return k;
}

/* Carves `bytes` from the end of the heap, growing memory when needed; NULL if the host
 * refuses. */
static void *carve(size_t bytes) {
    if (heap_next == 0) {
        heap_next = ((uintptr_t)&__heap_base + 15u) & ~(uintptr_t)15u;
        heap_end = __builtin_wasm_memory_size(0) * PAGE;
    }
    if (bytes > heap_end - heap_next) {
        size_t missing = bytes - (heap_end - heap_next);
        size_t pages = (missing + PAGE - 1) / PAGE;
        if (__builtin_wasm_memory_grow(0, pages) == (size_t)-1) return NULL;
        heap_end += pages * PAGE;
    }
    void *block = (void *)heap_next;
    heap_next += bytes;
    return block;
}

void *malloc(size_t size) {
    unsigned k = class_of(size);
    if (k >= CLASSES) return NULL;
    void *user = free_lists[k];
    if (user) {
        free_lists[k] = *(void **)user;
        return user;
    }
    unsigned char *block = carve(HEADER + ((size_t)1 << k));
    if (!block) return NULL;
    *(uint32_t *)block = k;
    return block + HEADER;
}

/* The class a block returned by malloc was carved for. */
static unsigned class_of_block(void *user) {
    return *(uint32_t *)((unsigned char *)user - HEADER);
}

void free(void *user) {
    if (!user) return;
    unsigned k = class_of_block(user);
    *(void **)user = free_lists[k];
    free_lists[k] = user;
}

void *calloc(size_t count, size_t size) {
    if (size != 0 && count > (size_t)-1 / size) return NULL;
    void *user = malloc(count * size);
    if (user) memset(user, 0, count * size);
    return user;
}

void *realloc(void *user, size_t size) {
    if (!user) return malloc(size);
    unsigned k = class_of_block(user);
    if (size <= ((size_t)1 << k)) return user;
    void *grown = malloc(size);
    if (!grown) return NULL;
    memcpy(grown, user, (size_t)1 << k);
    free(user);
    return grown;
}

#pragma clang attribute pop
