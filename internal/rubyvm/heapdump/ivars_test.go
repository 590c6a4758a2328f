package heapdump_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// ivarReport is what testdata/ivar_names.rb writes about itself.
type ivarReport struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Objects []struct {
		What    string      `json:"what"`
		Address string      `json:"address"`
		Ivars   [][2]string `json:"ivars"`
	} `json:"objects"`
}

// dumpIvars reads the instance variables of every line of a dump, by
// address, as "name=value" (an address as 0x... in lower case).
func dumpIvars(t *testing.T, r io.Reader) map[uint64][]string {
	t.Helper()
	out := map[uint64][]string{}
	rd := heap.NewReader(r, "rbscope dump")
	rd.KeepInstanceVariables()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, iv := range rec.InstanceVariables {
			out[rec.Address] = append(out[rec.Address], ivarString(iv.Name, iv.Address, iv.Value))
		}
	}
}

func ivarString(name string, addr uint64, value string) string {
	if addr != 0 {
		return fmt.Sprintf("%s=%#x", name, addr)
	}
	return name + "=" + value
}

// TestHeapDumpIvarNames dumps a program's objects with known instance
// variables from outside and compares the names and values the dump
// writes with what instance_variables and instance_variable_get say, on
// every Ruby installed.
func TestHeapDumpIvarNames(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "ivar_names.rb", nil)
			var rep ivarReport
			p.WaitReport(t, &rep, 60*time.Second)
			vm, _ := testvm.AttachAsleep(t, p.PID(), true)
			var out bytes.Buffer
			st, _, err := heapdump.WriteSnapshot(vm, vm.T.(*target.Live), &out, heapdump.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if st.Skipped != 0 {
				t.Errorf("%d objects skipped", st.Skipped)
			}
			got := dumpIvars(t, bytes.NewReader(out.Bytes()))
			if len(rep.Objects) < 21 {
				t.Fatalf("the program reported %d objects", len(rep.Objects))
			}
			compared := 0
			for _, o := range rep.Objects {
				a := parseAddr(t, o.Address)
				var want []string
				for _, iv := range o.Ivars {
					v := iv[1]
					if strings.HasPrefix(v, "0x") {
						v = fmt.Sprintf("%#x", parseAddr(t, v))
					}
					want = append(want, iv[0]+"="+v)
				}
				// instance_variables lists the names that begin with one @:
				// not class variables, nor Ruby's internal ivars.
				var mine []string
				for _, s := range got[a] {
					if strings.HasPrefix(s, "@") && !strings.HasPrefix(s, "@@") {
						mine = append(mine, s)
					}
				}
				if strings.Join(mine, " ") != strings.Join(want, " ") {
					t.Errorf("%s (%#x): the dump says\n  %v\nthe program\n  %v", o.What, a, mine, want)
					continue
				}
				compared++
			}
			t.Logf("Ruby %s: %d objects' instance variables as the program says", rep.Version, compared)
		})
	}
}
