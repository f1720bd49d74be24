/* Compaction key-map kernels of storage_engine.record._speedups (see _speedups.h).
 *
 * The in-process map (maintenance/offset_map.py, InProcessOffsetMap) is Kafka's SkimpyOffsetMap idea: one
 * preallocated buffer of `slots` entries of 24 bytes, `log.cleaner.dedupe.buffer.size / 24` slots, no object per
 * key. An entry is three native int64: the key's xxh3-128 hash (high, low, as offset_map.key_hash returns them)
 * and offset + 1 (0 marks an empty slot). Robin Hood linear probing: a key's home slot is
 * (unsigned high * slots) >> 64; inserting walks forward and takes the slot of the first resident that is
 * closer to its own home than the new key is to its home (the resident moves on), so a lookup stops as soon as
 * it meets such a resident: an absent key costs about as many probes as a present one, even at Kafka's 0.9 load
 * factor. offset_map.py holds the same algorithm in Python (_py_table_put/_py_table_get); the differential
 * tests require both to leave identical bytes in the buffer.
 *
 * The sorted map (SortedHashOffsetMap: the Spark-built map) is two int64 hash arrays sorted by (high, low) and
 * the offsets, plus a bucket index: starts[b] is the first entry whose high hash falls into bucket b (the top
 * `bits` bits of the high hash, in signed order), so a probe is a short binary search inside one bucket. The
 * offsets are int64 (kind 1), or uint32 relative to a base offset (kind 2: 20 bytes per key instead of 24, for
 * maps whose offsets span less than 2**32).
 *
 * Functions (all take and return plain ints, buffers and tuples of them):
 *   key_hash(key) -> (hi, lo)
 *   table_put(table, slots, entries, hi, lo, offset) -> 1 new, 0 updated, -1 full (nothing changed)
 *   table_get(table, slots, hi, lo) -> offset or -1
 *   map_batch(table, slots, entries, max_entries, batch, first, stop)
 *       -> None (rejected: nothing changed) or (records done, entries, last offset put or -1, full); batch is
 *       (buf, pos, records), see SpBatch in _speedups.h
 *   lookup_keys(spec, keys) -> bytes of native int64 offsets (-1 absent)
 *   sorted_check_and_index(hi, lo, bits) -> bytes of 2**bits + 1 native int64 starts, or None if not sorted
 *   split_rows(columns, n, drop, bits, rows, counts) -> kept: of the key columns (hi, lo, offset, flags), the
 *       rows without `drop` flags as n x 3 int64 (high, low, offset) grouped by bucket (top `bits` bits of high,
 *       signed order), counts per bucket
 *   sort_latest(rows) -> distinct: rows (writable, n x 3 native int64: high, low, offset) sorted in place by
 *       (high, low) in signed order, each hash's maximum offset kept, the `distinct` rows at the front
 * `spec` is (0, table, slots), (1, hi, lo, offset, starts, bits) or (2, hi, lo, offset32, starts, bits, base).
 */
#define XXH_INLINE_ALL
#include "vendor/xxhash.h"
#include "_speedups.h"

void
sp_key_hash(const uint8_t *key, size_t len, int64_t *hi, int64_t *lo)
{
    XXH128_hash_t h = XXH3_128bits(key, len);
    *hi = (int64_t)h.high64;
    *lo = (int64_t)h.low64;
}

/* -- the open-addressing table --------------------------------------------------------------------------------- */

static inline uint64_t
home_slot(int64_t hi, uint64_t slots)
{
    return (uint64_t)(((unsigned __int128)(uint64_t)hi * slots) >> 64);
}

static inline uint64_t
distance(uint64_t i, uint64_t home, uint64_t slots)
{
    return i >= home ? i - home : i + slots - home;
}

