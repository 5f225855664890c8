/* The ledger's hash chain over one frame, in native code.
 *
 * chain_frame(head, body, max_depth=0) -> (head, count)
 * merkle_frame(size, compact, body, max_depth=0) -> (size, compact)
 * merkle_leaves(body) -> bytes; merkle_parents(level) -> bytes
 *
 * `body` is a frame's canonical bytes: one msgpack array whose elements are the records'
 * canonical bytes. For each element in order, head = SHA-256(head || element bytes)
 * (see ledger/_chain.py, which holds the definition and the pure-Python twin of this
 * function). Elements are delimited by walking the msgpack format (the msgpack
 * specification, github.com/msgpack/msgpack/blob/master/spec.md), with every read
 * bounds-checked: a reader feeds it untrusted bytes. Malformed input raises ValueError.
 *
 * SHA-256 is OpenSSL's. In CPython each hashlib.sha256(...).digest() allocates and
 * initialises an EVP context, which costs more than hashing a 150-byte record; this loop
 * is why the ledger keeps up with its witnesses (benchmarks/ledger_bench.py). It uses
 * OpenSSL's low-level SHA256_Init/Update/Final: deprecated in OpenSSL 3.0 but still
 * shipped, and per record about a quarter faster than re-initialising an EVP context
 * (measured here with SHA-NI; the compression itself is then about half the cost).
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED
#include <Python.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <string.h>

static uint64_t read_be(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

#define MAX_DEPTH_CAP 255

/* Advance *pos past one msgpack object in buf[0:len]. With max_depth > 0, an object
 * with arrays or maps nested more than max_depth deep is refused (the object itself,
 * when an array or map, is depth 1). Returns 0, or -1 with *why set. */
static int skip_object(const unsigned char *buf, size_t len, size_t *pos, int max_depth, const char **why) {
    uint64_t remaining = 1; /* objects still to skip, nested ones included */
    uint64_t left[MAX_DEPTH_CAP + 1]; /* with max_depth: objects still to skip at each open level */
    int depth = 0;
    size_t p = *pos;
    left[0] = 1;
    while (remaining) {
        /* every object takes at least one byte: more pending objects than bytes is malformed */
        if (p >= len || remaining > len - p) { *why = "truncated msgpack"; return -1; }
        unsigned char t = buf[p++];
        remaining--;
        uint64_t payload = 0, children = 0;
        size_t header = 0;
        if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
            /* fixint, nil, false, true */
        } else if (t <= 0x8f) {
            children = 2 * (uint64_t)(t & 0x0f);
        } else if (t <= 0x9f) {
            children = t & 0x0f;
        } else if (t <= 0xbf) {
            payload = t & 0x1f;
        } else {
            switch (t) {
            case 0xc4: case 0xd9: header = 1; break;           /* bin8, str8 */
            case 0xc5: case 0xda: header = 2; break;           /* bin16, str16 */
            case 0xc6: case 0xdb: header = 4; break;           /* bin32, str32 */
            case 0xc7: header = 1; payload = 1; break;          /* ext8: len, type */
            case 0xc8: header = 2; payload = 1; break;          /* ext16 */
            case 0xc9: header = 4; payload = 1; break;          /* ext32 */
            case 0xca: payload = 4; break;                      /* float32 */
            case 0xcb: payload = 8; break;                      /* float64 */
            case 0xcc: case 0xd0: payload = 1; break;           /* uint8, int8 */
            case 0xcd: case 0xd1: payload = 2; break;
            case 0xce: case 0xd2: payload = 4; break;
            case 0xcf: case 0xd3: payload = 8; break;
            case 0xd4: payload = 2; break;                      /* fixext1: type + 1 */
            case 0xd5: payload = 3; break;
            case 0xd6: payload = 5; break;
            case 0xd7: payload = 9; break;
            case 0xd8: payload = 17; break;
            case 0xdc: case 0xde: header = 2; break;            /* array16, map16 */
            case 0xdd: case 0xdf: header = 4; break;            /* array32, map32 */
            default: *why = "invalid msgpack type byte 0xc1"; return -1;
            }
            if (header) {
                if (len - p < header) { *why = "truncated msgpack"; return -1; }
                uint64_t n = read_be(buf + p, header);
                p += header;
                if (t == 0xdc || t == 0xdd) children = n;
                else if (t == 0xde || t == 0xdf) children = 2 * n;
                else payload += n;
            }
        }
        if (payload > len - p) { *why = "truncated msgpack"; return -1; }
        p += (size_t)payload;
        remaining += children;
        if (max_depth) {
            int container = (t >= 0x80 && t <= 0x9f) || (t >= 0xdc && t <= 0xdf);
            left[depth]--;
            if (container && depth >= max_depth) { *why = "msgpack nested deeper than max_depth"; return -1; }
            if (children) left[++depth] = children;
            while (depth > 0 && left[depth] == 0) depth--;
        }
    }
    *pos = p;
    return 0;
}

