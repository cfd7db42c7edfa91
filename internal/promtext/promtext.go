// Package promtext writes metrics in the Prometheus text exposition format
// (version 0.0.4) by hand: troupe's few counters, gauges and histograms do
// not justify the client library's dependency tree.
package promtext

import "strconv"

// ContentType is the exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Writer appends an exposition to B. Numbers are written as Go's shortest
// 'g' form (1e+06, not 1000000): what the format allows and what scrapers
// of troupe's endpoints have always read.
type Writer struct {
	B []byte
}

// Header writes the HELP and TYPE lines of the metric name; typ is
// "counter", "gauge" or "histogram".
func (w *Writer) Header(name, typ, help string) {
	w.B = escape(append(w.B, "# HELP "+name+" "...), help, false)
	w.B = append(w.B, "\n# TYPE "+name+" "+typ+"\n"...)
}

// Sample writes one sample of name with v and labels, given as name,
// value pairs.
func (w *Writer) Sample(name string, v float64, labels ...string) {
	w.series(name, labels, "")
	w.B = strconv.AppendFloat(w.B, v, 'g', -1, 64)
	w.B = append(w.B, '\n')
}

// Metric writes a metric of one unlabelled sample: its header and value.
func (w *Writer) Metric(name, typ, help string, v float64) {
	w.Header(name, typ, help)
	w.Sample(name, v)
}

// Histogram writes the series of histogram name: a cumulative bucket for
// each upper bound in bounds and for +Inf, then the sum and the count.
// counts holds each bucket's own count, the +Inf one last (one more than
// bounds).
func (w *Writer) Histogram(name string, bounds []float64, counts []uint64, sum float64, labels ...string) {
	var cum uint64
	for i, c := range counts {
		cum += c
		le := "+Inf"
		if i < len(bounds) {
			le = strconv.FormatFloat(bounds[i], 'g', -1, 64)
		}
		w.series(name+"_bucket", labels, le)
		w.B = strconv.AppendUint(w.B, cum, 10)
		w.B = append(w.B, '\n')
	}
	w.Sample(name+"_sum", sum, labels...)
	w.series(name+"_count", labels, "")
	w.B = strconv.AppendUint(w.B, cum, 10)
	w.B = append(w.B, '\n')
}

// series writes name and its labels, le last when it is not "", and the
// space before the value.
func (w *Writer) series(name string, labels []string, le string) {
	w.B = append(w.B, name...)
	if len(labels) > 0 || le != "" {
		w.B = append(w.B, '{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				w.B = append(w.B, ',')
			}
			w.B = label(w.B, labels[i], labels[i+1])
		}
		if le != "" {
			if len(labels) > 0 {
				w.B = append(w.B, ',')
			}
			w.B = label(w.B, "le", le)
		}
		w.B = append(w.B, '}')
	}
	w.B = append(w.B, ' ')
}

func label(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, `="`...)
	b = escape(b, value, true)
	return append(b, '"')
}

// escape appends s with the format's escapes: a backslash and a newline in
// help texts, and a double quote too in label values.
func escape(b []byte, s string, quote bool) []byte {
	for i := range len(s) {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}
