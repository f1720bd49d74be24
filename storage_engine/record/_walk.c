/* Batch walks of storage_engine.record._speedups (see _speedups.h): CRC-32C, the recovery walk and the key columns
 * of the Spark data source. Both walks take the happy path only - plain magic-2 batches that are whole, valid and
 * in order - and stop at the first batch that is anything else, returning its position; the Python loop that
 * called them handles that one batch (and raises the exact error if there is one), then calls them again.
 *
 *   crc32c(data) -> int
 *   walk_batches(buf, pos, end, base_offset, index_interval_bytes, last_index_entry, max_ts, max_ts_offset,
 *                offset_index_last (-1: empty), offset_index_room, time_index_last_ts, time_index_last_offset,
 *                time_index_has_entries, time_index_room)
 *       -> (pos, batches, last_index_entry, max_ts, max_ts_offset, offset entries, time entries)
 *     segment.recovery.recover_segment's loop: every batch is size-, magic- and CRC-checked, its last offset
 *     must fit the segment, and the sparse index entries recovery adds are returned packed exactly as the index
 *     files store them (big-endian), ready to be written; the walk stops before an entry the index would refuse.
 *   key_columns(buf, pos, end, first, stop, hi, lo, offset, flags, row, rows) -> (pos, row, status)
 *     spark_jobs.segment_source's rows for the key map: for every record with first <= offset < stop, its key
 *     hash (0, 0 for a keyless record), offset and flags (1 keyless, 2 tombstone, 4 control batch) are written
 *     at index `row` of four native arrays of `rows` entries (int64, int64, int64, int8). A batch is written whole
 *     or not at all. status 0: done (end of buffer or a batch starting at or after `stop`), 1: the arrays are
 *     full, 2: the batch at `pos` needs Python (compressed, legacy, torn or corrupt).
 */
#include "_speedups.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define SP_HAVE_X86_CRC 1
#endif

static uint32_t crc_table[8][256];
static int crc_hardware = -1;

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
        }
    }
#ifdef SP_HAVE_X86_CRC
    __builtin_cpu_init();
    crc_hardware = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc_hardware = 0;
#endif
}

static uint32_t
crc_software(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
#endif
        v ^= crc;
        crc = crc_table[7][v & 0xFF] ^ crc_table[6][(v >> 8) & 0xFF] ^ crc_table[5][(v >> 16) & 0xFF] ^
              crc_table[4][(v >> 24) & 0xFF] ^ crc_table[3][(v >> 32) & 0xFF] ^ crc_table[2][(v >> 40) & 0xFF] ^
              crc_table[1][(v >> 48) & 0xFF] ^ crc_table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    }
    return crc;
}

#ifdef SP_HAVE_X86_CRC
__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) {
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32;
}
#endif

uint32_t
sp_crc32c(const uint8_t *buf, size_t len)
{
    if (crc_hardware < 0) {
        crc_init();
    }
#ifdef SP_HAVE_X86_CRC
    if (crc_hardware) {
        return ~crc_sse42(0xFFFFFFFFu, buf, len);
    }
#endif
    return ~crc_software(0xFFFFFFFFu, buf, len);
}