static PyObject *chain_frame(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer head, body;
    int max_depth = 0;
    if (!PyArg_ParseTuple(args, "y*y*|i:chain_frame", &head, &body, &max_depth)) return NULL;
    PyObject *result = NULL;
    const char *why = NULL;
    unsigned char h[SHA256_DIGEST_LENGTH];
    uint64_t count = 0;
    if (head.len != 32) {
        PyErr_SetString(PyExc_ValueError, "chain head must be 32 bytes");
        goto done;
    }
    if (max_depth < 0 || max_depth > MAX_DEPTH_CAP) {
        PyErr_Format(PyExc_ValueError, "max_depth must be 0 (no limit) to %d", MAX_DEPTH_CAP);
        goto done;
    }
    memcpy(h, head.buf, 32);
    const unsigned char *buf = body.buf;
    size_t len = (size_t)body.len, pos = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    if (len < 1) { why = "empty frame body"; failed = 1; }
    else {
        unsigned char t = buf[0];
        if (t >= 0x90 && t <= 0x9f) { count = t & 0x0f; pos = 1; }
        else if (t == 0xdc && len >= 3) { count = read_be(buf + 1, 2); pos = 3; }
        else if (t == 0xdd && len >= 5) { count = read_be(buf + 1, 4); pos = 5; }
        else { why = "frame body is not a msgpack array"; failed = 1; }
        for (uint64_t i = 0; !failed && i < count; i++) {
            size_t start = pos;
            SHA256_CTX ctx;
            if (skip_object(buf, len, &pos, max_depth, &why) < 0) { failed = 1; break; }
            if (!SHA256_Init(&ctx) || !SHA256_Update(&ctx, h, 32)
                || !SHA256_Update(&ctx, buf + start, pos - start) || !SHA256_Final(h, &ctx)) {
                why = "OpenSSL SHA-256 failed";
                failed = 1;
            }
        }
        if (!failed && pos != len) { why = "trailing bytes after the msgpack array"; failed = 1; }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetString(PyExc_ValueError, why);
        goto done;
    }
    result = Py_BuildValue("(y#K)", (const char *)h, (Py_ssize_t)32, (unsigned long long)count);
done:
    PyBuffer_Release(&head);
    PyBuffer_Release(&body);
    return result;
}

/* -- SHA-256 compression, two messages at a time where the CPU has the SHA extensions --------
 * merkle_frame hashes many short independent messages (a leaf per record, a node per pair);
 * with one message the rounds instruction's latency bounds it, with two interleaved its
 * throughput: 34 against OpenSSL's 59 ns a block on the development VM (AMD EPYC). Without
 * the extensions (or off x86-64), OpenSSL's SHA256_Transform compresses each block. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <cpuid.h>
#define HAVE_SHANI 1
/* SHA-256 block compression with the x86 SHA extensions, two independent messages at once
 * (the rounds instruction's latency, not its throughput, bounds one message). */

static const uint32_t SHANI_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* state: 8 words a..h; to and from the ABEF/CDGH layout the instructions use */
__attribute__((target("sha,sse4.1,ssse3")))
static inline void shani_load(const uint32_t *s, __m128i *s0, __m128i *s1) {
    __m128i tmp = _mm_loadu_si128((const __m128i *)&s[0]);
    __m128i st1 = _mm_loadu_si128((const __m128i *)&s[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);
    st1 = _mm_shuffle_epi32(st1, 0x1B);
    *s0 = _mm_alignr_epi8(tmp, st1, 8);
    *s1 = _mm_blend_epi16(st1, tmp, 0xF0);
}

__attribute__((target("sha,sse4.1,ssse3")))
static inline void shani_store(uint32_t *s, __m128i s0, __m128i s1) {
    __m128i tmp = _mm_shuffle_epi32(s0, 0x1B);
    s1 = _mm_shuffle_epi32(s1, 0xB1);
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);
    s1 = _mm_alignr_epi8(s1, tmp, 8);
    _mm_storeu_si128((__m128i *)&s[0], s0);
    _mm_storeu_si128((__m128i *)&s[4], s1);
}

