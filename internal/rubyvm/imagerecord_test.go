package rubyvm_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/diskcache"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestImageRecord: what is read of a Ruby image is kept on disk (0600) and
// read by the next run, which then reads the stacks as the program reports
// them; a record that is damaged, of another owner or mode, or of another
// file size is ignored, and written anew.
func TestImageRecord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the records are kept for root-owned images and chowned away")
	}
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(diskcache.Env, dir)
			p := testruby.Start(t, rb, "stack_threads.rb", nil, fmt.Sprint(deepFrames))
			var rep selfReport
			p.WaitReport(t, &rep, 30*time.Second)
			open := func() *rubyvm.VM {
				_, vm := testvm.Attach(t, p.PID())
				return vm
			}
			vm := open()
			id := vm.Image.BuildID()
			if id == "" {
				t.Skipf("%s has no build ID: nothing is kept", vm.Image.Path)
			}
			file := filepath.Join(dir, "images", id)
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatalf("no record after the first run: %v", err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("record mode %v, want 0600", fi.Mode())
			}
			fam, ver := vm.Layout.Family, vm.Version

			// mark writes the record back with the layout's Checked set
			// to a mark (and change applied), to tell whether the next
			// run read it.
			const marked = "marked by the test"
			mark := func(change func(map[string]any)) {
				t.Helper()
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				var r map[string]any
				if err := json.Unmarshal(b, &r); err != nil {
					t.Fatal(err)
				}
				r["layouts"].(map[string]any)[ver].(map[string]any)["checked"] = marked
				if change != nil {
					change(r)
				}
				if b, err = json.Marshal(r); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, b, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(file, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mark(nil)
			vm = open()
			if vm.Layout.Checked != marked {
				t.Fatalf("the record was not read: layout checked %q", vm.Layout.Checked)
			}
			checkStacks(t, rb, &rep, vm, testvm.ReadAsleep(t, vm, true), false)

			for _, c := range []struct {
				name  string
				spoil func()
			}{
				{"mode 0644", func() { mark(nil); os.Chmod(file, 0o644) }},
				{"owner 65534", func() { mark(nil); os.Chown(file, 65534, 65534) }},
				{"another size", func() { mark(func(r map[string]any) { r["size"] = r["size"].(float64) + 1 }) }},
				{"damaged", func() {
					mark(nil)
					b, _ := os.ReadFile(file)
					os.WriteFile(file, b[:len(b)/2], 0o600)
				}},
			} {
				c.spoil()
				vm := open()
				if vm.Layout.Checked == marked {
					t.Errorf("%s: the record was read", c.name)
				}
				if vm.Version != ver || vm.Layout.Family != fam {
					t.Errorf("%s: Ruby %s (%s), the first run read %s (%s)", c.name, vm.Version, vm.Layout.Family, ver, fam)
				}
				if _, err := vm.Threads(); err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
				// The record was written anew, trusted.
				fi, err := os.Stat(file)
				if err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
					t.Fatalf("%s: the record was not written anew: %v %v", c.name, fi, err)
				}
				var r map[string]any
				if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &r) != nil {
					t.Fatalf("%s: the record written anew does not parse: %v", c.name, err)
				}
			}
		})
	}
}