static int
table_put_entry(int64_t *t, uint64_t slots, uint64_t entries, int64_t hi, int64_t lo, int64_t offset)
{
    uint64_t i = home_slot(hi, slots), dist = 0;
    for (;;) {
        int64_t *e = t + 3 * i;
        if (e[2] == 0) {
            break;
        }
        if (e[0] == hi && e[1] == lo) {
            e[2] = offset + 1;
            return 0;
        }
        if (distance(i, home_slot(e[0], slots), slots) < dist) {
            break;  /* Robin Hood: the key would sit here if it were present */
        }
        i = i + 1 == slots ? 0 : i + 1;
        if (++dist >= slots) {
            break;
        }
    }
    if (entries >= slots) {
        return -1;
    }
    int64_t cur[3] = {hi, lo, offset + 1};
    for (;;) {
        int64_t *e = t + 3 * i;
        if (e[2] == 0) {
            e[0] = cur[0];
            e[1] = cur[1];
            e[2] = cur[2];
            return 1;
        }
        uint64_t d = distance(i, home_slot(e[0], slots), slots);
        if (d < dist) {
            int64_t tmp[3] = {e[0], e[1], e[2]};
            e[0] = cur[0];
            e[1] = cur[1];
            e[2] = cur[2];
            cur[0] = tmp[0];
            cur[1] = tmp[1];
            cur[2] = tmp[2];
            dist = d;
        }
        i = i + 1 == slots ? 0 : i + 1;
        dist++;
    }
}

static inline int64_t
table_get_entry(const int64_t *t, uint64_t slots, int64_t hi, int64_t lo)
{
    uint64_t i = home_slot(hi, slots), dist = 0;
    for (;;) {
        const int64_t *e = t + 3 * i;
        if (e[2] == 0) {
            return -1;
        }
        if (e[0] == hi && e[1] == lo) {
            return e[2] - 1;
        }
        if (distance(i, home_slot(e[0], slots), slots) < dist) {
            return -1;
        }
        i = i + 1 == slots ? 0 : i + 1;
        if (++dist >= slots) {
            return -1;
        }
    }
}

/* -- the sorted map -------------------------------------------------------------------------------------------- */

static inline int
hash_less(int64_t ahi, int64_t alo, int64_t bhi, int64_t blo)
{
    return ahi < bhi || (ahi == bhi && alo < blo);
}

static inline uint64_t
bucket_of(int64_t hi, int bits)
{
    return bits == 0 ? 0 : ((uint64_t)hi ^ 0x8000000000000000ULL) >> (64 - bits);
}

static int64_t
sorted_get(const SpMap *m, int64_t hi, int64_t lo)
{
    const uint64_t b = bucket_of(hi, m->bits);
    uint64_t left = (uint64_t)m->starts[b], right = (uint64_t)m->starts[b + 1];
    while (left < right) {
        const uint64_t mid = left + ((right - left) >> 1);
        if (hash_less(m->hi[mid], m->lo[mid], hi, lo)) {
            left = mid + 1;
        }
        else {
            right = mid;
        }
    }
    if (left < m->n && m->hi[left] == hi && m->lo[left] == lo) {
        return m->kind == 2 ? m->base + (int64_t)m->off32[left] : m->off[left];
    }
    return -1;
}

int64_t
sp_map_get(const SpMap *m, int64_t hi, int64_t lo)
{
    return m->kind == 0 ? table_get_entry(m->table, m->slots, hi, lo) : sorted_get(m, hi, lo);
}

static int
acquire(SpMap *m, PyObject *obj, int flags, Py_ssize_t min_len)
{
    Py_buffer *v = &m->views[m->held];
    if (PyObject_GetBuffer(obj, v, flags) < 0) {
        return -1;
    }
    m->held++;
    if (v->len < min_len) {
        PyErr_SetString(PyExc_ValueError, "key map buffer is smaller than its declared size");
        return -1;
    }
    return 0;
}

