/* The glue between the bindings wit-bindgen generates (selection_policy.h) and a policy
 * written against switchyard.h: it exports the world's functions, turns the packed
 * columns into one array per column (checking their lengths as the Rust SDK does),
 * fetches the request's lazy facts once per call, and frees what the host passed in.
 * Also the string functions a compiler may call, since nothing else defines them. */

#include <stdlib.h>
#include <string.h>

#include "selection_policy.h"
#include "switchyard_internal.h"

/* Every function of this file is compiled for size, whatever the flags: none runs per
 * candidate, and a guest built in one clang command (docs/writing-policies-c.md's) at -O3 would
 * otherwise be ~2 KB larger. A policy's own code keeps its flags. */
#pragma clang attribute push(__attribute__((minsize)), apply_to = function)

/* ---- memory and string functions (no libc) ---------------------------------------- */

/* With -mbulk-memory these builtins are single `memory.copy`/`memory.fill`
 * instructions, never calls back into these definitions. */
void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
    return __builtin_memcpy(dst, src, n);
}
void *memmove(void *dst, const void *src, size_t n) { return __builtin_memmove(dst, src, n); }
void *memset(void *dst, int c, size_t n) { return __builtin_memset(dst, c, n); }
int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return x[i] - y[i];
    return 0;
}
size_t strlen(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}
_Noreturn void abort(void) { __builtin_trap(); }

/* ---- messages ----------------------------------------------------------------------- */

