/*
 * The per-byte scan of gpu_platform.finops.feeds.dcgm in one pass over a piece of the input.
 *
 * scan(data, seed) reads the lines of ``data`` (a bytes-like object) and, with the GIL released,
 * does what the numpy passes of dcgm._parse_chunk do for each line:
 *
 * - a line that is empty or starts with '#' is skipped (it counts for the line numbers only);
 * - a fast-path line: its first byte is not '#', ' ' or '\t'; the first of the bytes '{', '|',
 *   '}' in it is a '{' after the first byte (end of the metric name) and the last is a '}'
 *   (end of the label block), followed by one space and a value that does not start with a
 *   space; one trailing '\r' is not part of the line (a second one sends the line to the
 *   tokenizer). Its offsets are recorded, its metric name and label block numbered by two
 *   hash tables (in order of first appearance in the piece; a key equal to the previous line's
 *   is not hashed again), and its value read:
 *     status 0: the whole text after the space is a decimal number read exactly (value);
 *     status 1: a decimal number, one space, integer milliseconds (value, ts; vlen is the
 *               value's length);
 *     status 2: a DCGM int64 blank sentinel: 19 digits starting 92233720 (value 1e19);
 *     status 3: anything else (NaN, Inf, long mantissas, large exponents, ...): left to the
 *               caller's cast, the same one the numpy path makes, so no value is guessed;
 *   and why a value read is not a sample (``cause``: the index of its reason in
 *   dcgm._FAST_REASONS, 0 when it is one; the name and label block checks are the caller's).
 *   Decimal numbers are read when at most 19 significant digits and a power of ten of at most
 *   22: an integer <= 2^53 by one correctly rounded multiplication or division; a longer one
 *   (the 17 digits Go's and Python's shortest float texts often have, as Prometheus'
 *   ``/federate`` writes them) by exact 128-bit integer arithmetic, rounded once to nearest,
 *   ties to even. Either way the correctly rounded value, which is what every correctly rounded
 *   parser (polars' cast among them) returns; anything else is status 3. Timestamps: an
 *   optional sign and 1..18 digits.
 * - a line longer than ``max_line`` bytes (newline not counted) is neither: a comment is
 *   skipped, any other line recorded apart (its line index, start and end) for the caller to
 *   quarantine with the bound as its reason, so that nothing else reads it.
 * - every other non-empty line is recorded for the character-level tokenizer (its line index,
 *   start and end).
 *
 * Nothing here allocates Python objects until the scan is over; the arrays come back as bytes
 * (native byte order) for numpy.frombuffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable arrays ------------------------------------------------------------------ */

typedef struct {
    Py_ssize_t n, cap;
    int64_t *line, *start, *v, *end, *vlen, *ts;
    double *value;
    uint8_t *status, *cause;
    uint32_t *name, *block;
} FastRows;

typedef struct {
    Py_ssize_t n, cap;
    int64_t *line, *start, *end;
} SlowRows;

static int grow(void **p, Py_ssize_t cap, size_t item) {
    void *q = realloc(*p, (size_t)cap * item);
    if (q == NULL) return -1;
    *p = q;
    return 0;
}

/* room for one more row; the first reservation is ``hint`` rows */
static int fast_reserve(FastRows *f, Py_ssize_t hint) {
    if (f->n < f->cap) return 0;
    Py_ssize_t cap = f->cap ? 2 * f->cap : hint;
    if (grow((void **)&f->line, cap, 8) || grow((void **)&f->start, cap, 8) || grow((void **)&f->v, cap, 8) ||
        grow((void **)&f->end, cap, 8) || grow((void **)&f->vlen, cap, 8) ||
        grow((void **)&f->ts, cap, 8) || grow((void **)&f->value, cap, 8) || grow((void **)&f->status, cap, 1) || grow((void **)&f->cause, cap, 1) ||
        grow((void **)&f->name, cap, 4) || grow((void **)&f->block, cap, 4))
        return -1;
    f->cap = cap;
    return 0;
}

static void fast_free(FastRows *f) {
    free(f->line); free(f->start); free(f->v); free(f->end); free(f->vlen);
    free(f->ts); free(f->value); free(f->status); free(f->cause); free(f->name); free(f->block);
}

