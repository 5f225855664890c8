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

/* merkle_frame(size, compact, body, max_depth=0) -> (size, compact): extend an RFC 9162
 * Merkle tree's compact range over a frame body's records (see ledger/_merkle.py, which
 * holds the definition and the pure-Python twin). `compact` is 32 bytes per set bit of
 * `size`; max_depth refuses records nested deeper, as chain_frame does. */
static int sha_parts(unsigned char *out, const unsigned char *a, size_t an, const unsigned char *b, size_t bn,
                     const unsigned char *c, size_t cn) {
    SHA256_CTX ctx;
    return SHA256_Init(&ctx) && SHA256_Update(&ctx, a, an) && SHA256_Update(&ctx, b, bn)
           && (cn == 0 || SHA256_Update(&ctx, c, cn)) && SHA256_Final(out, &ctx);
}

static PyObject *merkle_frame(PyObject *Py_UNUSED(module), PyObject *args) {
    unsigned long long size;
    Py_buffer compact, body;
    int max_depth = 0;
    if (!PyArg_ParseTuple(args, "Ky*y*|i:merkle_frame", &size, &compact, &body, &max_depth)) return NULL;
    PyObject *result = NULL;
    const char *why = NULL;
    unsigned char stack[64][32];
    int depth = 0;
    static const unsigned char zero = 0x00, one = 0x01;
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
        for (uint64_t i = 0; !failed && i < count; i++) {
            size_t start = pos;
            unsigned char h[32];
            if (skip_object(buf, len, &pos, max_depth, &why) < 0) { failed = 1; break; }
            if (size == UINT64_MAX) { why = "tree size overflow"; failed = 1; break; }
            if (!sha_parts(h, &zero, 1, buf + start, pos - start, NULL, 0)) { why = "OpenSSL SHA-256 failed"; failed = 1; break; }
            for (uint64_t n = size; n & 1; n >>= 1) {
                depth--;
                if (!sha_parts(h, &one, 1, stack[depth], 32, h, 32)) { why = "OpenSSL SHA-256 failed"; failed = 1; break; }
            }
            if (failed) break;
            memcpy(stack[depth++], h, 32);
            size++;
        }
        if (!failed && pos != len) { why = "trailing bytes after the msgpack array"; failed = 1; }
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
    static const unsigned char zero = 0x00;
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
    for (uint64_t i = 0; i < count; i++) {
        size_t start = pos;
        if (skip_object(buf, len, &pos, 0, &why) < 0) { failed = 1; break; }
        if (!sha_parts(out + 32 * i, &zero, 1, buf + start, pos - start, NULL, 0)) {
            why = "OpenSSL SHA-256 failed"; failed = 1; break;
        }
    }
    if (!failed && pos != len) { why = "trailing bytes after the msgpack array"; failed = 1; }
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
    static const unsigned char one = 0x01;
    int failed = 0;
    if (level.len % 32) { PyErr_SetString(PyExc_ValueError, "a level is 32 bytes per hash"); goto done; }
    size_t pairs = (size_t)level.len / 64;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(32 * pairs));
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    const unsigned char *in = level.buf;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < pairs; i++)
        if (!sha_parts(out + 32 * i, &one, 1, in + 64 * i, 64, NULL, 0)) { failed = 1; break; }
    Py_END_ALLOW_THREADS
    if (failed) { Py_CLEAR(result); PyErr_SetString(PyExc_ValueError, "OpenSSL SHA-256 failed"); }
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
