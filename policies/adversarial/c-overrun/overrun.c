/* Hostile, in C: `score` writes costs past the end of the array it was given, on and on
 * (a buffer overflow), until the store falls off the end of its linear memory. The
 * sandbox turns that into a `trap`; nothing outside the instance's memory is touched. */

#include "switchyard.h"

bool sy_configure(const char *json, size_t len, sy_error *err) {
    (void)json, (void)len, (void)err;
    return true;
}

sy_info sy_describe(void) { return (sy_info){SY_LOAD, false, false}; }

bool sy_score(const sy_request *r, const sy_candidates *c, double *costs, sy_error *err) {
    (void)r, (void)err;
    /* `volatile`: the compiler may not prove the loop endless and drop it. */
    volatile double *out = costs;
    for (size_t i = 0;; i++) out[i] = (double)c->decode_blocks[i % c->len];
    return true;
}
