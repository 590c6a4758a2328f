package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// containerSetup runs as PID 1 of the new PID namespace, inside the new
// mount namespace: it mounts a tmpfs on $1 and makes it a root filesystem
// (the host's /usr, /etc and /dev bound in, and $5, a Ruby build's library
// directory, at its own path unless "-"; its own /proc), copies Ruby's
// executable, libruby ($4) and the program from $2 into it, where only
// this mount namespace sees them, and runs Ruby in it: with "chroot"
// ($3), chrooted there, as a child of this shell; with "pivot_root", as a
// runtime makes a container's root, as PID 1 itself.
const containerSetup = `set -e
root=$1 share=$2 mode=$3 libruby=$4 stdlib=$5; shift 5
mount -t tmpfs -o mode=0755 tmpfs "$root"
mkdir -p "$root/usr" "$root/etc" "$root/dev" "$root/proc" "$root/tmp" "$root/app/bin" "$root/app/lib" "$root/app/src" "$root/report"
for d in usr etc dev; do mount --rbind "/$d" "$root/$d"; done
for d in bin lib lib64; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"
  elif [ -d "/$d" ]; then mkdir "$root/$d"; mount --rbind "/$d" "$root/$d"; fi
done
if [ "$stdlib" != - ]; then mkdir -p "$root$stdlib"; mount --rbind "$stdlib" "$root$stdlib"; fi
cp "$share/ruby" "$root/app/bin/ruby"
cp "$share/$libruby" "$root/app/lib/$libruby"
cp "$share/container.rb" "$root/app/src/container.rb"
mount --bind "$share/report" "$root/report"
mount -t proc proc "$root/proc"
chmod 1777 "$root/tmp"
export LD_LIBRARY_PATH=/app/lib
if [ "$mode" = chroot ]; then
  chroot "$root" /app/bin/ruby "$@" &
  wait
else
  cd "$root"; mkdir .old; pivot_root . .old; cd /; umount -l /.old; rmdir /.old
  exec /app/bin/ruby "$@"
fi
`

// containerReport is what testdata/container.rb says of itself.
type containerReport struct {
	PID         int       `json:"pid"` // inside its PID namespace
	Version     string    `json:"version"`
	ThreadNames []*string `json:"thread_names"`
	Threads     []struct {
		Name   *string `json:"name"`
		TID    int     `json:"tid"` // inside its PID namespace
		Frames [][]any `json:"frames"`
	} `json:"threads"`
	Widgets int    `json:"widgets"`
	File    string `json:"file"`
	Spin    int    `json:"spin"`
	Keep    int    `json:"keep"`
}

// rubyContainer is testdata/container.rb running in namespaces of its own.
type rubyContainer struct {
	hostPID int
	token   string
	rep     containerReport
	dir     string // shared with the host: outputs go here
}

// needContainerTools checks what the container tests need: root, and
// util-linux's unshare, nsenter and setpriv.
func needContainerTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testruby.Missing(t, "the container tests need root")
	}
	for _, tool := range []string{"unshare", "nsenter", "setpriv", "pivot_root", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			testruby.Missing(t, "%s (util-linux, coreutils) is not installed", tool)
		}
	}
}

// containerRuby is a Ruby to copy into a container.
type containerRuby struct {
	name    string
	exe     string // its executable
	libruby string // the libruby it maps
	soname  string // the name the executable loads libruby by
	stdlib  string // a build's library directory, bound at its own path ("-": none)
}

// containerRubies returns Debian's Ruby (the Ruby most containers run:
// stripped, read through the built-in layouts) and the newest shared build
// of the matrix from 3.3 on (read through its DWARF; the thread ID Ruby
// keeps in its native thread's struct).
func containerRubies(t *testing.T) []containerRuby {
	t.Helper()
	var debian, built *testruby.Ruby
	for _, r := range testruby.Rubies(t) {
		switch {
		case strings.HasPrefix(r.Name, "debian-"):
			debian = &r
		case strings.HasSuffix(r.Name, "-shared") && !testruby.Older(r, 3, 3):
			built = &r // sorted by name: the newest last
		}
	}
	if debian == nil {
		testruby.Missing(t, "Debian's ruby is not installed")
	}
	if built == nil {
		if os.Getenv(testruby.StrictEnv) != "" {
			testruby.Missing(t, "no shared Ruby 3.3 or newer built (make rubies)")
		}
		t.Log("no shared Ruby 3.3 or newer built (make rubies): Debian's Ruby alone")
	}
	out := []containerRuby{describeRuby(t, *debian, "-")}
	if built != nil {
		out = append(out, describeRuby(t, *built, filepath.Join(filepath.Dir(filepath.Dir(built.Bin)), "lib")))
	}
	return out
}