int
sp_map_acquire(SpMap *m, PyObject *spec)
{
    m->held = 0;
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1) {
        PyErr_SetString(PyExc_TypeError, "key map spec must be a tuple");
        return -1;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (kind == -1 && PyErr_Occurred()) {
        return -1;
    }
    m->kind = (int)kind;
    if (kind == 0 && PyTuple_GET_SIZE(spec) == 3) {
        unsigned long long slots = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(spec, 2));
        if (slots == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        if (slots == 0 || slots > (unsigned long long)PY_SSIZE_T_MAX / 24) {
            PyErr_SetString(PyExc_ValueError, "key map table must have at least one slot");
            return -1;
        }
        m->slots = slots;
        if (acquire(m, PyTuple_GET_ITEM(spec, 1), PyBUF_SIMPLE, (Py_ssize_t)(slots * 24)) < 0) {
            sp_map_release(m);
            return -1;
        }
        m->table = (int64_t *)m->views[0].buf;
        return 0;
    }
    if ((kind == 1 && PyTuple_GET_SIZE(spec) == 6) || (kind == 2 && PyTuple_GET_SIZE(spec) == 7)) {
        long bits = PyLong_AsLong(PyTuple_GET_ITEM(spec, 5));
        if (bits == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (bits < 0 || bits > 30) {
            PyErr_SetString(PyExc_ValueError, "sorted key map bucket bits must be in [0, 30]");
            return -1;
        }
        m->bits = (int)bits;
        m->base = 0;
        if (kind == 2 && sp_as_i64(PyTuple_GET_ITEM(spec, 6), &m->base) < 0) {
            return -1;
        }
        for (int i = 1; i <= 4; i++) {
            if (acquire(m, PyTuple_GET_ITEM(spec, i), PyBUF_SIMPLE, 0) < 0) {
                sp_map_release(m);
                return -1;
            }
        }
        const Py_ssize_t off_width = kind == 2 ? 4 : 8;
        m->n = (uint64_t)(m->views[0].len / 8);
        if (m->views[1].len / 8 != (Py_ssize_t)m->n || m->views[2].len / off_width != (Py_ssize_t)m->n ||
            m->views[3].len / 8 != ((Py_ssize_t)1 << bits) + 1) {
            sp_map_release(m);
            PyErr_SetString(PyExc_ValueError, "sorted key map columns differ in length");
            return -1;
        }
        m->hi = (const int64_t *)m->views[0].buf;
        m->lo = (const int64_t *)m->views[1].buf;
        m->off = kind == 1 ? (const int64_t *)m->views[2].buf : NULL;
        m->off32 = kind == 2 ? (const uint32_t *)m->views[2].buf : NULL;
        m->starts = (const int64_t *)m->views[3].buf;
        return 0;
    }
    PyErr_SetString(PyExc_ValueError,
                    "key map spec must be (0, table, slots), (1, hi, lo, offset, starts, bits) or "
                    "(2, hi, lo, offset32, starts, bits, base)");
    return -1;
}

void
sp_map_release(SpMap *m)
{
    for (int i = 0; i < m->held; i++) {
        PyBuffer_Release(&m->views[i]);
    }
    m->held = 0;
}

/* -- Python functions ------------------------------------------------------------------------------------------ */

static int
writable_table(PyObject *obj, PyObject *slots_obj, Py_buffer *view, uint64_t *slots)
{
    unsigned long long s = PyLong_AsUnsignedLongLong(slots_obj);
    if (s == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (s == 0 || s > (unsigned long long)PY_SSIZE_T_MAX / 24) {
        PyErr_SetString(PyExc_ValueError, "key map table must have at least one slot");
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) < 0) {
        return -1;
    }
    if (view->len < (Py_ssize_t)(s * 24)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "key map buffer is smaller than its declared size");
        return -1;
    }
    *slots = s;
    return 0;
}

