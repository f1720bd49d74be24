/* Batch walks of storage_engine.record._speedups (see _speedups.h): CRC-32C, the recovery walk and the key columns
 * of the Spark data source. Both walks take the happy path only - plain magic-2 batches that are whole, valid and
 * in order - and stop at the first batch that is anything else, returning its position; the Python loop that
 * called them handles that one batch (and raises the exact error if there is one), then calls them again.
 *
 *   crc32c(data) -> int
 *   walk_batches(buf, pos, end, walk, offset_index, time_index)
 *       walk         (base_offset, index_interval_bytes, last_index_entry, max_ts, max_ts_offset): the segment and
 *                    the walk's state so far
 *       offset_index (last offset (-1: empty), room)
 *       time_index   (last timestamp, last offset, has entries (0 or 1), room)
 *       -> (pos, batches, last_index_entry, max_ts, max_ts_offset, offset entries, time entries)
 *     segment.recovery.recover_segment's loop: every batch is size-, magic- and CRC-checked, its last offset
 *     must fit the segment, and the sparse index entries recovery adds are returned packed exactly as the index
 *     files store them (big-endian), ready to be written; the walk stops before an entry the index would refuse.
 *   key_columns(buf, pos, end, first, stop, columns, row, rows) -> (pos, row, status)
 *     spark_jobs.segment_source's rows for the key map: for every record with first <= offset < stop, its key
 *     hash (0, 0 for a keyless record), offset and flags (1 keyless, 2 tombstone, 4 control batch) are written
 *     at index `row` of the four native arrays columns = (hi, lo, offset, flags) of `rows` entries (int64, int64,
 *     int64, int8). A batch is written whole or not at all. status 0: done (end of buffer or a batch starting at
 *     or after `stop`), 1: the arrays are full, 2: the batch at `pos` needs Python (compressed, legacy, torn or
 *     corrupt).
 *
 * It also holds SpBatch (_speedups.h): a batch handed to the cleaner's kernels as (buf, pos, records).
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

/* -- a batch handed to a kernel ------------------------------------------------------------------------------- */

int
sp_batch_acquire(SpBatch *b, PyObject *spec)
{
    b->held = 0;
    b->records = NULL;
    b->records_len = 0;
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
        PyErr_SetString(PyExc_TypeError, "a batch must be the tuple (buf, pos, records)");
        return -1;
    }
    int64_t pos;
    if (sp_as_i64(PyTuple_GET_ITEM(spec, 1), &pos) < 0) {
        return -1;
    }
    b->records_obj = PyTuple_GET_ITEM(spec, 2);
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 0), &b->views[0], PyBUF_SIMPLE) < 0) {
        return -1;
    }
    b->held = 1;
    if (pos < 0 || pos > b->views[0].len - SP_BATCH_OVERHEAD) {
        PyErr_SetString(PyExc_ValueError, "batch header outside the buffer");
        sp_batch_release(b);
        return -1;
    }
    const uint8_t *p = (const uint8_t *)b->views[0].buf + pos;
    sp_read_batch_header(p, &b->h);
    b->records = p + SP_BATCH_OVERHEAD;
    b->records_len = (int64_t)b->h.length + SP_LOG_OVERHEAD - SP_BATCH_OVERHEAD;
    return 0;
}

int
sp_batch_records(SpBatch *b)
{
    if (b->records_obj == Py_None) {
        const int64_t start = b->records - (const uint8_t *)b->views[0].buf, end = start + b->records_len;
        if (end > b->views[0].len || start > end) {
            PyErr_SetString(PyExc_ValueError, "records section outside the buffer");
            return -1;
        }
        return 0;
    }
    if (b->held == 1) {
        if (PyObject_GetBuffer(b->records_obj, &b->views[1], PyBUF_SIMPLE) < 0) {
            return -1;
        }
        b->held = 2;
    }
    b->records = (const uint8_t *)b->views[1].buf;
    b->records_len = b->views[1].len;
    return 0;
}

void
sp_batch_release(SpBatch *b)
{
    for (int i = 0; i < b->held; i++) {
        PyBuffer_Release(&b->views[i]);
    }
    b->held = 0;
}

/* -- the recovery walk ------------------------------------------------------------------------------------------ */

/* Index entries as the index files store them (segment/offset_index.py, segment/time_index.py), big-endian:
 * offset index (offset - base int32, position int32), time index (timestamp int64, offset - base int32). */
#define OFFSET_ENTRY_SIZE 8
#define TIME_ENTRY_SIZE 12

/* The batch at `pos` if it is a whole magic-2 batch with a matching CRC: its size; 0 otherwise. */
static inline int64_t
valid_v2_batch(const uint8_t *b, int64_t pos, int64_t end)
{
    const uint8_t *p = b + pos;
    const int64_t size = sp_v2_batch_size(p, end - pos);
    if (size == 0 ||
        sp_crc32c(p + SP_HDR_ATTRIBUTES, (size_t)(size - SP_HDR_ATTRIBUTES)) != sp_get_u32(p + SP_HDR_CRC)) {
        return 0;
    }
    return size;
}