static int
get_i64(PyObject *obj, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static PyObject *
py_crc32c(PyObject *Py_UNUSED(module), PyObject *data)
{
    Py_buffer v;
    if (PyObject_GetBuffer(data, &v, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = sp_crc32c((const uint8_t *)v.buf, (size_t)v.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(crc);
}

/* The batch at `pos` if it is a whole magic-2 batch with a matching CRC: its size; 0 otherwise. */
static inline int64_t
valid_v2_batch(const uint8_t *b, int64_t pos, int64_t end)
{
    const int64_t remaining = end - pos;
    if (remaining < 17) {
        return 0;
    }
    const int32_t length = sp_be32(b + pos + 8);
    if (length < 14 || SP_LOG_OVERHEAD + (int64_t)length > remaining || b[pos + 16] != 2 ||
        SP_LOG_OVERHEAD + (int64_t)length < SP_BATCH_OVERHEAD) {
        return 0;
    }
    const uint32_t stored = (uint32_t)sp_be32(b + pos + SP_CRC_OFFSET);
    if (sp_crc32c(b + pos + SP_ATTRIBUTES_OFFSET, (size_t)(SP_LOG_OVERHEAD + length - SP_ATTRIBUTES_OFFSET)) != stored) {
        return 0;
    }
    return SP_LOG_OVERHEAD + length;
}

static PyObject *
py_walk_batches(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "walk_batches() takes 14 arguments");
        return NULL;
    }
    int64_t pos, end, base, interval, last_entry, max_ts, max_ts_offset, off_last, off_room, time_last_ts,
        time_last_offset, time_has, time_room;
    if (get_i64(args[1], &pos) < 0 || get_i64(args[2], &end) < 0 || get_i64(args[3], &base) < 0 ||
        get_i64(args[4], &interval) < 0 || get_i64(args[5], &last_entry) < 0 || get_i64(args[6], &max_ts) < 0 ||
        get_i64(args[7], &max_ts_offset) < 0 || get_i64(args[8], &off_last) < 0 ||
        get_i64(args[9], &off_room) < 0 || get_i64(args[10], &time_last_ts) < 0 ||
        get_i64(args[11], &time_last_offset) < 0 || get_i64(args[12], &time_has) < 0 ||
        get_i64(args[13], &time_room) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (pos < 0 || end > view.len || pos > end || end > INT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk range outside the buffer");
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    /* Entries are collected in growing buffers; at most one per interval bytes, so size by that. */
    const int64_t max_entries = (end - pos) / (interval > 0 ? interval : 1) + 2;
    uint8_t *off_entries = PyMem_Malloc((size_t)max_entries * 8 + 1);
    uint8_t *time_entries = PyMem_Malloc((size_t)max_entries * 12 + 1);
    if (off_entries == NULL || time_entries == NULL) {
        PyMem_Free(off_entries);
        PyMem_Free(time_entries);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int64_t n_off = 0, n_time = 0, batches = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        const int64_t size = valid_v2_batch(b, pos, end);
        if (size == 0) {
            break;
        }
        int64_t last;
        if (__builtin_add_overflow(sp_be64(b + pos), (int64_t)sp_be32(b + pos + 23), &last) || last < base ||
            last - base > INT32_MAX) {
            break;
        }
        const int64_t batch_max_ts = sp_be64(b + pos + 35);
        int64_t new_max_ts = max_ts, new_max_ts_offset = max_ts_offset;
        if (batch_max_ts > new_max_ts) {
            new_max_ts = batch_max_ts;
            new_max_ts_offset = last;
        }
        if (pos - last_entry > interval) {
            /* OffsetIndex.append(last, pos) and TimeIndex.maybe_append(max_ts, max_ts_offset): stop where they
             * would raise (full, offsets not increasing, timestamps going back) and let Python raise. */
            if (n_off >= off_room || (off_last >= 0 && last <= off_last) || n_time >= time_room ||
                (time_has && new_max_ts_offset < time_last_offset) || (time_has && new_max_ts < time_last_ts)) {
                break;
            }
            if (new_max_ts > time_last_ts) {
                if (new_max_ts_offset < base || new_max_ts_offset - base > INT32_MAX) {
                    break;
                }
                sp_put_be64(time_entries + 12 * n_time, new_max_ts);
                sp_put_be32(time_entries + 12 * n_time + 8, (uint32_t)(new_max_ts_offset - base));
                n_time++;
                time_last_ts = new_max_ts;
                time_last_offset = new_max_ts_offset;
                time_has = 1;
            }
            sp_put_be32(off_entries + 8 * n_off, (uint32_t)(last - base));
            sp_put_be32(off_entries + 8 * n_off + 4, (uint32_t)pos);
            n_off++;
            off_last = last;
            last_entry = pos;
        }
        max_ts = new_max_ts;
        max_ts_offset = new_max_ts_offset;
        pos += size;
        batches++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(LLLLLy#y#)", (long long)pos, (long long)batches, (long long)last_entry,
                                     (long long)max_ts, (long long)max_ts_offset, (const char *)off_entries,
                                     (Py_ssize_t)(n_off * 8), (const char *)time_entries, (Py_ssize_t)(n_time * 12));
    PyMem_Free(off_entries);
    PyMem_Free(time_entries);
    return result;
}

static int
writable(PyObject *obj, Py_buffer *view, int64_t rows, int64_t itemsize)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) < 0) {
        return -1;
    }
    if (view->len < rows * itemsize) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "key column buffer is smaller than the declared rows");
        return -1;
    }
    return 0;
}

