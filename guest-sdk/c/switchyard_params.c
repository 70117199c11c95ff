/* `sy_parse_numbers`: a policy's parameters as a flat JSON object of numbers, read with
 * no libc. A number becomes the double the Rust SDK's reader gives (which is
 * serde_json's, default features): its digits as an integer while they fit 64 bits (the
 * rest of the integer part only scales, the rest of the fraction is dropped), converted to
 * double, then one multiplication or division by the correctly rounded 10^|e| (division by
 * 1e308 first while |e| > 308). Not always the correctly rounded value of the text, but
 * the same bits as the Rust policy reads, which is what makes the two builds agree. */

#include <string.h>

#include "switchyard_internal.h"

/* Every function of this file is compiled for size, whatever the flags: none runs per
 * candidate, and a guest built in one clang command (docs/writing-policies-c.md's) at -O3 would
 * otherwise be ~2 KB larger. A policy's own code keeps its flags. */
#pragma clang attribute push(__attribute__((minsize)), apply_to = function)

/* ---- 10^n, correctly rounded -------------------------------------------------------- */

/* 10^308 needs 1,024 bits: 33 limbs is room. */
#define LIMBS 33

/* 10^n as the nearest double, 0 <= n <= 308: exact up to 10^22 (5^22 < 2^53); above, from
 * the exact integer's top 64 bits and whether any bit below them is set, rounded to 53
 * bits, ties to even. */
static double pow10_of(unsigned n) {
    double exact = 1.0;
    if (n <= 22) {
        while (n--) exact *= 10.0;
        return exact;
    }
    uint32_t limb[LIMBS] = {1};
    unsigned used = 1;
    while (n--) {
        uint64_t carry = 0;
        for (unsigned i = 0; i < used; i++) {
            uint64_t p = (uint64_t)limb[i] * 10 + carry;
            limb[i] = (uint32_t)p;
            carry = p >> 32;
        }
        if (carry) limb[used++] = (uint32_t)carry;
    }
    unsigned bits = 32 * used - (unsigned)__builtin_clz(limb[used - 1]), low = bits - 64;
    uint64_t top = 0;
    bool sticky = false;
    for (unsigned i = bits; i-- > 0;) {
        bool bit = (limb[i / 32] >> (i % 32)) & 1;
        if (i >= low) top = (top << 1) | bit;
        else sticky |= bit;
    }
    /* Keep 53 of the 64 bits; round on the other 11 and the sticky bit. */
    uint64_t rest = top & 0x7ff, q = top >> 11;
    if (rest > 0x400 || (rest == 0x400 && (sticky || (q & 1)))) q++;
    int exp = (int)low + 11;
    if (q >> 53) q >>= 1, exp++;
    uint64_t raw = ((uint64_t)(exp + 52 + 1023) << 52) | (q & (((uint64_t)1 << 52) - 1));
    memcpy(&exact, &raw, sizeof raw);
    return exact;
}

/* ---- the JSON object ---------------------------------------------------------------- */

typedef struct reader {
    const char *s;
    size_t len, at;
} reader;

/* The reader's three primitives are calls, not inlined (~370 bytes less): the reader
 * runs once per `configure`, never per candidate. */

/* The character at the reader; 0 at the end (a 0 in the text matches no token either). */
__attribute__((noinline)) static char at(const reader *r) { return r->at < r->len ? r->s[r->at] : 0; }

/* Steps over `c` if it is next. */
__attribute__((noinline)) static bool eat(reader *r, char c) {
    if (at(r) != c) return false;
    r->at++;
    return true;
}

__attribute__((noinline)) static bool digit(const reader *r) { return (unsigned)(at(r) - '0') < 10; }

static void skip_ws(reader *r) {
    for (char c; (c = at(r)) == ' ' || c == '\t' || c == '\n' || c == '\r';) r->at++;
}

/* n * 10 + d into *n if it fits 64 bits. */
static bool append_digit(uint64_t *n, unsigned d) {
    if (*n > UINT64_MAX / 10 || (*n == UINT64_MAX / 10 && d > UINT64_MAX % 10)) return false;
    *n = *n * 10 + d;
    return true;
}

