package rubyvm

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestConfirmRelease: what a process says of its release proves a release
// only of the family whose table read it, well formed, and, from
// RbConfig, with the process's own patch level and RUBY_VERSION's length.
func TestConfirmRelease(t *testing.T) {
	unread := errors.New("address not in the core")
	h27, h31 := releaseHint{"2.7.4", "2.7"}, releaseHint{"3.1.2", "3.1"}
	cfg272 := releaseFacts{versionErr: unread, versionLen: 5, patchlevel: 137, hasPatch: true, cfgVersion: "2.7.2", cfgPatch: "137"}
	for _, tc := range []struct {
		name string
		h    releaseHint
		f    releaseFacts
		want string // "" for a refusal
	}{
		{"RUBY_VERSION", h31, releaseFacts{version: "3.1.7"}, "3.1.7"},
		{"RUBY_VERSION newer than the tables", releaseHint{"3.4.5", "3.4"}, releaseFacts{version: "3.4.11"}, "3.4.11"},
		{"RUBY_VERSION of another family", h27, releaseFacts{version: "3.1.7"}, ""},
		{"RUBY_VERSION of a family that starts alike", releaseHint{"3.1.2", "3.1"}, releaseFacts{version: "3.10.0"}, ""},
		{"RUBY_VERSION a family", h31, releaseFacts{version: "3.1"}, ""},
		{"RUBY_VERSION garbage", h31, releaseFacts{version: "3.1.2\x00\x01"}, ""},
		{"RbConfig", h27, cfg272, "2.7.2"},
		{"RbConfig of another family", h31, cfg272, ""},
		{"RbConfig, another patch level", h27, func() releaseFacts { f := cfg272; f.patchlevel = 191; return f }(), ""},
		{"RbConfig, no patch level", h27, func() releaseFacts { f := cfg272; f.hasPatch = false; return f }(), ""},
		{"RbConfig, a patch level not a number", h27, func() releaseFacts { f := cfg272; f.cfgPatch = "p137"; return f }(), ""},
		{"RbConfig, RUBY_VERSION of another length", h27, func() releaseFacts { f := cfg272; f.versionLen = 6; return f }(), ""},
		{"RbConfig, RUBY_VERSION's length unknown", h27, func() releaseFacts { f := cfg272; f.versionLen = -1; return f }(), ""},
		{"RbConfig not a release", h27, func() releaseFacts { f := cfg272; f.cfgVersion = "2.7"; return f }(), ""},
		{"neither", h27, releaseFacts{versionErr: unread, cfgErr: errors.New("RbConfig is not loaded")}, ""},
	} {
		got, how, err := confirmRelease(tc.h, tc.f, tc.h.family+"'s table")
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: proved %s (%s), want a refusal", tc.name, got, how)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %s", tc.name, got, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: the refusal is not one line: %q", tc.name, err)
		case tc.want != "" && !strings.Contains(how, tc.h.family+"'s table"):
			t.Errorf("%s: how it was proven, %q, does not name the table that read it", tc.name, how)
		}
	}
}

// peerCoreRelease lists the peer cores whose family has a table, by the
// release expected.json says each is.
func peerCoreReleases(t *testing.T) map[string]string {
	t.Helper()
	src := testruby.EnvOr("RBSCOPE_PEER_CORES", "/work/shared/peer-cores")
	b, err := os.ReadFile(filepath.Join(src, "expected.json"))
	if err != nil {
		t.Skipf("no peer cores: %v", err)
	}
	var exp struct {
		Cores map[string]struct {
			Ruby string `json:"ruby"`
		} `json:"cores"`
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatalf("expected.json: %v", err)
	}
	out := map[string]string{}
	for name, c := range exp.Cores {
		if fam, _ := Family(c.Ruby); layouts.For(fam) != nil {
			out[c.Ruby] = testruby.UnpackCore(t, filepath.Join(src, name), filepath.Join(testruby.CoreCache(), "peer-cores"))
		}
	}
	return out
}

