package envserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/trajectories"
)

// BenchmarkVectorStep is the server path of a vector environment's step:
// the handler (routing, the actions frame decoded, every env stepped, the
// batch encoded and written) called in process on a recorder, for
// tic-tac-toe at batch 1, 16 and 256, every move a random legal cell
// (chosen from the answer's masks, read in place: the client's cost is
// not the server's). It reports CPU ns per move (user+sys):
//
//	go test -run '^$' -bench VectorStep -benchtime 200x ./envserver
func BenchmarkVectorStep(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch-%d", n), func(b *testing.B) { benchVector(b, n, "") })
	}
	b.Run("256-sink", func(b *testing.B) { benchVector(b, 256, "sink") })
}

// discardSink takes episodes and writes them nowhere: the cost of the
// output stage (credit, samples) without a file's.
type discardSink struct{}

func (discardSink) WriteEpisode(*trajectories.Episode) error { return nil }

func benchVector(b *testing.B, n int, mode string) {
	cfg := envserver.Config{}
	if mode == "sink" {
		cfg.Sink = discardSink{}
	}
	s, err := envserver.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	post := func(path, ctype string, body []byte) []byte {
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	var va envclient.VectorAnswer
	if err := json.Unmarshal(post(envclient.PathVectors, "application/json", fmt.Appendf(nil, `{"scenario":"tictactoe","num_envs":%d}`, n)), &va); err != nil {
		b.Fatal(err)
	}
	base := envclient.PathVector + va.VectorID + "/"
	frame := post(base+"reset", "application/json", []byte(`{"seed":1}`))
	na, k := len(va.Agents), va.NumActions
	sdim := 1
	for _, d := range va.State.Shape {
		sdim *= d
	}
	masksAt := 48 + 4*n*na + 4*n*sdim + 4*n*na*va.ObsDim
	if first, err := envclient.DecodeBatch(frame); err != nil || !bytes.Equal(first.Masks, frame[masksAt:masksAt+n*na*k]) {
		b.Fatalf("the masks are not at byte %d of the batch frame (%v)", masksAt, err)
	}
	acts := make([]int32, n*na)
	var body []byte
	rng := uint64(1)
	moves, cpu0 := 0, cputime.Seconds()
	for b.Loop() {
		masks := frame[masksAt : masksAt+n*na*k]
		for i := range acts {
			acts[i] = envclient.NoAction
			m := masks[i*k : (i+1)*k]
			c := 0
			for _, x := range m {
				c += int(x)
			}
			if c == 0 {
				continue
			}
			rng = rng*6364136223846793005 + 1442695040888963407
			pick := int(rng>>33) % c
			for j, x := range m {
				if x == 1 {
					if pick == 0 {
						acts[i] = int32(j)
						break
					}
					pick--
				}
			}
			moves++
		}
		body = envclient.AppendActions(body[:0], envclient.Actions{NumEnvs: n, NumAgents: na, Actions: acts})
		frame = post(base+"step", envclient.ContentBinary, body)
	}
	if cpu := cputime.Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu*1e9/float64(moves), "cpu-ns/move")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(moves), "ns/move")
}