static PyObject *
py_key_hash(PyObject *Py_UNUSED(module), PyObject *key)
{
    Py_buffer v;
    if (PyObject_GetBuffer(key, &v, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    int64_t hi, lo;
    sp_key_hash((const uint8_t *)v.buf, (size_t)v.len, &hi, &lo);
    PyBuffer_Release(&v);
    return Py_BuildValue("(LL)", (long long)hi, (long long)lo);
}

static PyObject *
py_table_put(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "table_put(table, slots, entries, hi, lo, offset)");
        return NULL;
    }
    int64_t entries, hi, lo, offset;
    if (sp_as_i64(args[2], &entries) < 0 || sp_as_i64(args[3], &hi) < 0 || sp_as_i64(args[4], &lo) < 0 ||
        sp_as_i64(args[5], &offset) < 0) {
        return NULL;
    }
    if (offset < 0 || offset == INT64_MAX) {
        PyErr_Format(PyExc_ValueError, "offset %lld cannot be stored in a key map", (long long)offset);
        return NULL;
    }
    Py_buffer view;
    uint64_t slots;
    if (writable_table(args[0], args[1], &view, &slots) < 0) {
        return NULL;
    }
    int r = table_put_entry((int64_t *)view.buf, slots, (uint64_t)(entries < 0 ? 0 : entries), hi, lo, offset);
    PyBuffer_Release(&view);
    return PyLong_FromLong(r);
}

static PyObject *
py_table_get(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "table_get(table, slots, hi, lo)");
        return NULL;
    }
    int64_t hi, lo;
    if (sp_as_i64(args[2], &hi) < 0 || sp_as_i64(args[3], &lo) < 0) {
        return NULL;
    }
    Py_buffer view;
    uint64_t slots;
    if (writable_table(args[0], args[1], &view, &slots) < 0) {
        return NULL;
    }
    int64_t r = table_get_entry((const int64_t *)view.buf, slots, hi, lo);
    PyBuffer_Release(&view);
    return PyLong_FromLongLong((long long)r);
}

/* map_batch: cleaner._map_segment's inner loop for one magic-2 data batch. The whole records section is parsed
 * first, so a batch the Python decoder would reject changes nothing (None: the caller decodes it in Python,
 * which raises the exact error). Then, for each record with a key and first <= offset < stop: if the map holds
 * max_entries keys it stops (full), otherwise it puts the key. */
typedef struct {
    int64_t offset;
    const uint8_t *key;
    int32_t key_len;
} MapItem;

