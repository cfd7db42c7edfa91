package promtext

import "testing"

func TestWriter(t *testing.T) {
	var w Writer
	w.Header("x_total", "counter", "Help with a \\ and a\nnewline and a \"quote\".")
	w.Sample("x_total", 1e6, "a", "q\"\\\nz", "b", "plain")
	w.Metric("g", "gauge", "A gauge.", -0.5)
	w.Header("h_seconds", "histogram", "H.")
	w.Histogram("h_seconds", []float64{0.1, 1}, []uint64{1, 2, 3}, 2.25, "s", "x")
	w.Histogram("u", []float64{1}, []uint64{0, 0}, 0)
	want := `# HELP x_total Help with a \\ and a\nnewline and a "quote".
# TYPE x_total counter
x_total{a="q\"\\\nz",b="plain"} 1e+06
# HELP g A gauge.
# TYPE g gauge
g -0.5
# HELP h_seconds H.
# TYPE h_seconds histogram
h_seconds_bucket{s="x",le="0.1"} 1
h_seconds_bucket{s="x",le="1"} 3
h_seconds_bucket{s="x",le="+Inf"} 6
h_seconds_sum{s="x"} 2.25
h_seconds_count{s="x"} 6
u_bucket{le="1"} 0
u_bucket{le="+Inf"} 0
u_sum 0
u_count 0
`
	if got := string(w.B); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
