// Package rawtest reads a raw recording (output.ReadRaw) for tests: the
// samples of each thread in time order, as the functions of their stacks.
package rawtest

import (
	"cmp"
	"os"
	"slices"
	"testing"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
)

// Samples reads the raw recording path and returns, per thread id, its
// samples in time order, each as its functions root first, as keep leaves
// them (nil: the sample is left out).
func Samples(t testing.TB, path string, keep func(s profile.Sample, fns []string) []string) map[int][][]string {
	t.Helper()
	p := Read(t, path)
	timeline := slices.Clone(p.Timeline)
	slices.SortStableFunc(timeline, func(a, b profile.Sample) int { return cmp.Compare(a.Time, b.Time) })
	out := map[int][][]string{}
	for _, s := range timeline {
		var fns []string
		for _, fr := range p.StackFrames(s.Stack) {
			fns = append(fns, fr.Name(false))
		}
		if fns = keep(s, fns); fns != nil {
			out[s.TID] = append(out[s.TID], fns)
		}
	}
	return out
}

// Read reads the raw recording path as report reads it.
func Read(t testing.TB, path string) *profile.Profile {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	p, _, err := output.ReadRaw(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
