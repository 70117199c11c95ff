/* A test guest in C that reads every lazy fact through the C SDK, so a test can check
 * what the SDK hands over: cost_i = 1e6 × (number of prefix hashes) + Σ hashes
 *                                 + 1e3 × (length of the policy class)
 *                                 + total KV blocks / 1024 (0 if unknown).
 * It fails the call (invalid-input) if `sy_worker_capacity` disagrees with
 * `sy_candidate_capacities`, or a second read of a fact differs from the first. */

#include "switchyard.h"

bool sy_configure(const char *json, size_t len, sy_error *err) {
    return sy_parse_numbers(json, len, 0, 0, err);
}

sy_info sy_describe(void) { return (sy_info){0, false, false}; }

bool sy_score(const sy_request *r, const sy_candidates *c, double *costs, sy_error *err) {
    (void)r;
    const uint64_t *hashes, *again;
    size_t n_hashes = 0, n_again = 0;
    double prefix = 0.0;
    if (sy_prefix_hashes(&hashes, &n_hashes)) {
        prefix = 1e6 * (double)n_hashes;
        for (size_t i = 0; i < n_hashes; i++) prefix += (double)hashes[i];
    }
    sy_prefix_hashes(&again, &n_again);
    const char *name;
    size_t name_len = 0;
    double class_cost = sy_policy_class(&name, &name_len) ? 1e3 * (double)name_len : 0.0;
    size_t n_capacities;
    const sy_capacity *capacities = sy_candidate_capacities(&n_capacities);
    if (again != hashes || n_again != n_hashes || n_capacities != c->len)
        return sy_fail(err, SY_INVALID_INPUT, "a fact read twice differed");
    for (size_t i = 0; i < c->len; i++) {
        sy_capacity one = sy_worker_capacity(c->worker_id[i]);
        if (one.known != capacities[i].known || one.total_kv_blocks != capacities[i].total_kv_blocks)
            return sy_fail(err, SY_INVALID_INPUT, "worker and candidate capacities differ");
        costs[i] = prefix + class_cost + (one.known ? (double)one.total_kv_blocks / 1024.0 : 0.0);
    }
    return true;
}