static PyObject *
py_map_batch(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "map_batch(table, slots, entries, max_entries, batch, first, stop)");
        return NULL;
    }
    int64_t entries, max_entries, first, stop;
    if (sp_as_i64(args[2], &entries) < 0 || sp_as_i64(args[3], &max_entries) < 0 ||
        sp_as_i64(args[5], &first) < 0 || sp_as_i64(args[6], &stop) < 0) {
        return NULL;
    }
    SpBatch batch;
    if (sp_batch_acquire(&batch, args[4]) < 0) {
        return NULL;
    }
    const int64_t count = batch.h.records_count, base_offset = batch.h.base_offset;
    PyObject *result = NULL;
    MapItem *items = NULL;
    int table_held = 0;
    Py_buffer table;
    uint64_t slots;
    if (count < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (writable_table(args[0], args[1], &table, &slots) < 0) {
        goto done;
    }
    table_held = 1;
    if (sp_batch_records(&batch) < 0) {
        goto done;
    }
    const int64_t len = batch.records_len;
    if (count > len / 7 + 1) {
        result = Py_NewRef(Py_None);  /* more records than bytes can hold: the decoder rejects it */
        goto done;
    }
    items = PyMem_Malloc(sizeof(MapItem) * (size_t)(count ? count : 1));
    if (items == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *b = batch.records;
    int64_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        SpRecord r;
        if (sp_parse_record(b, len, &pos, &r) < 0 ||
            __builtin_add_overflow(base_offset, (int64_t)r.offset_delta, &items[i].offset)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        items[i].key = r.key;
        items[i].key_len = r.key_len;
    }
    if (count > 0 && pos != len) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    int64_t *t = (int64_t *)table.buf;
    int64_t latest = -1;
    int full = 0;
    int64_t done_records = count;
    for (int64_t i = 0; i < count; i++) {
        const MapItem *it = &items[i];
        if (it->key_len < 0 || it->offset < first || it->offset >= stop) {
            continue;
        }
        if (entries >= max_entries) {
            full = 1;
            done_records = i;
            break;
        }
        if (it->offset == INT64_MAX) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        int64_t hi, lo;
        sp_key_hash(it->key, (size_t)it->key_len, &hi, &lo);
        int r = table_put_entry(t, slots, (uint64_t)entries, hi, lo, it->offset);
        if (r < 0) {
            PyErr_SetString(PyExc_ValueError, "attempted to add a new entry to a full offset map");
            goto done;
        }
        entries += r;
        latest = it->offset;
    }
    result = Py_BuildValue("(LLLO)", (long long)done_records, (long long)entries, (long long)latest,
                           full ? Py_True : Py_False);
done:
    PyMem_Free(items);
    if (table_held) {
        PyBuffer_Release(&table);
    }
    sp_batch_release(&batch);
    return result;
}

static PyObject *
py_lookup_keys(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "lookup_keys(spec, keys)");
        return NULL;
    }
    PyObject *keys = PySequence_Fast(args[1], "keys must be a sequence of bytes");
    if (keys == NULL) {
        return NULL;
    }
    SpMap m;
    if (sp_map_acquire(&m, args[0]) < 0) {
        Py_DECREF(keys);
        return NULL;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 8);
    if (out != NULL) {
        int64_t *w = (int64_t *)PyBytes_AS_STRING(out);
        PyObject **items = PySequence_Fast_ITEMS(keys);
        for (Py_ssize_t i = 0; i < n; i++) {
            char *data;
            Py_ssize_t len;
            if (PyBytes_AsStringAndSize(items[i], &data, &len) < 0) {
                Py_CLEAR(out);
                break;
            }
            int64_t hi, lo;
            sp_key_hash((const uint8_t *)data, (size_t)len, &hi, &lo);
            w[i] = sp_map_get(&m, hi, lo);
        }
    }
    sp_map_release(&m);
    Py_DECREF(keys);
    return out;
}

static PyObject *
py_sorted_check_and_index(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "sorted_check_and_index(hi, lo, bits)");
        return NULL;
    }
    long bits = PyLong_AsLong(args[2]);
    if (bits == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (bits < 0 || bits > 30) {
        PyErr_SetString(PyExc_ValueError, "bits must be in [0, 30]");
        return NULL;
    }
    Py_buffer hv, lv;
    if (PyObject_GetBuffer(args[0], &hv, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[1], &lv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&hv);
        return NULL;
    }
    PyObject *out = NULL;
    const int64_t *hi = hv.buf, *lo = lv.buf;
    const uint64_t n = (uint64_t)(hv.len / 8);
    if ((uint64_t)(lv.len / 8) != n) {
        PyErr_SetString(PyExc_ValueError, "hash columns differ in length");
        goto done;
    }
    const uint64_t buckets = (uint64_t)1 << bits;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((buckets + 1) * 8));
    if (out == NULL) {
        goto done;
    }
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(out);
    uint64_t next_bucket = 0;
    Py_BEGIN_ALLOW_THREADS
    for (uint64_t i = 0; i < n; i++) {
        if (i > 0 && !hash_less(hi[i - 1], lo[i - 1], hi[i], lo[i])) {
            next_bucket = UINT64_MAX;  /* not strictly sorted */
            break;
        }
        const uint64_t b = bucket_of(hi[i], (int)bits);
        while (next_bucket <= b) {
            starts[next_bucket++] = (int64_t)i;
        }
    }
    if (next_bucket != UINT64_MAX) {
        while (next_bucket <= buckets) {
            starts[next_bucket++] = (int64_t)n;
        }
    }
    Py_END_ALLOW_THREADS
    if (next_bucket == UINT64_MAX) {
        Py_CLEAR(out);
        out = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&hv);
    PyBuffer_Release(&lv);
    return out;
}