static int slow_push(SlowRows *s, int64_t line, int64_t start, int64_t end) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 256;
        if (grow((void **)&s->line, cap, 8) || grow((void **)&s->start, cap, 8) || grow((void **)&s->end, cap, 8))
            return -1;
        s->cap = cap;
    }
    s->line[s->n] = line;
    s->start[s->n] = start;
    s->end[s->n] = end;
    s->n++;
    return 0;
}

static void slow_free(SlowRows *s) { free(s->line); free(s->start); free(s->end); }

/* ---- hashing: (offset, length) keys into the piece, numbered in order of first appearance ---- */

static inline uint64_t mix(uint64_t a, uint64_t b) {
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

#define K1 0xa0761d6478bd642full
#define K2 0xe7037ed1a0b428dbull
#define K3 0x8ebc6af09c88c6e3ull

static uint64_t hash_bytes(const uint8_t *p, size_t n, uint64_t seed) {
    uint64_t h = seed ^ mix((uint64_t)n ^ K1, K2);
    while (n >= 16) {
        h = mix(load64(p) ^ K1 ^ h, load64(p + 8) ^ K2);
        p += 16;
        n -= 16;
    }
    uint8_t tail[16] = {0};
    memcpy(tail, p, n);
    h = mix(load64(tail) ^ K1 ^ h, load64(tail + 8) ^ K3);
    return mix(h ^ K2, (uint64_t)n ^ K3);
}

typedef struct {
    uint32_t *slots; /* code + 1; 0 is empty */
    size_t mask;
    Py_ssize_t n, cap;
    uint64_t *hash;
    int64_t *start, *len;
} Table;

static int table_init(Table *t) {
    memset(t, 0, sizeof(*t));
    t->mask = 1023;
    t->slots = calloc(t->mask + 1, sizeof(uint32_t));
    return t->slots ? 0 : -1;
}

static void table_free(Table *t) { free(t->slots); free(t->hash); free(t->start); free(t->len); }

static int table_rehash(Table *t) {
    size_t mask = 2 * t->mask + 1;
    uint32_t *slots = calloc(mask + 1, sizeof(uint32_t));
    if (slots == NULL) return -1;
    for (Py_ssize_t c = 0; c < t->n; c++) {
        size_t i = (size_t)t->hash[c] & mask;
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = (uint32_t)c + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

/* The code of data[start:start+len]; -1 when out of memory. */
static int64_t table_code(Table *t, const uint8_t *data, int64_t start, int64_t len, uint64_t seed) {
    uint64_t h = hash_bytes(data + start, (size_t)len, seed);
    size_t i = (size_t)h & t->mask;
    for (;;) {
        uint32_t s = t->slots[i];
        if (s == 0) break;
        Py_ssize_t c = s - 1;
        if (t->hash[c] == h && t->len[c] == len && memcmp(data + t->start[c], data + start, (size_t)len) == 0)
            return c;
        i = (i + 1) & t->mask;
    }
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? 2 * t->cap : 256;
        if (grow((void **)&t->hash, cap, 8) || grow((void **)&t->start, cap, 8) || grow((void **)&t->len, cap, 8))
            return -1;
        t->cap = cap;
    }
    Py_ssize_t c = t->n++;
    t->hash[c] = h;
    t->start[c] = start;
    t->len[c] = len;
    t->slots[i] = (uint32_t)c + 1;
    if ((size_t)t->n * 2 > t->mask && table_rehash(t)) return -1;
    return c;
}

/* ---- numbers ------------------------------------------------------------------------- */

static const double POW10[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

#define IS_DIGIT(c) ((unsigned)((c) - '0') < 10u)

static const uint64_t POW5[23] = {
    1ull, 5ull, 25ull, 125ull, 625ull, 3125ull, 15625ull, 78125ull, 390625ull, 1953125ull, 9765625ull,
    48828125ull, 244140625ull, 1220703125ull, 6103515625ull, 30517578125ull, 152587890625ull,
    762939453125ull, 3814697265625ull, 19073486328125ull, 95367431640625ull, 476837158203125ull,
    2384185791015625ull,
};

/* n * 2^exp2 rounded once to binary64 (nearest, ties to even); ``sticky``: a nonzero remainder
   below n's last bit was dropped (only ever set with n of more than 54 bits). n > 0 and the
   result a normal number (the callers' ranges: 1e-22 .. 2^64 * 1e22). */
static double round_scaled(__uint128_t n, int sticky, int exp2) {
    uint64_t hi = (uint64_t)(n >> 64);
    int bits = hi ? 128 - __builtin_clzll(hi) : 64 - __builtin_clzll((uint64_t)n);
    if (bits <= 53) return ldexp((double)(uint64_t)n, exp2);
    int drop = bits - 53;
    __uint128_t one = 1, rem = n & ((one << drop) - 1), half = one << (drop - 1);
    uint64_t top = (uint64_t)(n >> drop);
    if (rem > half || (rem == half && (sticky || (top & 1)))) top++; /* 2^53 at most: exact */
    return ldexp((double)top, exp2 + drop);
}

/* m * 10^e10 (m < 2^64, |e10| <= 22) correctly rounded. 10^k = 5^k * 2^k and 5^22 < 2^52:
   for k >= 0 the product m * 5^k is exact in 128 bits; for k < 0, m shifted to the top of 128
   bits divided by 5^-k leaves a quotient of more than 74 bits and a remainder (the sticky bit). */
static double scaled_exactly(uint64_t m, int e10) {
    if (e10 >= 0) return round_scaled((__uint128_t)m * POW5[e10], 0, e10);
    int s = 64 + __builtin_clzll(m);
    __uint128_t n = (__uint128_t)m << s, d = POW5[-e10];
    return round_scaled(n / d, n % d != 0, e10 - s);
}

/* A decimal number [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)? filling [p, end), read exactly: 1 and
   *out, or 0 when the text is not one or its value would need more than one rounding. */
static int parse_float(const uint8_t *p, const uint8_t *end, double *out) {
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) {
        neg = *p == '-';
        p++;
    }
    uint64_t m = 0;
    int nd = 0, frac = 0, any = 0;
    while (p < end && *p == '0') {
        p++;
        any = 1;
    }
    while (p < end && IS_DIGIT(*p)) {
        if (nd >= 19) return 0;
        m = m * 10 + (uint64_t)(*p - '0');
        nd++;
        p++;
        any = 1;
    }
    if (p < end && *p == '.') {
        p++;
        if (nd == 0) {
            while (p < end && *p == '0') {
                p++;
                frac++;
                any = 1;
            }
        }
        while (p < end && IS_DIGIT(*p)) {
            if (nd >= 19) return 0;
            m = m * 10 + (uint64_t)(*p - '0');
            nd++;
            frac++;
            p++;
            any = 1;
        }
    }
    if (!any) return 0;
    int e = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0, ed = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        while (p < end && IS_DIGIT(*p)) {
            if (ed >= 4) return 0;
            e = e * 10 + (*p - '0');
            ed++;
            p++;
        }
        if (ed == 0) return 0;
        if (eneg) e = -e;
    }
    if (p != end) return 0;
    int e10 = e - frac;
    if (e10 < -22 || e10 > 22) return 0;
    double v;
    if (m <= (1ull << 53)) {
        v = (double)m;
        if (e10 < 0)
            v /= POW10[-e10];
        else
            v *= POW10[e10];
    } else {
        v = scaled_exactly(m, e10);
    }
    *out = neg ? -v : v;
    return 1;
}

/* An integer [+-]?d{1,18} filling [p, end). */
static int parse_int(const uint8_t *p, const uint8_t *end, int64_t *out) {
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) {
        neg = *p == '-';
        p++;
    }
    if (p >= end || end - p > 18) return 0;
    int64_t v = 0;
    for (; p < end; p++) {
        if (!IS_DIGIT(*p)) return 0;
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

static const uint8_t SENTINEL_HEAD[8] = {'9', '2', '2', '3', '3', '7', '2', '0'};

static int is_sentinel(const uint8_t *p, int64_t len) {
    if (len != 19 || memcmp(p, SENTINEL_HEAD, 8) != 0) return 0;
    for (int i = 8; i < 19; i++)
        if (!IS_DIGIT(p[i])) return 0;
    return 1;
}

/* ---- the scan ------------------------------------------------------------------------ */

static uint8_t DELIM[256];

/* The first of '{', '|', '}' in b[p:e], or e: eight bytes at a time (the lowest byte that
   matches is found exactly by the zero-byte test of each pattern), then byte by byte. */
static inline Py_ssize_t first_delimiter(const uint8_t *b, Py_ssize_t p, Py_ssize_t e) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (p + 8 <= e) {
        uint64_t x = load64(b + p);
        uint64_t y = x ^ (0x7Bull * ones), z = x ^ (0x7Cull * ones), w = x ^ (0x7Dull * ones);
        uint64_t m = (((y - ones) & ~y) | ((z - ones) & ~z) | ((w - ones) & ~w)) & highs;
        if (m) return p + (__builtin_ctzll(m) >> 3);
        p += 8;
    }
#endif
    while (p < e && !DELIM[b[p]]) p++;
    return p;
}

/* Why a value is not a sample, as dcgm._FAST_REASONS numbers them (0: it is one): a timestamp
   out of range, NaN, an infinity, >= 9.2e18, one of DCGM's fp64 blanks. */
static inline uint8_t value_cause(double value, int has_ts, int64_t ts) {
    if (has_ts && (ts > 100000000000000LL || ts < -100000000000000LL)) return 2;
    if (value != value) return 3;
    if (value == HUGE_VAL || value == -HUGE_VAL) return 4;
    if (value >= 9.2e18) return 5;
    if (value == 140737488355328.0 || value == 140737488355329.0 || value == 140737488355330.0 ||
        value == 140737488355331.0)
        return 6;
    return 0;
}

/* A code from ``t`` with a one-entry cache of the previous key (consecutive lines often share
   their metric name or their label block). */
typedef struct {
    int64_t start, len, code;
} Last;

static inline int64_t cached_code(Table *t, Last *last, const uint8_t *b, int64_t start, int64_t len, uint64_t seed) {
    if (last->code >= 0 && last->len == len && memcmp(b + last->start, b + start, (size_t)len) == 0) return last->code;
    int64_t code = table_code(t, b, start, len, seed);
    last->start = start;
    last->len = len;
    last->code = code;
    return code;
}

/* The label block that followed each block code last time (-1: none yet). Exposition text repeats
   its series in one order (every metric lists the GPUs in the same order, every scrape the
   metrics): the block after the previous line's is nearly always the one that followed it
   before, so one comparison finds its code without hashing it. */
typedef struct {
    int64_t *next;
    Py_ssize_t cap;
} Successors;

static int64_t successor(const Successors *q, int64_t code) { return code >= 0 && code < q->cap ? q->next[code] : -1; }

static int set_successor(Successors *q, int64_t code, int64_t next) {
    if (code < 0) return 0;
    if (code >= q->cap) {
        Py_ssize_t cap = q->cap ? q->cap : 256;
        while (cap <= code) cap *= 2;
        if (grow((void **)&q->next, cap, 8)) return -1;
        for (Py_ssize_t i = q->cap; i < cap; i++) q->next[i] = -1;
        q->cap = cap;
    }
    q->next[code] = next;
    return 0;
}

typedef struct {
    FastRows fast;
    SlowRows slow, overlong;
    Successors after;
    Table names, blocks;
    int64_t newlines;
    int64_t sentinel_first; /* start of the first sentinel's value, -1 when none */
    int sentinel_same;      /* every sentinel's text is the first one's */
} Scan;

/* 0 when fine, -1 when out of memory. */
static int scan_piece(const uint8_t *b, Py_ssize_t size, uint64_t seed, Py_ssize_t max_line, Scan *r) {
    Py_ssize_t s = 0;
    int64_t line = 0;
    Last last_name = {0, 0, -1}, last_block = {0, 0, -1};
    int64_t prev_block = -1;
    while (s < size) {
        const uint8_t *nl = memchr(b + s, '\n', (size_t)(size - s));
        Py_ssize_t e = nl ? nl - b : size;
        r->newlines += nl != NULL;
        if (e - s > max_line) {
            /* a comment: '#' after blanks within the first 200 bytes (the text quarantined) */
            Py_ssize_t c = s, head = s + 200 < e ? s + 200 : e;
            while (c < head && (b[c] == ' ' || b[c] == '\t' || b[c] == '\r')) c++;
            if ((c == head || b[c] != '#') && slow_push(&r->overlong, line, s, e)) return -1;
        } else if (e > s && b[s] != '#') {
            uint8_t first = b[s];
            Py_ssize_t po = s, pc = e - 1;
            int fast = 0;
            if (first != ' ' && first != '\t' && first != '{') {
                po = first_delimiter(b, s, e);
                if (po < e && b[po] == '{') {
                    while (!DELIM[b[pc]]) pc--;
                    if (pc > po && b[pc] == '}') {
                        Py_ssize_t ce = e - (b[e - 1] == '\r');
                        Py_ssize_t v = pc + 2;
                        fast = v < ce && b[pc + 1] == ' ' && b[v] != ' ' && b[ce - 1] != '\r';
                        if (fast) {
                            FastRows *f = &r->fast;
                            if (fast_reserve(f, size / 64 + 1024)) return -1;
                            Py_ssize_t k = f->n++;
                            int64_t vlen = ce - v;
                            double value = 0.0;
                            int64_t ts = 0;
                            uint8_t status;
                            /* the value's text is read once: up to the space before a timestamp */
                            const uint8_t *sp = memchr(b + v, ' ', (size_t)vlen);
                            if (sp == NULL && is_sentinel(b + v, vlen)) {
                                status = 2;
                                value = 1e19;
                                if (r->sentinel_first < 0) {
                                    r->sentinel_first = v;
                                } else if (r->sentinel_same && memcmp(b + v, b + r->sentinel_first, 19) != 0) {
                                    r->sentinel_same = 0;
                                }
                            } else if (sp == NULL && parse_float(b + v, b + ce, &value)) {
                                status = 0;
                            } else if (sp != NULL && parse_float(b + v, sp, &value) && parse_int(sp + 1, b + ce, &ts)) {
                                status = 1;
                                vlen = sp - (b + v);
                            } else {
                                status = 3;
                                value = 0.0;
                                ts = 0;
                            }
                            int64_t name = cached_code(&r->names, &last_name, b, s, po - s, seed);
                            int64_t block_start = po + 1, block_len = pc - po - 1, block;
                            int64_t guess = successor(&r->after, prev_block);
                            if (guess >= 0 && guess != last_block.code && r->blocks.len[guess] == block_len &&
                                memcmp(b + r->blocks.start[guess], b + block_start, (size_t)block_len) == 0) {
                                block = guess;
                                last_block.start = block_start;
                                last_block.len = block_len;
                                last_block.code = block;
                            } else {
                                block = cached_code(&r->blocks, &last_block, b, block_start, block_len, seed ^ K3);
                            }
                            if (name < 0 || block < 0 || set_successor(&r->after, prev_block, block)) return -1;
                            prev_block = block;
                            f->line[k] = line;
                            f->start[k] = s;
                            f->v[k] = v;
                            f->end[k] = ce;
                            f->vlen[k] = vlen;
                            f->ts[k] = ts;
                            f->value[k] = value;
                            f->status[k] = status;
                            f->cause[k] = status == 3 ? 0 : value_cause(value, status == 1, ts);
                            f->name[k] = (uint32_t)name;
                            f->block[k] = (uint32_t)block;
                        }
                    }
                }
            }
            if (!fast && slow_push(&r->slow, line, s, e)) return -1;
        }
        line++;
        s = e + 1;
    }
    return 0;
}

/* ---- Block: memory from malloc handed to Python without a copy (a writable buffer) ---- */

typedef struct {
    PyObject_HEAD
    void *p;
    Py_ssize_t len;
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->p, b->len, 0, flags);
}

