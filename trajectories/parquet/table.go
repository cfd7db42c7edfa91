package parquet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// A table is written in row groups of at most maxRows rows, or fewer when
// the rows' variable-length data (text, lists) reaches maxBytes: a row group
// is built in memory (arrow arrays, then its encoded column chunks) before it
// is written, so these two bound the memory of an export whatever the size of
// the file, and of the one that reads it back.
const (
	maxRows  = 16 << 10
	maxBytes = 8 << 20
)

// createdBy is the writer name in every file's footer. It is fixed (not
// the Arrow library's version string) so that the same input writes the
// same bytes whichever Arrow release built troupe.
const createdBy = "troupe"

// table is one Parquet file being written: the arrow builders of the row
// group in progress and the file writer the full ones go to.
type table struct {
	b     *array.RecordBuilder
	fw    *pqarrow.FileWriter
	rows  int
	bytes int
	err   error // the first write error; the table is dead after it
}

// noClose hides an io.Closer from the Parquet writer, which would close it
// with the footer: closing the file is the caller's.
type noClose struct{ io.Writer }

func newTable(w io.Writer, schema *arrow.Schema) (*table, error) {
	props := pq.NewWriterProperties(
		pq.WithCompression(compress.Codecs.Zstd),
		pq.WithCreatedBy(createdBy),
		pq.WithMaxRowGroupLength(maxRows),
		pq.WithDictionaryDefault(true),
		pq.WithStats(true),
	)
	fw, err := pqarrow.NewFileWriter(schema, noClose{w}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	return &table{b: array.NewRecordBuilder(memory.DefaultAllocator, schema), fw: fw}, nil
}

// endRow counts a row whose fields have all been appended, size bytes of
// variable-length data, and writes the row group when it is full.
func (t *table) endRow(size int) error {
	t.rows++
	t.bytes += size
	if t.rows >= maxRows || t.bytes >= maxBytes {
		return t.flush()
	}
	return nil
}

// flush writes the rows built so far as one row group.
func (t *table) flush() error {
	if t.err != nil || t.rows == 0 {
		return t.err
	}
	rec := t.b.NewRecordBatch()
	defer rec.Release()
	t.rows, t.bytes = 0, 0
	if err := t.fw.Write(rec); err != nil {
		t.err = fmt.Errorf("parquet: %w", err)
	}
	return t.err
}

// close writes the last row group and the footer.
func (t *table) close() error {
	err := t.flush()
	if cerr := t.fw.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("parquet: %w", cerr)
	}
	t.b.Release()
	return err
}

// Field helpers: the schemas are built from these, so that a column's
// type and nullability are stated once.

func str(name string) arrow.Field    { return arrow.Field{Name: name, Type: arrow.BinaryTypes.String} }
func optStr(name string) arrow.Field { f := str(name); f.Nullable = true; return f }
func i64(name string) arrow.Field    { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64} }
func u64(name string) arrow.Field    { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Uint64} }
func i32(name string) arrow.Field    { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int32} }
func optI32(name string) arrow.Field { f := i32(name); f.Nullable = true; return f }
func f64(name string) arrow.Field    { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64} }
func optF64(name string) arrow.Field { f := f64(name); f.Nullable = true; return f }
func boolean(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.FixedWidthTypes.Boolean}
}

func listOf(name string, elem arrow.DataType, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.ListOf(elem), Nullable: nullable}
}

func mapOf(name string, item arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.MapOf(arrow.BinaryTypes.String, item), Nullable: true}
}

// Appenders: each appends one value to the builder of a column, and
// returns the bytes of variable-length data it added (for endRow).

func appendStr(b array.Builder, s string) int {
	b.(*array.StringBuilder).Append(s)
	return len(s)
}

// appendOptStr appends s, or null when it is empty.
func appendOptStr(b array.Builder, s string) int {
	if s == "" {
		b.AppendNull()
		return 0
	}
	return appendStr(b, s)
}

func appendInts(b array.Builder, v []int, nullIfNil bool) int {
	lb := b.(*array.ListBuilder)
	if v == nil && nullIfNil {
		lb.AppendNull()
		return 0
	}
	lb.Append(true)
	vb := lb.ValueBuilder().(*array.Int32Builder)
	for _, x := range v {
		vb.Append(int32(x))
	}
	return 4 * len(v)
}

func appendFloats(b array.Builder, v []float64, nullIfNil bool) int {
	lb := b.(*array.ListBuilder)
	if v == nil && nullIfNil {
		lb.AppendNull()
		return 0
	}
	lb.Append(true)
	lb.ValueBuilder().(*array.Float64Builder).AppendValues(v, nil)
	return 8 * len(v)
}

func appendStrs(b array.Builder, v []string, nullIfNil bool) int {
	lb := b.(*array.ListBuilder)
	if v == nil && nullIfNil {
		lb.AppendNull()
		return 0
	}
	lb.Append(true)
	n := 0
	vb := lb.ValueBuilder().(*array.StringBuilder)
	for _, s := range v {
		vb.Append(s)
		n += len(s)
	}
	return n
}

// appendFloatMap appends m with its keys sorted (null when m is nil).
func appendFloatMap(b array.Builder, m map[string]float64) int {
	mb := b.(*array.MapBuilder)
	if m == nil {
		mb.AppendNull()
		return 0
	}
	mb.Append(true)
	kb, ib := mb.KeyBuilder().(*array.StringBuilder), mb.ItemBuilder().(*array.Float64Builder)
	n := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kb.Append(k)
		ib.Append(m[k])
		n += len(k) + 8
	}
	return n
}

// appendStrMap appends m with its keys sorted (null when m is nil).
func appendStrMap(b array.Builder, m map[string]string) int {
	mb := b.(*array.MapBuilder)
	if m == nil {
		mb.AppendNull()
		return 0
	}
	mb.Append(true)
	kb, ib := mb.KeyBuilder().(*array.StringBuilder), mb.ItemBuilder().(*array.StringBuilder)
	n := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kb.Append(k)
		ib.Append(m[k])
		n += len(k) + len(m[k])
	}
	return n
}

func appendOptF64(b array.Builder, v *float64) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.(*array.Float64Builder).Append(*v)
}

// appendJSON appends v as a JSON object with its keys sorted, null when v
// is empty. A value JSON cannot encode (a NaN in a note) is written as the
// string "unencodable: <why>", as the JSONL writers write it.
func appendJSON(b array.Builder, v map[string]any) int {
	if len(v) == 0 {
		b.AppendNull()
		return 0
	}
	buf := []byte{'{'}
	for i, k := range slices.Sorted(maps.Keys(v)) {
		if i > 0 {
			buf = append(buf, ',')
		}
		key, _ := marshal(k)
		buf = append(append(buf, key...), ':')
		val, err := marshal(v[k])
		if err != nil {
			val, _ = marshal("unencodable: " + err.Error())
		}
		buf = append(buf, val...)
	}
	return appendStr(b, string(append(buf, '}')))
}

// marshal is json.Marshal without its HTML escaping ("<" as \u003c), which
// troupe's JSONL does not do either: the same text reads the same in both.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}
