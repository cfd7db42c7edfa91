package parquet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// A table is written in row groups of at most maxRows rows, or fewer when
// the rows' variable-length data (text, lists) reaches maxBytes: a row group
// is held in memory (each column's values and levels, then its encoded
// column chunks) before it is written, so these two bound the memory of an
// export whatever the size of the file, and of the one that reads it back.
const (
	maxRows  = 16 << 10
	maxBytes = 8 << 20
)

// createdBy is the writer name in every file's footer. It is fixed (not
// the library's version string) so that the same input writes the same
// bytes whichever Arrow release built troupe.
const createdBy = "troupe"

// The tables are written with arrow-go's Parquet file writer, column chunk
// by column chunk, not through its Arrow layer (pqarrow): that layer links
// Arrow's compute kernels, Flight and gRPC into troupe, and doubled the
// binary.

// kind is a column's value type.
type kind uint8

const (
	kInt32 kind = iota
	kInt64
	kUint64 // INT64 with the unsigned 64-bit logical type
	kFloat64
	kBool
	kString
)

// shape is how a column's values are nested.
type shape uint8

const (
	scalar shape = iota
	list         // a list of values, each present
	dict         // a map from strings to values, each present; always nullable
)

// field declares a column: the schemas are made of these, so that a
// column's type and nullability are stated once.
type field struct {
	name     string
	kind     kind
	shape    shape
	nullable bool // the value, list or map may be null
}

func str(name string) field     { return field{name: name, kind: kString} }
func optStr(name string) field  { return field{name: name, kind: kString, nullable: true} }
func i64(name string) field     { return field{name: name, kind: kInt64} }
func u64(name string) field     { return field{name: name, kind: kUint64} }
func i32(name string) field     { return field{name: name, kind: kInt32} }
func optI32(name string) field  { return field{name: name, kind: kInt32, nullable: true} }
func f64(name string) field     { return field{name: name, kind: kFloat64} }
func optF64(name string) field  { return field{name: name, kind: kFloat64, nullable: true} }
func boolean(name string) field { return field{name: name, kind: kBool} }

func listOf(name string, elem kind, nullable bool) field {
	return field{name: name, kind: elem, shape: list, nullable: nullable}
}

func mapOf(name string, item kind) field {
	return field{name: name, kind: item, shape: dict, nullable: true}
}

// node is the field's Parquet schema node.
func (f field) node() (schema.Node, error) {
	rep := pq.Repetitions.Required
	if f.nullable {
		rep = pq.Repetitions.Optional
	}
	switch f.shape {
	case list:
		elem, err := leaf("element", f.kind, pq.Repetitions.Required)
		if err != nil {
			return nil, err
		}
		return schema.ListOfWithName(f.name, elem, rep, -1)
	case dict:
		key, err := leaf("key", kString, pq.Repetitions.Required)
		if err != nil {
			return nil, err
		}
		value, err := leaf("value", f.kind, pq.Repetitions.Required)
		if err != nil {
			return nil, err
		}
		return schema.MapOf(f.name, key, value, rep, -1)
	}
	return leaf(f.name, f.kind, rep)
}

func leaf(name string, k kind, rep pq.Repetition) (schema.Node, error) {
	switch k {
	case kInt32:
		return schema.NewPrimitiveNodeLogical(name, rep, schema.NewIntLogicalType(32, true), pq.Types.Int32, -1, -1)
	case kInt64:
		return schema.NewPrimitiveNodeLogical(name, rep, schema.NewIntLogicalType(64, true), pq.Types.Int64, -1, -1)
	case kUint64:
		return schema.NewPrimitiveNodeLogical(name, rep, schema.NewIntLogicalType(64, false), pq.Types.Int64, -1, -1)
	case kFloat64:
		return schema.NewPrimitiveNode(name, rep, pq.Types.Double, -1, -1)
	case kBool:
		return schema.NewPrimitiveNode(name, rep, pq.Types.Boolean, -1, -1)
	}
	return schema.NewPrimitiveNodeLogical(name, rep, schema.StringLogicalType{}, pq.Types.ByteArray, -1, -1)
}

