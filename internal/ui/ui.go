// Package ui serves rbscope's local web page: heap dumps and raw
// recordings opened in a browser. The server does the graph work (a heap
// dump's index is built once and kept beside the dump) and answers each
// view with a small paged JSON document; the page, embedded in the
// binary, renders them. Every request needs the server's token and a Host
// header naming the server; every POST needs the page's CSRF token.
package ui

import (
	"bufio"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/diskcache"
	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Files are opened at start, in order.
	Files []string
	// CacheDir holds the indexes of dumps whose directory is not
	// writable, and the files dropped on the page (created 0700).
	CacheDir string
	// CacheLimits bound what CacheDir keeps, applied at start and after
	// each file the page adds there.
	CacheLimits CacheLimits
	// ListenHost is the host --listen named, accepted in Host headers
	// besides the loopback names ("" for none).
	ListenHost string
	// CrashDir is the crash store (rbscope crash install's) the crash views
	// list; CrashErr says why there is none.
	CrashDir string
	CrashErr error
	// Log receives one line per file that fails to open, and per index
	// built (os.Stderr in the command).
	Log io.Writer
	// Processes lists the host's Ruby processes for the Processes view,
	// whose stack, heap dump and record run the commands' packages; nil
	// leaves the view out.
	Processes *discover.Lister
	// VM is how the view finds a process's Ruby VM (the command's
	// options).
	VM rubyvm.Options
}

// Server is the web page's server.
type Server struct {
	opts  Options
	ln    net.Listener
	guard *guard
	mux   *http.ServeMux

	mu    sync.Mutex
	files []*file

	// pprof is pprof's web interface over the recordings.
	pprof pprofWeb
	// pairs are the comparisons of two dumps made so far.
	pairs pairs
}

// file is one opened file: a heap dump or a raw recording, loaded once.
type file struct {
	ID   int
	Path string
	// Name is what the page shows: the path given, or a dropped file's
	// own name.
	Name string

	once  sync.Once
	done  chan struct{}
	kind  string // "heap" or "profile", once loaded
	err   error
	built bool // the heap index was built (not read from an index file)
	took  time.Duration
	heap  *heapIndex
	prof  *profileView
}

// New prepares a server for the listener ln.
func New(ln net.Listener, o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	g, err := newGuard(ln.Addr(), o.ListenHost)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, ln: ln, guard: g, mux: http.NewServeMux()}
	if abs, err := filepath.Abs(o.CacheDir); err == nil && o.CacheDir != "" {
		s.pairs.kept = diskcache.At(filepath.Join(abs, "heap-pairs"))
	}
	for _, p := range o.Files {
		s.add(p, p)
	}
	s.sweepCache()
	s.routes()
	return s, nil
}

// URL is the address to open, token included.
func (s *Server) URL() string {
	host, port, _ := net.SplitHostPort(s.ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/?token=" + s.guard.token
}

// Handler is the server's handler, guard included.
func (s *Server) Handler() http.Handler { return s.guard.wrap(s.mux) }

// Serve loads the files in the background and serves until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		for _, f := range s.snapshot() {
			if ctx.Err() != nil {
				return
			}
			s.load(f)
		}
	}()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

func (s *Server) add(path, name string) *file {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &file{ID: len(s.files), Path: path, Name: name, done: make(chan struct{})}
	s.files = append(s.files, f)
	return f
}

// dumpsBefore returns the heap dumps open before f finished opening, in
// the order they were given. Of two finishing at once, each may list the
// other: their comparisons are made once all the same.
func (s *Server) dumpsBefore(f *file) []*file {
	var out []*file
	for _, o := range s.snapshot() {
		select {
		case <-o.done:
			if o != f && o.heap != nil {
				out = append(out, o)
			}
		default:
		}
	}
	return out
}

func (s *Server) snapshot() []*file {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*file(nil), s.files...)
}

func (s *Server) get(id int) *file {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id < 0 || id >= len(s.files) {
		return nil
	}
	return s.files[id]
}