/* sort_latest: the key-map job's per-bucket merge (spark_jobs/key_map_tasks.py). Rows are ordered by the high hash
 * (sign-flipped, so unsigned order is signed order) in two steps: one counting scatter by the 16 bits below the
 * rows' common prefix (a bucket's rows share its top bits) into a scratch copy, which leaves bins of a few dozen
 * rows for uniformly spread hashes; then each bin is sorted by (high, low, offset) with an insertion sort, or, if
 * it holds more than SMALL_BIN rows (one key seen many times, or a skewed input), by an LSD radix sort of the high
 * hash (8 passes of 8 bits, a pass skipped when every row has the same byte there), stable. Rows of equal high hash
 * (the same key seen more than once, or a rare 64-bit collision) are then insertion-sorted by (low, offset) and the
 * last row of each (high, low) run - the maximum offset - is kept. */
typedef struct {
    int64_t hi, lo, off;
} Row3;

#define SIGN64 0x8000000000000000ULL
#define SMALL_BIN 32
#define MSD_BITS 11

static inline uint64_t
row_key(const Row3 *r)
{
    return (uint64_t)r->hi ^ SIGN64;
}

static inline int
row_less(const Row3 *a, const Row3 *b)
{
    return a->lo < b->lo || (a->lo == b->lo && a->off < b->off);
}

static inline int
row_less_full(const Row3 *a, const Row3 *b)
{
    return a->hi < b->hi || (a->hi == b->hi && row_less(a, b));
}

static void
insertion_sort_full(Row3 *rows, size_t n)
{
    for (size_t a = 1; a < n; a++) {
        Row3 v = rows[a];
        size_t b = a;
        while (b > 0 && row_less_full(&v, &rows[b - 1])) {
            rows[b] = rows[b - 1];
            b--;
        }
        rows[b] = v;
    }
}

/* MSD radix sort of cur[0:n] by bits [0, shift) of the key (the bits above are equal in every row), stable, the
 * result written to out (which is cur or other: the two buffers have the same layout). Each level scatters by the
 * next MSD_BITS bits into the other buffer and recurses into each bin; a bin of SMALL_BIN rows or fewer is
 * insertion-sorted in place, and a level where every row falls into one bin scatters nothing. Depth <= 64 /
 * MSD_BITS + 1; bins of rows with one high hash end when no bits are left, in input order. */
static void
msd_sort(Row3 *cur, Row3 *other, Row3 *out, size_t n, int shift)
{
    while (n > SMALL_BIN && shift > 0) {
        const int bits = shift < MSD_BITS ? shift : MSD_BITS;
        shift -= bits;
        const size_t mask = ((size_t)1 << bits) - 1;
        size_t start[(1 << MSD_BITS) + 1];
        memset(start, 0, sizeof(size_t) * (mask + 2));
        for (size_t i = 0; i < n; i++) {
            start[((row_key(&cur[i]) >> shift) & mask) + 1]++;
        }
        if (start[((row_key(&cur[0]) >> shift) & mask) + 1] == n) {
            continue;   /* every row in one bin: nothing to move at this level */
        }
        for (size_t b = 0; b <= mask; b++) {
            start[b + 1] += start[b];
        }
        size_t fill[1 << MSD_BITS];
        memcpy(fill, start, sizeof(size_t) * (mask + 1));
        for (size_t i = 0; i < n; i++) {
            other[fill[(row_key(&cur[i]) >> shift) & mask]++] = cur[i];
        }
        for (size_t b = 0; b <= mask; b++) {
            const size_t a = start[b], len = start[b + 1] - a;
            if (len) {
                msd_sort(other + a, cur + a, out == cur ? cur + a : other + a, len, shift);
            }
        }
        return;
    }
    if (n <= SMALL_BIN) {
        insertion_sort_full(cur, n);
    }
    if (cur != out) {
        memcpy(out, cur, n * sizeof(Row3));
    }
}

