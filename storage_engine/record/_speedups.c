/* storage_engine.record._speedups: optional compiled versions of the per-record loops in storage_engine.record.records.
 *
 * decode_records(payload, count, base_offset, base_timestamp, log_append_time, record_cls, error_cls)
 * encode_records(records, offsets, base_offset, base_timestamp) -> bytes
 * scan_records(payload, count, error_cls) -> (bad delta index, that delta, keyless index)
 *
 * Each function must behave exactly like its pure-Python twin in records.py (_py_decode_records,
 * _py_encode_records, _py_scan_records): same results, same bytes, same error class, message and position. The record layout and
 * varint rules are documented in records.py's module docstring; tests/storage_engine/record/test_speedups.py runs the
 * same checks against both implementations and compares them on random and mutated input.
 *
 * Hostile input: every read is checked against the payload length before it happens. Positions are int64 so
 * that "position + declared length" cannot overflow (a declared length is at most 2**31 - 1). The payload is
 * held as a buffer export for the whole call, so it cannot be resized under us.
 *
 * Only the documented C API is used; nothing here depends on CPython internals.
 *
 * The varint decoder and writers are _speedups.h's (shared with every kernel); this file adds the Python error
 * each rejection raises. The module also carries the compaction, recovery and key-map kernels of _keymap.c,
 * _clean.c and _walk.c (see _speedups.h for what each holds); PyInit__speedups adds their functions.
 */
#include "_speedups.h"
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------------- */
/* decoding */

typedef struct {
    const uint8_t *buf;
    int64_t end;          /* payload length */
    PyObject *error_cls;  /* CorruptRecordError: called as error_cls(message, None, position) */
} Reader;