// describeRuby finds the files of rb to copy into a container.
func describeRuby(t *testing.T, rb testruby.Ruby, stdlib string) containerRuby {
	t.Helper()
	exe, err := filepath.EvalSymlinks(rb.Bin)
	if err != nil {
		t.Fatal(err)
	}
	// The file the Ruby maps, and the name the executable asks for.
	mapped, err := exec.Command(exe, "-e", `print File.readlines("/proc/self/maps").map { |l| l.split[5] }.compact.grep(/libruby/).first`).Output()
	if err != nil || len(mapped) == 0 {
		t.Fatalf("%s maps no libruby (%v)", exe, err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	needed, _ := ef.DynString(elf.DT_NEEDED)
	for _, n := range needed {
		if strings.HasPrefix(n, "libruby") {
			return containerRuby{name: rb.Name, exe: exe, libruby: string(mapped), soname: n, stdlib: stdlib}
		}
	}
	t.Fatalf("%s needs no libruby (%q)", exe, needed)
	return containerRuby{}
}

// startContainer starts testdata/container.rb as a container would: in new
// mount and PID namespaces, from a root filesystem on a tmpfs that only its
// mount namespace has (so the host cannot open its executable or libruby
// by the paths the process shows). With userNS, it runs rootless: started
// by uid 65534, in a user namespace of its own whose root that user is,
// its root made with pivot_root, Ruby its PID 1; else as root, chrooted,
// Ruby a child of PID 1.
func startContainer(t *testing.T, rb containerRuby, userNS bool) *rubyContainer {
	t.Helper()
	needContainerTools(t)
	if userNS {
		for _, knob := range []string{"/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces"} {
			if b, err := os.ReadFile(knob); err == nil && strings.TrimSpace(string(b)) == "0" {
				testruby.Missing(t, "%s is 0: no user namespaces for unprivileged users", knob)
			}
		}
	}
	share, err := os.MkdirTemp("", "rbscope-container")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(share) })
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(rb.exe, filepath.Join(share, "ruby"))
	copyFile(rb.libruby, filepath.Join(share, rb.soname))
	copyFile(testruby.Testdata("container.rb"), filepath.Join(share, "container.rb"))
	if err := os.WriteFile(filepath.Join(share, "setup.sh"), []byte(containerSetup), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"root", "report", "out"} {
		if err := os.Mkdir(filepath.Join(share, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The report directory is written by the container's root, which is
	// uid 65534 on the host when rootless.
	if err := errors.Join(os.Chmod(share, 0o755), os.Chmod(filepath.Join(share, "report"), 0o777)); err != nil {
		t.Fatal(err)
	}
	c := &rubyContainer{token: fmt.Sprintf("token-%d-%d", os.Getpid(), time.Now().UnixNano()), dir: filepath.Join(share, "out")}
	mode := "chroot"
	args := []string{"unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"}
	if userNS {
		mode = "pivot_root"
		args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
			"unshare", "--user", "--map-root-user"}, args[1:]...)
	}
	args = append(args, "sh", filepath.Join(share, "setup.sh"), filepath.Join(share, "root"), share, mode, rb.soname, rb.stdlib,
		"/app/src/container.rb", "/report/report.json", c.token, "4321")
	cmd := exec.Command(args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	testruby.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// unshare's child, PID 1 of the namespace, dies with it (--kill-child),
		// and every process of the namespace with PID 1.
		cmd.Process.Kill()
		<-exited
	})
	report := filepath.Join(share, "report", "report.json")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(report)
		if err == nil {
			if err := json.Unmarshal(b, &c.rep); err != nil {
				t.Fatalf("report: %v\n%s", err, b)
			}
			break
		}
		select {
		case <-exited:
			t.Fatalf("the container ended before its report: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report from the container within 60s: %s", out.String())
		}
	}
	c.hostPID = hostPIDOf(t, cmd.Process.Pid, c.rep.PID)
	if c.hostPID == c.rep.PID {
		t.Fatalf("the container's PID %d is the host's too: no PID namespace of its own", c.rep.PID)
	}
	// The host cannot open the executable or libruby by the paths the
	// process shows.
	if shown, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.hostPID)); err != nil || !strings.HasSuffix(shown, "/app/bin/ruby") || fileExists(shown) {
		t.Fatalf("the container's executable %q (%v) is open to the host by its path", shown, err)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", c.hostPID))
	if err != nil {
		t.Fatal(err)
	}
	libs := 0
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 && strings.Contains(f[5], "libruby") {
			libs++
			if !strings.HasSuffix(f[5], "/app/lib/"+rb.soname) || fileExists(f[5]) {
				t.Fatalf("the container maps %s, open to the host by its path", f[5])
			}
		}
	}
	if libs == 0 {
		t.Fatalf("the container maps no libruby:\n%s", maps)
	}
	return c
}

