package rubyvm_test

import (
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestBlockLinesNeverZero: every instruction of a one-line block is on
// that line, as the program reports it, wherever a sample finds the
// block's pc. Ruby 2.7's own line table puts the nop that ends a block
// (where `next` lands) on line 0; a sample caught there said "file:0".
func TestBlockLinesNeverZero(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "block_lines.rb", nil)
			var rep struct {
				PID  int `json:"pid"`
				Line int `json:"line"`
			}
			p.WaitReport(t, &rep, 30*time.Second)
			_, vm := testvm.Attach(t, rep.PID)
			if err := testvm.Paused(t, vm, func() error {
				_, err := vm.ReadThreads(func(rubyvm.Thread) bool { return true })
				return err
			}); err != nil {
				t.Fatal(err)
			}
			lines, err := vm.IseqLines("block in spin")
			if err != nil {
				t.Fatal(err)
			}
			if len(lines) == 0 {
				t.Fatal("the iseq of the block is not kept after a read of its thread's stack")
			}
			for pos, line := range lines {
				if line != rep.Line {
					t.Errorf("instruction %d of the block: line %d, the block is on line %d", pos, line, rep.Line)
				}
			}
		})
	}
}