// values are one leaf column's values of the row group in progress.
type values struct {
	i32   []int32
	i64   []int64 // also the uint64 columns, as their bits
	f64   []float64
	bools []bool
	// strings: their bytes one after another, and where each ends
	text []byte
	ends []int
}

func (v *values) reset() {
	v.i32, v.i64, v.f64, v.bools, v.text, v.ends = v.i32[:0], v.i64[:0], v.f64[:0], v.bools[:0], v.text[:0], v.ends[:0]
}

func (v *values) str(s string) {
	v.text = append(v.text, s...)
	v.ends = append(v.ends, len(v.text))
}

// column is one column of a table (a map is two leaf columns, its keys and
// its values) and what its rows of the row group in progress hold: the
// values, and, for a nullable or nested column, the definition and
// repetition levels that place them in the rows.
type column struct {
	field
	maxDef   int16
	def, rep []int16
	keys     values // a map's keys
	vals     values
}

func newColumn(f field) *column {
	c := &column{field: f}
	if f.nullable {
		c.maxDef++
	}
	if f.shape != scalar {
		c.maxDef++ // the repeated group
	}
	return c
}

// null appends a null row (the column is nullable).
func (c *column) null() {
	c.def = append(c.def, 0)
	if c.shape != scalar {
		c.rep = append(c.rep, 0)
	}
}

// present appends the levels of a present scalar.
func (c *column) present() {
	if c.nullable {
		c.def = append(c.def, 1)
	}
}

// items appends the levels of a list or map of n items.
func (c *column) items(n int) {
	if n == 0 {
		c.def = append(c.def, c.maxDef-1)
		c.rep = append(c.rep, 0)
		return
	}
	for i := range n {
		c.def = append(c.def, c.maxDef)
		c.rep = append(c.rep, min(int16(i), 1))
	}
}

func (c *column) int32(v int32)     { c.present(); c.vals.i32 = append(c.vals.i32, v) }
func (c *column) int64(v int64)     { c.present(); c.vals.i64 = append(c.vals.i64, v) }
func (c *column) uint64(v uint64)   { c.present(); c.vals.i64 = append(c.vals.i64, int64(v)) }
func (c *column) float64(v float64) { c.present(); c.vals.f64 = append(c.vals.f64, v) }
func (c *column) boolean(v bool)    { c.present(); c.vals.bools = append(c.vals.bools, v) }

func (c *column) reset() {
	c.def, c.rep = c.def[:0], c.rep[:0]
	c.keys.reset()
	c.vals.reset()
}

// table is one Parquet file being written: the columns of the row group in
// progress and the file writer the full ones go to.
type table struct {
	cols  []*column
	fw    *file.Writer
	rows  int
	bytes int
	err   error // the first write error; the table is dead after it
}

// noClose hides an io.Closer from the Parquet writer, which would close it
// with the footer: closing the file is the caller's.
type noClose struct{ io.Writer }