func fileExists(path string) bool { _, err := os.Stat(path); return err == nil }

// hostPIDOf finds, among the descendants of pid, the process whose ID in
// its own PID namespace is inner.
func hostPIDOf(t *testing.T, pid, inner int) int {
	t.Helper()
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if ids := nsPIDs(fmt.Sprintf("/proc/%d/status", p)); len(ids) > 1 && ids[len(ids)-1] == inner {
			return p
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, task.Name()))
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					queue = append(queue, c)
				}
			}
		}
	}
	t.Fatalf("no descendant of pid %d is pid %d in its namespace", pid, inner)
	return 0
}

// nsPIDs reads the NSpid line of a /proc status file.
func nsPIDs(path string) []int {
	b, _ := os.ReadFile(path)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			var ids []int
			for _, f := range strings.Fields(rest) {
				id, _ := strconv.Atoi(f)
				ids = append(ids, id)
			}
			return ids
		}
	}
	return nil
}

// hostTIDs maps the container's thread IDs to the host's, as the host's
// /proc says.
func (c *rubyContainer) hostTIDs(t *testing.T) map[int]int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.hostPID))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, e := range ents {
		ids := nsPIDs(fmt.Sprintf("/proc/%d/task/%s/status", c.hostPID, e.Name()))
		if len(ids) > 1 {
			out[ids[len(ids)-1]] = ids[0]
		}
	}
	return out
}

// dockerCaps are the capabilities Docker (and Kubernetes, with its
// runtimes' defaults) gives a container.
const dockerCaps = "chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,sys_chroot,mknod,audit_write,setfcap"

// runner runs rbscope with args one way (on the host, in a sidecar).
type runner func(t *testing.T, args ...string) (string, string, int)

// sidecar returns a runner that runs rbscope as a sidecar container of c
// does (Kubernetes' shareProcessNamespace): in c's PID namespace, where
// --pid is c's own PID, with a mount namespace and /proc of its own (the
// host's files, not c's), as root with the capabilities a container gets,
// plus CAP_SYS_PTRACE when ptrace is set. It has no CAP_SYS_ADMIN, so
// /proc/PID/map_files is closed to it.
func (c *rubyContainer) sidecar(ptrace bool) runner {
	caps := "+" + strings.ReplaceAll(dockerCaps, ",", ",+")
	if ptrace {
		caps += ",+sys_ptrace"
	}
	return func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		full := append([]string{"--target", strconv.Itoa(c.hostPID), "--pid", "--",
			"unshare", "--mount", "--fork", "--mount-proc",
			"setpriv", "--inh-caps=-all", "--bounding-set=-all," + caps, "--", rbscopeBin}, args...)
		return runCommand(t, exec.Command("nsenter", full...))
	}
}

