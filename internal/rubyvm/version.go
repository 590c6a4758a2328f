package rubyvm

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/rbscope/rbscope/internal/target"
)

// findVersion sets Version and Description from the Ruby image itself,
// never from a file's name: --force-version; else the process's
// ruby_version symbol (RUBY_VERSION, the exact release); else, for a core
// that lacks the image's read-only data, a ruby_description string ("ruby
// 3.3.0 (2023-12-25 ...") found in what the core holds of the image or of
// the process's memory (a Ruby that builds its description at run time
// keeps it there). VersionFrom records any source but the symbol. When
// none holds the version, the refusal names the release a mapped file's
// name claims (libruby.so.3.1.0, .rbenv/versions/2.7.2/) for the user to
// confirm with --force-version: a name proves nothing, and the patch
// release chooses the layout.
func (v *VM) findVersion(maps []target.Mapping, opts Options) error {
	v.Description, _ = v.symbolString("ruby_description", 256)
	if opts.ForceVersion != "" {
		if !versionRE.MatchString(opts.ForceVersion) {
			return fmt.Errorf("--force-version %q: want a Ruby version such as 3.3.0: %w", opts.ForceVersion, ErrUnsupported)
		}
		v.Version, v.VersionFrom = opts.ForceVersion, "--force-version"
		return nil
	}
	var err error
	if v.Version, err = v.symbolString("ruby_version", 32); err == nil && versionRE.MatchString(v.Version) {
		return nil
	}
	if desc, where, ok := v.scanDescription(maps); ok {
		v.Description = desc
		v.Version = strings.Fields(desc)[1]
		v.VersionFrom = "the ruby_description string in " + where
		return nil
	}
	why := "the ruby_version symbol is not in its symbols"
	if err != nil {
		why = firstLine(err)
	}
	v.Version = ""
	if ver, path, ok := versionFromPaths(maps); ok {
		return unsupported("the Ruby release of %s cannot be read (%s), nor a ruby_description string found in its memory; its file's name says Ruby %s (%s), which a name cannot prove: pass --force-version X.Y.Z (%s if that is its release): %w",
			v.Image.Path, why, ver, path, ver, ErrUnsupported)
	}
	return unsupported("the Ruby release of %s cannot be read (%s), nor a ruby_description string found in its memory; pass --force-version X.Y.Z: %w",
		v.Image.Path, why, ErrUnsupported)
}

// The expressions of the fallbacks are compiled when first needed, not by
// every run of every command.
var (
	versionRE = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)
	// RUBY_DESCRIPTION begins "ruby 3.3.0 (2023-12-25 revision 5124f9ac75)"
	// or "ruby 2.7.2p137 (2020-10-01 revision 5445e04352)".
	descriptionRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`ruby (\d+\.\d+\.\d+)(p\d+)? \(\d{4}-\d\d-\d\d[^\x00]{0,200}`)
	})
	// Version-bearing paths, most precise first: libruby's file name
	// (libruby.so.3.1.0, Debian's libruby-3.1.so.3.1), a directory named
	// for the version (.rbenv/versions/2.7.2/, /Ruby/3.3.0/x64/,
	// ruby-3.2.2/), and last the library directory, which carries the ABI
	// version (lib/ruby/3.1.0/ for every 3.1.x).
	pathVersionREs = sync.OnceValue(func() []*regexp.Regexp {
		return []*regexp.Regexp{
			regexp.MustCompile(`(?:^|/)libruby(?:-\d+\.\d+)?\.so\.(\d+\.\d+(?:\.\d+)?)$`),
			regexp.MustCompile(`/(?:ruby-)?(\d+\.\d+\.\d+)(?:-[0-9a-z]+)?/(?:x64/|x86_64/)?(?:bin|lib)/`),
			regexp.MustCompile(`/lib/ruby/(\d+\.\d+)\.\d+/`),
		}
	})
)

// ValidVersion reports whether s reads as a Ruby version: "3.3.0", or a
// family, "3.3".
func ValidVersion(s string) bool { return versionRE.MatchString(s) }

// versionFromPaths finds a Ruby version in the paths of the mapped files.
func versionFromPaths(maps []target.Mapping) (version, path string, ok bool) {
	for _, re := range pathVersionREs() {
		for _, m := range maps {
			p := strings.TrimSuffix(m.Path, " (deleted)")
			if sm := re.FindStringSubmatch(p); sm != nil && !strings.Contains(p, "/gems/") {
				return sm[1], p, true
			}
		}
	}
	return "", "", false
}

// maxDescriptionScan bounds how much of each read-only mapping of the image
// is searched for RUBY_DESCRIPTION.
const maxDescriptionScan = 32 << 20

// scanDescription looks for RUBY_DESCRIPTION in what the target holds of
// the Ruby image's read-only mappings, then in its writable ones and the
// anonymous mapping after them (a Ruby built with a JIT writes its
// description into a buffer of its own at start), and returns it with the
// range it was found in.
func (v *VM) scanDescription(maps []target.Mapping) (desc, where string, ok bool) {
	var ro, rw []target.Mapping
	for i, m := range maps {
		if strings.TrimSuffix(m.Path, " (deleted)") != v.Image.Path {
			continue
		}
		if !strings.Contains(m.Perms, "w") {
			ro = append(ro, m)
			continue
		}
		rw = append(rw, m)
		if i+1 < len(maps) && maps[i+1].Path == "" && maps[i+1].Start == m.End {
			rw = append(rw, maps[i+1])
		}
	}
	for _, m := range append(ro, rw...) {
		b := make([]byte, min(m.End-m.Start, maxDescriptionScan))
		n, _ := v.T.ReadAt(b, m.Start)
		if loc := descriptionRE().FindIndex(b[:n]); loc != nil {
			d := b[loc[0]:loc[1]]
			if i := bytes.IndexByte(d, 0); i >= 0 {
				d = d[:i]
			}
			return string(d), fmt.Sprintf("%s at %#x", v.Image.Path, m.Start+uint64(loc[0])), true
		}
	}
	return "", "", false
}
