package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/ui"
)

// BenchmarkUIProfileViews answers every profile view of `rbscope ui` on a
// recording of 100,000 samples (issue #26's scale: each in at most 300
// ms): stacks 20 to 60 frames deep over 3,000 functions of 150 files, in
// 8 threads, as a busy Rails process's recording has them. It reports each
// view's time per answer at the server (ms) and its ratio to the target.
func BenchmarkUIProfileViews(b *testing.B) {
	dir := b.TempDir()
	raw := filepath.Join(dir, "big.raw.gz")
	writeBigRecording(b, raw, 100_000)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s, err := ui.New(ln, ui.Options{Files: []string{raw, raw}, CacheDir: dir, Log: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)
	u, _ := url.Parse(s.URL())
	token := u.Query().Get("token")
	get := func(path string) time.Duration {
		start := time.Now()
		resp, err := http.Get("http://" + u.Host + path + "&token=" + token)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return time.Since(start)
	}
	// The first answer waits for the recording to load: say how long.
	load := get("/api/profile/functions?f=0")
	get("/api/profile/functions?f=1")
	views := []struct{ name, path string }{
		{"functions by self", "/api/profile/functions?f=0"},
		{"functions by total", "/api/profile/functions?f=0&sort=total"},
		{"call tree root", "/api/profile/tree?f=0&node=0"},
		{"call tree, a deep node", "/api/profile/tree?f=0&node=40"},
		{"flame graph SVG", "/api/profile/flame.svg?f=0"},
		{"stack chart SVG", "/api/profile/stackchart.svg?f=0"},
		{"stack chart, 2 s of it", "/api/profile/stackchart.svg?f=0&t=" + url.QueryEscape("time:100-102")},
		{"stack chart, a focus", "/api/profile/stackchart.svg?f=0&t=" + url.QueryEscape("focus:"+benchFunc(7).Name(false))},
		{"sandwich of a hot function", "/api/profile/sandwich?f=0&fn=" + url.QueryEscape(benchFunc(7).Name(false))},
		{"compare with a recording", "/api/profile/diff?f=1&before=0"},
		{"call tree against it", "/api/profile/tree?f=1&node=40&before=0"},
		{"sandwich against it", "/api/profile/sandwich?f=1&before=0&fn=" + url.QueryEscape(benchFunc(7).Name(false))},
	}
	b.ResetTimer()
	times := make([][]time.Duration, len(views))
	for i := 0; i < b.N; i++ {
		for k, v := range views {
			times[k] = append(times[k], get(v.path))
		}
	}
	b.StopTimer()
	fmt.Printf("recording: 100,000 samples, loaded in %.2f s (first answer)\n", load.Seconds())
	for k, v := range views {
		sort.Slice(times[k], func(i, j int) bool { return times[k][i] < times[k][j] })
		med := times[k][len(times[k])/2]
		fmt.Printf("%-28s %8.1f ms %6.2f of 300 ms\n", v.name, float64(med.Microseconds())/1000, med.Seconds()/0.3)
		b.ReportMetric(float64(med.Microseconds())/1000, strings.ReplaceAll(v.name, " ", "_")+"-ms")
	}
}

// benchFunc is function k of the synthetic recording.
func benchFunc(k int) profile.Frame {
	return profile.Frame{Kind: profile.KindRuby, Label: fmt.Sprintf("App::Mod%d#method_%d", k%150, k), Path: fmt.Sprintf("/srv/app/lib/mod%d.rb", k%150), Line: 10 + k%40}
}

// writeBigRecording writes a raw recording of n samples to path.
func writeBigRecording(b *testing.B, path string, n int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	p := profile.NewProfile(100)
	p.KeepTimeline() // as record --format raw does: the timeline and stack chart need it
	t0 := time.Unix(1_700_000_000, 0)
	p.Start = t0
	// 400 base stacks from a tree: each sample takes one and cuts it at a
	// random depth, so the tree is wide and deep.
	bases := make([][]profile.Frame, 400)
	for i := range bases {
		depth := 20 + rng.IntN(41)
		st := make([]profile.Frame, depth)
		for d := range st {
			// Shallow frames are shared by many stacks, deep ones spread.
			st[d] = benchFunc((d*37 + rng.IntN(1+d*d)) % 3000)
		}
		bases[i] = st
	}
	for i := 0; i < n; i++ {
		st := bases[rng.IntN(len(bases))]
		cut := len(st) - rng.IntN(10)
		p.AddSample(st[:cut], t0.Add(time.Duration(i)*10*time.Millisecond), 4242, 100+i%8, fmt.Sprintf("worker %d", i%8))
	}
	p.Duration = time.Duration(n) * 10 * time.Millisecond
	p.Ticks = n
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	raw, err := output.Lookup("raw")
	if err != nil {
		b.Fatal(err)
	}
	if err := raw.Write(f, p, output.Options{}); err != nil {
		b.Fatal(err)
	}
}
