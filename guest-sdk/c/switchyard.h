/* The Switchyard C SDK: what a policy written in C sees.
 *
 * A policy defines `sy_describe`, `sy_configure` and `sy_score` (and, if it wants them,
 * `sy_filter` and `sy_on_selected`); the SDK's glue (switchyard.c) exports them through
 * the bindings wit-bindgen generates from wit/policy.wit, and hands them the same views
 * the Rust SDK gives: the request's facts, and the candidates as one array per column,
 * with the packing of the wire hidden. Units and absence rules are the WIT file's.
 *
 * No libc: the SDK brings its allocator (switchyard_alloc.c) and the few string
 * functions a compiler may call. Build with clang for wasm32 (see
 * docs/writing-policies-c.md). */
#ifndef SWITCHYARD_H
#define SWITCHYARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Column groups a policy reads (`sy_info.inputs`); the host sends only these. */
#define SY_CACHE 1u    /* device/host/disk overlap blocks, cached tokens */
#define SY_LOAD 2u     /* active prefill tokens, decode blocks, active requests */
#define SY_AFFINITY 4u /* preferred multiplier */

/* Which pool of a (possibly disaggregated) deployment is being routed. */
typedef enum sy_pool { SY_POOL_AGGREGATED = 0, SY_POOL_PREFILL = 1, SY_POOL_DECODE = 2 } sy_pool;

/* One data-parallel rank of one worker: the unit a selection picks. */
typedef struct sy_worker_rank {
    uint64_t worker_id;
    uint32_t dp_rank;
} sy_worker_rank;

/* The small facts passed with every call (the WIT record `request-facts`). */
typedef struct sy_request {
    uint32_t prompt_tokens;
    uint32_t block_size; /* never zero */
    uint32_t request_blocks;
    bool has_expected_output_tokens;
    uint32_t expected_output_tokens;
    bool is_pinned;
    sy_worker_rank pinned;
    sy_pool pool;
    uint64_t seed; /* the only randomness a policy may use */
} sy_request;

/* The candidates as columns: row i of every array is the same candidate. The arrays of
 * groups the policy did not declare are NULL; `preferred_multiplier` is NULL also when no
 * preference applies to any candidate (every multiplier would be 1.0). Valid during the
 * call only. */
typedef struct sy_candidates {
    size_t len;
    const uint64_t *worker_id;
    const uint32_t *dp_rank;
    /* SY_CACHE */
    const uint32_t *device_overlap_blocks;
    const uint32_t *host_overlap_blocks;
    const uint32_t *disk_overlap_blocks;
    const uint32_t *cached_tokens;
    /* SY_LOAD */
    const uint32_t *active_prefill_tokens;
    const uint32_t *decode_blocks;
    const uint32_t *active_requests;
    /* SY_AFFINITY */
    const double *preferred_multiplier;
} sy_candidates;

/* What a policy tells the host about itself. */
typedef struct sy_info {
    uint8_t inputs; /* SY_CACHE | SY_LOAD | SY_AFFINITY */
    bool filters;
    bool wants_commits;
} sy_info;

typedef enum sy_error_kind {
    SY_INVALID_PARAMETERS = 0,
    SY_INVALID_INPUT = 1,
    SY_INTERNAL = 2,
} sy_error_kind;

/* A policy's own error, filled by `sy_fail`. */
typedef struct sy_error {
    sy_error_kind kind;
    char *message; /* owned: the SDK frees it once the host has copied it */
    size_t len;
} sy_error;

/* A worker's advertised capacity; `known` false for an unknown worker or one that
 * advertised zero blocks. */
typedef struct sy_capacity {
    bool known;
    uint32_t total_kv_blocks;
    bool has_max_num_batched_tokens;
    uint32_t max_num_batched_tokens;
} sy_capacity;

/* ---- What the policy defines ------------------------------------------------------- */

/* Applies the tenant's parameters (JSON, not NUL-terminated; "{}" for defaults). Called
 * before any other call of an instance. False with `err` filled (by `sy_fail`) refuses. */
bool sy_configure(const char *json, size_t len, sy_error *err);
/* The groups it reads and whether it filters or wants commits. */
sy_info sy_describe(void);
/* One finite cost per candidate into `costs` (c->len entries, zeroed), lower is better. */
bool sy_score(const sy_request *r, const sy_candidates *c, double *costs, sy_error *err);
/* Optional: which candidates to keep (`keep` comes all true). Needs `filters`. */
bool sy_filter(const sy_request *r, const sy_candidates *c, bool *keep, sy_error *err);
/* Optional: the host accepted `chosen` (not for dry runs). Needs `wants_commits`. */
void sy_on_selected(const sy_request *r, sy_worker_rank chosen);

/* ---- What the SDK gives ------------------------------------------------------------ */

/* Fills `err` with a copy of the NUL-terminated `message`; returns false, so a policy
 * writes `return sy_fail(err, SY_INVALID_INPUT, "…");`. */
bool sy_fail(sy_error *err, sy_error_kind kind, const char *message);

/* Facts fetched from the host on demand (each first use in a call is a host call). The
 * memory they point to is the SDK's, valid until the current call returns. */
/* The chained prefix hashes; false when the host tracks none (a prefill pool). */
bool sy_prefix_hashes(const uint64_t **hashes, size_t *len);
/* The request's policy class (not NUL-terminated); false when it has none. */
bool sy_policy_class(const char **name, size_t *len);
/* One worker's capacity. */
sy_capacity sy_worker_capacity(uint64_t worker_id);
/* Every candidate's capacity, in row order (c->len entries). */
const sy_capacity *sy_candidate_capacities(size_t *len);

/* One number parameter for `sy_parse_numbers`: its JSON name, where to store it, and
 * the closed range it must lie in (a message names the field otherwise, and writes the
 * range when both ends are whole numbers or ±∞). `present`, if not NULL, says whether the
 * JSON gave it; then `null` is accepted as absent. `integer` true refuses a number the
 * Rust SDK would not read into an integer field (`1.5`, `2.0`, `1e3`, `-0`); the value is
 * still stored as a double, exact up to 2^53 (keep `max` within that). */
typedef struct sy_number_param {
    const char *name;
    double *value;
    double min, max;
    bool *present;
    bool integer;
} sy_number_param;

/* Reads `json`, an object whose members are all among `params` (numbers, or `null` for
 * optional ones): an unknown, duplicate, ill-typed or out-of-range member fails with a
 * message naming the field (field `x`: …), as the Rust SDK's parameter reader does (an
 * unknown field's message lists the fields of `params`, in their order).
 * Numbers become the same doubles as the Rust SDK's reader gives (serde_json's conversion). */
bool sy_parse_numbers(const char *json, size_t len, const sy_number_param *params, size_t count,
                      sy_error *err);

#ifdef __cplusplus
}
#endif

#endif