// checkCommands runs every command that reads a live process against c
// through run, with pid the process's ID as run sees it, and compares what
// each reads with what the program said of itself. tid turns a thread ID
// of the program's into the one run sees.
func (c *rubyContainer) checkCommands(t *testing.T, run runner, pid int, tid func(int) int) {
	p := strconv.Itoa(pid)
	rep := c.rep
	type repThread struct {
		name   string
		tid    int
		frames [][]any
	}
	var want []repThread
	for _, th := range rep.Threads {
		name := ""
		if th.Name != nil {
			name = *th.Name
		}
		want = append(want, repThread{name, tid(th.TID), th.Frames})
	}
	var wantNames []string
	for _, n := range rep.ThreadNames {
		if n == nil {
			wantNames = append(wantNames, "")
		} else {
			wantNames = append(wantNames, *n)
		}
	}

	t.Run("stack", func(t *testing.T) {
		var doc struct {
			PID         int    `json:"pid"`
			RubyVersion string `json:"ruby_version"`
			Threads     []struct {
				Name   string `json:"name"`
				TID    int    `json:"tid"`
				Frames []struct {
					Kind, Label, Path string
					Line              int
				} `json:"frames"`
			} `json:"threads"`
		}
		// An exec or alloc just before may still be ending inside the
		// process (its answer's write returning, the watchdog thread it
		// killed dying): read until the main thread sleeps again, with
		// the program's threads alone.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			stdout, stderr, code := run(t, "stack", "-p", p, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, stdout)
			}
			settled := len(doc.Threads) == len(wantNames) && len(doc.Threads[0].Frames) == len(rep.Threads[len(rep.Threads)-1].Frames)+1
			if settled || time.Now().After(deadline) {
				break
			}
		}
		if doc.PID != pid || doc.RubyVersion != rep.Version {
			t.Errorf("pid %d, Ruby %q; want %d, %q", doc.PID, doc.RubyVersion, pid, rep.Version)
		}
		var names []string
		for _, th := range doc.Threads {
			names = append(names, th.Name)
		}
		if strings.Join(names, ",") != strings.Join(wantNames, ",") {
			t.Errorf("threads %q, Thread.list says %q", names, wantNames)
		}
		for _, w := range want {
			found := false
			for _, th := range doc.Threads {
				if th.Name != w.name {
					continue
				}
				found = true
				if th.TID != w.tid {
					t.Errorf("thread %q: tid %d, want %d", w.name, th.TID, w.tid)
				}
				if len(w.frames) == 0 {
					continue // running: no frames to compare
				}
				// The innermost frame is Kernel#sleep, above the line
				// caller_locations was taken on.
				if len(th.Frames) != len(w.frames)+1 || th.Frames[0].Label != "Kernel#sleep" {
					t.Errorf("thread %q: %d frames (the first %+v), the program saw %d below Kernel#sleep", w.name, len(th.Frames), th.Frames[0], len(w.frames))
					continue
				}
				for i, f := range w.frames {
					got := th.Frames[i+1]
					label, _ := f[0].(string)
					path, _ := f[1].(string)
					line, _ := f[2].(float64)
					if !testruby.LabelMatches(rep.Version, got.Label, label) || got.Path != path || got.Line != int(line) {
						t.Errorf("thread %q frame %d: %s %s:%d, the program saw %s %s:%d", w.name, i+1, got.Label, got.Path, got.Line, label, path, int(line))
					}
				}
			}
			if !found {
				t.Errorf("no thread %q", w.name)
			}
		}
	})

	t.Run("stack --native", func(t *testing.T) {
		stdout, stderr, code := run(t, "stack", "--native", "-p", p, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var doc struct {
			Threads []struct {
				Name   string `json:"name"`
				TID    int    `json:"tid"`
				Ruby   bool   `json:"ruby"`
				Frames []struct {
					Kind     string `json:"kind"`
					Function string `json:"function"`
					Label    string `json:"label"`
				} `json:"frames"`
			} `json:"threads"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout)
		}
		for _, w := range want {
			found := false
			for _, th := range doc.Threads {
				if th.Name != w.name || !th.Ruby {
					continue
				}
				found = true
				native, ruby := 0, 0
				for _, f := range th.Frames {
					if f.Kind == "native" {
						native++
					} else {
						ruby++
					}
				}
				if th.TID != w.tid || native < 3 || ruby == 0 {
					t.Errorf("thread %q: tid %d (want %d), %d native and %d Ruby frames", w.name, th.TID, w.tid, native, ruby)
				}
			}
			if !found {
				t.Errorf("no Ruby thread %q", w.name)
			}
		}
	})

	t.Run("threads", func(t *testing.T) {
		stdout, stderr, code := run(t, "threads", "-p", p, "--json", "--interval", "100ms")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var doc struct {
			Threads []struct {
				TID  int    `json:"tid"`
				Comm string `json:"comm"`
				Kind string `json:"kind"`
				Ruby *struct {
					Name string `json:"name"`
				} `json:"ruby"`
			} `json:"threads"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout)
		}
		for _, w := range want {
			found := false
			for _, th := range doc.Threads {
				if th.TID != w.tid {
					continue
				}
				found = true
				// Ruby names the native thread after the Thread.
				if th.Kind != "ruby" || th.Ruby == nil || th.Ruby.Name != w.name || (w.name != "" && th.Comm != w.name) {
					t.Errorf("tid %d (comm %q): kind %q, Ruby thread %+v; want Ruby thread %q", th.TID, th.Comm, th.Kind, th.Ruby, w.name)
				}
			}
			if !found {
				t.Errorf("no tid %d (thread %q)", w.tid, w.name)
			}
		}
	})

	t.Run("heap census", func(t *testing.T) {
		stdout, stderr, code := run(t, "heap", "census", "-p", p, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		got := censusCount(censusJSON(t, stdout), "", "Widget")
		if got != rep.Widgets {
			t.Errorf("%d Widgets, the program holds %d", got, rep.Widgets)
		}
	})

	t.Run("heap dump", func(t *testing.T) {
		out := filepath.Join(c.dir, fmt.Sprintf("dump-%d.json", time.Now().UnixNano()))
		defer os.Remove(out)
		_, stderr, code := run(t, "heap", "dump", "-p", p, "-o", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if got := widgetsInDump(t, out); got != rep.Widgets {
			t.Errorf("%d Widgets in the dump, the program holds %d", got, rep.Widgets)
		}
	})

	t.Run("record", func(t *testing.T) {
		// Every thread, sleeping or not, at each tick, under its name.
		stdout, stderr, code := run(t, "record", "-p", p, "--idle", "--threads", "--duration", "1s", "--rate", "50", "-f", "collapsed", "-o", "-")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		stacks, counts := collapsedLines(t, stdout)
		seen := map[string]int{}
		for i, st := range stacks {
			th := strings.TrimPrefix(st[0], "thread ")
			seen[th] += counts[i]
			for _, w := range want {
				name := w.name
				if name == "" {
					name = "main"
				}
				if name != th || len(w.frames) == 0 {
					continue
				}
				// The program's frames, outermost first, then where it sleeps.
				if len(st) != len(w.frames)+2 || st[len(st)-1] != "Kernel#sleep (cfunc)" {
					t.Errorf("thread %q: stack %q, the program saw %d frames below Kernel#sleep", name, st, len(w.frames))
					continue
				}
				for j, f := range w.frames {
					got := st[len(st)-2-j]
					label, _ := f[0].(string)
					path, _ := f[1].(string)
					line, _ := f[2].(float64)
					wantAt := fmt.Sprintf(" (%s:%d)", path, int(line))
					if !strings.HasSuffix(got, wantAt) || !testruby.LabelMatches(rep.Version, strings.TrimSuffix(got, wantAt), label) {
						t.Errorf("thread %q frame %d: %s, the program saw %s%s", name, j, got, label, wantAt)
					}
				}
			}
		}
		spin := fmt.Sprintf("Object#spin (%s:%d)", rep.File, rep.Spin)
		for _, w := range want {
			name := w.name
			if name == "" {
				name = "main"
			}
			if seen[name] == 0 {
				t.Errorf("no samples of thread %q; %s\n%s", name, strings.TrimSpace(stderr), stdout)
			}
		}
		if !strings.Contains(stdout, "thread spinner;block in <main> ("+rep.File) || !strings.Contains(stdout, ";"+spin) {
			t.Errorf("the spinner is not seen in %s:\n%s", spin, stdout)
		}

		// Running threads only: the spinner is the one that keeps a CPU
		// busy. How many samples there are depends on how often rbscope
		// and the spinner got a CPU at once, on a busy machine.
		stdout, stderr, code = run(t, "record", "-p", p, "--duration", "1s", "--rate", "100", "-f", "collapsed", "-o", "-")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		stacks, counts = collapsedLines(t, stdout)
		total, spun := 0, 0
		for i, st := range stacks {
			total += counts[i]
			if slices.Contains(st, spin) {
				spun += counts[i]
			}
		}
		t.Logf("running threads only: %d of %d samples in %s", spun, total, spin)
		if 2*spun < total {
			t.Errorf("%d of %d samples in %s\n%s", spun, total, spin, stdout)
		}
	})

	t.Run("exec", func(t *testing.T) {
		stdout, stderr, code := run(t, "exec", "-p", p, "[Process.pid, TOKEN]")
		if want := fmt.Sprintf("[%d, %q]\n", rep.PID, c.token); code != 0 || stdout != want {
			t.Errorf("exit %d, %q (%s); want %q", code, stdout, strings.TrimSpace(stderr), want)
		}
	})

	t.Run("alloc", func(t *testing.T) {
		stdout, stderr, code := run(t, "alloc", "-p", p, "-d", "1s", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		_, sites := allocJSON(t, stdout)
		found := false
		for _, s := range sites {
			found = found || s.File == rep.File && s.Line == rep.Keep && s.Class == "String" && s.Count > 0
		}
		if !found {
			t.Errorf("no String kept at %s:%d among %+v", rep.File, rep.Keep, sites)
		}
	})

	if st := processState(t, c.hostPID); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}
}

// innerTID returns the thread ID, inside the container, of the program's
// thread named name.
func (c *rubyContainer) innerTID(t *testing.T, name string) int {
	t.Helper()
	for _, th := range c.rep.Threads {
		if th.Name != nil && *th.Name == name {
			return th.TID
		}
	}
	t.Fatalf("the program reports no thread %q", name)
	return 0
}

// threadCPU returns the CPU time the kernel counted for a thread.
func threadCPU(t *testing.T, pid, tid int) time.Duration {
	t.Helper()
	st, err := procfs.ReadStat(pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	return st.CPU()
}

// widgetsInDump counts the objects of class Widget in a heap dump.
func widgetsInDump(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type obj struct {
		Address string `json:"address"`
		Type    string `json:"type"`
		Class   string `json:"class"`
		Name    string `json:"name"`
	}
	var objs []obj
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var o obj
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Text())
		}
		objs = append(objs, o)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	class := ""
	for _, o := range objs {
		if o.Type == "CLASS" && o.Name == "Widget" {
			class = o.Address
		}
	}
	n := 0
	for _, o := range objs {
		if class != "" && o.Type == "OBJECT" && o.Class == class {
			n++
		}
	}
	return n
}

