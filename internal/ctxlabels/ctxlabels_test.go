package ctxlabels

import (
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/profile"
)

// stack makes frames, root first, from labels: "name (cfunc)" is a C
// method, any other a Ruby frame; "label => method" is a Ruby frame
// running the block of a method defined with define_method.
func stack(labels ...string) []profile.Frame {
	var fs []profile.Frame
	for _, l := range labels {
		if name, ok := strings.CutSuffix(l, " (cfunc)"); ok {
			fs = append(fs, profile.Frame{Kind: profile.KindCFunc, Label: name})
			continue
		}
		label, method, _ := strings.Cut(l, " => ")
		fs = append(fs, profile.Frame{Kind: profile.KindRuby, Label: label, Path: "x.rb", Line: 1, Method: method})
	}
	return fs
}

// Rails' and Sidekiq's frames as rbscope reads them in Debian's Redmine
// 5.0.4 (Rails 6.1) under Puma and Sidekiq 6.4.1 (abridged).
var (
	railsTop = []string{
		"block in Puma::ThreadPool#spawn_thread",
		"ActionDispatch::Routing::RouteSet::Dispatcher#dispatch",
		"ActionController::Metal#dispatch",
		"AbstractController::Base#process",
		"AbstractController::Callbacks#process_action",
		"ActiveSupport::Callbacks#run_callbacks",
		"block in ActiveSupport::Callbacks#run_callbacks",
	}
	railsAction = []string{
		"block in AbstractController::Callbacks#process_action",
		"ActionController::Rendering#process_action",
		"AbstractController::Base#process_action",
		"ActionController::BasicImplicitRender#send_action",
	}
	// Sinatra 3.0.5's, on Debian's Ruby 3.1.
	sinatraTop = []string{
		"Sinatra::Base#call!",
		"block in Sinatra::Base#call!",
		"Sinatra::Base#dispatch!",
		"Sinatra::Base#route!",
		"block in Sinatra::Base#route!",
		"Sinatra::Base#process_route",
		"block in Sinatra::Base#process_route",
		"block (2 levels) in Sinatra::Base#route!",
		"Sinatra::Base#route_eval",
		"block (3 levels) in Sinatra::Base#route!",
		"block in Sinatra::Base.compile!",
	}
	sidekiqTop = []string{
		"block in Sidekiq::Util#safe_thread",
		"Sidekiq::Processor#run",
		"Sidekiq::Processor#process",
		"Sidekiq::Middleware::Chain#invoke",
		"block (2 levels) in Sidekiq::Processor#process",
		"Sidekiq::Processor#execute_job",
	}
)

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestOf(t *testing.T) {
	for _, c := range []struct {
		name          string
		labels        []string
		endpoint, job string
	}{
		{"action", cat(railsTop, railsAction, []string{"IssuesController#show", "User#pref", "Hash#fetch (cfunc)"}), "IssuesController#show", ""},
		{"action's own line", cat(railsTop, railsAction, []string{"IssuesController#show"}), "IssuesController#show", ""},
		{"helper called by the action", cat(railsTop, railsAction, []string{"ProjectsController#index", "ProjectsController#project_scope"}), "ProjectsController#index", ""},
		{"around_action", cat(railsTop, []string{"Redmine::SudoMode::Controller#sudo_mode", "block in ActiveSupport::Callbacks#run_callbacks"}, railsAction, []string{"IssuesController#show"}), "IssuesController#show", ""},
		{"in the around_action, before the action", cat(railsTop, []string{"Redmine::SudoMode::Controller#sudo_mode", "Redmine::SudoMode#sudo_mode?"}), "", ""},
		{"before_action", cat(railsTop, []string{"ApplicationController#find_issue"}), "", ""},
		{"namespaced controller", cat(railsTop, railsAction, []string{"Admin::UsersController#update"}), "Admin::UsersController#update", ""},
		{"block in the action", cat(railsTop, railsAction, []string{"IssuesController#index", "Array#each (cfunc)", "block in IssuesController#index"}), "IssuesController#index", ""},
		{"default_render", cat(railsTop, railsAction, []string{"ActionController::ImplicitRender#default_render"}), "", ""},
		{"send_action as send", cat(railsTop, []string{"AbstractController::Base#process_action", "WelcomeController#index"}), "WelcomeController#index", ""},
		{"mailer", []string{"ActionMailer::Base#process", "AbstractController::Base#process_action", "UserMailer#welcome"}, "", ""},
		{"outermost", cat(railsTop, railsAction, []string{"OuterController#show"}, railsAction, []string{"InnerController#show"}), "OuterController#show", ""},
		{"job", cat(sidekiqTop, []string{"SpinJob#perform", "Process.clock_gettime (cfunc)"}), "", "SpinJob"},
		{"namespaced job", cat(sidekiqTop, []string{"Billing::InvoiceJob#perform"}), "", "Billing::InvoiceJob"},
		{"job's middleware", cat(sidekiqTop[:4], []string{"Sidekiq::JobLogger#call"}), "", ""},
		{"execute_job as leaf", sidekiqTop, "", ""},
		{"job serving a request", cat(sidekiqTop, []string{"InlineJob#perform"}, railsAction, []string{"PingController#show"}), "PingController#show", "InlineJob"},
		{"ActiveJob on Sidekiq, Rails 6.1", cat(sidekiqTop, []string{"ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper#perform", "ActiveJob::Execution::ClassMethods#execute",
			"ActiveJob::Execution#perform_now", "ActiveSupport::Callbacks#run_callbacks", "block in ActiveJob::Execution#perform_now", "ReportJob#perform", "Report#build"}), "", "ReportJob"},
		{"ActiveJob on Sidekiq, Rails 7", cat(sidekiqTop, []string{"ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper#perform", "ActiveJob::Execution#perform_now",
			"ActiveJob::Execution#_perform_job", "ActiveSupport::Callbacks#run_callbacks", "block in ActiveJob::Execution#_perform_job", "ReportJob#perform"}), "", "ReportJob"},
		{"ActiveJob's callbacks", cat(sidekiqTop, []string{"ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper#perform", "ActiveJob::Execution#perform_now", "ActiveSupport::Callbacks#run_callbacks"}),
			"", "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"},
		{"ActiveJob inline in an action", cat(railsTop, railsAction, []string{"ReportsController#create", "ActiveJob::Execution#perform_now", "block in ActiveJob::Execution#perform_now", "ReportJob#perform"}),
			"ReportsController#create", "ReportJob"},
		{"Sinatra route", cat(sinatraTop, []string{"Method#call (cfunc)", "block in <class:App> => GET /hello/:name", "App#greet", "Kernel#sleep (cfunc)"}), "GET /hello/:name", ""},
		{"Sinatra route's own line", cat(sinatraTop, []string{"Method#call (cfunc)", "block in <class:App> => POST /items"}), "POST /items", ""},
		{"Sinatra block not a method", cat(sinatraTop, []string{"Method#call (cfunc)", "block in <class:App>"}), "", ""},
		{"Sinatra without Method#call", cat(sinatraTop, []string{"block in <class:App> => GET /x"}), "", ""},
		{"Sinatra filter", cat(sinatraTop[:4], []string{"Sinatra::Base#filter!"}), "", ""},
		{"Sinatra after filter's block", cat(sinatraTop[:3], []string{"Sinatra::Base#filter!", "Array#each (cfunc)", "block in Sinatra::Base#filter!", "Sinatra::Base#process_route",
			"block in Sinatra::Base.compile!", "Method#call (cfunc)", "block in Shop#<class:Shop> => after (?-mix:.*)"}), "", ""},
		{"Sinatra before filter's block", cat(sinatraTop[:3], []string{"block in Sinatra::Base.compile!", "Method#call (cfunc)", "block in <class:Shop> => before /admin"}), "", ""},
		{"Sinatra filter, then a route deeper", cat(sinatraTop[:3], []string{"block in Sinatra::Base.compile!", "Method#call (cfunc)", "block in <class:Shop> => after /x"},
			sinatraTop[3:], []string{"Method#call (cfunc)", "block in Shop#search_routes => GET /search"}), "GET /search", ""},
		{"Sinatra custom verb", cat(sinatraTop, []string{"Method#call (cfunc)", "block in <class:App> => PROPFIND /dav"}), "PROPFIND /dav", ""},
		{"define_method outside Sinatra", []string{"<main>", "Method#call (cfunc)", "block in <class:A> => GET /x"}, "", ""},
		{"neither", []string{"<main>", "Object#work", "Kernel#sleep (cfunc)"}, "", ""},
		{"singleton callee", cat(sidekiqTop, []string{"Foo.perform"}), "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			endpoint, job := Of(stack(c.labels...))
			if endpoint != c.endpoint || job != c.job {
				t.Errorf("Of = %q, %q; want %q, %q", endpoint, job, c.endpoint, c.job)
			}
		})
	}
}

