package heap

import "testing"

func TestGem(t *testing.T) {
	for file, want := range map[string]string{
		"/app/vendor/bundle/ruby/3.4.0/gems/rack-3.0.8/lib/rack/request.rb":           "rack-3.0.8",
		"/usr/local/bundle/bundler/gems/rails-0a1b2c3d4e5f/activesupport/lib/x.rb":    "rails-0a1b2c3d4e5f",
		"/usr/share/rubygems-integration/all/gems/mustermann-3.0.0/lib/mustermann.rb": "mustermann-3.0.0",
		"/usr/lib/ruby/gems/3.3.0/gems/nokogiri-1.16.0-x86_64-linux/lib/n.rb":         "nokogiri-1.16.0-x86_64-linux",
		"/usr/lib/ruby/3.3.0/json/common.rb":                                          GemStdlib,
		"/opt/ruby/lib/ruby/3.4.0/set.rb":                                             GemStdlib,
		"/usr/lib/ruby/vendor_ruby/rack/request.rb":                                   GemVendor,
		"<internal:kernel>":           GemCore,
		"/srv/app/app/models/user.rb": GemApp,
		"/srv/app/gems/notes.rb":      GemApp,
		"":                            GemUnknown,
	} {
		if got := Gem(file); got != want {
			t.Errorf("Gem(%q) = %q, want %q", file, got, want)
		}
	}
}