// checkRefused runs every command against c through run, which lacks
// CAP_SYS_PTRACE: each must fail with one line that says what to grant,
// write no output file, and leave the process running.
func (c *rubyContainer) checkRefused(t *testing.T, run runner, pid int) {
	p := strconv.Itoa(pid)
	out := filepath.Join(c.dir, "refused.out")
	for _, args := range [][]string{
		{"stack", "-p", p},
		{"stack", "--native", "-p", p},
		{"threads", "-p", p},
		{"heap", "census", "-p", p},
		{"heap", "dump", "-p", p, "-o", out},
		{"record", "-p", p, "--duration", "1s", "-o", out},
		{"exec", "-p", p, "1"},
		{"alloc", "-p", p, "-d", "1s"},
	} {
		stdout, stderr, code := run(t, args...)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, "permission denied: rbscope runs as root but without CAP_SYS_PTRACE") || !strings.Contains(stderr, "--cap-add SYS_PTRACE") ||
			!strings.HasSuffix(stderr, "(see "+target.DocContainers+")\n") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line asking for CAP_SYS_PTRACE", args, code, stdout, stderr)
		}
		if fileExists(out) {
			t.Errorf("%v left %s behind", args, out)
			os.Remove(out)
		}
	}
	if st := processState(t, c.hostPID); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}
}