func newTable(w io.Writer, fields []field) (*table, error) {
	t := &table{}
	nodes := make(schema.FieldList, len(fields))
	for i, f := range fields {
		n, err := f.node()
		if err != nil {
			return nil, fmt.Errorf("parquet: column %s: %w", f.name, err)
		}
		nodes[i] = n
		t.cols = append(t.cols, newColumn(f))
	}
	root, err := schema.NewGroupNode("schema", pq.Repetitions.Required, nodes, -1)
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	props := pq.NewWriterProperties(
		pq.WithCompression(compress.Codecs.Zstd),
		pq.WithCreatedBy(createdBy),
		pq.WithMaxRowGroupLength(maxRows),
		pq.WithDictionaryDefault(true),
		pq.WithStats(true),
	)
	t.fw, err = file.NewParquetWriterWithError(noClose{w}, root, file.WithWriterProps(props))
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	return t, nil
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

// flush writes the rows held so far as one row group.
func (t *table) flush() error {
	if t.err != nil || t.rows == 0 {
		return t.err
	}
	t.rows, t.bytes = 0, 0
	rg := t.fw.AppendRowGroup()
	var strs []pq.ByteArray
	write := func(c *column, v *values) error {
		cw, err := rg.NextColumn()
		if err != nil {
			return err
		}
		def, rep := c.def, c.rep
		if c.maxDef == 0 {
			def = nil
		}
		switch w := cw.(type) {
		case *file.Int32ColumnChunkWriter:
			_, err = w.WriteBatch(v.i32, def, rep)
		case *file.Int64ColumnChunkWriter:
			_, err = w.WriteBatch(v.i64, def, rep)
		case *file.Float64ColumnChunkWriter:
			_, err = w.WriteBatch(v.f64, def, rep)
		case *file.BooleanColumnChunkWriter:
			_, err = w.WriteBatch(v.bools, def, rep)
		case *file.ByteArrayColumnChunkWriter:
			strs = strs[:0]
			from := 0
			for _, end := range v.ends {
				strs = append(strs, v.text[from:end:end])
				from = end
			}
			_, err = w.WriteBatch(strs, def, rep)
		default:
			err = fmt.Errorf("column %s: unexpected writer %T", c.name, cw)
		}
		if err != nil {
			return err
		}
		return cw.Close()
	}
	for _, c := range t.cols {
		if c.shape == dict {
			if err := write(c, &c.keys); err != nil {
				t.err = fmt.Errorf("parquet: %s.key: %w", c.name, err)
				return t.err
			}
		}
		if err := write(c, &c.vals); err != nil {
			t.err = fmt.Errorf("parquet: %s: %w", c.name, err)
			return t.err
		}
		c.reset()
	}
	if err := rg.Close(); err != nil {
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
	return err
}

// Appenders: each appends one value to a column, and returns the bytes of
// variable-length data it added (for endRow).

func appendStr(c *column, s string) int {
	c.present()
	c.vals.str(s)
	return len(s)
}

// appendOptStr appends s, or null when it is empty.
func appendOptStr(c *column, s string) int {
	if s == "" {
		c.null()
		return 0
	}
	return appendStr(c, s)
}

func appendInts(c *column, v []int, nullIfNil bool) int {
	if v == nil && nullIfNil {
		c.null()
		return 0
	}
	c.items(len(v))
	for _, x := range v {
		c.vals.i32 = append(c.vals.i32, int32(x))
	}
	return 4 * len(v)
}

func appendFloats(c *column, v []float64, nullIfNil bool) int {
	if v == nil && nullIfNil {
		c.null()
		return 0
	}
	c.items(len(v))
	c.vals.f64 = append(c.vals.f64, v...)
	return 8 * len(v)
}

func appendStrs(c *column, v []string, nullIfNil bool) int {
	if v == nil && nullIfNil {
		c.null()
		return 0
	}
	c.items(len(v))
	n := 0
	for _, s := range v {
		c.vals.str(s)
		n += len(s)
	}
	return n
}

// appendFloatMap appends m with its keys sorted (null when m is nil).
func appendFloatMap(c *column, m map[string]float64) int {
	if m == nil {
		c.null()
		return 0
	}
	c.items(len(m))
	n := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c.keys.str(k)
		c.vals.f64 = append(c.vals.f64, m[k])
		n += len(k) + 8
	}
	return n
}

// appendStrMap appends m with its keys sorted (null when m is nil).
func appendStrMap(c *column, m map[string]string) int {
	if m == nil {
		c.null()
		return 0
	}
	c.items(len(m))
	n := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c.keys.str(k)
		c.vals.str(m[k])
		n += len(k) + len(m[k])
	}
	return n
}

func appendOptF64(c *column, v *float64) {
	if v == nil {
		c.null()
		return
	}
	c.float64(*v)
}

// appendJSON appends v as a JSON object with its keys sorted, null when v
// is empty. A value JSON cannot encode (a NaN in a note) is written as the
// string "unencodable: <why>", as the JSONL writers write it.
func appendJSON(c *column, v map[string]any) int {
	if len(v) == 0 {
		c.null()
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
	return appendStr(c, string(append(buf, '}')))
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
