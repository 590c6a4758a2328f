// Package ctxlabels derives labels from the program's own context out of a
// sampled stack: the Rails controller action or the Sinatra route a
// request runs (Endpoint) and the job a Sidekiq processor or ActiveJob runs (Job). The stack is all it reads, so it
// costs no read of the target beyond the sample's; the rule is anchored on
// the framework's own frames, each label being the frame the framework
// calls:
//
//   - Endpoint is the label of the Ruby method frame that Rails' dispatch
//     to the action calls: the callee of
//     ActionController::BasicImplicitRender#send_action (every
//     ActionController::Base and ::API controller since Rails 5), or of
//     AbstractController::Base#process_action where send_action is Ruby's
//     send, which leaves no frame; the callee must be a method of a class
//     or module whose name ends in "Controller" ("IssuesController#show"),
//     which leaves out mailers and Rails' default_render. The outermost
//     such frame wins. A helper the action calls is not taken for the
//     action, nor a filter (before_action, around_action): samples in
//     filters, in the middleware and in the view rendered after the
//     action returns have no endpoint.
//   - For a Sinatra application (Sinatra 2 to 4), Endpoint is the route:
//     Sinatra defines each route's block as a method named for its verb
//     and pattern and calls it from the wrapper compile! makes, so the
//     endpoint is that method's name ("GET /hello/:name", rubyvm's
//     Frame.Method) in the first Ruby frame that "block in
//     Sinatra::Base.compile!" calls through Method#call. compile! wraps
//     filters too ("after (?-mix:.*)"): a method whose name does not
//     begin with a verb in capitals is no route. Samples in filters, in
//     the middleware and in rendering after the route's block returns
//     have no endpoint.
//   - Job is the class of the Ruby method frame that Sidekiq's processor
//     calls to run a job: the callee of Sidekiq::Processor#execute_job
//     (Sidekiq 6 and 7), "HardJob" for "HardJob#perform"; for an ActiveJob
//     job, whose perform ActiveJob calls from its wrapper's, the class of
//     the perform that ActiveJob's perform_now calls (the callee of "block
//     in ActiveJob::Execution#perform_now", Rails 6.1, or "block in
//     ActiveJob::Execution#_perform_job", Rails 7), which is also the job
//     of an ActiveJob job run by another backend or inline. Samples in
//     Sidekiq's middleware and in fetching have no job; those of an
//     ActiveJob job run by Sidekiq out of its perform (ActiveJob's
//     callbacks) have the wrapper Sidekiq runs,
//     ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper.
//
// Both name the method's owner as the profile shows it: an action or a
// perform inherited from a parent class names the parent. A stack with
// neither context has no label: there is no "unknown" value.
package ctxlabels

import (
	"strings"

	"github.com/rbscope/rbscope/internal/profile"
)

// The keys of the labels, in pprof's sample labels and OpenTelemetry's
// sample attributes.
const (
	Endpoint = profile.LabelEndpoint
	Job      = profile.LabelJob
)

// role is what a frame says of the frame it calls.
type role uint8

const (
	none           role = iota
	callsAction         // the callee is a controller action (Endpoint)
	callsJob            // the callee is a job's perform (Job)
	callsActiveJob      // the callee is an ActiveJob job's perform (Job, before callsJob's)
	callsRoute          // the callee, through Method#call, runs a Sinatra route's block (Endpoint)
)

// anchors are the framework's frames whose callee names the context.
var anchors = map[string]role{
	"ActionController::BasicImplicitRender#send_action": callsAction,
	"AbstractController::Base#process_action":           callsAction,
	"Sidekiq::Processor#execute_job":                    callsJob,
	"block in ActiveJob::Execution#perform_now":         callsActiveJob,
	"block in ActiveJob::Execution#_perform_job":        callsActiveJob,
	"block in Sinatra::Base.compile!":                   callsRoute,
}

func roleOf(f profile.Frame) role {
	if f.Kind != profile.KindRuby {
		return none
	}
	return anchors[f.Label]
}