// TestContainer reads Ruby in containers made with unshare: Debian's Ruby
// as root in new mount and PID namespaces (chrooted), and rootless in a
// user namespace too (pivot_root, Ruby as PID 1), as is the newest shared
// build from 3.3 on; each has its executable and libruby on a tmpfs only
// the container sees. Every command runs from the host by the host's
// PID, and (Debian's Ruby) from a sidecar that shares the container's PID
// namespace by the container's PID, with and without CAP_SYS_PTRACE; what
// each reads is compared with what the program says of itself.
func TestContainer(t *testing.T) {
	needContainerTools(t)
	rubies := containerRubies(t)
	type scenario struct {
		name    string
		rb      containerRuby
		userNS  bool
		sidecar bool
	}
	cases := []scenario{
		{"root/" + rubies[0].name, rubies[0], false, true},
		{"userns/" + rubies[0].name, rubies[0], true, true},
	}
	// A debug build takes longer to read (its DWARF): from the host only,
	// where its threads' IDs are translated (in a sidecar they are the
	// program's own, as with Debian's Ruby).
	for _, rb := range rubies[1:] {
		cases = append(cases, scenario{"userns/" + rb.name, rb, true, false})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startContainer(t, tc.rb, tc.userNS)
			t.Logf("Ruby %s: pid %d inside, %d on the host", c.rep.Version, c.rep.PID, c.hostPID)
			t.Run("host", func(t *testing.T) {
				tids := c.hostTIDs(t)
				c.checkCommands(t, rbscope, c.hostPID, func(tid int) int { return tids[tid] })
			})
			if tc.sidecar {
				t.Run("sidecar", func(t *testing.T) {
					c.checkCommands(t, c.sidecar(true), c.rep.PID, func(tid int) int { return tid })
				})
			}
			t.Run("sidecar without CAP_SYS_PTRACE", func(t *testing.T) {
				c.checkRefused(t, c.sidecar(false), c.rep.PID)
			})
		})
	}
}

