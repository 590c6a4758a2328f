package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/rbscope/rbscope/internal/profile"
)

// cuts are the flags that keep some of a profile's samples, by thread and
// by the context labels ctxlabels derives: record, report and top share
// them (the UI has them as transforms of the same names).
type cuts struct{ thread, endpoint, job string }

func (c *cuts) register(f *pflag.FlagSet) {
	f.StringVar(&c.thread, "thread", "", `only the samples of this thread: its TID, its name as profiles show it (Thread#name; "main" for the unnamed main thread, "tid N" for another unnamed one), or a regular expression matching whole names ('puma srv tp .*')`)
	f.StringVar(&c.endpoint, "endpoint", "", `only the samples in this endpoint, as the agent labels them: a Rails controller action (IssuesController#show) or Sinatra route ('GET /items/:id'), or a regular expression matching whole ones ('IssuesController#.*')`)
	f.StringVar(&c.job, "job", "", `only the samples in this job: a Sidekiq or ActiveJob job class (HardJob), or a regular expression matching whole ones`)
}

// transforms are the cuts as profile transforms (thread:, endpoint:, job:).
func (c cuts) transforms() []profile.Transform {
	var out []profile.Transform
	for _, t := range []profile.Transform{{Op: "thread", Function: c.thread}, {Op: profile.LabelEndpoint, Function: c.endpoint}, {Op: profile.LabelJob, Function: c.job}} {
		if t.Function != "" {
			out = append(out, t)
		}
	}
	return out
}

// labels are the cuts by label alone.
func (c cuts) labels() []profile.Transform {
	return cuts{endpoint: c.endpoint, job: c.job}.transforms()
}

// String says the cuts as a table's header does: `, thread "web",
// endpoint "X#y"` ("" for none).
func (c cuts) String() string {
	var b strings.Builder
	for _, t := range c.transforms() {
		fmt.Fprintf(&b, ", %s %q", t.Op, t.Function)
	}
	return b.String()
}
