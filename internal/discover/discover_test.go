package discover

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestRubyFindsRubies: a Ruby program is found, a shell is not, and match
// narrows by command line.
func TestRubyFindsRubies(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	marker := "discover-marker-" + time.Now().Format("150405.000000")
	rubyProc := exec.Command(rb.Bin, "-e", "sleep", marker)
	shell := exec.Command("sh", "-c", "sleep 30", marker)
	for _, c := range []*exec.Cmd{rubyProc, shell} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(c)
	}
	var found []Process
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if found, err = Ruby("/proc", regexp.MustCompile(regexp.QuoteMeta(marker))); err != nil {
			t.Fatal(err)
		}
		if len(found) > 0 {
			break
		}
	}
	if len(found) != 1 || found[0].PID != rubyProc.Process.Pid {
		t.Errorf("found %+v, want only the Ruby process %d (not the shell %d)", found, rubyProc.Process.Pid, shell.Process.Pid)
	}
	if all, err := Ruby("/proc", nil); err != nil || len(all) < 1 {
		t.Errorf("without match: %v, %v", all, err)
	}
	for _, p := range mustRuby(t) {
		if p.PID == os.Getpid() {
			t.Error("the scan lists its own process")
		}
	}
}

func mustRuby(t *testing.T) []Process {
	ps, err := Ruby("/proc", nil)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestIsRubyImageAndServiceName(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2": true, "/opt/ruby/lib/libruby.so.3.4.5": true,
		"/usr/bin/ruby3.1": true, "/opt/ruby/bin/ruby": true, "/usr/bin/ruby-3.3": true, "/x/ruby (deleted)": true,
		"/usr/bin/rubocop": false, "/usr/lib/librubberband.so": false, "/bin/sh": false,
	} {
		if IsRubyImage(path) != want {
			t.Errorf("IsRubyImage(%q) = %v", path, !want)
		}
	}
	for args, want := range map[string]string{
		"ruby bin/rails server -p 3000":      "rails",
		"/usr/bin/ruby3.1 -W0 worker.rb":     "worker",
		"puma: cluster worker 0: 1234 [app]": "puma",
		"sidekiq 7.1.0 app [0 of 5 busy]":    "sidekiq",
		"":                                   "ruby",
	} {
		if got := ServiceName(args); got != want {
			t.Errorf("ServiceName(%q) = %q, want %q", args, got, want)
		}
	}
}