/* Reads a JSON number at the reader into *v, as the Rust SDK does, and whether that
 * reader takes it for an integer (serde_json's rule: digits only, fitting a u64, or an
 * i64 when negative; `-0` is a float). Returns NULL, or why it was refused. */
static const char *number(reader *r, double *v, bool *integral) {
    bool negative = eat(r, '-');
    *integral = false;
    if (!digit(r)) return "expected a number";
    uint64_t m = 0;
    int64_t e10 = 0;
    if (eat(r, '0')) {
        if (digit(r)) return "invalid number (a leading zero)";
    } else {
        /* Once the integer part no longer fits, its other digits only scale. */
        for (bool full = false; digit(r); r->at++)
            if (full || !append_digit(&m, (unsigned)(at(r) - '0'))) full = true, e10++;
    }
    *integral = e10 == 0 && at(r) != '.' && at(r) != 'e' && at(r) != 'E' &&
                (!negative || (m != 0 && m <= (uint64_t)1 << 63));
    if (eat(r, '.')) {
        if (!digit(r)) return "expected a digit after the decimal point";
        /* Fraction digits while they fit; the rest are dropped. */
        for (bool full = false; digit(r); r->at++)
            if (!full && append_digit(&m, (unsigned)(at(r) - '0'))) e10--;
            else full = true;
    }
    if (eat(r, 'e') || eat(r, 'E')) {
        bool minus = eat(r, '-');
        if (!minus) eat(r, '+');
        if (!digit(r)) return "expected an exponent";
        /* Past i32 it only has to stay past: accumulation stops there. */
        int64_t written = 0;
        for (; digit(r); r->at++)
            if (written <= INT32_MAX) written = written * 10 + (at(r) - '0');
        if (written > INT32_MAX) {
            /* An exponent past i32: out of range upwards, zero downwards. */
            if (m != 0 && !minus) return "is out of range";
            *v = negative ? -0.0 : 0.0;
            return NULL;
        }
        e10 += minus ? -written : written;
        if (e10 > INT32_MAX) e10 = INT32_MAX;
        if (e10 < INT32_MIN) e10 = INT32_MIN;
    }
    double f = (double)m;
    while (f != 0.0 && e10 < -308) {
        f /= 1e308;
        e10 += 308;
    }
    if (e10 > 308 && m != 0) return "is out of range";
    if (e10 >= 0 && f != 0.0) {
        f *= pow10_of((unsigned)e10);
        if (f > 1.7976931348623157e308) return "is out of range";
    } else if (f != 0.0) {
        f /= pow10_of((unsigned)-e10);
    }
    *v = negative ? -f : f;
    return NULL;
}

/* Whether a range end is one `bound` writes exactly: ±∞, or a whole number below 2^63 in
 * magnitude. (Writing any double as the Rust SDK does, shortest round trip, would take a
 * float printer the size of the reader.) */
static bool writable(double v) {
    return v > 1.7e308 || v < -1.7e308 || (v > -9.2e18 && v < 9.2e18 && v == (double)(int64_t)v);
}

/* A range end that is `writable`. */
static void bound(sy_text *t, double v) {
    if (v > 1.7e308 || v < -1.7e308) {
        sy_text_str(t, v < 0 ? "-∞" : "∞");
    } else {
        if (v < 0) sy_text_str(t, "-"), v = -v;
        sy_text_u64(t, (uint64_t)v);
    }
}

/* The two refusals whose message goes on past `why` (compared by address). */
static const char unknown[] = "unknown field `", not_integer[] = "invalid type: floating point `";

/* Out of line: the build optimises across files (`-flto`), and inlined into a policy's
 * `sy_configure`, compiled for speed, the reader grows by a third. Every refusal leaves
 * through `fail`: "field `<name>`: <why>" once the field is known (the Rust SDK's shape),
 * else <why>; an unknown field also lists the fields there are, in `params`' order, as
 * serde words it for a Rust parameters struct; a fraction for an integer quotes its
 * text; an out-of-range value also quotes its text and the range. */