// load opens f once: a gzipped file is a raw recording, anything else a
// heap dump. A failure is said once on the log and kept for the page.
func (s *Server) load(f *file) {
	f.once.Do(func() {
		defer close(f.done)
		start := time.Now()
		f.kind, f.err = s.open(f)
		f.took = time.Since(start)
		if f.err != nil {
			fmt.Fprintf(s.opts.Log, "rbscope: ui: %s\n", oneLine(f.err.Error()))
			return
		}
		if f.heap != nil {
			// Its comparisons with every dump open before it, made ready
			// meanwhile (pairs.prepare).
			go s.pairs.prepare(f, s.dumpsBefore(f))
		}
		if f.built {
			fmt.Fprintf(s.opts.Log, "rbscope: ui: indexed %s (%d objects) in %.1fs\n", f.Name, f.heap.g.Len(), f.took.Seconds())
		}
	})
	<-f.done
}

func (s *Server) open(f *file) (string, error) {
	in, err := heap.Open(f.Path)
	if err != nil {
		return "", fmt.Errorf("cannot open %s: %w", f.Name, unwrapPath(err))
	}
	br := bufio.NewReader(in)
	head, err := br.Peek(64)
	in.Close()
	// Gzipped, a raw recording unless it reads as a dump.
	if in.Compression == heap.Gzip && (len(head) == 0 || head[0] != '{' || output.RawHead(head)) {
		raw, err := os.Open(f.Path)
		if err != nil {
			return "", fmt.Errorf("cannot open %s: %w", f.Name, unwrapPath(err))
		}
		defer raw.Close()
		p, title, err := output.ReadRaw(raw)
		if err != nil {
			return "profile", fmt.Errorf("%s: not a raw recording (rbscope record --format raw): %w", f.Name, err)
		}
		f.prof = newProfileView(p, title)
		return "profile", nil
	}
	if len(head) == 0 && err != nil && err != io.EOF {
		return "", fmt.Errorf("%s: not a usable heap dump: %w", f.Name, err)
	}
	if len(head) == 0 {
		return "", fmt.Errorf("%s: empty file: not a heap dump nor a raw recording", f.Name)
	}
	if head[0] != '{' {
		return "", fmt.Errorf("%s: not a heap dump (ObjectSpace.dump_all JSON lines, plain, .zst or .gz) nor a raw recording (gzipped)", f.Name)
	}
	ix, built, err := openHeap(f.Path, s.opts.CacheDir)
	if err != nil {
		var he *heap.Error
		if errors.As(err, &he) {
			return "heap", fmt.Errorf("%s: not a usable heap dump: line %d: %s", f.Name, he.Line, he.Msg)
		}
		msg := strings.TrimPrefix(err.Error(), f.Path+": ")
		return "heap", fmt.Errorf("%s: not a usable heap dump: %s", f.Name, msg)
	}
	f.heap, f.built = ix, built
	return "heap", nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ") }

// upload stores a file dropped on the page under CacheDir (0600) and adds
// it to the files.
func (s *Server) upload(name string, body io.Reader) (*file, error) {
	if s.opts.CacheDir == "" {
		return nil, errors.New("no cache directory to keep dropped files in")
	}
	dir := filepath.Join(s.opts.CacheDir, "dropped")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	base := filepath.Base(filepath.Clean("/" + name))
	if base == "/" || base == "." {
		base = "dropped"
	}
	out, err := os.CreateTemp(dir, "*-"+strings.ReplaceAll(base, "*", "_"))
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(out, body); err != nil {
		out.Close()
		os.Remove(out.Name())
		return nil, fmt.Errorf("receiving %s: %w", base, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(out.Name())
		return nil, err
	}
	f := s.add(out.Name(), base)
	s.sweepCache()
	return f, nil
}

// profileView is a loaded recording with what its views read.
type profileView struct {
	p     *profile.Profile
	title string
	funcs []profile.FunctionStat
	tree  []treeNode

	// transformed are the views of p with transforms applied (view), by
	// their t parameter.
	mu          sync.Mutex
	transformed map[string]*profileView

	// shares are p's stack prefixes' shares of its samples
	// (profile.Profile.PrefixShares, by line), made when another
	// recording is first compared with this one (prefixShares).
	sharesOnce sync.Once
	shares     map[string]float64
}

// prefixShares returns the view's stack prefixes' shares of its samples,
// made on first use.
func (pv *profileView) prefixShares() map[string]float64 {
	pv.sharesOnce.Do(func() { pv.shares = pv.p.PrefixShares(true) })
	return pv.shares
}

func newProfileView(p *profile.Profile, title string) *profileView {
	return &profileView{p: p, title: title, funcs: p.Functions(), tree: callTree(p)}
}