/* Raise error_cls(message, None, position) with a printf-style message (PyUnicode_FromFormat). Returns -1. */
static int
raise_invalid(const Reader *r, int64_t position, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyObject *message = PyUnicode_FromFormatV(format, va);
    va_end(va);
    if (message == NULL) {
        return -1;
    }
    PyObject *exc = PyObject_CallFunction(r->error_cls, "OOL", message, Py_None, (long long)position);
    Py_DECREF(message);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

/* records.read_varint(buf, pos, 5) and (buf, pos, 10): the shared decoder (sp_read_varint, sp_read_varlong of
 * _speedups.h) bounded by the payload, its rejection raised as the Python decoder raises it. */
static void
raise_varint_error(const Reader *r, int64_t position, int rc, const char *too_long)
{
    raise_invalid(r, position, rc == SP_VARINT_TRUNCATED ? "premature end of buffer inside a varint" : too_long);
}

static inline int
read_varint(const Reader *r, int64_t *pos, int32_t *out)
{
    const int rc = sp_read_varint(r->buf, r->end, pos, out);
    if (rc != SP_VARINT_OK) {
        raise_varint_error(r, *pos, rc, "varint is too long");
        return -1;
    }
    return 0;
}

static inline int
read_varlong(const Reader *r, int64_t *pos, int64_t *out)
{
    const int rc = sp_read_varlong(r->buf, r->end, pos, out);
    if (rc != SP_VARINT_OK) {
        raise_varint_error(r, *pos, rc, "varlong is too long");
        return -1;
    }
    return 0;
}

/* The Python loop's one-byte fast path: `b = payload[pos]` raises IndexError (reported as premature EOF) before
 * read_varint is ever reached. */
static inline int
read_varint_fast(const Reader *r, int64_t *pos, int32_t *out)
{
    const int64_t p = *pos;
    if (p >= r->end) {
        return raise_invalid(r, p, "premature EOF while reading records");
    }
    const uint8_t b = r->buf[p];
    if (b < 0x80) {
        *out = sp_unzigzag32(b);
        *pos = p + 1;
        return 0;
    }
    return read_varint(r, pos, out);
}

/* payload[pos:pos + n] for n >= 0: a slice past the end is short or empty, as in Python. */
static PyObject *
slice_bytes(const Reader *r, int64_t pos, int64_t n)
{
    int64_t available = pos < r->end ? r->end - pos : 0;
    if (n > available) {
        n = available;
    }
    return PyBytes_FromStringAndSize(n > 0 ? (const char *)r->buf + pos : "", (Py_ssize_t)n);
}

/* records._decode_headers: a tuple of (str key, bytes | None value), bounded by the record's end. */
static PyObject *
decode_headers(const Reader *r, int64_t *ppos, int64_t body_end)
{
    int64_t pos = *ppos;
    int32_t count;
    if (read_varint(r, &pos, &count) < 0) {
        return NULL;
    }
    if (count < 0 || count > body_end - pos) {
        raise_invalid(r, pos, "found invalid number of record headers %d", (int)count);
        return NULL;
    }
    PyObject *headers = PyTuple_New(count);  /* count <= bytes left in the record */
    if (headers == NULL) {
        return NULL;
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t key_len, value_len;
        if (read_varint(r, &pos, &key_len) < 0) {
            goto error;
        }
        if (key_len < 0) {
            raise_invalid(r, pos, "invalid negative header key size %d", (int)key_len);
            goto error;
        }
        if (pos + key_len > body_end) {
            raise_invalid(r, pos, "header key runs past the record");
            goto error;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)r->buf + pos, key_len, "surrogateescape");
        if (key == NULL) {
            goto error;
        }
        pos += key_len;
        PyObject *value;
        if (read_varint(r, &pos, &value_len) < 0) {
            Py_DECREF(key);
            goto error;
        }
        if (value_len >= 0) {
            if (pos + value_len > body_end) {
                Py_DECREF(key);
                raise_invalid(r, pos, "header value runs past the record");
                goto error;
            }
            value = PyBytes_FromStringAndSize((const char *)r->buf + pos, value_len);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            pos += value_len;
        }
        else if (value_len == -1) {
            value = Py_NewRef(Py_None);
        }
        else {
            Py_DECREF(key);
            raise_invalid(r, pos, "invalid negative header value size %d", (int)value_len);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    *ppos = pos;
    return headers;
error:
    Py_DECREF(headers);  /* unfilled slots are NULL, which tuple deallocation skips */
    return NULL;
}

/* base + delta as a Python int. base_obj is used (with Python arithmetic) when it is not an int that fits int64
 * or the sum overflows int64, so the result is exact whatever the caller passed. */
static PyObject *
add_delta(PyObject *base_obj, int base_fits, int64_t base, int64_t delta)
{
    if (base_fits && !((delta > 0 && base > INT64_MAX - delta) || (delta < 0 && base < INT64_MIN - delta))) {
        return PyLong_FromLongLong((long long)(base + delta));
    }
    PyObject *d = PyLong_FromLongLong((long long)delta);
    if (d == NULL) {
        return NULL;
    }
    PyObject *sum = PyNumber_Add(base_obj, d);
    Py_DECREF(d);
    return sum;
}

/* 1 and the int64 value when obj is an int that fits int64; 0 otherwise (no error set); -1 on error. */
static int
as_int64(PyObject *obj, int64_t *out)
{
    if (!PyLong_Check(obj)) {
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

/* A namedtuple-like class (a tuple subclass with five _fields) is built with tuple.__new__(cls, fields), which is
 * exactly what namedtuple's generated __new__ does, minus a Python-level call per record. Anything else is
 * called normally. Measured on 1000 records with 100-byte values: calling record_cls 2.3M records/s, calling
 * the tuple.__new__ object 3.6M, PyTuple_Type.tp_new directly 4.3M (best of 25 rounds). */
static int
is_plain_namedtuple5(PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        return 0;
    }
    PyObject *fields = PyObject_GetAttrString(cls, "_fields");
    if (fields == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == 5;
    Py_DECREF(fields);
    return ok;
}

/* record_cls(offset, timestamp, key, value, headers); steals the five references, even on failure. */
static PyObject *
make_record(PyObject *record_cls, int plain_namedtuple, PyObject *items[5])
{
    PyObject *record = NULL;
    if (plain_namedtuple) {
        PyObject *fields = PyTuple_New(5);
        if (fields == NULL) {
            goto done;
        }
        for (int i = 0; i < 5; i++) {
            PyTuple_SET_ITEM(fields, i, items[i]);
            items[i] = NULL;
        }
        PyObject *args = PyTuple_Pack(1, fields);
        Py_DECREF(fields);
        if (args == NULL) {
            goto done;
        }
        record = PyTuple_Type.tp_new((PyTypeObject *)record_cls, args, NULL);
        Py_DECREF(args);
    }
    else {
        record = PyObject_Vectorcall(record_cls, items, 5, NULL);
    }
done:
    for (int i = 0; i < 5; i++) {
        Py_XDECREF(items[i]);
    }
    return record;
}

static PyObject *
speedups_decode_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "decode_records() takes exactly 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *payload = args[0], *count_obj = args[1], *base_offset_obj = args[2], *base_timestamp_obj = args[3];
    PyObject *log_append_time = args[4], *record_cls = args[5], *error_cls = args[6];

    int overflow;
    long long count = PyLong_AsLongLongAndOverflow(count_obj, &overflow);  /* range(count) semantics */
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow > 0) {
        count = LLONG_MAX;  /* runs out of payload long before this */
    }
    else if (overflow < 0) {
        count = 0;
    }
    int64_t base_offset = 0, base_timestamp = 0;
    int base_offset_fits = as_int64(base_offset_obj, &base_offset);
    int base_timestamp_fits = as_int64(base_timestamp_obj, &base_timestamp);
    if (base_offset_fits < 0 || base_timestamp_fits < 0) {
        return NULL;
    }
    const int plain_namedtuple = is_plain_namedtuple5(record_cls);

    Py_buffer view;
    if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const Reader reader = {(const uint8_t *)view.buf, (int64_t)view.len, error_cls};
    const Reader *r = &reader;

    /* A decoded record consumes at least 7 bytes (length and six body fields of one byte each), so a list of
     * end / 7 slots holds every record that can succeed; appending covers the impossible rest. */
    long long slots = count > 0 ? count : 0;
    if (slots > r->end / 7) {
        slots = r->end / 7;
    }
    PyObject *out = PyList_New((Py_ssize_t)slots);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }

    int64_t pos = 0;
    for (long long n = 0; n < count; n++) {
        int32_t length = 0, offset_delta = 0, key_len = 0, value_len = 0;
        int64_t timestamp_delta = 0;
        PyObject *items[5] = {NULL, NULL, NULL, NULL, NULL};  /* offset, timestamp, key, value, headers */

        if (read_varint_fast(r, &pos, &length) < 0) {
            goto error;
        }
        const int64_t body_end = pos + length;
        if (length < 0 || body_end > r->end) {
            raise_invalid(r, pos, "record size %d is larger than the %lld bytes remaining", (int)length,
                          (long long)(r->end - pos));
            goto error;
        }
        pos += 1;  /* attributes, unused */
        if (read_varlong(r, &pos, &timestamp_delta) < 0 || read_varint_fast(r, &pos, &offset_delta) < 0 ||
            read_varint_fast(r, &pos, &key_len) < 0) {
            goto error;
        }
        if (key_len >= 0) {
            items[2] = slice_bytes(r, pos, key_len);
            if (items[2] == NULL) {
                goto error;
            }
            pos += key_len;
        }
        else if (key_len == -1) {
            items[2] = Py_NewRef(Py_None);
        }
        else {
            raise_invalid(r, pos, "invalid negative key size %d", (int)key_len);
            goto error;
        }
        if (read_varint_fast(r, &pos, &value_len) < 0) {
            goto record_error;
        }
        if (value_len >= 0) {
            items[3] = slice_bytes(r, pos, value_len);
            if (items[3] == NULL) {
                goto record_error;
            }
            pos += value_len;
        }
        else if (value_len == -1) {
            items[3] = Py_NewRef(Py_None);
        }
        else {
            raise_invalid(r, pos, "invalid negative value size %d", (int)value_len);
            goto record_error;
        }
        if (pos >= r->end) {
            raise_invalid(r, pos, "premature EOF while reading records");
            goto record_error;
        }
        if (r->buf[pos] == 0) {
            items[4] = PyTuple_New(0);
            pos += 1;
        }
        else {
            items[4] = decode_headers(r, &pos, body_end);
        }
        if (items[4] == NULL) {
            goto record_error;
        }
        if (pos != body_end) {
            raise_invalid(r, pos,
                          "invalid record size: expected to read %d bytes in record payload, but instead read %lld",
                          (int)length, (long long)(length - (body_end - pos)));
            goto record_error;
        }
        items[0] = add_delta(base_offset_obj, base_offset_fits, base_offset, offset_delta);
        if (items[0] == NULL) {
            goto record_error;
        }
        if (log_append_time != Py_None) {
            items[1] = Py_NewRef(log_append_time);
        }
        else {
            items[1] = add_delta(base_timestamp_obj, base_timestamp_fits, base_timestamp, timestamp_delta);
            if (items[1] == NULL) {
                goto record_error;
            }
        }
        PyObject *record = make_record(record_cls, plain_namedtuple, items);  /* consumes items */
        if (record == NULL) {
            goto error;
        }
        if (n < slots) {
            PyList_SET_ITEM(out, (Py_ssize_t)n, record);
        }
        else {
            int failed = PyList_Append(out, record);
            Py_DECREF(record);
            if (failed) {
                goto error;
            }
        }
        continue;
record_error:
        for (int i = 0; i < 5; i++) {
            Py_XDECREF(items[i]);
        }
        goto error;
    }
    if (pos != r->end) {
        raise_invalid(r, pos, "incorrect declared batch size, records still remaining in file");
        goto error;
    }
    PyBuffer_Release(&view);
    return out;
error:
    PyBuffer_Release(&view);
    Py_DECREF(out);  /* unfilled slots are NULL, which list deallocation skips */
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* scanning: decode_records' checks without building a record */

/* decode_headers' checks and position, without building the headers. */
static int
skip_headers(const Reader *r, int64_t *ppos, int64_t body_end)
{
    int64_t pos = *ppos;
    int32_t count;
    if (read_varint(r, &pos, &count) < 0) {
        return -1;
    }
    if (count < 0 || count > body_end - pos) {
        return raise_invalid(r, pos, "found invalid number of record headers %d", (int)count);
    }
    for (int32_t i = 0; i < count; i++) {
        int32_t key_len, value_len;
        if (read_varint(r, &pos, &key_len) < 0) {
            return -1;
        }
        if (key_len < 0) {
            return raise_invalid(r, pos, "invalid negative header key size %d", (int)key_len);
        }
        if (pos + key_len > body_end) {
            return raise_invalid(r, pos, "header key runs past the record");
        }
        pos += key_len;  /* a header key always decodes (surrogateescape) */
        if (read_varint(r, &pos, &value_len) < 0) {
            return -1;
        }
        if (value_len >= 0) {
            if (pos + value_len > body_end) {
                return raise_invalid(r, pos, "header value runs past the record");
            }
            pos += value_len;
        }
        else if (value_len != -1) {
            return raise_invalid(r, pos, "invalid negative header value size %d", (int)value_len);
        }
    }
    *ppos = pos;
    return 0;
}

/* scan_records(payload, count, error_cls) -> (first record whose offset delta is not its index or -1, that
 * delta or 0, first record without a key or -1): every check of decode_records, in the same order, raising the
 * same errors at the same positions, but no record object is made (what a leader append needs of each record of a
 * client's batch). See records._py_scan_records. */
static PyObject *
speedups_scan_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "scan_records() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *payload = args[0], *count_obj = args[1], *error_cls = args[2];
    int overflow;
    long long count = PyLong_AsLongLongAndOverflow(count_obj, &overflow);  /* range(count) semantics */
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow > 0) {
        count = LLONG_MAX;  /* runs out of payload long before this */
    }
    else if (overflow < 0) {
        count = 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const Reader reader = {(const uint8_t *)view.buf, (int64_t)view.len, error_cls};
    const Reader *r = &reader;
    long long bad_index = -1, null_index = -1;
    int32_t bad_delta = 0;
    int64_t pos = 0;
    for (long long n = 0; n < count; n++) {
        int32_t length = 0, offset_delta = 0, key_len = 0, value_len = 0;
        int64_t timestamp_delta = 0;
        if (read_varint_fast(r, &pos, &length) < 0) {
            goto error;
        }
        const int64_t body_end = pos + length;
        if (length < 0 || body_end > r->end) {
            raise_invalid(r, pos, "record size %d is larger than the %lld bytes remaining", (int)length,
                          (long long)(r->end - pos));
            goto error;
        }
        pos += 1;  /* attributes, unused */
        if (read_varlong(r, &pos, &timestamp_delta) < 0 || read_varint_fast(r, &pos, &offset_delta) < 0 ||
            read_varint_fast(r, &pos, &key_len) < 0) {
            goto error;
        }
        if (key_len >= 0) {
            pos += key_len;  /* a key past the end is short, as the decoder's slice; the next read fails */
        }
        else if (key_len == -1) {
            if (null_index < 0) {
                null_index = n;
            }
        }
        else {
            raise_invalid(r, pos, "invalid negative key size %d", (int)key_len);
            goto error;
        }
        if (read_varint_fast(r, &pos, &value_len) < 0) {
            goto error;
        }
        if (value_len >= 0) {
            pos += value_len;
        }
        else if (value_len != -1) {
            raise_invalid(r, pos, "invalid negative value size %d", (int)value_len);
            goto error;
        }
        if (pos >= r->end) {
            raise_invalid(r, pos, "premature EOF while reading records");
            goto error;
        }
        if (r->buf[pos] == 0) {
            pos += 1;
        }
        else if (skip_headers(r, &pos, body_end) < 0) {
            goto error;
        }
        if (pos != body_end) {
            raise_invalid(r, pos,
                          "invalid record size: expected to read %d bytes in record payload, but instead read %lld",
                          (int)length, (long long)(length - (body_end - pos)));
            goto error;
        }
        if (bad_index < 0 && (long long)offset_delta != n) {
            bad_index = n;
            bad_delta = offset_delta;
        }
    }
    if (pos != r->end) {
        raise_invalid(r, pos, "incorrect declared batch size, records still remaining in file");
        goto error;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(LiL)", bad_index, (int)bad_delta, null_index);
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* encoding */

typedef struct {
    uint8_t *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
} Output;

static int
output_reserve(Output *o, size_t extra)
{
    if (extra > (size_t)(PY_SSIZE_T_MAX - o->len)) {
        PyErr_NoMemory();
        return -1;
    }
    const Py_ssize_t need = o->len + (Py_ssize_t)extra;
    if (need <= o->cap) {
        return 0;
    }
    Py_ssize_t cap = o->cap > 0 ? o->cap : 1024;
    while (cap < need) {
        cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    }
    uint8_t *grown = PyMem_Realloc(o->buf, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = grown;
    o->cap = cap;
    return 0;
}

/* write_varint's arithmetic on an arbitrary int d: ((d << 1) ^ (d >> 63)) & (2**64 - 1). Only reached when d
 * does not fit int64 (or is not an int at all, where the Python operators raise the same TypeError). */
static int
python_zigzag(PyObject *d, uint64_t *out)
{
    int result = -1;
    PyObject *one = PyLong_FromLong(1), *shift = PyLong_FromLong(63), *mask = PyLong_FromUnsignedLongLong(UINT64_MAX);
    PyObject *left = NULL, *right = NULL, *mixed = NULL, *masked = NULL;
    if (one == NULL || shift == NULL || mask == NULL) {
        goto done;
    }
    if ((left = PyNumber_Lshift(d, one)) == NULL || (right = PyNumber_Rshift(d, shift)) == NULL ||
        (mixed = PyNumber_Xor(left, right)) == NULL || (masked = PyNumber_And(mixed, mask)) == NULL) {
        goto done;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(masked);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        goto done;
    }
    *out = (uint64_t)v;
    result = 0;
done:
    Py_XDECREF(one);
    Py_XDECREF(shift);
    Py_XDECREF(mask);
    Py_XDECREF(left);
    Py_XDECREF(right);
    Py_XDECREF(mixed);
    Py_XDECREF(masked);
    return result;
}

/* The zig-zag encoding of a - b, as write_varint(a - b) would compute it. */
static int
zigzag_of_difference(PyObject *a, PyObject *b, uint64_t *out)
{
    int64_t x, y;
    int a_fits = as_int64(a, &x);
    int b_fits = a_fits > 0 ? as_int64(b, &y) : 0;
    if (a_fits < 0 || b_fits < 0) {
        return -1;
    }
    if (a_fits && b_fits && !((y < 0 && x > INT64_MAX + y) || (y > 0 && x < INT64_MIN + y))) {
        *out = sp_zigzag(x - y);
        return 0;
    }
    PyObject *d = PyNumber_Subtract(a, b);
    if (d == NULL) {
        return -1;
    }
    int result = python_zigzag(d, out);
    Py_DECREF(d);
    return result;
}

/* a OP b, with a shortcut for ints that fit int64. 1 true, 0 false, -1 error. */
static int
compare(PyObject *a, PyObject *b, int op)
{
    int64_t x, y;
    int a_fits = as_int64(a, &x);
    int b_fits = a_fits > 0 ? as_int64(b, &y) : 0;
    if (a_fits < 0 || b_fits < 0) {
        return -1;
    }
    if (a_fits && b_fits) {
        return op == Py_LT ? x < y : x <= y;
    }
    return PyObject_RichCompareBool(a, b, op);
}

/* Bytes to copy into a record: a key, a value, a header key or a header value. */
typedef struct {
    const char *ptr;
    Py_ssize_t len;   /* -1: None */
    Py_buffer view;   /* view.obj is set while a buffer export is held */
    PyObject *owner;  /* a strong reference to the bytes/str that ptr points into, or NULL */
} Piece;

static void
piece_release(Piece *p)
{
    if (p->view.obj != NULL) {
        PyBuffer_Release(&p->view);
    }
    Py_CLEAR(p->owner);
}

/* A key or value: None, or any contiguous bytes-like object (as `len(x)` then `body += x` accept). */
static int
piece_from_value(Piece *p, PyObject *obj)
{
    p->view.obj = NULL;
    p->owner = NULL;
    if (obj == Py_None) {
        p->ptr = NULL;
        p->len = -1;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        p->owner = Py_NewRef(obj);
        p->ptr = PyBytes_AS_STRING(obj);
        p->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, &p->view, PyBUF_SIMPLE) < 0) {
        p->view.obj = NULL;
        return -1;
    }
    p->ptr = (const char *)p->view.buf;
    p->len = p->view.len;
    return 0;
}

/* A header key: str encoded UTF-8 with 'surrogateescape', else bytes(key). */
static int
piece_from_header_key(Piece *p, PyObject *key)
{
    p->view.obj = NULL;
    p->owner = NULL;
    if (PyUnicode_Check(key)) {
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(key, &n);  /* cached in the str; fails only on surrogates */
        if (utf8 != NULL) {
            p->owner = Py_NewRef(key);
            p->ptr = utf8;
            p->len = n;
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            return -1;
        }
        PyErr_Clear();
        p->owner = PyUnicode_AsEncodedString(key, "utf-8", "surrogateescape");
    }
    else if (PyBytes_Check(key)) {
        p->owner = Py_NewRef(key);
        p->ptr = PyBytes_AS_STRING(key);
        p->len = PyBytes_GET_SIZE(key);
        return 0;
    }
    else {
        p->owner = PyObject_CallOneArg((PyObject *)&PyBytes_Type, key);
    }
    if (p->owner == NULL) {
        return -1;
    }
    p->ptr = PyBytes_AS_STRING(p->owner);
    p->len = PyBytes_GET_SIZE(p->owner);
    return 0;
}

/* `a, b, ... = obj` for `n` names: a tuple (new reference) of exactly n items, or NULL with Python's error. */
static PyObject *
unpack(PyObject *obj, Py_ssize_t n)
{
    PyObject *t = PyTuple_Check(obj) ? Py_NewRef(obj) : PySequence_Tuple(obj);
    if (t == NULL) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(t) != n) {
        if (PyTuple_GET_SIZE(t) > n) {
            PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %zd)", n);
        }
        else {
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %zd, got %zd)", n,
                         PyTuple_GET_SIZE(t));
        }
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

typedef struct {
    Piece *pieces;  /* two per header: key, value */
    Py_ssize_t cap;
} HeaderScratch;

static int
scratch_reserve(HeaderScratch *s, Py_ssize_t headers)
{
    if (headers > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(Piece)) {
        PyErr_NoMemory();
        return -1;
    }
    if (2 * headers <= s->cap) {
        return 0;
    }
    Piece *grown = PyMem_Realloc(s->pieces, (size_t)(2 * headers) * sizeof(Piece));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->pieces = grown;
    s->cap = 2 * headers;
    return 0;
}

/* Append one record, exactly as records.encode_record writes it. */
static int
encode_one(Output *o, HeaderScratch *scratch, uint64_t offset_zz, PyObject *record_obj, PyObject *base_timestamp)
{
    int result = -1;
    Piece key = {0}, value = {0};
    Py_ssize_t held = 0;  /* header pieces acquired */
    PyObject *headers = NULL;
    PyObject *fields = unpack(record_obj, 4);  /* key, value, timestamp, headers */
    if (fields == NULL) {
        return -1;
    }
    uint64_t timestamp_zz;
    if (zigzag_of_difference(PyTuple_GET_ITEM(fields, 2), base_timestamp, &timestamp_zz) < 0) {
        goto done;
    }
    size_t body = 1 + sp_varint_size(timestamp_zz) + sp_varint_size(offset_zz);
    if (piece_from_value(&key, PyTuple_GET_ITEM(fields, 0)) < 0) {
        goto done;
    }
    if (piece_from_value(&value, PyTuple_GET_ITEM(fields, 1)) < 0) {
        goto done;
    }
    body += (size_t)(sp_bytes_field_size(key.len) + sp_bytes_field_size(value.len));

    PyObject *headers_obj = PyTuple_GET_ITEM(fields, 3);
    Py_ssize_t header_count = PyObject_Size(headers_obj);  /* len(headers) is what gets written */
    if (header_count < 0) {
        goto done;
    }
    body += sp_varint_size(sp_zigzag(header_count));
    Py_ssize_t n = 0;
    if (header_count > 0 || !PyTuple_Check(headers_obj)) {
        headers = PySequence_Tuple(headers_obj);
        if (headers == NULL) {
            goto done;
        }
        n = PyTuple_GET_SIZE(headers);
        if (scratch_reserve(scratch, n) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = unpack(PyTuple_GET_ITEM(headers, i), 2);
        if (pair == NULL) {
            goto done;
        }
        Piece *hk = &scratch->pieces[2 * i], *hv = &scratch->pieces[2 * i + 1];
        int failed = piece_from_header_key(hk, PyTuple_GET_ITEM(pair, 0));
        if (!failed) {
            held++;
            failed = piece_from_value(hv, PyTuple_GET_ITEM(pair, 1));
            if (!failed) {
                held++;
            }
        }
        Py_DECREF(pair);  /* each piece holds a reference to (or an export of) what it points into */
        if (failed) {
            goto done;
        }
        body += (size_t)(sp_bytes_field_size(hk->len) + sp_bytes_field_size(hv->len));
    }
    if ((int64_t)body < 0) {
        PyErr_NoMemory();
        goto done;
    }
    const uint64_t body_zz = sp_zigzag((int64_t)body);
    if (output_reserve(o, sp_varint_size(body_zz) + body) < 0) {
        goto done;
    }
    uint8_t *w = o->buf + o->len;
    w = sp_put_varint(w, body_zz);
    *w++ = 0;  /* attributes */
    w = sp_put_varint(w, timestamp_zz);
    w = sp_put_varint(w, offset_zz);
    w = sp_put_bytes_field(w, key.ptr, key.len);
    w = sp_put_bytes_field(w, value.ptr, value.len);
    w = sp_put_varint(w, sp_zigzag(header_count));
    for (Py_ssize_t i = 0; i < n; i++) {
        const Piece *hk = &scratch->pieces[2 * i], *hv = &scratch->pieces[2 * i + 1];
        w = sp_put_bytes_field(w, hk->ptr, hk->len);
        w = sp_put_bytes_field(w, hv->ptr, hv->len);
    }
    o->len = w - o->buf;
    result = 0;
done:
    for (Py_ssize_t i = 0; i < held; i++) {
        piece_release(&scratch->pieces[i]);
    }
    piece_release(&key);
    piece_release(&value);
    Py_XDECREF(headers);
    Py_DECREF(fields);
    return result;
}

static PyObject *
speedups_encode_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "encode_records() takes exactly 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *records_obj = args[0], *offsets_obj = args[1], *base_offset = args[2], *base_timestamp = args[3];
    PyObject *records = NULL, *offsets = NULL, *result = NULL;
    Output o = {NULL, 0, 0};
    HeaderScratch scratch = {NULL, 0};

    Py_ssize_t count = PyObject_Size(records_obj);
    if (count < 0) {
        return NULL;
    }
    if (offsets_obj == Py_None) {
        PyObject *index = PyNumber_Index(base_offset);  /* range(base_offset, ...) needs an integer */
        if (index == NULL) {
            return NULL;
        }
        Py_DECREF(index);
    }
    else {
        Py_ssize_t offsets_count = PyObject_Size(offsets_obj);
        if (offsets_count < 0) {
            return NULL;
        }
        if (offsets_count != count) {
            PyErr_SetString(PyExc_ValueError, "offsets and records differ in length");
            return NULL;
        }
        offsets = PySequence_Tuple(offsets_obj);  /* a private copy: nothing can change it while we run */
        if (offsets == NULL) {
            return NULL;
        }
    }
    records = PySequence_Tuple(records_obj);
    if (records == NULL) {
        goto done;
    }
    if (offsets != NULL && PyTuple_GET_SIZE(offsets) < PyTuple_GET_SIZE(records)) {
        PyErr_SetString(PyExc_ValueError, "offsets and records differ in length");
        goto done;
    }
    if (output_reserve(&o, (size_t)PyTuple_GET_SIZE(records) * 8) < 0) {
        goto done;
    }
    PyObject *prev = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(records); i++) {
        uint64_t offset_zz;
        if (offsets == NULL) {
            offset_zz = sp_zigzag((int64_t)i);  /* offset - base_offset for offset in range(base_offset, ...) */
        }
        else {
            PyObject *offset = PyTuple_GET_ITEM(offsets, i);
            int bad;
            if (prev != NULL && (bad = compare(offset, prev, Py_LE)) != 0) {
                if (bad > 0) {
                    PyErr_Format(PyExc_ValueError, "offsets must increase, got %S after %S", offset, prev);
                }
                goto done;
            }
            if ((bad = compare(offset, base_offset, Py_LT)) != 0) {
                if (bad > 0) {
                    PyErr_Format(PyExc_ValueError, "offset %S is below the base offset %S", offset, base_offset);
                }
                goto done;
            }
            prev = offset;
            if (zigzag_of_difference(offset, base_offset, &offset_zz) < 0) {
                goto done;
            }
        }
        if (encode_one(&o, &scratch, offset_zz, PyTuple_GET_ITEM(records, i), base_timestamp) < 0) {
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize((const char *)o.buf, o.len);
done:
    PyMem_Free(o.buf);
    PyMem_Free(scratch.pieces);
    Py_XDECREF(records);
    Py_XDECREF(offsets);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------- */

static PyMethodDef speedups_methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))speedups_decode_records, METH_FASTCALL,
     "decode_records(payload, count, base_offset, base_timestamp, log_append_time, record_cls, error_cls)\n"
     "--\n\n"
     "Decode `count` records from an uncompressed records section; see records._py_decode_records."},
    {"scan_records", (PyCFunction)(void (*)(void))speedups_scan_records, METH_FASTCALL,
     "scan_records(payload, count, error_cls)\n"
     "--\n\n"
     "decode_records' checks without building records; see records._py_scan_records."},
    {"encode_records", (PyCFunction)(void (*)(void))speedups_encode_records, METH_FASTCALL,
     "encode_records(records, offsets, base_offset, base_timestamp)\n"
     "--\n\n"
     "The concatenated encodings of `records`; see records._py_encode_records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "storage_engine.record._speedups",
    "Compiled per-record loops for storage_engine.record.records (optional; same behaviour as the Python ones).",
    -1,
    speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddFunctions(module, sp_keymap_methods) < 0 || PyModule_AddFunctions(module, sp_clean_methods) < 0 ||
        PyModule_AddFunctions(module, sp_walk_methods) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
