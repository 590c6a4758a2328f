package rubyvm_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestLabelsTorture reads the stack of testdata/labels_torture.rb's
// "torture" thread, which goes through every form of frame label (class
// and module bodies, singleton, module and refined methods, nested blocks,
// define_method, method_missing, eval, instance_eval, class_exec, an
// anonymous class, C methods), and compares its labels, exactly, with
// those Ruby 3.4's own caller_locations prints for it
// (testdata/labels_torture.want.json): rbscope labels frames as 3.4 does
// on every Ruby. Under 3.4 the program's own labels must also still be
// the stored ones.
func TestLabelsTorture(t *testing.T) {
	b, err := os.ReadFile(testruby.Testdata("labels_torture.want.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Ruby   string   `json:"ruby"`
		Labels []string `json:"labels"`
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "labels_torture.rb", nil)
			var rep struct {
				Version string   `json:"version"`
				Labels  []string `json:"labels"`
			}
			p.WaitReport(t, &rep, 30*time.Second)
			if strings.HasPrefix(rep.Version, "3.4.") && fmt.Sprint(rep.Labels) != fmt.Sprint(want.Labels) {
				t.Errorf("Ruby %s labels the chain\n%q\nlabels_torture.want.json (from %s) has\n%q", rep.Version, rep.Labels, want.Ruby, want.Labels)
			}
			_, vm := testvm.Attach(t, p.PID())
			var got []string
			// The thread writes its report just before it calls sleep.
			for deadline := time.Now().Add(10 * time.Second); ; {
				var ths []rubyvm.Thread
				err := testvm.Paused(t, vm, func() (err error) {
					ths, err = vm.Threads()
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				got = nil
				for _, th := range ths {
					if th.Name == "torture" {
						for _, f := range th.Frames {
							got = append(got, f.Label)
						}
					}
				}
				if len(got) > 0 && got[0] == "Kernel#sleep" || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if fmt.Sprint(got) != fmt.Sprint(want.Labels) {
				for i := range max(len(got), len(want.Labels)) {
					g, w := "", ""
					if i < len(got) {
						g = got[i]
					}
					if i < len(want.Labels) {
						w = want.Labels[i]
					}
					if g != w {
						t.Errorf("frame %d: %q, Ruby 3.4 labels it %q", i, g, w)
					}
				}
			}
		})
	}
}
