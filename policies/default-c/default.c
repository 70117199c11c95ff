/* Dynamo's default worker-selection cost, written in C against the Switchyard C SDK:
 * the same rule as policies/default (Rust), from the same published formula
 * (ai-dynamo/dynamo, `DefaultWorkerSelector`, current form), with the same float
 * operations in the same order, so that the costs are bit-identical.
 *
 * Per candidate w, in blocks (lower is better):
 *   decay_w  = 1 / (1 + d · ((pf_w − min pf) / B) / max(request_blocks, 1))   (1 if d = 0 or no prefill tracking)
 *   credit_w = c · decay_w · dev_w + h · host_w + k · disk_w
 *   prefill  = ((pf_w + max(isl − cached_w, 0)) + cached_w) / B               (0 in a decode pool)
 *   logit_w  = scale · max(0, prefill − credit_w) + decode_w + a · req_w
 *   decode pool with c > 0:  logit_w = max(0, decode_w − credit_w) + a · req_w
 *   cost_w   = logit_w · preferred_multiplier_w                               (not for a pinned request) */

#include "switchyard.h"

/* Dynamo's defaults (`KvRouterConfig`); the deprecated overlap_score_weight applied. */
static struct parameters {
    double credit;       /* c, overlap_score_credit, [0, 1] */
    double decay;        /* d, overlap_score_credit_decay */
    double scale;        /* prefill_load_scale */
    double request;      /* a, decode_active_request_weight */
    double host, disk;   /* h, k: host_cache_hit_weight, disk_cache_hit_weight */
} p = {1.0, 0.0, 1.0, 0.0, 0.75, 0.25};

/* What `configure` reads into: checked, then applied to `p`. */
static struct parameters read;
static double weight;
static bool has_weight;
#define INF __builtin_inf()
static const sy_number_param params[] = {
    {"overlap_score_credit", &read.credit, 0.0, 1.0, 0},
    {"overlap_score_credit_decay", &read.decay, 0.0, INF, 0},
    {"prefill_load_scale", &read.scale, 0.0, INF, 0},
    {"decode_active_request_weight", &read.request, 0.0, INF, 0},
    {"host_cache_hit_weight", &read.host, 0.0, INF, 0},
    {"disk_cache_hit_weight", &read.disk, 0.0, INF, 0},
    {"overlap_score_weight", &weight, 0.0, INF, &has_weight},
};

bool sy_configure(const char *json, size_t len, sy_error *err) {
    read = (struct parameters){1.0, 0.0, 1.0, 0.0, 0.75, 0.25};
    if (!sy_parse_numbers(json, len, params, sizeof params / sizeof params[0], err)) return false;
    if (has_weight) {
        /* Dynamo: the old weight is the prefill scale, and 0 also drops the credit. */
        read.scale = weight;
        if (weight == 0.0) read.credit = 0.0;
    }
    p = read;
    return true;
}

sy_info sy_describe(void) { return (sy_info){SY_CACHE | SY_LOAD | SY_AFFINITY, false, false}; }

/* max(0, x) as a compare and select: one vector instruction (Rust's policy does the same). */
static inline __attribute__((always_inline)) double positive_part(double x) { return x > 0.0 ? x : 0.0; }

static inline __attribute__((always_inline)) uint32_t saturating_sub(uint32_t a, uint32_t b) {
    return a > b ? a - b : 0;
}

