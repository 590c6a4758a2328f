package ui

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/rbscope/rbscope/internal/heapfile"
	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/recording"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/wire"
)

// The Processes view acts on a process with the commands' own packages
// (stacks, heapfile, recording), so that a look from the page pauses a
// process no longer, and checks no less, than the command would.

// stack returns the stacks of pid's threads, the document stack -p PID
// --json prints.
func (s *Server) stack(pid int) (any, error) {
	p, err := liveproc.Open(pid, liveproc.Options{VM: s.opts.VM})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	threads, err := stacks.Capture(p.Live, p.VM, stacks.Options{})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return wire.NewStack(wire.NewProcess(pid, p.VM), threads), nil
}

// heapDump writes pid's heap to path, as heap dump -p PID -o path does.
func (s *Server) heapDump(pid int, path string) error {
	_, err := heapfile.Write(pid, path, heapfile.Options{Pause: true, VM: s.opts.VM})
	return err
}

// record records pid for d into path, as record -p PID --duration d
// --format raw -o path does, at record's default rate.
func (s *Server) record(ctx context.Context, pid int, d time.Duration, path string) error {
	raw, err := output.Lookup("raw")
	if err != nil {
		return err
	}
	opts := sampler.Options{Rate: 100, Duration: d, VM: s.opts.VM, Realtime: true, Timeline: raw.Timeline}
	if err := opts.Validate(); err != nil {
		return err
	}
	_, err = recording.Run(ctx, recording.Options{PID: pid, Sampler: opts, Path: path, Format: raw, Output: output.Options{Lines: true}})
	return err
}

// LiveProcess is a row of the Processes view (the page's own API).
type LiveProcess struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	// Ruby is the release read from the process's Ruby image; RubyError
	// says why it could not be (rbscope would refuse the process), and
	// Ruby is then empty.
	Ruby       string  `json:"ruby"`
	RubyError  string  `json:"ruby_error,omitempty"`
	RSS        uint64  `json:"rss"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Threads    int     `json:"threads"`
}

// processes lists the Ruby processes the user running the page could read
// from the command line (Options.Processes).
func (s *Server) processes() ([]LiveProcess, error) {
	found, err := s.opts.Processes.List()
	if err != nil {
		return nil, err
	}
	out := make([]LiveProcess, 0, len(found))
	for _, p := range found {
		out = append(out, LiveProcess{PID: p.PID, Command: p.Args, Ruby: p.Ruby, RubyError: oneLine(p.RubyError), RSS: p.RSS, CPUSeconds: p.CPUSeconds, Threads: p.Threads})
	}
	return out, nil
}

// maxRecordSeconds bounds a recording started from the page.
const maxRecordSeconds = 60

func (s *Server) apiLive(w http.ResponseWriter, r *http.Request) {
	if s.opts.Processes == nil {
		fail(w, http.StatusNotFound, "no live processes here")
		return
	}
	ps, err := s.processes()
	if err != nil {
		fail(w, http.StatusInternalServerError, "%s", oneLine(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"processes": ps})
}

// livePID returns the process the pid parameter names if it is one of the
// Ruby processes the page lists, or answers the request with why not.
func (s *Server) livePID(w http.ResponseWriter, r *http.Request) (int, bool) {
	if s.opts.Processes == nil {
		fail(w, http.StatusNotFound, "no live processes here")
		return 0, false
	}
	pid, err := strconv.Atoi(r.URL.Query().Get("pid"))
	ps, lerr := s.processes()
	if err != nil || lerr != nil || !slices.ContainsFunc(ps, func(p LiveProcess) bool { return p.PID == pid }) {
		fail(w, http.StatusNotFound, "pid=%q: not a Ruby process this user can read (see the Processes view)", r.URL.Query().Get("pid"))
		return 0, false
	}
	return pid, true
}

func (s *Server) apiLiveStack(w http.ResponseWriter, r *http.Request) {
	pid, ok := s.livePID(w, r)
	if !ok {
		return
	}
	doc, err := s.stack(pid)
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "%s", oneLine(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// liveFile returns a new path for what an action on pid writes, in the
// cache directory's live/ (0700).
func (s *Server) liveFile(pid int, kind, ext string) (string, error) {
	if s.opts.CacheDir == "" {
		return "", fmt.Errorf("no cache directory to keep %s in", kind)
	}
	dir := filepath.Join(s.opts.CacheDir, "live")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%d-%s%s", kind, pid, time.Now().Format("20060102-150405.000"), ext)), nil
}

// apiLiveHeap dumps a process's heap into the cache directory and opens
// the dump.
func (s *Server) apiLiveHeap(w http.ResponseWriter, r *http.Request) {
	pid, ok := s.livePID(w, r)
	if !ok {
		return
	}
	s.liveWrite(w, pid, "heap", ".json", func(path string) error { return s.heapDump(pid, path) })
}

// liveWrite has write make a file of the action kind on pid in the cache
// directory, opens it on the page and answers with it.
func (s *Server) liveWrite(w http.ResponseWriter, pid int, kind, ext string, write func(path string) error) {
	path, err := s.liveFile(pid, kind, ext)
	if err == nil {
		err = write(path)
	}
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "%s", oneLine(err.Error()))
		return
	}
	f := s.add(path, filepath.Base(path))
	s.sweepCache()
	go s.load(f)
	writeJSON(w, http.StatusOK, f.info())
}

// apiLiveRecord records a process for seconds (1 to maxRecordSeconds)
// into the cache directory and opens the recording.
func (s *Server) apiLiveRecord(w http.ResponseWriter, r *http.Request) {
	q := &query{r: r}
	secs := q.num("seconds", 10, 1, maxRecordSeconds)
	if q.err != nil {
		fail(w, http.StatusBadRequest, "%s", q.err)
		return
	}
	pid, ok := s.livePID(w, r)
	if !ok {
		return
	}
	s.liveWrite(w, pid, "record", ".raw.gz", func(path string) error {
		return s.record(r.Context(), pid, time.Duration(secs)*time.Second, path)
	})
}