#define SHANI_ROUNDS(S0, S1, W, i) do { \
        __m128i m_ = _mm_add_epi32((W), _mm_loadu_si128((const __m128i *)&SHANI_K[4 * (i)])); \
        (S1) = _mm_sha256rnds2_epu32((S1), (S0), m_); \
        (S0) = _mm_sha256rnds2_epu32((S0), (S1), _mm_shuffle_epi32(m_, 0x0E)); \
    } while (0)

#define SHANI_SCHED(W0, W1, W2, W3) \
    _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32((W0), (W1)), _mm_alignr_epi8((W3), (W2), 4)), (W3))

/* one 64-byte block into each of two states */
__attribute__((target("sha,sse4.1,ssse3")))
static void shani_2x(uint32_t *sa, const unsigned char *da, uint32_t *sb, const unsigned char *db) {
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i a0, a1, b0, b1;
    shani_load(sa, &a0, &a1);
    shani_load(sb, &b0, &b1);
    __m128i as0 = a0, as1 = a1, bs0 = b0, bs1 = b1;
    __m128i aw[4], bw[4];
    for (int i = 0; i < 4; i++) {
        aw[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(da + 16 * i)), mask);
        bw[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(db + 16 * i)), mask);
    }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < 16; i++) {
        if (i >= 4) {
            aw[i & 3] = SHANI_SCHED(aw[i & 3], aw[(i + 1) & 3], aw[(i + 2) & 3], aw[(i + 3) & 3]);
            bw[i & 3] = SHANI_SCHED(bw[i & 3], bw[(i + 1) & 3], bw[(i + 2) & 3], bw[(i + 3) & 3]);
        }
        SHANI_ROUNDS(a0, a1, aw[i & 3], i);
        SHANI_ROUNDS(b0, b1, bw[i & 3], i);
    }
    shani_store(sa, _mm_add_epi32(a0, as0), _mm_add_epi32(a1, as1));
    shani_store(sb, _mm_add_epi32(b0, bs0), _mm_add_epi32(b1, bs1));
}

static int shani_usable(void) {
    static int usable = -1;
    if (usable < 0) {
        unsigned a, b, c, d;
        int sha = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
        int sse = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 19)) && (c & (1u << 9));
        usable = sha && sse;
    }
    return usable;
}
#endif

