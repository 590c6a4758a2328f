package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/wire"

	"github.com/rbscope/rbscope/internal/testruby"
)

func TestHeapCensusJSONAndText(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "heap_census.rb", nil)
	var rep struct {
		HeapProbe uint64 `json:"heap_probe"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	pid := fmt.Sprint(p.PID())

	stdout, stderr, code := rbscope(t, "heap", "census", "-p", pid, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		SchemaVersion int `json:"schema_version"`
		Classes       []struct {
			Type  string `json:"type"`
			Class string `json:"class"`
			Count uint64 `json:"count"`
			Bytes uint64 `json:"bytes"`
		} `json:"classes"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.SchemaVersion != wire.SchemaVersion {
		t.Fatalf("--json output (schema %d): %v\n%s", doc.SchemaVersion, err, stdout)
	}
	rows := doc.Classes
	found := false
	for i, r := range rows {
		if i > 0 && r.Bytes > rows[i-1].Bytes {
			t.Errorf("rows not largest first: %+v after %+v", r, rows[i-1])
		}
		if r.Class == "HeapProbe" {
			found = true
			if r.Type != "OBJECT" || r.Count != rep.HeapProbe || r.Bytes < r.Count*40 {
				t.Errorf("HeapProbe row %+v, want OBJECT x %d", r, rep.HeapProbe)
			}
		}
	}
	if !found {
		t.Errorf("no HeapProbe row in %d rows", len(rows))
	}
	if st := processState(t, p.PID()); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}

	stdout, stderr, code = rbscope(t, "heap", "census", "-p", pid)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`(?m)^TYPE +COUNT +BYTES$`,
		`(?m)^OBJECT +\d+ +\d+$`,
		`(?m)^STRING +\d+ +\d+$`,
		`(?m)^CLASS +TYPE +COUNT +BYTES$`,
		fmt.Sprintf(`(?m)^HeapProbe +OBJECT +%d +\d+$`, rep.HeapProbe),
		`(?m)^String +STRING +\d+ +\d+$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("text output lacks %s:\n%s", want, stdout)
		}
	}
	classRows := func(out string) int {
		loc := regexp.MustCompile(`(?m)^CLASS +TYPE +COUNT +BYTES\n`).FindStringIndex(out)
		if loc == nil {
			return 0
		}
		return strings.Count(out[loc[1]:], "\n")
	}
	if n := classRows(stdout); n != censusTopClasses+1 {
		t.Errorf("%d class lines without --all, want %d with the note", n, censusTopClasses+1)
	}
	all, _, code := rbscope(t, "heap", "census", "-p", pid, "--all", "--nonblocking")
	if code != 0 || classRows(all) <= classRows(stdout) || strings.Contains(all, "more (--all") {
		t.Errorf("--all printed %d class lines (exit %d), without it %d", classRows(all), code, classRows(stdout))
	}
}

func TestHeapCensusErrors(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	dead := exec.Command("true")
	dead.Run()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"heap"}, 2, "a subcommand is required"},
		{"no pid", []string{"heap", "census"}, 2, "--pid is required"},
		{"bad flag", []string{"heap", "census", "--frobnicate"}, 2, "unknown flag"},
		{"extra argument", []string{"heap", "census", "-p", "1", "x"}, 2, "unexpected argument"},
		{"no such process", []string{"heap", "census", "-p", fmt.Sprint(dead.Process.Pid)}, 1, "no such process"},
		{"not ruby", []string{"heap", "census", "-p", fmt.Sprint(sleeper.Process.Pid)}, 1, "not a Ruby process (it runs sleep)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := rbscope(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "goroutine") {
				t.Errorf("stderr %q, want one line containing %q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q on error", stdout)
			}
		})
	}
}

// TestHeapDumpInterrupted: SIGINT to rbscope in the middle of a heap dump
// (while the target stands still for the copy, or after, while the copy
// is decoded: the pause is tens of milliseconds, too short to aim at on a
// busy machine) makes rbscope exit at once (status 130) with the target
// running and neither the output nor its temporary file left behind,
// compressed or not.
func TestHeapDumpInterrupted(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "big_heap.rb", nil)
	var rep struct{ PID int }
	p.WaitReport(t, &rep, 60*time.Second)
	for _, name := range []string{"heap.json", "heap.jsonl.zst"} {
		t.Run(name, func(t *testing.T) { interruptDump(t, p.PID(), name) })
	}
}

// interruptDump interrupts heap dump of pid to a file named name.
func interruptDump(t *testing.T, pid int, name string) {
	dir := t.TempDir()
	out := filepath.Join(dir, name)
	cmd := exec.Command(rbscopeBin, "heap", "dump", "-p", fmt.Sprint(pid), "-o", out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The dump is under way once its temporary file exists.
	deadline := time.Now().Add(30 * time.Second)
	for {
		tmp, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
		if len(tmp) > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("setup: no dump under way: %s", stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("heap dump after SIGINT: %v (%s); want exit 130", err, stderr.String())
	}
	for i := 0; i < 5 && !t.Failed(); i++ {
		checkNotStopped(t, pid)
		time.Sleep(20 * time.Millisecond)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("files left behind: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// TestHeapDumpRedactStrings: --redact-strings keeps every String's
// bytesize and encoding but none of its bytes; without it the same dump
// holds them.
func TestHeapDumpRedactStrings(t *testing.T) {
	cmd, marker, addr := startSecretHolder(t)
	dump := func(args ...string) string {
		path := filepath.Join(t.TempDir(), "dump.json")
		if _, errOut, code := rbscope(t, append([]string{"heap", "dump", "-p", strconv.Itoa(cmd.Process.Pid), "-o", path}, args...)...); code != 0 {
			t.Fatalf("heap dump %v: exit %d: %s", args, code, errOut)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if plain := dump(); !strings.Contains(plain, marker) {
		t.Fatal("setup: the dump without --redact-strings lacks the program's string")
	}
	redacted := dump("--redact-strings")
	if strings.Contains(redacted, marker) || strings.Contains(redacted, `"value":"secret`) {
		t.Error("--redact-strings left the string's contents in the dump")
	}
	// The program's String keeps its bytesize and encoding, on its own line.
	var line string
	for _, l := range strings.Split(redacted, "\n") {
		if strings.HasPrefix(l, `{"address":"`+addr+`"`) {
			line = l
		}
	}
	if !strings.Contains(line, fmt.Sprintf(`"bytesize":%d`, len(marker))) || !strings.Contains(line, `"encoding":"UTF-8"`) || strings.Contains(line, `"value"`) {
		t.Errorf("--redact-strings: the program's String %s reads %q; want its bytesize and encoding, no value", addr, line)
	}
}

