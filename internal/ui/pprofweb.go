package ui

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/driver"
	gprofile "github.com/google/pprof/profile"

	"github.com/rbscope/rbscope/internal/output"
)

// pprofWeb is pprof's own web interface (graph, flame graph, peek, source,
// top) over a recording, mounted at /pprof/ID/: the handlers of
// github.com/google/pprof/driver, made once per recording.
type pprofWeb struct {
	mu       sync.Mutex
	handlers map[int]map[string]http.Handler
}

// pprofCSP lets pprof's pages run their own inline script and style (its
// templates escape what comes from the profile); nothing from elsewhere.
const pprofCSP = "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'self'"

// servePprof answers /pprof/{id}/{rest...}.
func (s *Server) servePprof(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	f := s.get(id)
	if err != nil || f == nil {
		http.Error(w, "no such recording", http.StatusNotFound)
		return
	}
	s.load(f)
	if f.err != nil || f.kind != "profile" {
		http.Error(w, fmt.Sprintf("%s is not a recording that opened", f.Name), http.StatusNotFound)
		return
	}
	hs, err := s.pprof.of(f)
	if err != nil {
		http.Error(w, "pprof: "+oneLine(err.Error()), http.StatusInternalServerError)
		return
	}
	h, ok := hs["/"+r.PathValue("rest")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Security-Policy", pprofCSP)
	h.ServeHTTP(w, r)
}

// of returns pprof's handlers for recording f, making them on first use.
func (p *pprofWeb) of(f *file) (map[string]http.Handler, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hs, ok := p.handlers[f.ID]; ok {
		return hs, nil
	}
	prof, err := output.PprofProfile(f.prof.p)
	if err != nil {
		return nil, err
	}
	var hs map[string]http.Handler
	err = driver.PProf(&driver.Options{
		Flagset: newPprofFlags([]string{"-http=127.0.0.1:0", "-no_browser", "-symbolize=none", f.Name}),
		Fetch:   pprofFetch{prof},
		UI:      quietUI{},
		HTTPServer: func(args *driver.HTTPServerArgs) error {
			hs = args.Handlers
			return nil
		},
	})
	if err == nil && hs == nil {
		err = errors.New("no web interface")
	}
	if err != nil {
		return nil, err
	}
	if p.handlers == nil {
		p.handlers = map[int]map[string]http.Handler{}
	}
	p.handlers[f.ID] = hs
	return hs, nil
}

// pprofFetch hands pprof the recording, whatever source it names.
type pprofFetch struct{ p *gprofile.Profile }

func (f pprofFetch) Fetch(string, time.Duration, time.Duration) (*gprofile.Profile, string, error) {
	return f.p.Copy(), "", nil
}

// quietUI keeps pprof's messages off rbscope's terminal.
type quietUI struct{}

func (quietUI) ReadLine(string) (string, error)     { return "", io.EOF }
func (quietUI) Print(...interface{})                {}
func (quietUI) PrintErr(...interface{})             {}
func (quietUI) IsTerminal() bool                    { return false }
func (quietUI) WantBrowser() bool                   { return false }
func (quietUI) SetAutoComplete(func(string) string) {}

// pprofFlags is pprof's command line, given rather than read from os.Args.
type pprofFlags struct {
	*flag.FlagSet
	args  []string
	extra []string
}

func newPprofFlags(args []string) *pprofFlags {
	fs := flag.NewFlagSet("pprof", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &pprofFlags{FlagSet: fs, args: args}
}

func (p *pprofFlags) StringList(name, def, usage string) *[]*string {
	return &[]*string{p.FlagSet.String(name, def, usage)}
}

func (p *pprofFlags) ExtraUsage() string { return strings.Join(p.extra, "\n") }

func (p *pprofFlags) AddExtraUsage(eu string) { p.extra = append(p.extra, eu) }

func (p *pprofFlags) Parse(usage func()) []string {
	if err := p.FlagSet.Parse(p.args); err != nil {
		usage()
		return nil
	}
	return p.FlagSet.Args()
}