/* Orders rows[0:n] by the high hash (tmp: n rows of scratch). */
static void
sort_by_hi(Row3 *rows, Row3 *tmp, size_t n)
{
    uint64_t lo_key = UINT64_MAX, hi_key = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t k = row_key(&rows[i]);
        lo_key = k < lo_key ? k : lo_key;
        hi_key = k > hi_key ? k : hi_key;
    }
    const uint64_t diff = lo_key ^ hi_key;
    if (diff != 0) {   /* else one high hash: the run pass orders it */
        msd_sort(rows, tmp, rows, n, 64 - __builtin_clzll(diff));
    }
}

static Py_ssize_t
sort_latest_rows(Row3 *rows, Row3 *tmp, Py_ssize_t n)
{
    sort_by_hi(rows, tmp, (size_t)n);
    Py_ssize_t out = 0;
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = i + 1;
        while (j < n && rows[j].hi == rows[i].hi) {
            j++;
        }
        for (Py_ssize_t a = i + 1; a < j; a++) {   /* runs of one high hash are short: insertion sort */
            Row3 v = rows[a];
            Py_ssize_t b = a;
            while (b > i && row_less(&v, &rows[b - 1])) {
                rows[b] = rows[b - 1];
                b--;
            }
            rows[b] = v;
        }
        for (Py_ssize_t a = i; a < j; a++) {
            if (a + 1 == j || rows[a + 1].lo != rows[a].lo) {
                rows[out++] = rows[a];
            }
        }
        i = j;
    }
    return out;
}