static PyObject *
py_walk_batches(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "walk_batches(buf, pos, end, walk, offset_index, time_index)");
        return NULL;
    }
    int64_t pos, end, walk[5], off_index[2], time_index[4];
    if (sp_as_i64(args[1], &pos) < 0 || sp_as_i64(args[2], &end) < 0 ||
        sp_i64_tuple(args[3], 5, "walk (base_offset, index_interval_bytes, last_index_entry, max_ts, max_ts_offset)",
                     walk) < 0 ||
        sp_i64_tuple(args[4], 2, "offset_index (last offset, room)", off_index) < 0 ||
        sp_i64_tuple(args[5], 4, "time_index (last timestamp, last offset, has entries, room)", time_index) < 0) {
        return NULL;
    }
    const int64_t base = walk[0], interval = walk[1];
    int64_t last_entry = walk[2], max_ts = walk[3], max_ts_offset = walk[4];
    int64_t off_last = off_index[0];
    const int64_t off_room = off_index[1];
    int64_t time_last_ts = time_index[0], time_last_offset = time_index[1], time_has = time_index[2];
    const int64_t time_room = time_index[3];
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
    uint8_t *off_entries = PyMem_Malloc((size_t)max_entries * OFFSET_ENTRY_SIZE + 1);
    uint8_t *time_entries = PyMem_Malloc((size_t)max_entries * TIME_ENTRY_SIZE + 1);
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
        SpBatchHeader h;
        sp_read_batch_header(b + pos, &h);
        int64_t last;
        if (__builtin_add_overflow(h.base_offset, (int64_t)h.last_offset_delta, &last) || last < base ||
            last - base > INT32_MAX) {
            break;
        }
        const int64_t batch_max_ts = h.max_timestamp;
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
                uint8_t *entry = time_entries + TIME_ENTRY_SIZE * n_time;
                sp_put_i64(entry, new_max_ts);
                sp_put_u32(entry + 8, (uint32_t)(new_max_ts_offset - base));
                n_time++;
                time_last_ts = new_max_ts;
                time_last_offset = new_max_ts_offset;
                time_has = 1;
            }
            uint8_t *entry = off_entries + OFFSET_ENTRY_SIZE * n_off;
            sp_put_u32(entry, (uint32_t)(last - base));
            sp_put_u32(entry + 4, (uint32_t)pos);
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
                                     (Py_ssize_t)(n_off * OFFSET_ENTRY_SIZE), (const char *)time_entries,
                                     (Py_ssize_t)(n_time * TIME_ENTRY_SIZE));
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
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "key_columns(buf, pos, end, first, stop, columns, row, rows)");
        return NULL;
    }
    int64_t pos, end, first, stop, row, rows;
    if (sp_as_i64(args[1], &pos) < 0 || sp_as_i64(args[2], &end) < 0 || sp_as_i64(args[3], &first) < 0 ||
        sp_as_i64(args[4], &stop) < 0 || sp_as_i64(args[6], &row) < 0 || sp_as_i64(args[7], &rows) < 0) {
        return NULL;
    }
    PyObject *columns = args[5];
    if (!PyTuple_Check(columns) || PyTuple_GET_SIZE(columns) != 4) {
        PyErr_SetString(PyExc_TypeError, "key columns must be the tuple (hi, lo, offset, flags)");
        return NULL;
    }
    Py_buffer view, cols[4];
    int held = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    for (; held < 4; held++) {
        if (writable(PyTuple_GET_ITEM(columns, held), &cols[held], rows, held == 3 ? 1 : 8) < 0) {
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
        if (pos == end) {
            status = 0;
            break;
        }
        const int64_t size = sp_v2_batch_size(b + pos, end - pos);
        if (size == 0) {
            status = 2;
            break;
        }
        SpBatchHeader h;
        sp_read_batch_header(b + pos, &h);
        const int64_t base = h.base_offset;
        const int32_t count = h.records_count;
        int64_t last;
        if (__builtin_add_overflow(base, (int64_t)h.last_offset_delta, &last)) {
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
        if ((h.attributes & SP_ATTR_CODEC_MASK) != 0 || count < 0) {
            status = 2;
            break;
        }
        if (row + count > rows) {
            status = row == 0 ? 2 : 1;
            break;
        }
        const int control = (h.attributes & SP_ATTR_CONTROL) != 0;
        /* Parse the whole batch before writing any row of it. */
        const uint8_t *p = b + pos + SP_HDR_RECORDS;
        const int64_t len = size - SP_HDR_RECORDS;
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
