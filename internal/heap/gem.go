package heap

import (
	"regexp"
	"strings"
)

// gemDir matches the directory of an installed gem in a path: RubyGems',
// Bundler's (vendor/bundle, bundler/gems for git sources) and Debian's
// rubygems-integration all keep a gem in .../gems/NAME-VERSION/.
var gemDir = regexp.MustCompile(`/gems/([^/]+-[0-9][^/]*)/`)

// stdlibDir matches Ruby's own library directory (lib/ruby/3.4.0/).
var stdlibDir = regexp.MustCompile(`/lib/ruby/[0-9][^/]*/`)

// Origins of sites outside any gem (Gem).
const (
	GemApp     = "(app)"
	GemStdlib  = "(ruby stdlib)"
	GemCore    = "(ruby core)"
	GemVendor  = "(vendor_ruby)"
	GemUnknown = "(no site)"
)

// Gem names the code an allocation site belongs to: the gem's directory
// name with its version ("rack-3.0.8"), or one of GemApp, GemStdlib,
// GemCore (<internal:...> files), GemVendor (Debian's vendor_ruby) and
// GemUnknown (no site).
func Gem(file string) string {
	switch {
	case file == "":
		return GemUnknown
	case strings.HasPrefix(file, "<internal:"):
		return GemCore
	}
	if m := gemDir.FindStringSubmatch(file); m != nil {
		return m[1]
	}
	switch {
	case strings.Contains(file, "/vendor_ruby/"):
		return GemVendor
	case stdlibDir.MatchString(file):
		return GemStdlib
	}
	return GemApp
}
