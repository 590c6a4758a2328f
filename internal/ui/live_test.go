package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestLiveView drives the Processes view's handlers on a real Ruby: the
// list names it with the release it says it is (RUBY_VERSION), stack
// answers with the threads Thread.list has, heap dump and record write
// files the page opens, and a process that is not a Ruby the page listed
// is refused.
func TestLiveView(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	var self struct {
		Version string   `json:"version"`
		Threads []string `json:"threads"`
	}
	pid := testruby.StartInline(t, rb, `
require "json"
t = Thread.new { Thread.current.name = "ui-worker"; sleep }
sleep 0.01 until t.status == "sleep"
puts JSON.generate("version" => RUBY_VERSION, "threads" => Thread.list.map { |th| th == Thread.main ? "main" : th.name })
$stdout.flush
sleep`, &self)
	vm := rubyvm.Options{Builds: rubyvm.NewBuildCache()}
	s, base := serve(t, Options{Processes: discover.NewLister(procfs.Root, vm), VM: vm})
	tok := "token=" + s.guard.token
	post := map[string]string{"X-CSRF-Token": s.guard.csrf}

	code, body := do(t, "GET", base+"/api/live?"+tok, nil, nil)
	var list struct{ Processes []LiveProcess }
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("/api/live: %d %v %s", code, err, body)
	}
	i := slices.IndexFunc(list.Processes, func(p LiveProcess) bool { return p.PID == pid })
	if i < 0 {
		t.Fatalf("/api/live lacks pid %d: %s", pid, body)
	}
	if p := list.Processes[i]; p.Ruby != self.Version || p.RubyError != "" || p.Threads < len(self.Threads) || p.RSS == 0 {
		t.Errorf("/api/live row %+v: want Ruby %s, at least %d threads, an RSS", p, self.Version, len(self.Threads))
	}

	code, body = do(t, "POST", fmt.Sprintf("%s/api/live/stack?pid=%d&%s", base, pid, tok), post, nil)
	var stack struct {
		Threads []struct {
			Name string
			Main bool
		}
	}
	if err := json.Unmarshal([]byte(body), &stack); code != http.StatusOK || err != nil {
		t.Fatalf("/api/live/stack: %d %v %s", code, err, body)
	}
	var names []string
	for _, th := range stack.Threads {
		if th.Main {
			th.Name = "main"
		}
		names = append(names, th.Name)
	}
	slices.Sort(names)
	slices.Sort(self.Threads)
	if !slices.Equal(names, self.Threads) {
		t.Errorf("/api/live/stack threads %q, the program's Thread.list %q", names, self.Threads)
	}

	for _, action := range []string{"heap", "record?seconds=1&x=1"} {
		path, query, _ := strings.Cut(action, "?")
		u := fmt.Sprintf("%s/api/live/%s?pid=%d&%s", base, path, pid, tok)
		if query != "" {
			u += "&" + query
		}
		code, body = do(t, "POST", u, post, nil)
		var f fileInfo
		if err := json.Unmarshal([]byte(body), &f); code != http.StatusOK || err != nil || f.Name == "" {
			t.Errorf("/api/live/%s: %d %v %s", path, code, err, body)
			continue
		}
		if fi, err := os.Stat(s.opts.CacheDir + "/live/" + f.Name); err != nil || fi.Size() == 0 {
			t.Errorf("/api/live/%s wrote %s: %v", path, f.Name, err)
		}
		for deadline := time.Now().Add(60 * time.Second); f.State == "loading" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			_, body := do(t, "GET", base+"/api/files?"+tok, nil, nil)
			var files struct{ Files []fileInfo }
			if err := json.Unmarshal([]byte(body), &files); err != nil {
				t.Fatalf("/api/files: %v %s", err, body)
			}
			for _, g := range files.Files {
				if g.ID == f.ID {
					f = g
				}
			}
		}
		if f.State != "ready" {
			t.Errorf("/api/live/%s: the page's file %+v", path, f)
		}
	}

	// rbscope's own process runs no Ruby: not one the page lists.
	code, body = do(t, "POST", fmt.Sprintf("%s/api/live/stack?pid=%d&%s", base, os.Getpid(), tok), post, nil)
	if code != http.StatusNotFound || !strings.Contains(body, "not a Ruby process this user can read") {
		t.Errorf("/api/live/stack of a process that is not Ruby: %d %s", code, body)
	}
}