__attribute__((noinline)) bool sy_parse_numbers(const char *json, size_t len, const sy_number_param *params,
                                                size_t count, sy_error *err) {
    if (count > 64) return sy_fail(err, SY_INTERNAL, "sy_parse_numbers takes at most 64 fields");
    reader r = {json, len, 0};
    uint64_t seen = 0;
    const char *why, *name = NULL;
    size_t name_len = 0, value_start = 0;
    const sy_number_param *p = NULL;
    for (size_t i = 0; i < count; i++)
        if (params[i].present) *params[i].present = false;
    skip_ws(&r);
    why = "parameters must be a JSON object";
    if (!eat(&r, '{')) goto fail;
    for (bool first = true;; first = false) {
        name = NULL;
        skip_ws(&r);
        if (eat(&r, '}')) break;
        why = "expected `,` or `}`";
        if (!first && !eat(&r, ',')) goto fail;
        skip_ws(&r);
        why = "expected a field name";
        if (!eat(&r, '"')) goto fail;
        size_t start = r.at;
        while (r.at < r.len && r.s[r.at] != '"') r.at += r.s[r.at] == '\\' ? 2 : 1;
        why = "unterminated field name";
        if (r.at >= r.len) goto fail;
        name = r.s + start;
        name_len = r.at++ - start;
        size_t which = count;
        for (size_t i = 0; i < count; i++)
            if (strlen(params[i].name) == name_len && memcmp(params[i].name, name, name_len) == 0) which = i;
        why = unknown;
        if (which == count) goto fail;
        why = "duplicate field";
        if (seen >> which & 1) goto fail;
        seen |= (uint64_t)1 << which;
        p = &params[which];
        skip_ws(&r);
        why = "expected `:`";
        if (!eat(&r, ':')) goto fail;
        skip_ws(&r);
        if (p->present && r.len - r.at >= 4 && memcmp(r.s + r.at, "null", 4) == 0) {
            r.at += 4; /* an optional field given as null: absent */
            continue;
        }
        value_start = r.at;
        double v;
        bool integral;
        if ((why = number(&r, &v, &integral))) goto fail;
        why = not_integer;
        if (p->integer && !integral) goto fail;
        why = NULL;
        if (!(v >= p->min && v <= p->max)) goto fail; /* why is NULL: out of range */
        *p->value = v;
        if (p->present) *p->present = true;
    }
    skip_ws(&r);
    why = "trailing characters after the object";
    if (r.at == r.len) return true;
fail:;
    sy_text t = {0};
    if (name) {
        sy_text_str(&t, "field `");
        sy_text_bytes(&t, name, name_len);
        sy_text_str(&t, "`: ");
    }
    if (why == unknown) {
        sy_text_str(&t, why);
        sy_text_bytes(&t, name, name_len);
        if (count == 0) sy_text_str(&t, "`, there are no fields");
        else sy_text_str(&t, count < 3 ? "`, expected " : "`, expected one of ");
        for (size_t i = 0; i < count; i++) {
            if (i > 0) sy_text_str(&t, count == 2 ? " or " : ", ");
            sy_text_str(&t, "`");
            sy_text_str(&t, params[i].name);
            sy_text_str(&t, "`");
        }
    } else if (why == not_integer) {
        sy_text_str(&t, why);
        sy_text_bytes(&t, r.s + value_start, r.at - value_start);
        sy_text_str(&t, "`, expected an integer");
    } else if (why) {
        sy_text_str(&t, why);
    } else {
        /* The range only when both ends can be written exactly: a fractional end would
         * otherwise be written as another number. */
        sy_text_bytes(&t, r.s + value_start, r.at - value_start);
        sy_text_str(&t, " is out of range");
        if (writable(p->min) && writable(p->max)) {
            sy_text_str(&t, " [");
            bound(&t, p->min);
            sy_text_str(&t, ", ");
            bound(&t, p->max);
            sy_text_str(&t, p->max > 1.7e308 ? ")" : "]");
        }
    }
    return sy_text_fail(&t, err, SY_INVALID_PARAMETERS);
}

#pragma clang attribute pop
