package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/wire"
)

// uiServer is a running `rbscope ui`.
type uiServer struct {
	cmd    *exec.Cmd
	url    string // as printed, token included
	base   string // scheme and host
	token  string
	mu     sync.Mutex
	stderr strings.Builder
}

// startUI runs `rbscope ui args...` and waits for its URL. The server is
// interrupted (SIGINT) when the test ends, and must then exit 0.
func startUI(t *testing.T, args ...string) *uiServer {
	t.Helper()
	s := &uiServer{cmd: exec.Command(rbscopeBin, append([]string{"ui", "--cache-dir", t.TempDir()}, args...)...)}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := stderr.Read(b)
			s.mu.Lock()
			s.stderr.Write(b[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		t.Fatalf("rbscope ui printed no URL: %v; stderr: %s", err, s.errors())
	}
	s.url = strings.TrimSpace(line)
	u, err := url.Parse(s.url)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "0" || len(u.Query().Get("token")) < 32 {
		t.Fatalf("URL %q: want http://127.0.0.1:PORT/?token=RANDOM", s.url)
	}
	s.base, s.token = "http://"+u.Host, u.Query().Get("token")
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rbscope ui after SIGINT: %v; stderr: %s", err, s.errors())
			}
		case <-time.After(60 * time.Second):
			s.cmd.Process.Kill()
			t.Errorf("rbscope ui still serving a minute after SIGINT")
		}
	})
	return s
}

func (s *uiServer) errors() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// get fetches an API path (token added) and decodes its JSON into v.
func (s *uiServer) get(t *testing.T, path string, v any) {
	t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	resp, err := http.Get(s.base + path + sep + "token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// waitLoaded waits until no file is loading and returns the file list.
func (s *uiServer) waitLoaded(t *testing.T) []uiFile {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Minute); ; {
		var d struct{ Files []uiFile }
		s.get(t, "/api/files", &d)
		if !slices.ContainsFunc(d.Files, func(f uiFile) bool { return f.State == "loading" }) {
			return d.Files
		}
		if time.Now().After(deadline) {
			t.Fatalf("files still loading: %+v", d.Files)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type uiFile struct {
	ID      int    `json:"id"`
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	State   string `json:"state"`
	Error   string `json:"error"`
	Objects int    `json:"objects"`
	Samples int    `json:"samples"`
	Built   bool   `json:"index_built"`
}

type uiObject struct {
	wire.HeapObject
	Retained      uint64 `json:"retained"`
	RetainedCount uint64 `json:"retained_count"`
	Reachable     bool   `json:"reachable"`
}

type uiPage[T any] struct {
	Offset, Total int
	Rows          []T
}

type uiGroup struct {
	ID            int    `json:"id"`
	Class         string `json:"class"`
	Type          string `json:"type"`
	Count         uint64 `json:"count"`
	Shallow       uint64 `json:"shallow"`
	Retained      uint64 `json:"retained"`
	RetainedCount uint64 `json:"retained_count"`
}

func TestUIUsage(t *testing.T) {
	_, stderr, code := rbscope(t, "ui", "--listen", "nonsense")
	if code != 2 || stderr != `rbscope: --listen "nonsense": want HOST:PORT, such as 127.0.0.1:8080 (see 'rbscope ui --help')`+"\n" {
		t.Errorf("bad --listen: exit %d %q", code, stderr)
	}
}