static PyObject *
py_sort_latest(PyObject *Py_UNUSED(module), PyObject *rows_obj)
{
    Py_buffer v;
    if (PyObject_GetBuffer(rows_obj, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    if (v.len % (Py_ssize_t)sizeof(Row3) != 0) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_ValueError, "rows must be n x 3 int64");
        return NULL;
    }
    const Py_ssize_t n = v.len / (Py_ssize_t)sizeof(Row3);
    Py_ssize_t distinct = 0;
    if (n > 0) {
        Row3 *tmp = PyMem_RawMalloc((size_t)n * sizeof(Row3));
        if (tmp == NULL) {
            PyBuffer_Release(&v);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        distinct = sort_latest_rows((Row3 *)v.buf, tmp, n);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(tmp);
    }
    PyBuffer_Release(&v);
    if (distinct < 0) {
        return PyErr_NoMemory();
    }
    return PyLong_FromSsize_t(distinct);
}

/* split_rows: the key-map job's first stage (spark_jobs/key_map_tasks.py, split_group). Of rows [0, n) of the
 * decoded columns, drops those whose flags share a bit with `drop` (keyless records, control batches) and writes the
 * others as (high, low, offset) rows into `rows`, grouped by bucket (the top `bits` bits of the high hash, in signed
 * order) and in their input order within a bucket: a stable counting sort. counts[b] = the rows of bucket b. */
static PyObject *
py_split_rows(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "split_rows(columns, n, drop, bits, rows, counts)");
        return NULL;
    }
    PyObject *columns = args[0];
    if (!PyTuple_Check(columns) || PyTuple_GET_SIZE(columns) != 4) {
        PyErr_SetString(PyExc_TypeError, "key columns must be the tuple (hi, lo, offset, flags)");
        return NULL;
    }
    const Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    const long drop = PyLong_AsLong(args[2]);
    const long bits = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0 || bits < 0 || bits > 16) {
        PyErr_SetString(PyExc_ValueError, "split_rows: n must be >= 0 and bits in [0, 16]");
        return NULL;
    }
    Py_buffer v[6];
    int got = 0;
    PyObject *out = NULL;
    for (; got < 6; got++) {
        PyObject *obj = got < 4 ? PyTuple_GET_ITEM(columns, got) : args[got];  /* the columns, then rows, counts */
        if (PyObject_GetBuffer(obj, &v[got], got < 4 ? PyBUF_SIMPLE : PyBUF_WRITABLE) < 0) {
            goto done;
        }
    }
    const size_t buckets = (size_t)1 << bits;
    if (v[0].len / 8 < n || v[1].len / 8 < n || v[2].len / 8 < n || v[3].len < n ||
            v[4].len / (Py_ssize_t)sizeof(Row3) < n || (size_t)(v[5].len / 8) != buckets) {
        PyErr_SetString(PyExc_ValueError, "split_rows: a column holds fewer than n rows, or counts is not 2**bits");
        goto done;
    }
    const int64_t *hi = v[0].buf, *lo = v[1].buf, *off = v[2].buf;
    const uint8_t *flags = v[3].buf;
    Row3 *rows = v[4].buf;
    int64_t *counts = v[5].buf;
    const int shift = 64 - (int)bits;
    size_t *fill = PyMem_RawCalloc(buckets, sizeof(size_t));
    if (fill == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    size_t kept = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(counts, 0, buckets * 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(flags[i] & drop)) {
            counts[bits ? ((uint64_t)hi[i] ^ SIGN64) >> shift : 0]++;
        }
    }
    for (size_t b = 1; b < buckets; b++) {
        fill[b] = fill[b - 1] + (size_t)counts[b - 1];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(flags[i] & drop)) {
            Row3 *r = &rows[fill[bits ? ((uint64_t)hi[i] ^ SIGN64) >> shift : 0]++];
            r->hi = hi[i];
            r->lo = lo[i];
            r->off = off[i];
            kept++;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(fill);
    out = PyLong_FromSize_t(kept);
done:
    for (int i = 0; i < got; i++) {
        PyBuffer_Release(&v[i]);
    }
    return out;
}

PyMethodDef sp_keymap_methods[] = {
    {"key_hash", (PyCFunction)py_key_hash, METH_O, "key_hash(key) -> (hi, lo): xxh3-128 as two signed int64"},
    {"table_put", (PyCFunction)(void (*)(void))py_table_put, METH_FASTCALL,
     "table_put(table, slots, entries, hi, lo, offset) -> 1 new, 0 updated, -1 full"},
    {"table_get", (PyCFunction)(void (*)(void))py_table_get, METH_FASTCALL,
     "table_get(table, slots, hi, lo) -> offset or -1"},
    {"map_batch", (PyCFunction)(void (*)(void))py_map_batch, METH_FASTCALL,
     "map_batch(table, slots, entries, max_entries, batch, first, stop), batch = (buf, pos, records)"},
    {"lookup_keys", (PyCFunction)(void (*)(void))py_lookup_keys, METH_FASTCALL,
     "lookup_keys(spec, keys) -> bytes of native int64 offsets (-1 absent)"},
    {"sorted_check_and_index", (PyCFunction)(void (*)(void))py_sorted_check_and_index, METH_FASTCALL,
     "sorted_check_and_index(hi, lo, bits) -> bucket starts (bytes) or None if not strictly sorted"},
    {"split_rows", (PyCFunction)(void (*)(void))py_split_rows, METH_FASTCALL,
     "split_rows(columns, n, drop, bits, rows, counts) -> rows kept, grouped by bucket; columns = (hi, lo, offset, "
     "flags)"},
    {"sort_latest", (PyCFunction)py_sort_latest, METH_O,
     "sort_latest(rows) -> distinct: n x 3 int64 rows sorted by hash in place, each hash's maximum offset first"},
    {NULL, NULL, 0, NULL},
};