// TestCoreHeapDump: the dump rbscope core --heap-dump writes from a gcore'd
// core (compressed with zstd, as its name asks) equals the one heap dump
// writes from the live process at the same moment (the program stands
// still, its GC off), object for object.
func TestCoreHeapDump(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			own := filepath.Join(t.TempDir(), "own.json")
			p := testruby.Start(t, rb, "heap_dump.rb", nil, own)
			var rep struct {
				PID   int
				Known map[string]string
			}
			p.WaitReport(t, &rep, 120*time.Second)
			core := testruby.Gcore(t, p.PID())
			live := filepath.Join(t.TempDir(), "live.json")
			if _, errOut, code := rbscope(t, "heap", "dump", "-p", strconv.Itoa(p.PID()), "-o", live); code != 0 {
				t.Fatalf("heap dump: exit %d: %s", code, errOut)
			}
			// Written compressed, as heap dump writes it (the same writer).
			fromCore := filepath.Join(t.TempDir(), "core.jsonl.zst")
			if _, errOut, code := rbscope(t, "core", core, "--heap-dump", "-o", fromCore); code != 0 {
				t.Fatalf("core --heap-dump: exit %d: %s", code, errOut)
			}
			lines := func(path string) map[string]bool {
				b := decompressed(t, path)
				out := map[string]bool{}
				for _, l := range strings.Split(string(b), "\n") {
					if l != "" {
						out[l] = true
					}
				}
				return out
			}
			a, b := lines(live), lines(fromCore)
			if len(a) < 1000 {
				t.Fatalf("setup: the live dump has %d lines", len(a))
			}
			var missing, extra []string
			for l := range a {
				if !b[l] {
					missing = append(missing, l)
				}
			}
			for l := range b {
				if !a[l] {
					extra = append(extra, l)
				}
			}
			if len(missing)+len(extra) > 0 {
				t.Errorf("the core's dump differs from the live one: %d lines only live, %d only from the core; e.g.\n%v\n%v", len(missing), len(extra), first(missing, 3), first(extra, 3))
			}
			// And the objects the program knows are in the core's dump as
			// in the program's own dump_all.
			type obj struct {
				typ  string
				refs []uint64
			}
			read := func(path string) map[uint64]obj {
				f, err := heap.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				out := map[uint64]obj{}
				rd := heap.NewReader(f, path)
				for {
					r, err := rd.Next()
					if err == io.EOF {
						return out
					}
					if err != nil {
						t.Fatal(err)
					}
					out[r.Address] = obj{r.Type, append([]uint64(nil), r.References...)}
				}
			}
			theirs, ours := read(own), read(fromCore)
			for name, a := range rep.Known {
				addr, err := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				want, got := theirs[addr], ours[addr]
				if want.typ == "" || got.typ != want.typ {
					t.Errorf("%s %s: %q in the core's dump, %q in dump_all's", name, a, got.typ, want.typ)
					continue
				}
				switch want.typ { // the types whose references are decoded as dump_all writes them
				case "ARRAY", "HASH", "OBJECT", "STRUCT", "STRING":
					if !slices.Equal(got.refs, want.refs) {
						t.Errorf("%s %s: references %x in the core's dump, %x in dump_all's", name, a, got.refs, want.refs)
					}
				}
			}
		})
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// startSecretHolder starts a Ruby program that keeps a String of a secret
// marker (built at run time, twice) and returns it, the marker and the
// String's address; the program is killed when the test ends.
func startSecretHolder(t *testing.T) (*exec.Cmd, string, string) {
	t.Helper()
	rb := testruby.Rubies(t)[0]
	marker := fmt.Sprintf("secret-marker-%d", time.Now().UnixNano())
	cmd := exec.Command(rb.Bin, "-e", `require "objspace"; $keep = ARGV[0].chars.join; $copy = ARGV[0].chars.join; $stdout.puts ObjectSpace.dump($keep)[/"address":"(0x\h+)"/, 1]; $stdout.flush; sleep`, marker)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	addr = strings.TrimSpace(addr)
	if err != nil || !strings.HasPrefix(addr, "0x") {
		t.Fatalf("setup: the program said %q, %v", addr, err)
	}
	return cmd, marker, addr
}
