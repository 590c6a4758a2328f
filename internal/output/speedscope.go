package output

import (
	"encoding/json"
	"io"

	"github.com/rbscope/rbscope/internal/profile"
)

// SpeedscopeSchema is the $schema of speedscope's file format.
const SpeedscopeSchema = "https://www.speedscope.app/file-format-schema.json"

type speedscopeFile struct {
	Schema             string              `json:"$schema"`
	Shared             speedscopeShared    `json:"shared"`
	Profiles           []speedscopeProfile `json:"profiles"`
	Name               string              `json:"name"`
	Exporter           string              `json:"exporter"`
	ActiveProfileIndex int                 `json:"activeProfileIndex"`
}

type speedscopeShared struct {
	Frames []speedscopeFrame `json:"frames"`
}

type speedscopeFrame struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

type speedscopeProfile struct {
	Type       string    `json:"type"`
	Name       string    `json:"name"`
	Unit       string    `json:"unit"`
	StartValue float64   `json:"startValue"`
	EndValue   float64   `json:"endValue"`
	Samples    [][]int   `json:"samples"`
	Weights    []float64 `json:"weights"`
}

// Speedscope writes the profile in speedscope's JSON file format: one
// sampled profile, weights in seconds.
func Speedscope(w io.Writer, p *profile.Profile, o Options) error {
	f := speedscopeFile{Schema: SpeedscopeSchema, Name: o.Title, Exporter: "rbscope"}
	for _, fr := range p.Frames {
		sf := speedscopeFrame{Name: fr.Label}
		if fr.Kind == profile.KindRuby {
			sf.File, sf.Line = fr.Path, fr.Line
		}
		f.Shared.Frames = append(f.Shared.Frames, sf)
	}
	prof := speedscopeProfile{Type: "sampled", Name: o.Title, Unit: "seconds", Samples: [][]int{}, Weights: []float64{}}
	period := 1 / p.Rate
	total := 0.0
	for _, st := range p.Stacks {
		prof.Samples = append(prof.Samples, st.Frames)
		wgt := float64(st.Count) * period
		prof.Weights = append(prof.Weights, wgt)
		total += wgt
	}
	prof.EndValue = total
	f.Profiles = []speedscopeProfile{prof}
	if f.Shared.Frames == nil {
		f.Shared.Frames = []speedscopeFrame{}
	}
	return json.NewEncoder(w).Encode(f)
}
