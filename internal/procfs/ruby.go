package procfs

import (
	"path/filepath"
	"strings"
)

// IsRubyLib tells whether a mapped file's path names a libruby
// (libruby.so*, libruby-3.4.so*, libruby.3.4.so ...), the Ruby image of a
// shared build.
func IsRubyLib(path string) bool {
	base := filepath.Base(strings.TrimSuffix(path, " (deleted)"))
	rest, ok := strings.CutPrefix(base, "libruby")
	if !ok {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.HasPrefix(rest[i:], ".so") {
			return true
		}
		if c := rest[i]; !(c == '-' || c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return false
}

// IsRubyImage tells whether a mapped file's path names a Ruby image: a
// libruby (IsRubyLib), or an executable named ruby, rubyX.Y or ruby-X.Y
// (a static build's).
func IsRubyImage(path string) bool {
	if IsRubyLib(path) {
		return true
	}
	base := filepath.Base(strings.TrimSuffix(path, " (deleted)"))
	return base == "ruby" || strings.HasPrefix(base, "ruby") && len(base) > 4 && (base[4] == '-' || base[4] >= '0' && base[4] <= '9')
}

// RubyImage is rbscope's one rule for "this process runs Ruby", by what it
// maps: the path of the loaded object that holds the Ruby VM, a libruby
// first (a shared build's executable is a ruby too), else an executable
// named as a Ruby is. ok is false when no loaded object names one; a
// program that embeds Ruby under another name is then told by its symbols
// alone. A loaded object is a file mapped executable, or in several
// segments (a core's writer may keep no permissions of the files it left
// out), not a file some program maps whole to read it, as a linker does.
func RubyImage(maps []Mapping) (path string, ok bool) {
	type seen struct {
		n    int
		code bool
	}
	files := map[string]*seen{}
	var order []string
	for _, m := range maps {
		if !strings.HasPrefix(m.Path, "/") || !IsRubyImage(m.Path) {
			continue
		}
		p := strings.TrimSuffix(m.Path, " (deleted)")
		f := files[p]
		if f == nil {
			f = &seen{}
			files[p] = f
			order = append(order, p)
		}
		f.n++
		f.code = f.code || strings.Contains(m.Perms, "x")
	}
	var exe string
	for _, p := range order {
		if f := files[p]; !f.code && f.n < 2 {
			continue
		}
		if IsRubyLib(p) {
			return p, true
		}
		if exe == "" {
			exe = p
		}
	}
	return exe, exe != ""
}