// TestHostileImagePathWithoutMapFiles: without CAP_SYS_ADMIN (a sidecar
// container's lot), /proc/PID/map_files is closed to rbscope, and it opens
// a Ruby image otherwise. A target running as nobody that replaced its
// executable by a FIFO or a symlink to a root-only file neither blocks
// rbscope nor shows it the file: the executable is read through
// /proc/PID/exe (the mapped inode, though deleted) and libruby at its path
// (the mapped inode, checked). With libruby replaced too, libruby is
// refused, in one line that says what map_files needs.
func TestHostileImagePathWithoutMapFiles(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		testruby.Missing(t, "setpriv (util-linux) is not installed")
	}
	run := func(t *testing.T, args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "setpriv", append([]string{"--inh-caps=-all", "--bounding-set=-sys_admin,-checkpoint_restore", "--", rbscopeBin}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("rbscope %v hung:\n%s", args, stderr.String())
		}
		return stdout.String(), stderr.String(), err
	}
	for _, kind := range []string{"fifo", "symlink"} {
		t.Run(kind, func(t *testing.T) {
			secretPath, secret := rootSecret(t)
			h := startHostile(t, `STDOUT.puts :ready; STDOUT.flush; sleep`)
			plantAt(t, h.exe, kind, secretPath)
			h.checkMapped(t)
			stdout, stderr, err := run(t, "stack", "--native", "--json", "-p", strconv.Itoa(h.pid()))
			if leaks(stdout+stderr, secret) {
				t.Errorf("rbscope stack printed the root-only file's bytes:\n%s%s", stdout, stderr)
			}
			var doc struct {
				Threads []struct {
					Frames []struct {
						Kind, Function, Object string
					} `json:"frames"`
				} `json:"threads"`
			}
			if err != nil || json.Unmarshal([]byte(stdout), &doc) != nil || len(doc.Threads) == 0 {
				t.Fatalf("stack --native with the executable replaced: %v: %s", err, stderr)
			}
			// _start is the executable's own symbol: read from its file.
			start := false
			for _, f := range doc.Threads[0].Frames {
				start = start || strings.TrimSuffix(f.Object, " (deleted)") == h.exe && f.Function == "_start"
			}
			if !start {
				t.Errorf("the main thread's native stack has no _start in %s: %+v", h.exe, doc.Threads[0].Frames)
			}

			plantAt(t, h.lib, kind, secretPath)
			stdout, stderr, err = run(t, "stack", "-p", strconv.Itoa(h.pid()))
			if leaks(stdout+stderr, secret) {
				t.Errorf("rbscope stack printed the root-only file's bytes:\n%s%s", stdout, stderr)
			}
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 ||
				!strings.Contains(stderr, "map_files needs CAP_SYS_ADMIN") || !strings.Contains(stderr, h.lib) {
				t.Errorf("%v: stdout %q, stderr %q; want one line refusing %s", err, stdout, stderr, h.lib)
			}
			t.Log(strings.TrimSpace(stderr))
		})
	}
}

// plantAt replaces the file at path, as its owner can: by a FIFO, or by a
// symlink to secret.
func plantAt(t *testing.T, path, kind, secret string) {
	t.Helper()
	tmp := path + ".new"
	var err error
	if kind == "fifo" {
		err = unix.Mkfifo(tmp, 0o666)
	} else {
		err = os.Symlink(secret, tmp)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
