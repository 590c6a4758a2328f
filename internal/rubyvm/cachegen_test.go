package rubyvm_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// gcCounts is what testdata/cache_gen.rb reports of itself (GC.stat).
type gcCounts struct {
	PID   int    `json:"pid"`
	Count uint64 `json:"count"`
	Major uint64 `json:"major"`
}

// TestCachesFollowTheCollector: the caches of objects a read of the
// threads keeps follow the program's own collections. testdata/cache_gen.rb
// waits in a method four full collections old and in one eval'd just
// before; rbscope must take the first iseq for old and the second for
// young, as the program's own ObjectSpace.dump_all flags them; read the
// collector's counts GC.stat gives; keep both iseqs while no collection
// runs, drop only the young one after a minor collection, and everything
// after a major one.
func TestCachesFollowTheCollector(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			cmd := exec.Command(rb.Bin, testruby.Testdata("cache_gen.rb"))
			cmd.Env = append(os.Environ(), rb.Env...)
			testruby.DieWithTest(cmd)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			in, _ := cmd.StdinPipe()
			outPipe, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			out := bufio.NewReader(outPipe)
			next := func(what string) gcCounts {
				t.Helper()
				if what != "" {
					fmt.Fprintln(in, what)
				}
				line, err := out.ReadString('\n')
				var c gcCounts
				if err == nil {
					err = json.Unmarshal([]byte(line), &c)
				}
				if err != nil {
					t.Fatalf("the program's report after %q: %v; stderr:\n%s", what, err, stderr.String())
				}
				return c
			}
			counts := next("")
			_, vm := testvm.Attach(t, counts.PID)
			read := func(stacks bool) {
				t.Helper()
				var with func(rubyvm.Thread) bool
				if stacks {
					with = func(rubyvm.Thread) bool { return true }
				}
				if err := testvm.Paused(t, vm, func() error { _, err := vm.ReadThreads(with); return err }); err != nil {
					t.Fatal(err)
				}
			}
			sameCounts := func(when string, c gcCounts) {
				t.Helper()
				count, major, ok := vm.CacheCounts()
				if !ok || count != c.Count || major != c.Major {
					t.Fatalf("%s: rbscope read the collector's counts %d and %d (major; read: %v), GC.stat says %d and %d", when, count, major, ok, c.Count, c.Major)
				}
			}

			read(true)
			sameCounts("first read", counts)
			oldAddr, oldYoung, ok1 := vm.CachedIseq("old_wait")
			youngAddr, youngYoung, ok2 := vm.CachedIseq("young_wait")
			if !ok1 || !ok2 {
				t.Fatalf("the iseqs of old_wait (%v) and young_wait (%v) are not kept after a read of the stacks", ok1, ok2)
			}
			// Ruby's own word on each iseq's age.
			dump := filepath.Join(t.TempDir(), "dump.json")
			counts = next("dump " + dump)
			ages := dumpAges(t, dump, oldAddr, youngAddr)
			for _, c := range []struct {
				name  string
				addr  uint64
				young bool
			}{{"old_wait", oldAddr, oldYoung}, {"young_wait", youngAddr, youngYoung}} {
				old, found := ages[c.addr]
				if !found {
					t.Fatalf("the iseq of %s, %#x to rbscope, is not in the program's dump_all", c.name, c.addr)
				}
				if old == c.young {
					t.Errorf("the iseq of %s: rbscope takes it for young=%v, dump_all says old=%v", c.name, c.young, old)
				}
			}
			if !ages[oldAddr] || ages[youngAddr] {
				t.Fatalf("setup: dump_all says old_wait old=%v and young_wait old=%v; want old and young", ages[oldAddr], ages[youngAddr])
			}

			// No collection: everything is kept.
			read(false)
			sameCounts("no collection", counts)
			if _, _, ok := vm.CachedIseq("young_wait"); !ok {
				t.Error("no collection ran, yet the young iseq was dropped")
			}

			// Ruby makes a collection asked for as minor a major one when
			// it wants one: then the iseqs are read again (the young one
			// is still young: it has survived fewer than three) and a
			// minor one asked for again.
			for try := 0; ; try++ {
				major := counts.Major
				if counts = next("minor"); counts.Major == major {
					break
				}
				if try == 2 {
					t.Fatalf("three collections asked for as minor were all major (GC.stat: %+v)", counts)
				}
				read(true)
				sameCounts("after a major collection", counts)
			}
			read(false)
			sameCounts("after a minor collection", counts)
			if _, _, ok := vm.CachedIseq("old_wait"); !ok {
				t.Error("a minor collection dropped the old iseq")
			}
			if _, _, ok := vm.CachedIseq("young_wait"); ok {
				t.Error("a minor collection kept the young iseq")
			}

			counts = next("major")
			read(false)
			sameCounts("after a major collection", counts)
			if _, _, ok := vm.CachedIseq("old_wait"); ok {
				t.Error("a major collection kept the old iseq")
			}

			// And the stacks read afresh still name both methods.
			read(true)
			for _, label := range []string{"old_wait", "young_wait"} {
				if _, _, ok := vm.CachedIseq(label); !ok {
					t.Errorf("%s is not read again after the major collection", label)
				}
			}
		})
	}
}

// dumpAges reads, from a dump_all file, whether the objects at addrs are
// old.
func dumpAges(t *testing.T, path string, addrs ...uint64) map[uint64]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]uint64{}
	for _, a := range addrs {
		want[fmt.Sprintf("%#x", a)] = a
	}
	ages := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var rec struct {
			Address string          `json:"address"`
			Flags   map[string]bool `json:"flags"`
		}
		line := sc.Bytes()
		if !strings.Contains(string(line[:min(len(line), 40)]), `"address"`) {
			continue
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		if a, ok := want[rec.Address]; ok {
			ages[a] = rec.Flags["old"]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ages
}
