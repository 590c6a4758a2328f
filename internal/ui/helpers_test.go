package ui

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// testServer is a Server whose handler (token and Host checks included)
// the tests call through httptest, with no listener serving: New takes
// one only for its address.
type testServer struct {
	*Server
	host string
}

// newTestServer makes a server on o's files (o.CacheDir a fresh directory
// when unset) and opens them all before it returns, as Serve does in the
// background.
func newTestServer(t *testing.T, o Options) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if o.CacheDir == "" {
		o.CacheDir = t.TempDir()
	}
	s, err := New(ln, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range s.snapshot() {
		s.load(f)
	}
	// Opening a dump starts its comparisons with the others in the
	// background (pairs.prepare), which keep files under CacheDir: they
	// are done before the test's directories go.
	t.Cleanup(func() {
		var heaps []*file
		for _, f := range s.snapshot() {
			if f.heap != nil {
				heaps = append(heaps, f)
			}
		}
		for _, a := range heaps {
			for _, b := range heaps {
				if a != b {
					s.pairs.of(a, b, true)
				}
			}
		}
	})
	return &testServer{Server: s, host: ln.Addr().String()}
}

// request answers a GET of path (the token added), as the page sends it.
func (ts *testServer) request(t *testing.T, path string) *httptest.ResponseRecorder {
	t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	req := httptest.NewRequest(http.MethodGet, path+sep+"token="+ts.guard.token, nil)
	req.Host = ts.host
	rec := httptest.NewRecorder()
	ts.Handler().ServeHTTP(rec, req)
	return rec
}

// get answers a GET of an API path, which must succeed, decoded into v.
func (ts *testServer) get(t *testing.T, path string, v any) {
	t.Helper()
	rec := ts.request(t, path)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, rec.Body)
	}
}

// getError answers a GET of an API path that must fail: its status and
// its one message.
func (ts *testServer) getError(t *testing.T, path string) (int, string) {
	t.Helper()
	rec := ts.request(t, path)
	var e struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code == http.StatusOK {
		t.Errorf("GET %s: %d %s, want an error", path, rec.Code, rec.Body)
	}
	return rec.Code, e.Error
}

// files returns the page's file list.
func (ts *testServer) files(t *testing.T) []fileInfo {
	t.Helper()
	var d struct{ Files []fileInfo }
	ts.get(t, "/api/files", &d)
	return d.Files
}

// heapGraphReport is what testdata/heap_graph.rb says of its dump.
type heapGraphReport struct {
	Hash string `json:"hash"`
	Path struct {
		Module, Array, Hash, Target, Value string
	} `json:"path"`
}

// heapGraphDump runs testdata/heap_graph.rb, which writes its heap with
// ObjectSpace.dump_all, and returns the dump and its report.
func heapGraphDump(t *testing.T, dir string) (string, heapGraphReport) {
	t.Helper()
	dump := filepath.Join(dir, "graph.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_graph.rb", nil, dump)
	var rep heapGraphReport
	p.WaitReport(t, &rep, 60*time.Second)
	return dump, rep
}

// diffReport is what testdata/heap_graph_diff.rb says of its two dumps.
type diffReport struct {
	Leaky     uint64 `json:"leaky"`
	Site      string `json:"site"`
	LastLeaky string `json:"last_leaky"`
}

// diffDumps has heap_graph_diff.rb dump its heap before and after keeping
// its Leaky objects, and returns both dumps and its report.
func diffDumps(t *testing.T) (before, after string, rep diffReport) {
	t.Helper()
	dir := t.TempDir()
	before, after = filepath.Join(dir, "before.json"), filepath.Join(dir, "after.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_graph_diff.rb", nil, before, after)
	p.WaitReport(t, &rep, 60*time.Second)
	return before, after, rep
}
