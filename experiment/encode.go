package experiment

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// The per-episode series are most of an experiment's output bytes, and
// formatting their numbers was most of its outputs' CPU time. A cell's
// series are encoded here rather than by encoding/json, to the same bytes
// (TestEncodeCellIsEncodingJSONs): integers (El Farol's attendance, every
// count metric) take strconv.AppendInt rather than the shortest-float
// search, and the team and reward values' text is kept (cellJSON.spans),
// so that episodes.csv copies it rather than format those numbers again.

// appendJSONFloat appends v as encoding/json writes a float64: the
// shortest text that reads back as v, in 'f' form unless |v| < 1e-6 or
// |v| ≥ 1e21, with an exponent of one digit where json's has one. Not
// finite is an error, as in encoding/json.
func appendJSONFloat(dst []byte, v float64) ([]byte, error) {
	abs := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return dst, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(v, 'g', -1, 64))
	case abs < 1e15 && v == math.Trunc(v) && (v != 0 || !math.Signbit(v)):
		return strconv.AppendInt(dst, int64(v), 10), nil
	case abs != 0 && (abs < 1e-6 || abs >= 1e21):
		dst = strconv.AppendFloat(dst, v, 'e', -1, 64)
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1] // e-09 → e-9, as encoding/json
			dst = dst[:n-1]
		}
		return dst, nil
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64), nil
}

// appendFtoa appends ftoa(v): strconv's shortest 'g' text, integers below
// 1e6 (which 'g' writes without an exponent) by strconv.AppendInt.
func appendFtoa(dst []byte, v float64) []byte {
	if math.Abs(v) < 1e6 && v == math.Trunc(v) && (v != 0 || !math.Signbit(v)) {
		return strconv.AppendInt(dst, int64(v), 10)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// sameText says whether v's JSON text (appendJSONFloat) is its CSV text
// (appendFtoa): both are the shortest digits in plain form from 1e-4 to
// 1e6 (and for 0).
func sameText(v float64) bool {
	abs := math.Abs(v)
	return abs == 0 || abs >= 1e-4 && abs < 1e6
}

// cellJSON is a cell's encoding and where its team and reward numbers
// lie in it.
type cellJSON struct {
	data []byte
	// spans holds, per episode e, the offsets of the team value's text
	// (spans[4e], spans[4e+1]) and the reward's (spans[4e+2],
	// spans[4e+3]) in data.
	spans []uint32
}

// number appends episode e's team (which 0) or reward (which 1) value v
// as ftoa writes it: copied from data where the texts agree.
func (j *cellJSON) number(dst []byte, e, which int, v float64) []byte {
	if j == nil || j.spans == nil || !sameText(v) {
		return appendFtoa(dst, v)
	}
	k := 4*e + 2*which
	return append(dst, j.data[j.spans[k]:j.spans[k+1]]...)
}

// encodeCell encodes c as json.Marshal does, with a newline after it
// (the cell file's), which data leaves out.
func encodeCell(c *Cell) (*cellJSON, error) {
	head, err := json.Marshal(c.CellConfig)
	if err != nil {
		return nil, err
	}
	n := len(c.Team)
	buf := make([]byte, 0, len(head)+1024+(2+len(c.Metrics))*n*20)
	buf = append(buf, head[:len(head)-1]...) // the fields, without the closing brace
	buf = append(buf, `,"updates":`...)
	buf = strconv.AppendInt(buf, c.Updates, 10)
	if c.Optimum != nil {
		buf = append(buf, `,"optimum":`...)
		if buf, err = appendJSONFloat(buf, *c.Optimum); err != nil {
			return nil, err
		}
	}
	buf = append(buf, `,"turns":`...)
	buf = strconv.AppendInt(buf, c.Turns, 10)
	spans := make([]uint32, 4*n)
	series := func(name string, xs []float64, at int) error {
		buf = append(buf, name...)
		if xs == nil {
			buf = append(buf, "null"...)
			return nil
		}
		buf = append(buf, '[')
		for e, v := range xs {
			if e > 0 {
				buf = append(buf, ',')
			}
			start := len(buf)
			var err error
			if buf, err = appendJSONFloat(buf, v); err != nil {
				return err
			}
			if at >= 0 && e < n {
				spans[4*e+at], spans[4*e+at+1] = uint32(start), uint32(len(buf))
			}
		}
		buf = append(buf, ']')
		return nil
	}
	if err := series(`,"team":`, c.Team, 0); err != nil {
		return nil, err
	}
	if err := series(`,"reward":`, c.Reward, 2); err != nil {
		return nil, err
	}
	buf = append(buf, `,"cost":`...)
	if c.Cost == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '[')
		for e, v := range c.Cost {
			if e > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendInt(buf, v, 10)
		}
		buf = append(buf, ']')
	}
	marshal := func(name string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf = append(append(buf, name...), data...)
		return nil
	}
	if c.Credit != nil {
		if err := marshal(`,"credit":`, c.Credit); err != nil {
			return nil, err
		}
	}
	if len(c.MetricNames) > 0 {
		if err := marshal(`,"metric_names":`, c.MetricNames); err != nil {
			return nil, err
		}
	}
	if len(c.Metrics) > 0 {
		buf = append(buf, `,"metrics":[`...)
		for m, xs := range c.Metrics {
			name := ""
			if m > 0 {
				name = ","
			}
			if err := series(name, xs, -1); err != nil {
				return nil, err
			}
		}
		buf = append(buf, ']')
	}
	if c.Diagnostics != nil {
		if err := marshal(`,"diagnostics":`, c.Diagnostics); err != nil {
			return nil, err
		}
	}
	if c.Lock != nil {
		if err := marshal(`,"lock":`, c.Lock); err != nil {
			return nil, err
		}
	}
	if c.NashConv != nil {
		if err := marshal(`,"nashconv":`, c.NashConv); err != nil {
			return nil, err
		}
	}
	if c.Evaluation != nil {
		if err := marshal(`,"evaluation":`, c.Evaluation); err != nil {
			return nil, err
		}
	}
	buf = append(buf, '}', '\n')
	if uint64(len(buf)) > math.MaxUint32 {
		spans = nil // offsets past uint32: episodes.csv formats the numbers itself
	}
	// data leaves out the newline, and keeps room for it.
	return &cellJSON{data: buf[:len(buf)-1], spans: spans}, nil
}