// Of returns the endpoint and job of a stack, given root first ("" for
// none).
func Of(frames []profile.Frame) (endpoint, job string) {
	roles := make([]role, len(frames))
	ids := make([]int, len(frames))
	for i, f := range frames {
		roles[i], ids[i] = roleOf(f), i
	}
	return of(frames, roles, ids)
}

// of is Of of the stack ids (indexes into frames, root first), with the
// role of every frame of frames.
func of(frames []profile.Frame, roles []role, ids []int) (endpoint, job string) {
	activeJob := ""
	for i := 0; i+1 < len(ids) && (endpoint == "" || activeJob == ""); i++ {
		r := roles[ids[i]]
		if r == none {
			continue
		}
		callee := frames[ids[i+1]]
		if r == callsRoute {
			if endpoint == "" {
				endpoint = route(frames, ids[i+1:])
			}
			continue
		}
		if callee.Kind != profile.KindRuby {
			continue
		}
		owner, _, ok := method(callee.Label)
		if !ok {
			continue
		}
		switch {
		case r == callsAction && endpoint == "" && strings.HasSuffix(owner, "Controller"):
			endpoint = callee.Label
		case r == callsJob && job == "":
			job = owner
		case r == callsActiveJob && activeJob == "":
			activeJob = owner
		}
	}
	if activeJob != "" {
		job = activeJob
	}
	return endpoint, job
}

// route returns the Sinatra route whose block the first frames of ids
// run: the define_method name of the Ruby frame that Method#call, the
// first frame, calls; "" for any other stack.
func route(frames []profile.Frame, ids []int) string {
	if len(ids) < 2 {
		return ""
	}
	call, block := frames[ids[0]], frames[ids[1]]
	if call.Kind != profile.KindCFunc || call.Label != "Method#call" || block.Kind != profile.KindRuby {
		return ""
	}
	if !isRoute(block.Method) {
		return ""
	}
	return block.Method
}

// isRoute reports whether name is a Sinatra route's method, "VERB
// /pattern" (GET, POST, and any verb route declares, in capitals), not
// a filter's, which compile! makes and names the same way but for its
// kind ("before /x", "after (?-mix:.*)").
func isRoute(name string) bool {
	verb, _, ok := strings.Cut(name, " ")
	if !ok || verb == "" {
		return false
	}
	for _, c := range verb {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// method splits the label of an instance method's frame, "Owner#name",
// into its owner and name; ok is false for any other frame (a block, a
// singleton method, top-level code).
func method(label string) (owner, name string, ok bool) {
	owner, name, ok = strings.Cut(label, "#")
	if !ok || owner == "" || name == "" || strings.ContainsAny(owner, " <") {
		return "", "", false
	}
	return owner, name, true
}

// Annotate sets the Labels of every stack of p from its frames (Of), once
// per distinct stack: a stack with neither context gets none, and stacks
// of one context share one slice. value, if not nil, makes each value
// what the receiver takes (a label read from the target may be any bytes).
func Annotate(p *profile.Profile, value func(string) string) {
	roles := make([]role, len(p.Frames))
	anchored := false
	for i, f := range p.Frames {
		roles[i] = roleOf(f)
		anchored = anchored || roles[i] != none
	}
	shared := map[[2]string][]profile.Label{}
	for si := range p.Stacks {
		st := &p.Stacks[si]
		st.Labels = nil
		if !anchored {
			continue
		}
		endpoint, job := of(p.Frames, roles, st.Frames)
		if endpoint == "" && job == "" {
			continue
		}
		key := [2]string{endpoint, job}
		ls, ok := shared[key]
		if !ok {
			if value != nil {
				endpoint, job = value(endpoint), value(job)
			}
			if endpoint != "" {
				ls = append(ls, profile.Label{Key: Endpoint, Value: endpoint})
			}
			if job != "" {
				ls = append(ls, profile.Label{Key: Job, Value: job})
			}
			shared[key] = ls
		}
		st.Labels = ls
	}
}
