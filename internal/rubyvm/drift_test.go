package rubyvm

import (
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestDriftRecovers reads a live process through a layout whose thread
// name offset is off by a word, as a table from another patch release
// would be: the layout check must refuse it, and a known drift that moves
// the field back must be found, applied and reported.
func TestDriftRecovers(t *testing.T) {
	defer func(f func(string) []layout.Drift) { driftsFor = f }(driftsFor)
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "stack_threads.rb", nil, "10")
			var rep struct{ PID int }
			p.WaitReport(t, &rep, 30*time.Second)
			tg, err := target.Attach(p.PID())
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			v, err := Open(tg)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			good := *v.Layout
			bad := good
			bad.ThreadName -= 8
			bad.Source = "table"

			driftsFor = func(string) []layout.Drift { return nil }
			v.Layout = &bad
			if err := v.checkOrDrift(v.maps); err == nil {
				t.Fatalf("a thread name offset off by a word passed the layout check")
			}

			driftsFor = func(string) []layout.Drift {
				return []layout.Drift{{Moves: map[string]int64{"ThreadName": 16}}, {Moves: map[string]int64{"ThreadName": 8}, Why: "test"}}
			}
			v.Layout = &bad
			if err := v.checkOrDrift(v.maps); err != nil {
				t.Fatalf("with the drift known: %v", err)
			}
			if v.Layout.ThreadName != good.ThreadName {
				t.Errorf("ThreadName %d after the drift, want %d", v.Layout.ThreadName, good.ThreadName)
			}
			if len(v.Adjusted) != 1 || !strings.HasPrefix(v.Adjusted[0], "ThreadName ") || !strings.Contains(v.Adjusted[0], "known: test") {
				t.Errorf("Adjusted = %q", v.Adjusted)
			}
			if len(v.Unexpected()) != 0 {
				t.Errorf("a known drift is reported as unexpected: %q", v.Unexpected())
			}
			ths, err := v.Threads()
			if err != nil || len(ths) == 0 {
				t.Fatalf("threads after the drift: %d, %v", len(ths), err)
			}
		})
	}
}