static PyObject *
py_key_columns(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "key_columns(buf, pos, end, first, stop, hi, lo, offset, flags, row, rows)");
        return NULL;
    }
    int64_t pos, end, first, stop, row, rows;
    if (get_i64(args[1], &pos) < 0 || get_i64(args[2], &end) < 0 || get_i64(args[3], &first) < 0 ||
        get_i64(args[4], &stop) < 0 || get_i64(args[9], &row) < 0 || get_i64(args[10], &rows) < 0) {
        return NULL;
    }
    Py_buffer view, cols[4];
    int held = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    for (; held < 4; held++) {
        if (writable(args[5 + held], &cols[held], rows, held == 3 ? 1 : 8) < 0) {
            goto done;
        }
    }
    if (pos < 0 || end > view.len || pos > end || row < 0 || row > rows) {
        PyErr_SetString(PyExc_ValueError, "key column range outside the buffers");
        goto done;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    int64_t *hi = cols[0].buf, *lo = cols[1].buf, *off = cols[2].buf;
    int8_t *flags = cols[3].buf;
    int status = 0;
    for (;;) {
        if (end - pos < SP_BATCH_OVERHEAD) {
            status = end == pos ? 0 : 2;
            break;
        }
        const int32_t length = sp_be32(b + pos + 8);
        if (length < 14 || SP_LOG_OVERHEAD + (int64_t)length > end - pos || b[pos + 16] != 2 ||
            SP_LOG_OVERHEAD + (int64_t)length < SP_BATCH_OVERHEAD) {
            status = 2;
            break;
        }
        const int64_t size = SP_LOG_OVERHEAD + length;
        const int64_t base = sp_be64(b + pos);
        const int attributes = b[pos + 22];
        const int32_t count = sp_be32(b + pos + 57);
        int64_t last;
        if (__builtin_add_overflow(base, (int64_t)sp_be32(b + pos + 23), &last)) {
            status = 2;
            break;
        }
        if (last < first) {
            pos += size;
            continue;
        }
        if (base >= stop) {
            status = 0;
            break;
        }
        if ((attributes & SP_CODEC_MASK) != 0 || count < 0) {
            status = 2;
            break;
        }
        if (row + count > rows) {
            status = row == 0 ? 2 : 1;
            break;
        }
        const int control = (attributes & SP_CONTROL) != 0;
        /* Parse the whole batch before writing any row of it. */
        const uint8_t *p = b + pos + SP_BATCH_OVERHEAD;
        const int64_t len = size - SP_BATCH_OVERHEAD;
        int64_t q = 0, w = row;
        int bad = 0;
        for (int32_t i = 0; i < count; i++) {
            SpRecord r;
            int64_t offset;
            if (sp_parse_record(p, len, &q, &r) < 0 || __builtin_add_overflow(base, (int64_t)r.offset_delta, &offset)) {
                bad = 1;
                break;
            }
            if (offset < first || offset >= stop) {
                continue;
            }
            int8_t f = (int8_t)(control ? 4 : 0);
            if (r.key_len < 0) {
                f |= 1;
                hi[w] = lo[w] = 0;
            }
            else {
                sp_key_hash(r.key, (size_t)r.key_len, &hi[w], &lo[w]);
            }
            if (r.value_len < 0) {
                f |= 2;
            }
            off[w] = offset;
            flags[w] = f;
            w++;
        }
        if (bad || (count > 0 && q != len)) {
            status = 2;
            break;
        }
        row = w;
        pos += size;
    }
    result = Py_BuildValue("(LLi)", (long long)pos, (long long)row, status);
done:
    for (int i = 0; i < held; i++) {
        PyBuffer_Release(&cols[i]);
    }
    PyBuffer_Release(&view);
    return result;
}

PyMethodDef sp_walk_methods[] = {
    {"crc32c", (PyCFunction)py_crc32c, METH_O, "crc32c(data) -> CRC-32C of the bytes (hardware when available)"},
    {"walk_batches", (PyCFunction)(void (*)(void))py_walk_batches, METH_FASTCALL,
     "the recovery walk over valid magic-2 batches; see _walk.c"},
    {"key_columns", (PyCFunction)(void (*)(void))py_key_columns, METH_FASTCALL,
     "key-map rows (hash, offset, flags) of plain magic-2 batches; see _walk.c"},
    {NULL, NULL, 0, NULL},
};