// TestAnnotate: the labels of a profile's stacks are Of's, a stack
// without context has none, and stacks of one context share their slice.
func TestAnnotate(t *testing.T) {
	p := profile.NewProfile(100)
	show1 := p.Add(stack(cat(railsTop, railsAction, []string{"IssuesController#show", "User#pref"})...), 3)
	show2 := p.Add(stack(cat(railsTop, railsAction, []string{"IssuesController#show", "Issue#visible?"})...), 2)
	index := p.Add(stack(cat(railsTop, railsAction, []string{"IssuesController#index"})...), 1)
	filter := p.Add(stack(cat(railsTop, []string{"ApplicationController#user_setup"})...), 1)
	job := p.Add(stack(cat(sidekiqTop, []string{"SpinJob#perform"})...), 4)
	p.Stacks[filter].Labels = []profile.Label{{Key: "stale", Value: "x"}}
	Annotate(p, strings.ToUpper)
	want := map[int][]profile.Label{
		show1:  {{Key: Endpoint, Value: "ISSUESCONTROLLER#SHOW"}},
		show2:  {{Key: Endpoint, Value: "ISSUESCONTROLLER#SHOW"}},
		index:  {{Key: Endpoint, Value: "ISSUESCONTROLLER#INDEX"}},
		filter: nil,
		job:    {{Key: Job, Value: "SPINJOB"}},
	}
	for si, w := range want {
		got := p.Stacks[si].Labels
		if len(got) != len(w) || (len(w) > 0 && got[0] != w[0]) {
			t.Errorf("stack %d: labels %v, want %v", si, got, w)
		}
	}
	if &p.Stacks[show1].Labels[0] != &p.Stacks[show2].Labels[0] {
		t.Error("two stacks of one endpoint have a slice each")
	}
}

// BenchmarkAnnotate annotates a profile of 1000 distinct stacks of 80
// frames, a third of them in an action.
func BenchmarkAnnotate(b *testing.B) {
	p := profile.NewProfile(100)
	for i := 0; i < 1000; i++ {
		labels := cat(railsTop, railsAction)
		if i%3 != 0 {
			labels = railsTop
		}
		for len(labels) < 79 {
			labels = append(labels, "Deep#frame")
		}
		labels = append(labels, "Leaf#n"+strings.Repeat("x", i%50), "Leaf#m"+strings.Repeat("y", i/50))
		p.Add(stack(labels...), 1)
	}
	b.ResetTimer()
	for b.Loop() {
		Annotate(p, nil)
	}
}