void sy_text_bytes(sy_text *t, const char *s, size_t n) {
    if (t->len + n > t->cap) {
        size_t cap = (t->len + n) * 2 + 16;
        char *grown = realloc(t->buf, cap);
        if (!grown) return;
        t->buf = grown;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

void sy_text_str(sy_text *t, const char *s) { sy_text_bytes(t, s, strlen(s)); }

void sy_text_u64(sy_text *t, uint64_t v) {
    char digits[20];
    size_t i = sizeof digits;
    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    sy_text_bytes(t, digits + i, sizeof digits - i);
}

bool sy_text_fail(sy_text *t, sy_error *err, sy_error_kind kind) {
    err->kind = kind;
    err->message = t->buf;
    err->len = t->len;
    return false;
}

bool sy_fail(sy_error *err, sy_error_kind kind, const char *message) {
    sy_text t = {0};
    sy_text_str(&t, message);
    return sy_text_fail(&t, err, kind);
}

/* The policy's error as the WIT's; the host copies the message, and `configure`'s
 * post-return frees it (`score`'s and `filter`'s: `call`, at the next call). An empty
 * message gets words (an empty one would leak). */
static void to_wit(sy_error *e, exports_switchyard_policy_policy_policy_error_t *out) {
    if (e->len == 0) {
        free(e->message);
        sy_fail(e, e->kind, "the policy failed without a message");
    }
    out->kind = (switchyard_policy_types_error_kind_t)e->kind;
    out->message.ptr = (uint8_t *)e->message;
    out->message.len = e->len;
}

/* ---- the optional functions --------------------------------------------------------- */

__attribute__((weak)) bool sy_filter(const sy_request *r, const sy_candidates *c, bool *keep,
                                     sy_error *err) {
    (void)r, (void)c, (void)keep, (void)err;
    return true;
}

__attribute__((weak)) void sy_on_selected(const sy_request *r, sy_worker_rank chosen) {
    (void)r, (void)chosen;
}

/* ---- the request's lazy facts, fetched at most once per call ------------------------ */

static struct {
    bool hashes_fetched, has_hashes;
    selection_policy_list_u64_t hashes;
    bool class_fetched, has_class;
    selection_policy_string_t class_name;
    bool capacities_fetched;
    sy_capacity *capacities;
    size_t capacities_len;
} facts;

/* Frees what this call fetched: the next call describes another request. */
static void end_call(void) {
    if (facts.has_hashes) selection_policy_list_u64_free(&facts.hashes);
    if (facts.has_class) selection_policy_string_free(&facts.class_name);
    free(facts.capacities);
    memset(&facts, 0, sizeof facts);
}

bool sy_prefix_hashes(const uint64_t **hashes, size_t *len) {
    if (!facts.hashes_fetched) {
        facts.hashes_fetched = true;
        facts.has_hashes = switchyard_policy_request_prefix_hashes(&facts.hashes);
    }
    *hashes = facts.hashes.ptr;
    *len = facts.has_hashes ? facts.hashes.len : 0;
    return facts.has_hashes;
}

bool sy_policy_class(const char **name, size_t *len) {
    if (!facts.class_fetched) {
        facts.class_fetched = true;
        facts.has_class = switchyard_policy_request_policy_class(&facts.class_name);
    }
    *name = (const char *)facts.class_name.ptr;
    *len = facts.has_class ? facts.class_name.len : 0;
    return facts.has_class;
}

static sy_capacity capacity(bool known, const switchyard_policy_types_capacity_t *c) {
    sy_capacity out = {0};
    if (known) {
        out.known = true;
        out.total_kv_blocks = c->total_kv_blocks;
        out.has_max_num_batched_tokens = c->max_num_batched_tokens.is_some;
        out.max_num_batched_tokens = c->max_num_batched_tokens.val;
    }
    return out;
}

sy_capacity sy_worker_capacity(uint64_t worker_id) {
    switchyard_policy_request_capacity_t c;
    return capacity(switchyard_policy_request_worker_capacity(worker_id, &c), &c);
}

const sy_capacity *sy_candidate_capacities(size_t *len) {
    if (!facts.capacities_fetched) {
        facts.capacities_fetched = true;
        switchyard_policy_request_list_option_capacity_t list;
        switchyard_policy_request_candidate_capacities(&list);
        facts.capacities = calloc(list.len ? list.len : 1, sizeof(sy_capacity));
        if (!facts.capacities) abort();
        for (size_t i = 0; i < list.len; i++)
            facts.capacities[i] = capacity(list.ptr[i].is_some, &list.ptr[i].val);
        facts.capacities_len = list.len;
        switchyard_policy_request_list_option_capacity_free(&list);
    }
    *len = facts.capacities_len;
    return facts.capacities;
}

/* ---- the exports -------------------------------------------------------------------- */

static bool configured;
static uint8_t declared; /* sy_describe().inputs, read after each configure */

/* The host always configures first; one that does not gets the defaults (as in Rust). */
static void ensure_configured(void) {
    if (configured) return;
    sy_error e = {0};
    if (!sy_configure("{}", 2, &e)) abort();
    configured = true;
    declared = sy_describe().inputs;
}

void exports_switchyard_policy_policy_describe(exports_switchyard_policy_policy_policy_info_t *ret) {
    ensure_configured();
    sy_info info = sy_describe();
    ret->inputs = info.inputs;
    ret->filters = info.filters;
    ret->wants_commits = info.wants_commits;
}

bool exports_switchyard_policy_policy_configure(selection_policy_string_t *parameters,
                                                exports_switchyard_policy_policy_policy_error_t *err) {
    sy_error e = {0};
    bool ok = sy_configure((const char *)parameters->ptr, parameters->len, &e);
    selection_policy_string_free(parameters);
    if (!ok) {
        to_wit(&e, err);
        return false;
    }
    configured = true;
    declared = sy_describe().inputs;
    return true;
}

static sy_request request_of(const switchyard_policy_types_request_facts_t *r) {
    return (sy_request){
        .prompt_tokens = r->prompt_tokens,
        .block_size = r->block_size,
        .request_blocks = r->request_blocks,
        .has_expected_output_tokens = r->expected_output_tokens.is_some,
        .expected_output_tokens = r->expected_output_tokens.is_some ? r->expected_output_tokens.val : 0,
        .is_pinned = r->pinned.is_some,
        .pinned = r->pinned.is_some ? (sy_worker_rank){r->pinned.val.worker_id, r->pinned.val.dp_rank}
                                    : (sy_worker_rank){0, 0},
        .pool = (sy_pool)r->pool,
        .seed = r->seed,
    };
}

/* `column` has `found` entries, `expected` wanted: the Rust SDK's message. */
static bool length_error(const char *column, size_t found, size_t expected, sy_error *err) {
    sy_text t = {0};
    sy_text_str(&t, "`");
    sy_text_str(&t, column);
    sy_text_str(&t, "` has ");
    sy_text_u64(&t, found);
    sy_text_str(&t, " entries, expected ");
    sy_text_u64(&t, expected);
    return sy_text_fail(&t, err, SY_INVALID_INPUT);
}

/* Slices the packed columns of the declared groups back into one array each. */
static bool view_of(const switchyard_policy_types_candidates_t *c, sy_candidates *v, sy_error *err) {
    size_t n = c->worker_id.len;
    bool cache = declared & SY_CACHE, load = declared & SY_LOAD, affinity = declared & SY_AFFINITY;
    size_t present = 1 + (cache ? 4 : 0) + (load ? 3 : 0);
    if (c->columns.len != n * present) return length_error("columns", c->columns.len, n * present, err);
    size_t m = c->preferred_multiplier.len;
    if (m != 0 && (m != n || !affinity))
        return length_error("preferred-multiplier", m, affinity ? n : 0, err);
    const uint32_t *next = c->columns.ptr;
    *v = (sy_candidates){.len = n, .worker_id = c->worker_id.ptr};
    v->dp_rank = next, next += n;
    if (cache) {
        v->device_overlap_blocks = next, next += n;
        v->host_overlap_blocks = next, next += n;
        v->disk_overlap_blocks = next, next += n;
        v->cached_tokens = next, next += n;
    }
    if (load) {
        v->active_prefill_tokens = next, next += n;
        v->decode_blocks = next, next += n;
        v->active_requests = next;
    }
    v->preferred_multiplier = m ? c->preferred_multiplier.ptr : NULL;
    return true;
}

/* The last `score` or `filter` answer and error message. The host reads them after the
 * call returns and calls nothing in between, so an answer is not a fresh allocation
 * freed after each call but this buffer, reused, and a message lives until the next call
 * (the host makes no second call into the guest after each batch, a sizeable share of an
 * empty call, measured on the Rust SDK's noop guest: docs/benchmarks-history.md, "an
 * empty call's instructions"). */
static struct {
    unsigned char *answer;
    size_t capacity;
    char *message;
} last;

/* `score` or `filter` (`filter` true): the view, a zeroed (`filter`: all-kept) answer of
 * `width` bytes a candidate for the policy to fill, and everything the host passed freed. */
static bool call(exports_switchyard_policy_policy_request_facts_t *request,
                 exports_switchyard_policy_policy_candidates_t *candidates, size_t width, void **answer,
                 size_t *len, exports_switchyard_policy_policy_policy_error_t *err, bool filter) {
    ensure_configured();
    free(last.message);
    last.message = NULL;
    sy_request r = request_of(request);
    sy_candidates view;
    sy_error e = {0};
    bool ok = view_of(candidates, &view, &e);
    if (ok) {
        size_t bytes = view.len * width;
        if (bytes > last.capacity) {
            unsigned char *grown = realloc(last.answer, bytes);
            if (!grown) abort();
            last.answer = grown;
            last.capacity = bytes;
        }
        unsigned char *out = last.answer;
        if (bytes) memset(out, filter ? 1 : 0, bytes);
        ok = filter ? sy_filter(&r, &view, (bool *)out, &e) : sy_score(&r, &view, (double *)out, &e);
        *answer = out;
        *len = view.len;
    }
    if (!ok) {
        to_wit(&e, err);
        last.message = (char *)err->message.ptr;
    }
    exports_switchyard_policy_policy_candidates_free(candidates);
    end_call();
    return ok;
}

/* The bindings' post-returns for `score` and `filter` are weak definitions that free
 * the answer and the message: these replace them and are not exported (the bindings'
 * `export_name` is on the definitions they replace), so the component lifts the two
 * functions with no post-return, however the guest is linked. Exported, they would free
 * the reused buffer after each call. `build::c` checks that neither export is left. */
void __wasm_export_exports_switchyard_policy_policy_score_post_return(uint8_t *ret) { (void)ret; }
void __wasm_export_exports_switchyard_policy_policy_filter_post_return(uint8_t *ret) { (void)ret; }

bool exports_switchyard_policy_policy_score(exports_switchyard_policy_policy_request_facts_t *request,
                                            exports_switchyard_policy_policy_candidates_t *candidates,
                                            selection_policy_list_f64_t *ret,
                                            exports_switchyard_policy_policy_policy_error_t *err) {
    return call(request, candidates, sizeof(double), (void **)&ret->ptr, &ret->len, err, false);
}

bool exports_switchyard_policy_policy_filter(exports_switchyard_policy_policy_request_facts_t *request,
                                             exports_switchyard_policy_policy_candidates_t *candidates,
                                             selection_policy_list_bool_t *ret,
                                             exports_switchyard_policy_policy_policy_error_t *err) {
    return call(request, candidates, sizeof(bool), (void **)&ret->ptr, &ret->len, err, true);
}

void exports_switchyard_policy_policy_on_selected(exports_switchyard_policy_policy_request_facts_t *request,
                                                  exports_switchyard_policy_policy_worker_rank_t *chosen) {
    ensure_configured();
    sy_request r = request_of(request);
    sy_on_selected(&r, (sy_worker_rank){chosen->worker_id, chosen->dp_rank});
    end_call();
}

#pragma clang attribute pop
