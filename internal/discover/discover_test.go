package discover

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
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
		if found, err = Ruby("/proc", regexp.MustCompile(regexp.QuoteMeta(marker)), nil); err != nil {
			t.Fatal(err)
		}
		if len(found) > 0 {
			break
		}
	}
	if len(found) != 1 || found[0].PID != rubyProc.Process.Pid {
		t.Errorf("found %+v, want only the Ruby process %d (not the shell %d)", found, rubyProc.Process.Pid, shell.Process.Pid)
	}
	if all, err := Ruby("/proc", nil, nil); err != nil || len(all) < 1 {
		t.Errorf("without match: %v, %v", all, err)
	}
}

// TestRubyFakeProc: the scan reads a proc directory's maps, cmdline and
// stat: a process mapping libruby is found (with its command line and
// start time), one that maps none is not, and the scan's own PID is left
// out even when it maps libruby (as the test binary never does in /proc).
func TestRubyFakeProc(t *testing.T) {
	proc := t.TempDir()
	const libruby = "7f0000000000-7f0000100000 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libruby-3.3.so.3.3.0\n"
	const libc = "7f1000000000-7f1000100000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	// Only an executable mapping counts: a data mapping of libruby does not.
	const dataOnly = "7f2000000000-7f2000100000 rw-p 00000000 08:01 1234 /usr/lib/libruby.so.3.4\n"
	fake := func(pid int, maps, cmdline string) {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(pid) + " (ruby (x)) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n"
		for name, data := range map[string]string{"maps": libc + maps, "cmdline": cmdline, "stat": stat} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fake(4242, libruby, "puma: cluster worker 0\x00")
	fake(4243, "", "sh\x00-c\x00sleep 1\x00")
	fake(4244, dataOnly, "ruby\x00-e\x00x\x00")
	fake(os.Getpid(), libruby, "rbscope\x00")
	os.WriteFile(filepath.Join(proc, "self"), nil, 0o644) // not a PID
	got, err := Ruby(proc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Process{{PID: 4242, Args: "puma: cluster worker 0", Start: 777, Image: "/usr/lib/x86_64-linux-gnu/libruby-3.3.so.3.3.0"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Ruby(fake proc) = %+v, want %+v", got, want)
	}
	if got, _ := Ruby(proc, regexp.MustCompile("sidekiq"), nil); len(got) != 0 {
		t.Errorf("match selects none, got %+v", got)
	}
	// A process the caller has already is left out (found above without
	// known).
	known := func(pid int) bool { return pid == 4242 }
	if got, _ := Ruby(proc, nil, known); len(got) != 0 {
		t.Errorf("with 4242 known: got %+v, want none", got)
	}
}

func TestServiceName(t *testing.T) {
	for args, want := range map[string]string{
		"ruby bin/rails server -p 3000":      "rails",
		"/usr/bin/ruby3.1 -W0 worker.rb":     "worker",
		"puma: cluster worker 0: 1234 [app]": "puma",
		"sidekiq 7.1.0 app [0 of 5 busy]":    "sidekiq",
		"":                                   "ruby",
		// Debian's ruby3.4 on a C library of its own (ruby-3.4.11-debian)
		"/x/sysroot/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path /x/lib /x/usr/bin/ruby3.4 -I /x/lib/ruby/3.4.0 agent_work.rb": "agent_work",
		"/lib/ld-musl-x86_64.so.1 --preload /x/libjemalloc.so.2 /usr/bin/ruby -e sleep":                                                        "ruby",
		"/lib64/ld-linux-x86-64.so.2 --list /bin/true":                                                                                         "true",
		"/lib64/ld-linux-x86-64.so.2 --verify":                                                                                                 "ruby",
	} {
		if got := ServiceName(args); got != want {
			t.Errorf("ServiceName(%q) = %q, want %q", args, got, want)
		}
	}
}

// TestListerReadsTheRelease: the Processes view's list gives each Ruby's
// release as the program itself says it (RUBY_VERSION), read from its
// image, static and stripped builds too, whose file names carry none.
func TestListerReadsTheRelease(t *testing.T) {
	marker := "discover-lister-" + time.Now().Format("150405.000000")
	want := map[int]string{}
	for _, rb := range testruby.Rubies(t) {
		c := exec.Command(rb.Bin, "-e", "sleep", marker)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd) { c.Process.Kill(); c.Wait() }(c)
		want[c.Process.Pid] = testruby.Version(rb)
	}
	l := NewLister("/proc", rubyvm.Options{Builds: rubyvm.NewBuildCache()})
	got := map[int]Readable{}
	for deadline := time.Now().Add(30 * time.Second); len(got) < len(want) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		all, err := l.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if _, ok := want[r.PID]; ok && r.Threads > 0 {
				got[r.PID] = r
			}
		}
	}
	for pid, v := range want {
		r, ok := got[pid]
		switch {
		case !ok:
			t.Errorf("pid %d (Ruby %s) not listed", pid, v)
		case r.Ruby != v || r.RubyError != "":
			t.Errorf("pid %d: Ruby %q (%s), want %s", pid, r.Ruby, r.RubyError, v)
		}
	}
}