static void block_dealloc(PyObject *self) {
    free(((Block *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs block_as_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_dcgm_scan.Block",
    .tp_doc = "Memory filled by the scan, readable through the buffer protocol.",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* A Block owning ``*p`` (n items of ``item`` bytes); ``*p`` is NULL afterwards (also on failure,
   when it is freed). */
static PyObject *as_block(void *pp, Py_ssize_t n, size_t item) {
    void **p = (void **)pp;
    if (*p == NULL && (*p = malloc(1)) == NULL) return PyErr_NoMemory();
    if (n > 0) {
        /* give back the unused capacity (shrinking does not move the data) */
        void *q = realloc(*p, (size_t)n * item);
        if (q != NULL) *p = q;
    }
    Block *b = PyObject_New(Block, &BlockType);
    if (b == NULL) {
        free(*p);
        *p = NULL;
        return NULL;
    }
    b->p = *p;
    b->len = n * (Py_ssize_t)item;
    *p = NULL;
    return (PyObject *)b;
}

PyDoc_STRVAR(scan_doc,
             "scan(data, seed, max_line) -> (newlines, fast, names, blocks, slow, sentinel_first, sentinel_same,\n"
             "overlong)\n\n"
             "fast: buffers of (line, start, value start, end, value length, ts as int64; value float64;\n"
             "status, cause uint8; name, block uint32 codes); names, blocks: (start, length) int64 of\n"
             "each code; slow: (line, start, end) int64 of each line left to the tokenizer; overlong: the\n"
             "same of each line longer than max_line bytes that is not a comment. See the module's source.");

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    unsigned long long seed;
    Py_ssize_t max_line;
    if (!PyArg_ParseTuple(args, "y*Kn", &view, &seed, &max_line)) return NULL;
    Scan r;
    memset(&r, 0, sizeof(r));
    r.sentinel_first = -1;
    r.sentinel_same = 1;
    int rc = -1;
    if (table_init(&r.names) == 0 && table_init(&r.blocks) == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan_piece((const uint8_t *)view.buf, view.len, (uint64_t)seed, max_line, &r);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (rc != 0) {
        PyErr_NoMemory();
    } else {
        FastRows *f = &r.fast;
        Py_ssize_t n = f->n;
        PyObject *fast = Py_BuildValue(
            "(NNNNNNNNNNN)", as_block(&f->line, n, 8), as_block(&f->start, n, 8), as_block(&f->v, n, 8),
            as_block(&f->end, n, 8), as_block(&f->vlen, n, 8), as_block(&f->ts, n, 8), as_block(&f->value, n, 8),
            as_block(&f->status, n, 1), as_block(&f->cause, n, 1), as_block(&f->name, n, 4),
            as_block(&f->block, n, 4));
        PyObject *names =
            Py_BuildValue("(NN)", as_block(&r.names.start, r.names.n, 8), as_block(&r.names.len, r.names.n, 8));
        PyObject *blocks =
            Py_BuildValue("(NN)", as_block(&r.blocks.start, r.blocks.n, 8), as_block(&r.blocks.len, r.blocks.n, 8));
        PyObject *slow = Py_BuildValue("(NNN)", as_block(&r.slow.line, r.slow.n, 8),
                                       as_block(&r.slow.start, r.slow.n, 8), as_block(&r.slow.end, r.slow.n, 8));
        PyObject *overlong =
            Py_BuildValue("(NNN)", as_block(&r.overlong.line, r.overlong.n, 8),
                          as_block(&r.overlong.start, r.overlong.n, 8), as_block(&r.overlong.end, r.overlong.n, 8));
        if (fast && names && blocks && slow && overlong)
            out = Py_BuildValue("(LNNNNLON)", (long long)r.newlines, fast, names, blocks, slow,
                                (long long)r.sentinel_first, r.sentinel_same ? Py_True : Py_False, overlong);
        else {
            Py_XDECREF(fast);
            Py_XDECREF(names);
            Py_XDECREF(blocks);
            Py_XDECREF(slow);
            Py_XDECREF(overlong);
        }
    }
    fast_free(&r.fast);
    slow_free(&r.slow);
    slow_free(&r.overlong);
    table_free(&r.names);
    table_free(&r.blocks);
    free(r.after.next);
    return out;
}

/* ---- Arrow string views and numbered texts ----------------------------------------- */

static int int64_buffer(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->itemsize != 8 || view->format == NULL || (strcmp(view->format, "q") && strcmp(view->format, "l") &&
                                                         strcmp(view->format, "<q") && strcmp(view->format, "=q"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(views_doc,
             "views(data, starts, lengths) -> buffer of Arrow string views (16 bytes each) of\n"
             "data[start:start+length] (buffer 0 is data; a negative length is 0); starts and\n"
             "lengths are int64 arrays, every string within data.");

static PyObject *views(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *starts_obj, *lengths_obj;
    Py_buffer data, starts, lengths;
    if (!PyArg_ParseTuple(args, "y*OO", &data, &starts_obj, &lengths_obj)) return NULL;
    if (int64_buffer(starts_obj, &starts, "starts") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (int64_buffer(lengths_obj, &lengths, "lengths") < 0) {
        PyBuffer_Release(&starts);
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t n = starts.len / 8;
    PyObject *out = NULL;
    int bad = lengths.len / 8 != n;
    uint8_t *p = bad ? NULL : malloc((size_t)(n ? n : 1) * 16);
    if (!bad && p != NULL) {
        const int64_t *st = starts.buf, *ln = lengths.buf;
        const uint8_t *d = data.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && !bad; i++) {
            int64_t s = st[i], k = ln[i] > 0 ? ln[i] : 0;
            uint8_t *w = p + 16 * i;
            if (s < 0 || s + k > data.len || k > INT32_MAX) {
                bad = 1;
                break;
            }
            int32_t len32 = (int32_t)k;
            memset(w, 0, 16);
            memcpy(w, &len32, 4);
            if (k <= 12) {
                memcpy(w + 4, d + s, (size_t)k);
            } else {
                int32_t offset = (int32_t)s;
                memcpy(w + 4, d + s, 4);
                memcpy(w + 12, &offset, 4);
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (bad) {
        free(p);
        PyErr_SetString(PyExc_ValueError, "views: a string outside the data, or arrays of different lengths");
    } else if (p == NULL) {
        PyErr_NoMemory();
    } else {
        out = as_block(&p, n, 16);
    }
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return out;
}

PyDoc_STRVAR(numbered_doc,
             "numbered(numbers, head, tail) -> (offsets, data): the texts head + str(n) + tail of each\n"
             "of numbers (an int64 array) as an Arrow large_string array's int64 offsets and bytes.");

static PyObject *numbered(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *numbers_obj;
    Py_buffer numbers, head, tail;
    if (!PyArg_ParseTuple(args, "Oy*y*", &numbers_obj, &head, &tail)) return NULL;
    if (int64_buffer(numbers_obj, &numbers, "numbers") < 0) {
        PyBuffer_Release(&tail);
        PyBuffer_Release(&head);
        return NULL;
    }
    Py_ssize_t n = numbers.len / 8;
    const int64_t *num = numbers.buf;
    int64_t *offsets = malloc((size_t)(n + 1) * 8);
    uint8_t *text = malloc((size_t)(n ? n : 1) * (size_t)(head.len + tail.len + 20));
    PyObject *out = NULL;
    if (offsets != NULL && text != NULL) {
        Py_BEGIN_ALLOW_THREADS
        uint8_t *w = text;
        offsets[0] = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(w, head.buf, (size_t)head.len);
            w += head.len;
            int64_t v = num[i];
            uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
            if (v < 0) *w++ = '-';
            uint8_t digits[20];
            int k = 0;
            do {
                digits[k++] = (uint8_t)('0' + u % 10);
                u /= 10;
            } while (u);
            while (k) *w++ = digits[--k];
            memcpy(w, tail.buf, (size_t)tail.len);
            w += tail.len;
            offsets[i + 1] = w - text;
        }
        Py_END_ALLOW_THREADS
        Py_ssize_t size = (Py_ssize_t)offsets[n];
        out = Py_BuildValue("(NN)", as_block(&offsets, n + 1, 8), as_block(&text, size, 1));
    } else {
        free(offsets);
        free(text);
        PyErr_NoMemory();
    }
    PyBuffer_Release(&numbers);
    PyBuffer_Release(&tail);
    PyBuffer_Release(&head);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"views", views, METH_VARARGS, views_doc},
    {"numbered", numbered, METH_VARARGS, numbered_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dcgm_scan",
    "One compiled pass over dcgm-exporter text: line shapes, offsets, values, name and label-block codes.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dcgm_scan(void) {
    DELIM['{'] = DELIM['|'] = DELIM['}'] = 1;
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    /* what dcgm.py checks before using the module: a build of an older source is not used */
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
