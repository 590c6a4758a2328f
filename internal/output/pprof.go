package output

import (
	"io"
	"time"

	pprof "github.com/google/pprof/profile"

	"github.com/rbscope/rbscope/internal/profile"
)

// Pprof writes a gzipped pprof protobuf that `go tool pprof` reads: the
// profile PprofProfile makes.
func Pprof(w io.Writer, p *profile.Profile) error {
	prof, err := PprofProfile(p)
	if err != nil {
		return err
	}
	return prof.Write(w)
}

// PprofProfile maps p to a pprof profile, with a function, file and line
// per frame and samples weighted by the sampling period, as CPU time or,
// for a wall-clock profile, wall time. A stack's Labels are its sample's
// labels.
func PprofProfile(p *profile.Profile) (*pprof.Profile, error) {
	period := int64(float64(time.Second) / p.Rate)
	clock := "cpu"
	if p.Wall {
		clock = "wall"
	}
	prof := &pprof.Profile{
		SampleType:    []*pprof.ValueType{{Type: "samples", Unit: "count"}, {Type: clock, Unit: "nanoseconds"}},
		PeriodType:    &pprof.ValueType{Type: clock, Unit: "nanoseconds"},
		Period:        period,
		TimeNanos:     p.Start.UnixNano(),
		DurationNanos: p.Duration.Nanoseconds(),
	}
	funcs := map[profile.Frame]*pprof.Function{}
	locs := map[profile.Frame]*pprof.Location{}
	location := func(f profile.Frame) *pprof.Location {
		if l, ok := locs[f]; ok {
			return l
		}
		fk := f.Function()
		fn, ok := funcs[fk]
		if !ok {
			fn = &pprof.Function{ID: uint64(len(prof.Function) + 1), Name: fk.Label, SystemName: fk.Label, Filename: fk.Path}
			if f.Kind == profile.KindCFunc {
				fn.Filename = "<cfunc>"
			}
			funcs[fk] = fn
			prof.Function = append(prof.Function, fn)
		}
		l := &pprof.Location{ID: uint64(len(prof.Location) + 1), Line: []pprof.Line{{Function: fn, Line: int64(f.Line)}}}
		locs[f] = l
		prof.Location = append(prof.Location, l)
		return l
	}
	for _, st := range p.Stacks {
		s := &pprof.Sample{Value: []int64{int64(st.Count), int64(st.Count) * period}}
		if len(st.Labels) > 0 {
			s.Label = make(map[string][]string, len(st.Labels))
			for _, l := range st.Labels {
				s.Label[l.Key] = append(s.Label[l.Key], l.Value)
			}
		}
		for i := len(st.Frames) - 1; i >= 0; i-- { // pprof wants the leaf first
			s.Location = append(s.Location, location(p.Frames[st.Frames[i]]))
		}
		prof.Sample = append(prof.Sample, s)
	}
	if err := prof.CheckValid(); err != nil {
		return nil, err
	}
	return prof, nil
}