static const uint32_t SHA256_IV[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

static void compress_one(uint32_t *state, const unsigned char *block) {
    SHA256_CTX ctx;
    for (int i = 0; i < 8; i++) ctx.h[i] = state[i];
    SHA256_Transform(&ctx, block);
    for (int i = 0; i < 8; i++) state[i] = ctx.h[i];
}

/* Digests of `n` padded messages: message i is blocks[i] 64-byte blocks at msgs[i]. */
static void hash_padded(size_t n, const unsigned char *const *msgs, const size_t *blocks, unsigned char *out) {
    for (size_t i = 0; i < n; i += 2) {
        uint32_t sa[8], sb[8];
        memcpy(sa, SHA256_IV, 32);
        memcpy(sb, SHA256_IV, 32);
        size_t ba = blocks[i], bb = i + 1 < n ? blocks[i + 1] : 0, k = 0;
#ifdef HAVE_SHANI
        if (shani_usable()) {
            for (; k < ba && k < bb; k++) shani_2x(sa, msgs[i] + 64 * k, sb, msgs[i + 1] + 64 * k);
        }
#endif
        for (size_t j = k; j < ba; j++) compress_one(sa, msgs[i] + 64 * j);
        for (size_t j = k; j < bb; j++) compress_one(sb, msgs[i + 1] + 64 * j);
        for (int w = 0; w < 8; w++) {
            for (int b = 0; b < 4; b++) {
                out[32 * i + 4 * w + b] = (unsigned char)(sa[w] >> (24 - 8 * b));
                if (i + 1 < n) out[32 * (i + 1) + 4 * w + b] = (unsigned char)(sb[w] >> (24 - 8 * b));
            }
        }
    }
}

/* `msg` padded as SHA-256 pads it (0x80, zeros, the bit length): 64 * blocks bytes in `dst`. */
static size_t pad_message(unsigned char *dst, unsigned char prefix, const unsigned char *msg, size_t len) {
    size_t total = 1 + len, blocks = (total + 9 + 63) / 64;
    dst[0] = prefix;
    memcpy(dst + 1, msg, len);
    memset(dst + total, 0, 64 * blocks - total);
    dst[total] = 0x80;
    uint64_t bits = (uint64_t)total * 8;
    for (int b = 0; b < 8; b++) dst[64 * blocks - 1 - b] = (unsigned char)(bits >> (8 * b));
    return blocks;
}

/* The leaf hashes of records (starts[i] .. starts[i+1]-1 of buf), then the tree's levels
 * from the compact range `stack` (one entry per set bit of `size`, highest first) over
 * them; the new compact range into `stack`. 0, or -1 when out of memory. */
static int merkle_extend(uint64_t size, unsigned char (*stack)[32], int *depth, const unsigned char *buf,
                         const size_t *starts, uint64_t count) {
    int ok = -1;
    size_t scratch = 0;
    for (uint64_t i = 0; i < count; i++) scratch += ((starts[i + 1] - starts[i]) + 10 + 63) / 64 * 64;
    if (scratch < 128 * (count / 2 + 1)) scratch = 128 * (count / 2 + 1);
    unsigned char *pad = PyMem_RawMalloc(scratch);
    unsigned char *row = PyMem_RawMalloc(32 * (count + 1));
    const unsigned char **msgs = PyMem_RawMalloc(sizeof(*msgs) * (count + 1));
    size_t *blocks = PyMem_RawMalloc(sizeof(*blocks) * (count + 1));
    if (!pad || !row || !msgs || !blocks) goto out;
    unsigned char old[64][32], fresh[64][32];
    int has_old[64] = {0}, has_fresh[64] = {0};
    for (int level = 63, e = 0; level >= 0; level--)
        if (size >> level & 1) { memcpy(old[level], stack[e++], 32); has_old[level] = 1; }
    size_t off = 0;
    for (uint64_t i = 0; i < count; i++) {
        msgs[i] = pad + off;
        blocks[i] = pad_message(pad + off, 0x00, buf + starts[i], starts[i + 1] - starts[i]);
        off += 64 * blocks[i];
    }
    hash_padded(count, msgs, blocks, row + 32);  /* the row starts at slot 1; slot 0 takes a carry */
    uint64_t end = size + count;
    int level = 0;
    for (; level < 64; level++) {
        uint64_t lo = size >> level, hi = end >> level;
        if (lo >= hi) break;
        uint64_t m = hi - lo;
        unsigned char *first = row + 32;
        if (lo & 1) { memcpy(row, old[level], 32); first = row; m++; }
        uint64_t pairs = m / 2;
        if (m & 1) { memcpy(fresh[level], first + 32 * (m - 1), 32); has_fresh[level] = 1; }
        for (uint64_t j = 0; j < pairs; j++) {
            unsigned char *node = pad + 128 * j;
            unsigned char both[64];
            memcpy(both, first + 64 * j, 64);
            msgs[j] = node;
            blocks[j] = pad_message(node, 0x01, both, 64);
        }
        hash_padded(pairs, msgs, blocks, row + 32);
    }
    int e = 0;
    for (int l = 63; l >= 0; l--) {
        if (l >= level ? has_old[l] : has_fresh[l]) memcpy(stack[e++], l >= level ? old[l] : fresh[l], 32);
    }
    *depth = e;
    ok = 0;
out:
    PyMem_RawFree(pad);
    PyMem_RawFree(row);
    PyMem_RawFree((void *)msgs);
    PyMem_RawFree(blocks);
    return ok;
}

/* merkle_frame(size, compact, body, max_depth=0) -> (size, compact): extend an RFC 9162
 * Merkle tree's compact range over a frame body's records (see ledger/_merkle.py, which
 * holds the definition and the pure-Python twin). `compact` is 32 bytes per set bit of
 * `size`; max_depth refuses records nested deeper, as chain_frame does. */
static PyObject *merkle_frame(PyObject *Py_UNUSED(module), PyObject *args) {
    unsigned long long size;
    Py_buffer compact, body;
    int max_depth = 0;
    if (!PyArg_ParseTuple(args, "Ky*y*|i:merkle_frame", &size, &compact, &body, &max_depth)) return NULL;
    PyObject *result = NULL;
    const char *why = NULL;
    unsigned char stack[64][32];
    int depth = 0;
    if (max_depth < 0 || max_depth > MAX_DEPTH_CAP) {
        PyErr_Format(PyExc_ValueError, "max_depth must be 0 (no limit) to %d", MAX_DEPTH_CAP);
        goto done;
    }
    if ((Py_ssize_t)(32 * __builtin_popcountll(size)) != compact.len) {
        PyErr_SetString(PyExc_ValueError, "compact range does not fit the tree size");
        goto done;
    }
    depth = __builtin_popcountll(size);
    memcpy(stack, compact.buf, (size_t)compact.len);
    const unsigned char *buf = body.buf;
    size_t len = (size_t)body.len, pos = 0;
    uint64_t count = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    if (len < 1) { why = "empty frame body"; failed = 1; }
    else {
        unsigned char t = buf[0];
        if (t >= 0x90 && t <= 0x9f) { count = t & 0x0f; pos = 1; }
        else if (t == 0xdc && len >= 3) { count = read_be(buf + 1, 2); pos = 3; }
        else if (t == 0xdd && len >= 5) { count = read_be(buf + 1, 4); pos = 5; }
        else { why = "frame body is not a msgpack array"; failed = 1; }
        size_t *starts = NULL;
        if (!failed && (count > len || size > UINT64_MAX - count)) { why = "truncated msgpack"; failed = 1; }
        if (!failed && !(starts = PyMem_RawMalloc(sizeof(size_t) * (count + 1)))) { why = "out of memory"; failed = 1; }
        for (uint64_t i = 0; !failed && i < count; i++) {
            starts[i] = pos;
            if (skip_object(buf, len, &pos, max_depth, &why) < 0) failed = 1;
        }
        if (!failed && pos != len) { why = "trailing bytes after the msgpack array"; failed = 1; }
        if (!failed) {
            starts[count] = pos;
            if (merkle_extend(size, stack, &depth, buf, starts, count) < 0) { why = "out of memory"; failed = 1; }
            else size += count;
        }
        PyMem_RawFree(starts);
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetString(PyExc_ValueError, why);
        goto done;
    }
    result = Py_BuildValue("(Ky#)", size, (const char *)stack, (Py_ssize_t)(32 * depth));
done:
    PyBuffer_Release(&compact);
    PyBuffer_Release(&body);
    return result;
}

/* merkle_leaves(body) -> bytes: the RFC 9162 leaf hashes of a frame body's records,
 * 32 bytes each, concatenated. merkle_parents(level) -> bytes: the node hashes of each
 * pair of a level's 32-byte hashes (an odd last one is left out). */
static PyObject *merkle_leaves(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer body;
    if (!PyArg_ParseTuple(args, "y*:merkle_leaves", &body)) return NULL;
    PyObject *result = NULL;
    const char *why = NULL;
    const unsigned char *buf = body.buf;
    size_t len = (size_t)body.len, pos = 0;
    uint64_t count = 0;
    int failed = 0;
    if (len < 1) { why = "empty frame body"; failed = 1; }
    else {
        unsigned char t = buf[0];
        if (t >= 0x90 && t <= 0x9f) { count = t & 0x0f; pos = 1; }
        else if (t == 0xdc && len >= 3) { count = read_be(buf + 1, 2); pos = 3; }
        else if (t == 0xdd && len >= 5) { count = read_be(buf + 1, 4); pos = 5; }
        else { why = "frame body is not a msgpack array"; failed = 1; }
    }
    if (!failed && count > len) { why = "truncated msgpack"; failed = 1; }
    if (failed) { PyErr_SetString(PyExc_ValueError, why); goto done; }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(32 * count));
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    size_t *starts = PyMem_RawMalloc(sizeof(size_t) * (count + 1));
    if (!starts) { why = "out of memory"; failed = 1; }
    for (uint64_t i = 0; !failed && i < count; i++) {
        starts[i] = pos;
        if (skip_object(buf, len, &pos, 0, &why) < 0) failed = 1;
    }
    if (!failed && pos != len) { why = "trailing bytes after the msgpack array"; failed = 1; }
    if (!failed) {
        starts[count] = pos;
        size_t scratch = 64;
        for (uint64_t i = 0; i < count; i++) scratch += ((starts[i + 1] - starts[i]) + 10 + 63) / 64 * 64;
        unsigned char *pad = PyMem_RawMalloc(scratch);
        const unsigned char **msgs = PyMem_RawMalloc(sizeof(*msgs) * (count + 1));
        size_t *blocks = PyMem_RawMalloc(sizeof(*blocks) * (count + 1));
        if (!pad || !msgs || !blocks) { why = "out of memory"; failed = 1; }
        else {
            size_t off = 0;
            for (uint64_t i = 0; i < count; i++) {
                msgs[i] = pad + off;
                blocks[i] = pad_message(pad + off, 0x00, buf + starts[i], starts[i + 1] - starts[i]);
                off += 64 * blocks[i];
            }
            hash_padded(count, msgs, blocks, out);
        }
        PyMem_RawFree(pad);
        PyMem_RawFree((void *)msgs);
        PyMem_RawFree(blocks);
    }
    PyMem_RawFree(starts);
    Py_END_ALLOW_THREADS
    if (failed) { Py_CLEAR(result); PyErr_SetString(PyExc_ValueError, why); }
done:
    PyBuffer_Release(&body);
    return result;
}