// openPeerCore opens a core with nothing but the core.
func openPeerCore(t *testing.T, path string, opts Options) *VM {
	t.Helper()
	c, err := target.OpenCore(path, target.CoreOptions{CoreOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	vm, err := OpenWith(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

// TestReleaseFactsPeerCores reads what each peer core's process says of
// its release, RbConfig included (the cores whose release a string of the
// image gives read it only in this test): it is the release expected.json
// names, and it proves that release with its own family's table and none
// with another family's.
func TestReleaseFactsPeerCores(t *testing.T) {
	for want, core := range peerCoreReleases(t) {
		t.Run(want, func(t *testing.T) {
			vm := openPeerCore(t, core, Options{})
			fam, _ := Family(want)
			f := vm.releaseFacts(true)
			t.Logf("RUBY_VERSION %q (%v, %d bytes), RUBY_PATCHLEVEL %d, RbConfig %q p%q (%v)", f.version, f.versionErr, f.versionLen, f.patchlevel, f.cfgVersion, f.cfgPatch, f.cfgErr)
			if f.versionErr == nil && f.version != want {
				t.Errorf("RUBY_VERSION %q, want %s", f.version, want)
			}
			if f.versionErr != nil && f.versionLen != len(want) {
				t.Errorf("RUBY_VERSION's bytes unread (%v) and its length %d, want %d", f.versionErr, f.versionLen, len(want))
			}
			if f.cfgErr != nil || f.cfgVersion != want || f.cfgPatch != strconv.FormatInt(f.patchlevel, 10) || !f.hasPatch {
				t.Errorf("RbConfig %q p%q (%v), RUBY_PATCHLEVEL %d (%v); want %s at the process's patch level", f.cfgVersion, f.cfgPatch, f.cfgErr, f.patchlevel, f.hasPatch, want)
			}
			// RbConfig alone, as a core without RUBY_VERSION's bytes
			// gives it
			g := f
			if g.versionErr == nil {
				g.versionErr, g.versionLen = errors.New("left out"), len(g.version)
			}
			for _, h := range []releaseFacts{f, g} {
				if rel, how, err := confirmRelease(releaseHint{vm.Version, fam}, h, readThrough(vm.Layout, fam)); err != nil || rel != want {
					t.Errorf("with %s's own table: %q, %v", fam, rel, err)
				} else {
					t.Logf("proven: %s, %s", rel, how)
				}
				for _, other := range layouts.Families() {
					if other == fam {
						continue
					}
					if rel, _, err := confirmRelease(releaseHint{layouts.For(other).Checked, other}, h, other+"'s table"); err == nil {
						t.Errorf("a hint of Ruby %s proved %s: a hint of the wrong family must be refused", other, rel)
					}
				}
			}
		})
	}
}

// TestFileNameIsAHint: the release a file's name says only chooses the
// layout tried first. A name of another release of the family, or of
// another family (whose table does not fit), proves nothing: the release
// read is the process's own.
func TestFileNameIsAHint(t *testing.T) {
	cores := peerCoreReleases(t)
	core, ok := cores["2.7.2"]
	if !ok {
		t.Skip("no 2.7.2 peer core")
	}
	vm := openPeerCore(t, core, Options{ForceVersion: "2.7.2"})
	for _, name := range []string{"2.7.8", "3.1.0", "3.4.11", ""} {
		u := &unreadVersion{why: "the test's", name: name, namePath: "/test/libruby.so." + name}
		vm.VersionFrom = ""
		if err := vm.proveRelease(vm.maps, u); err != nil {
			t.Errorf("name %q: %v", name, err)
			continue
		}
		if vm.Version != "2.7.2" || vm.Layout.Release != "2.7.2" || !strings.Contains(vm.VersionFrom, "2.7's table") {
			t.Errorf("name %q: Ruby %s (%s), read with %s", name, vm.Version, vm.VersionFrom, vm.LayoutName())
		}
		if _, err := vm.Threads(); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
}

// TestProvenReleaseLive opens each live Ruby twice: as usual (the
// ruby_version symbol), and with neither the symbol nor a description
// read (noVersionString), as a core without the image's read-only data:
// the release proven from the heap is the one the program prints, read
// with the same layout. What RbConfig says (the proof where RUBY_VERSION's
// bytes are missing) is that release at the program's patch level too.
func TestProvenReleaseLive(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			var rep struct {
				Version    string `json:"version"`
				Patchlevel int64  `json:"patchlevel"`
			}
			pid := testruby.StartInline(t, rb, `require "json"; puts JSON.generate(version: RUBY_VERSION, patchlevel: RUBY_PATCHLEVEL); $stdout.flush; sleep`, &rep)
			tg, err := target.Attach(pid)
			if errors.Is(err, target.ErrPermission) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			read, err := Open(tg)
			if err != nil {
				t.Fatal(err)
			}
			defer read.Close()
			noVersionString = true
			proven, err := Open(tg)
			noVersionString = false
			if err != nil {
				t.Fatalf("the release not read from the image's strings: %v", err)
			}
			defer proven.Close()
			if read.Version != rep.Version || read.VersionFrom != "" {
				t.Errorf("read Ruby %s (%q), the program says %s", read.Version, read.VersionFrom, rep.Version)
			}
			if proven.Version != rep.Version || proven.VersionFrom != "RUBY_VERSION read from Object's constants with "+readThrough(read.Layout, read.Layout.Family) {
				t.Errorf("proved Ruby %s (%s), the program says %s", proven.Version, proven.VersionFrom, rep.Version)
			}
			if !sameOffsets(read.Layout, proven.Layout) || read.LayoutName() != proven.LayoutName() {
				t.Errorf("proven, read with %s; read as usual, with %s", proven.LayoutName(), read.LayoutName())
			}
			t.Logf("Ruby %s from %s, read with %s", proven.Version, proven.VersionFrom, proven.LayoutName())
			f := proven.releaseFacts(true)
			if f.cfgErr != nil || f.cfgVersion != rep.Version || !f.hasPatch || f.patchlevel != rep.Patchlevel || f.cfgPatch != strconv.FormatInt(rep.Patchlevel, 10) {
				t.Errorf("RbConfig says %q p%q (%v), RUBY_PATCHLEVEL %d; the program says %s p%d", f.cfgVersion, f.cfgPatch, f.cfgErr, f.patchlevel, rep.Version, rep.Patchlevel)
			}
			f.version, f.versionErr, f.versionLen = "", errors.New("left out"), len(rep.Version)
			if rel, _, err := confirmRelease(releaseHint{proven.Version, proven.Layout.Family}, f, readThrough(proven.Layout, proven.Layout.Family)); err != nil || rel != rep.Version {
				t.Errorf("RbConfig alone proves %q (%v), the program says %s", rel, err, rep.Version)
			}
		})
	}
}

// TestObjectAboveThread: class Object found above the main thread's class
// (for a core that holds none of the image's symbols) is rb_cObject.
func TestObjectAboveThread(t *testing.T) {
	for want, core := range peerCoreReleases(t) {
		vm := openPeerCore(t, core, Options{})
		addr, _, err := vm.Symbol("rb_cObject")
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		obj, err := vm.m.u64(addr)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if got, err := vm.objectAboveThread(); err != nil || got != obj {
			t.Errorf("%s: Object above Thread %#x (%v), rb_cObject %#x", want, got, err, obj)
		}
		if vm.isObject(obj + 8) {
			t.Errorf("%s: %#x taken for Object", want, obj+8)
		}
	}
}

// TestSettle: a proven release is read through its own layout. Proven on
// the 2.7.2 peer core (attached with 2.7's table), a 2.7 release newer
// than those rbscope knows is named as proven and read with the newest
// known release's layout, which LayoutNote says; on the 3.1.0 core, a
// release that moved fields (3.1.5: the VM's objspace) is attached again
// with its own layout.
func TestSettle(t *testing.T) {
	cores := peerCoreReleases(t)
	for _, tc := range []struct {
		core, rel, note, how string
		moved                bool
	}{
		{"2.7.2", "2.7.2", "", "", false},
		{"2.7.2", "2.7.99", "Ruby 2.7.99 is newer than the releases rbscope knows (2.7.0 to 2.7.8): read with 2.7.8's layout", "", false},
		{"3.1.0", "3.1.5", "", ", then read with 3.1.5's own layout", true},
	} {
		core, ok := cores[tc.core]
		if !ok {
			t.Skipf("no %s peer core", tc.core)
		}
		vm := openPeerCore(t, core, Options{ForceVersion: tc.core})
		fam, _ := Family(tc.core)
		before := *vm.Layout
		if err := vm.settle(vm.maps, releaseHint{tc.core, fam}, tc.rel, "the test's proof"); err != nil {
			t.Errorf("%s as %s: %v", tc.core, tc.rel, err)
			continue
		}
		if vm.Version != tc.rel || vm.Layout.Release != tc.rel || vm.LayoutNote != tc.note || vm.VersionFrom != "the test's proof"+tc.how {
			t.Errorf("%s as %s: Ruby %s (%s) read with %s; note %q", tc.core, tc.rel, vm.Version, vm.VersionFrom, vm.LayoutName(), vm.LayoutNote)
		}
		if moved := !sameOffsets(&before, vm.Layout); moved != tc.moved {
			t.Errorf("%s as %s: layout moved %v, want %v", tc.core, tc.rel, moved, tc.moved)
		}
	}
}