static inline __attribute__((always_inline)) uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* Four rows a vector step, two steps interleaved (what the Rust guests are built with):
 * four u32 rows load with one `v128.load`, where two rows (clang's choice for f64) load
 * with `v128.load64_zero`, which Cranelift lowers through a general register. */
#define WIDE_LOOP _Pragma("clang loop vectorize_width(4) interleave_count(2)")

/* The per-batch constants, and the columns the cost reads as `restrict` pointers (no
 * column aliases the costs), so that each loop vectorises. */
typedef struct rows {
    const uint32_t *restrict pf, *restrict dev, *restrict host, *restrict disk, *restrict cached,
        *restrict decode, *restrict requests;
    double block_size, per_block, request_blocks;
    uint32_t isl, min_pf;
} rows;

/* c · decay_w · dev_w + h · host_w + k · disk_w; without decay c · 1.0 is c exactly. */
static inline __attribute__((always_inline)) double credit(const struct parameters *q, const rows *r,
                                                           size_t i, bool decays) {
    double device = q->credit;
    if (decays) {
        double excess = (double)saturating_sub(r->pf[i], r->min_pf) / r->block_size;
        double decay = 1.0 / (1.0 + q->decay * (excess / r->request_blocks));
        device = q->credit * decay;
    }
    return device * (double)r->dev[i] + q->host * (double)r->host[i] + q->disk * (double)r->disk[i];
}

/* Three loops, where the Rust policy has five: each vectorised loop is ~1 KB of the
 * component, built here to stay small. Dynamo's defaults (a power-of-two block) in an
 * aggregated or prefill pool, and in a decode pool, have a loop each; every other case
 * shares one loop that computes what each case needs and selects.
 *
 * The common loop does less, bit-identically: tokens / B is tokens · (1/B), 1/B being
 * exact (the same real number, rounded once the same way; a multiplication where the
 * division would be the loop's slowest instruction), and the request term 0 · r is +0,
 * which leaves every cost as it is (a cost here is never −0), so it is neither computed
 * nor its column read. */
static void score_common(const rows *r, size_t n, double *restrict costs) {
    const struct parameters q = p;
    WIDE_LOOP
    for (size_t i = 0; i < n; i++) {
        double cr = credit(&q, r, i, false);
        double raw = (double)r->pf[i] + (double)max_u32(r->isl, r->cached[i]);
        costs[i] = q.scale * positive_part(raw * r->per_block - cr) + (double)r->decode[i];
    }
}

/* The decode pool with credit: no prefill term, and no decay (it tracks no prefill). */
static void score_decode(const rows *r, size_t n, double *restrict costs) {
    const struct parameters q = p;
    WIDE_LOOP
    for (size_t i = 0; i < n; i++)
        costs[i] = positive_part((double)r->decode[i] - credit(&q, r, i, false)) + q.request * (double)r->requests[i];
}

/* Every other case: the decay, a request weight, a block that is not a power of two, a
 * decode pool without credit (no prefill term: 0). Compiled for size (`minsize`: the
 * loop-invariant branches are not unswitched into a loop each), vectorised all the same
 * (the pragma); each select picks a value computed as the case's own loop would. */
__attribute__((minsize)) static void score_general(const rows *r, size_t n, double *restrict costs,
                                                   bool tracks_prefill, bool decays) {
    const struct parameters q = p;
    _Pragma("clang loop vectorize(enable) vectorize_width(4) interleave_count(1)")
    for (size_t i = 0; i < n; i++) {
        /* Dynamo's (pf + max(isl − cached, 0)) + cached is pf + max(isl, cached): the
         * terms are integers below 2^53, which doubles add exactly in any order. */
        double prefill =
            tracks_prefill ? ((double)r->pf[i] + (double)max_u32(r->isl, r->cached[i])) / r->block_size : 0.0;
        double request_cost = q.request * (double)r->requests[i];
        costs[i] = q.scale * positive_part(prefill - credit(&q, r, i, decays)) + (double)r->decode[i] + request_cost;
    }
}

bool sy_score(const sy_request *req, const sy_candidates *c, double *costs, sy_error *err) {
    (void)err;
    bool tracks_prefill = req->pool != SY_POOL_DECODE;
    bool decays = tracks_prefill && p.decay > 0.0;
    bool decode = req->pool == SY_POOL_DECODE && p.credit > 0.0;
    size_t n = c->len;
    rows r = {c->active_prefill_tokens, c->device_overlap_blocks, c->host_overlap_blocks,
              c->disk_overlap_blocks, c->cached_tokens, c->decode_blocks, c->active_requests,
              (double)req->block_size, 1.0 / (double)req->block_size,
              (double)(req->request_blocks > 1 ? req->request_blocks : 1), req->prompt_tokens, 0};
    bool power_of_two = req->block_size != 0 && (req->block_size & (req->block_size - 1)) == 0;
    bool common = !decays && power_of_two && p.request == 0.0;
    if (decays && n) {
        r.min_pf = r.pf[0];
        for (size_t i = 1; i < n; i++)
            if (r.pf[i] < r.min_pf) r.min_pf = r.pf[i];
    }
    if (tracks_prefill && common) score_common(&r, n, costs);
    else if (decode) score_decode(&r, n, costs);
    else score_general(&r, n, costs, tracks_prefill, decays);
    if (!req->is_pinned && c->preferred_multiplier) {
        const double *restrict m = c->preferred_multiplier;
        for (size_t i = 0; i < n; i++) costs[i] *= m[i];
    }
    return true;
}