static PyObject *merkle_parents(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer level;
    if (!PyArg_ParseTuple(args, "y*:merkle_parents", &level)) return NULL;
    PyObject *result = NULL;
    if (level.len % 32) { PyErr_SetString(PyExc_ValueError, "a level is 32 bytes per hash"); goto done; }
    size_t pairs = (size_t)level.len / 64;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(32 * pairs));
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    const unsigned char *in = level.buf;
    Py_BEGIN_ALLOW_THREADS
    enum { CHUNK = 256 };
    unsigned char pad[128 * CHUNK];
    const unsigned char *msgs[CHUNK];
    size_t blocks[CHUNK];
    for (size_t i = 0; i < pairs; i += CHUNK) {
        size_t n = pairs - i < CHUNK ? pairs - i : CHUNK;
        for (size_t j = 0; j < n; j++) {
            msgs[j] = pad + 128 * j;
            blocks[j] = pad_message(pad + 128 * j, 0x01, in + 64 * (i + j), 64);
        }
        hash_padded(n, msgs, blocks, out + 32 * i);
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&level);
    return result;
}

static PyMethodDef methods[] = {
    {"chain_frame", chain_frame, METH_VARARGS,
     "chain_frame(head, body, max_depth=0) -> (head, count): extend the chain over a msgpack array of\n"
     "records. With max_depth (1..255), a record whose arrays and maps nest deeper is refused.\n\n"
     "Raises ValueError on malformed msgpack, a refused record or a head that is not 32 bytes."},
    {"merkle_frame", merkle_frame, METH_VARARGS,
     "merkle_frame(size, compact, body, max_depth=0) -> (size, compact): extend an RFC 9162 Merkle tree's\n"
     "compact range (32 bytes per set bit of size, largest subtree first) over a msgpack array of records.\n"
     "With max_depth (1..255), a record whose arrays and maps nest deeper is refused.\n\n"
     "Raises ValueError on malformed msgpack, a refused record or a compact range that does not fit size."},
    {"merkle_leaves", merkle_leaves, METH_VARARGS,
     "merkle_leaves(body) -> bytes: the RFC 9162 leaf hashes of a msgpack array of records, 32 bytes each.\n\n"
     "Raises ValueError on malformed msgpack."},
    {"merkle_parents", merkle_parents, METH_VARARGS,
     "merkle_parents(level) -> bytes: the node hash of each pair of 32-byte hashes (an odd last one left out).\n\n"
     "Raises ValueError when the level is not a whole number of hashes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ledger._chainc", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__chainc(void) { return PyModule_Create(&module); }
