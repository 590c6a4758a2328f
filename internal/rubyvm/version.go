package rubyvm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
)

// findVersion sets Version and Description from the Ruby image itself,
// never from a file's name: --force-version; else the process's
// ruby_version symbol (RUBY_VERSION, the exact release); else, for a core
// that lacks the image's read-only data, a ruby_description string ("ruby
// 3.3.0 (2023-12-25 ...") found in what the core holds of the image or of
// the process's memory (a Ruby that builds its description at run time
// keeps it there). VersionFrom records any source but the symbol. When
// none holds the version, it returns what was tried, for proveRelease to
// prove the release from the process's heap.
func (v *VM) findVersion(maps []target.Mapping, opts Options) (*unreadVersion, error) {
	v.Description, _ = v.symbolString("ruby_description", 256)
	if opts.ForceVersion != "" {
		if !versionRE.MatchString(opts.ForceVersion) {
			return nil, fmt.Errorf("--force-version %q: want a Ruby version such as 3.3.0: %w", opts.ForceVersion, ErrUnsupported)
		}
		v.Version, v.VersionFrom = opts.ForceVersion, "--force-version"
		return nil, nil
	}
	var err error
	if noVersionString {
		err = errors.New("not read: the tests' noVersionString")
	} else {
		if v.Version, err = v.symbolString("ruby_version", 32); err == nil && versionRE.MatchString(v.Version) {
			return nil, nil
		}
		if desc, where, ok := v.scanDescription(maps); ok {
			v.Description = desc
			v.Version = strings.Fields(desc)[1]
			v.VersionFrom = "the ruby_description string in " + where
			return nil, nil
		}
	}
	u := &unreadVersion{why: "the ruby_version symbol is not in its symbols"}
	if err != nil {
		u.why = firstLine(err)
	}
	v.Version = ""
	u.name, u.namePath, _ = versionFromPaths(maps)
	return u, nil
}

// noVersionString, set only by the tests (TestProvenReleaseLive), makes
// findVersion read neither the ruby_version symbol nor a ruby_description
// string, as in a core without the image's read-only data: the release is
// then proven from the heap.
var noVersionString bool

// unreadVersion is what findVersion tried when no string of the image
// gave the release: why the ruby_version symbol did not, and the release
// (or family) a mapped file's name says, with that file's path.
type unreadVersion struct {
	why            string
	name, namePath string
}

// A releaseHint is a release whose layout a process is attached with
// only to read the process's own account of its release: the release
// a file's name says, or a family's table's own release. A hint proves
// nothing.
type releaseHint struct {
	release, family string
}

// releaseHints lists the releases to attach with, in order: the one a
// file's name says (the family's table's own release when the name says
// only a family: libruby-3.1.so.3.1), then each other family with a
// built-in table for the image's architecture, newest first. noTable is
// the family the name says when it has no table (3.0), which cannot be
// proven.
func (v *VM) releaseHints(u *unreadVersion) (hints []releaseHint, noTable string) {
	a, err := arch.ForMachine(v.Image.File.Machine)
	if err != nil {
		return nil, ""
	}
	tried := map[string]bool{}
	if fam, err := Family(u.name); u.name != "" && err == nil {
		if l := layouts.ForArch(a, fam); l == nil {
			noTable = fam
		} else {
			rel := u.name
			if strings.Count(rel, ".") < 2 {
				rel = tableRelease(l)
			}
			hints = append(hints, releaseHint{rel, fam})
			tried[fam] = true
		}
	}
	fams := layouts.FamiliesFor(a)
	for i := len(fams) - 1; i >= 0; i-- {
		if l := layouts.ForArch(a, fams[i]); !tried[fams[i]] && l != nil {
			hints = append(hints, releaseHint{tableRelease(l), fams[i]})
		}
	}
	return hints, noTable
}

// tableRelease is the release a family's table was made from (the first
// its Checked lists).
func tableRelease(l *layout.Layout) string {
	f := strings.FieldsFunc(l.Checked, func(r rune) bool { return r == ',' || r == ' ' })
	if len(f) == 0 {
		return l.Family
	}
	return f[0]
}

// proveRelease finds the release of a process whose image's strings do
// not say it (a core without the image's read-only data): it attaches
// with each hint's layout in turn (releaseHints), and where the layout
// passes the checks of attach reads what the process says of its own
// release from its heap (releaseFacts), which must confirm a release of
// the hint's family (confirmRelease). It then attaches again with that
// release's own layout if it differs. A hint that does not fit or is not
// confirmed is only passed by; when none is, the process is refused in
// one line, with what its file's name says.
func (v *VM) proveRelease(maps []target.Mapping, u *unreadVersion) error {
	hints, noTable := v.releaseHints(u)
	var fits []string // the hints that fit but were not confirmed, and why
	for _, h := range hints {
		if err := v.attach(maps, h.release); err != nil {
			continue
		}
		facts := v.releaseFacts(false)
		rel, how, err := confirmRelease(h, facts, readThrough(v.Layout, h.family))
		if err != nil {
			fits = append(fits, fmt.Sprintf("%s's table fits it, but %s", h.family, firstLine(err)))
			continue
		}
		return v.settle(maps, h, rel, how)
	}
	v.detach()
	v.Version = ""
	msg := fmt.Sprintf("the Ruby release of %s cannot be read (%s), nor a ruby_description string found in its memory", v.Image.Path, u.why)
	if u.name != "" {
		msg += fmt.Sprintf("; its file's name says Ruby %s (%s), which a name cannot prove", u.name, u.namePath)
	}
	if noTable != "" {
		msg += fmt.Sprintf("; Ruby %s has no built-in table to read its heap with", noTable)
	}
	var fams []string
	for _, h := range hints {
		fams = append(fams, h.family)
	}
	switch {
	case len(fits) > 0:
		msg += "; its heap does not prove it: " + strings.Join(fits, "; ")
	case len(fams) > 0:
		msg += fmt.Sprintf("; no built-in table fits it (%s tried)", strings.Join(fams, ", "))
	}
	if u.name != "" {
		return unsupported("%s: pass --force-version X.Y.Z (%s if that is its release): %w", msg, u.name, ErrUnsupported)
	}
	return unsupported("%s: pass --force-version X.Y.Z: %w", msg, ErrUnsupported)
}

// settle reads the process, attached with hint h's layout, as the release
// rel its heap proved (how says how): through rel's own layout, attached
// again where it differs from h's; a release newer than those rbscope knows
// is read with the newest one's layout, and LayoutNote says so.
func (v *VM) settle(maps []target.Mapping, h releaseHint, rel, how string) error {
	v.VersionFrom = how
	l, note, err := v.build.layout(h.family, rel)
	switch {
	case err != nil:
		return v.withVersionSource(err)
	case sameOffsets(l, v.Layout):
		v.Layout, v.LayoutNote = l, note // the release's own name, and what to say of it
	default:
		if err := v.attach(maps, rel); err != nil {
			return err
		}
		how += fmt.Sprintf(", then read with %s's own layout", rel)
	}
	v.Version, v.VersionFrom = rel, how
	return nil
}

// sameOffsets reports whether two layouts read every field at the same
// offset, whatever release they are named for.
func sameOffsets(a, b *layout.Layout) bool {
	x, y := *a, *b
	x.Release, y.Release = "", ""
	return reflect.DeepEqual(x, y)
}

// releaseFacts is what a process says of its own release, read from its
// heap through the layout it is attached with.
type releaseFacts struct {
	// version is RUBY_VERSION, from Object's constants; versionErr says
	// why it was not read. A Ruby makes RUBY_VERSION a String whose
	// bytes are the image's ruby_version (rb_usascii_str_new_static):
	// where the core lacks them, versionLen is its length from the
	// String's header (-1 when not read).
	version    string
	versionErr error
	versionLen int
	// patchlevel is RUBY_PATCHLEVEL, a Fixnum (ok in hasPatch).
	patchlevel int64
	hasPatch   bool
	// cfgVersion and cfgPatch are RbConfig::CONFIG's
	// RUBY_PROGRAM_VERSION and PATCHLEVEL, read only when RUBY_VERSION's
	// bytes were not; cfgErr says why they were not read.
	cfgVersion, cfgPatch string
	cfgErr               error
}

// releaseFacts reads what the process says of its release: RUBY_VERSION
// and RUBY_PATCHLEVEL from Object's constants and, when RUBY_VERSION's
// bytes cannot be read (or withConfig), RbConfig::CONFIG's
// RUBY_PROGRAM_VERSION and PATCHLEVEL. rbconfig.rb is written for the build it is installed with,
// and refuses to load into a Ruby whose RUBY_VERSION is of another family
// ("ruby lib version (3.1.0) doesn't match executable version").
func (v *VM) releaseFacts(withConfig bool) releaseFacts {
	f := releaseFacts{versionLen: -1}
	obj, err := v.objectClass()
	if err != nil {
		f.versionErr, f.cfgErr = err, err
		return f
	}
	c, err := v.constants(obj, "RUBY_VERSION", "RUBY_PATCHLEVEL", "RbConfig")
	if err != nil {
		err = fmt.Errorf("Object's constants: %w", err)
		f.versionErr, f.cfgErr = err, err
		return f
	}
	f.patchlevel, f.hasPatch = v.Fixnum(c["RUBY_PATCHLEVEL"])
	if val, ok := c["RUBY_VERSION"]; !ok {
		f.versionErr = errors.New("Object has no constant RUBY_VERSION whose name can be read")
	} else if f.version, f.versionErr = v.rstring(val); f.versionErr != nil {
		if n, err := v.stringLen(val); err == nil {
			f.versionLen = int(n)
		}
	}
	if f.versionErr == nil && !withConfig {
		return f
	}
	rbconfig, ok := c["RbConfig"]
	if !ok {
		f.cfgErr = errors.New("RbConfig is not loaded")
		return f
	}
	cc, err := v.constants(rbconfig, "CONFIG")
	if err != nil || cc["CONFIG"] == 0 {
		f.cfgErr = fmt.Errorf("RbConfig has no CONFIG: %v", err)
		return f
	}
	pairs, err := v.hashPairs(cc["CONFIG"])
	if err != nil {
		f.cfgErr = fmt.Errorf("RbConfig::CONFIG: %w", err)
		return f
	}
	found := 0
	for _, p := range pairs {
		k, err := v.rstring(p[0])
		if err != nil || (k != "RUBY_PROGRAM_VERSION" && k != "PATCHLEVEL") {
			continue
		}
		val, err := v.rstring(p[1])
		if err != nil {
			continue
		}
		if k == "PATCHLEVEL" {
			f.cfgPatch = val
		} else {
			f.cfgVersion = val
		}
		if found++; found == 2 {
			break
		}
	}
	if found < 2 {
		f.cfgErr = errors.New("RbConfig::CONFIG lacks RUBY_PROGRAM_VERSION or PATCHLEVEL")
	}
	return f
}

// objectClass returns class Object: the exported rb_cObject, or, in an
// image whose symbols the core does not hold, the class above the main
// thread's Thread object's class (Thread < Object), past iclasses and
// singleton classes. Either must hold the constant Object, itself.
func (v *VM) objectClass() (uint64, error) {
	if addr, _, err := v.Symbol("rb_cObject"); err == nil {
		obj, err := v.m.u64(addr)
		if err != nil {
			return 0, fmt.Errorf("reading rb_cObject: %w", err)
		}
		if !v.isObject(obj) {
			return 0, fmt.Errorf("rb_cObject holds %#x, not a class whose constant Object is itself: %w", obj, ErrGarbage)
		}
		return obj, nil
	}
	return v.objectAboveThread()
}

// isObject reports whether k is class Object: a class whose constant
// Object is itself.
func (v *VM) isObject(k uint64) bool {
	c, err := v.constants(k, "Object")
	return err == nil && c["Object"] == k
}

// objectAboveThread finds class Object above the main thread's Thread
// object's class (Thread < Object), past iclasses and singleton classes.
func (v *VM) objectAboveThread() (uint64, error) {
	L := v.Layout
	vm, err := v.VMPtr()
	if err != nil {
		return 0, err
	}
	th, err := v.m.u64(at(vm, L.VMRactorMainThread))
	if err != nil {
		return 0, err
	}
	self, err := v.m.u64(at(th, L.ThreadSelf))
	if err != nil {
		return 0, err
	}
	k, err := v.m.u64(at(self, L.RBasicKlass))
	if err != nil {
		return 0, err
	}
	classes := 0 // Thread, then Object
	for range maxSuperChain {
		typ, flags, err := v.objType(k)
		if err != nil {
			return 0, fmt.Errorf("the main thread's classes: %w", err)
		}
		if typ == L.TClass && flags&uint64(L.FlSingleton) == 0 {
			if classes++; classes == 2 {
				if !v.isObject(k) {
					return 0, fmt.Errorf("class Thread's superclass %#x is not a class whose constant Object is itself: %w", k, ErrGarbage)
				}
				return k, nil
			}
		}
		if k, err = v.m.u64(at(k, L.RClassSuper)); err != nil || k == 0 {
			return 0, fmt.Errorf("the main thread's classes (RClass.super at %d): %v: %w", L.RClassSuper, err, ErrGarbage)
		}
	}
	return 0, fmt.Errorf("no class Object above the main thread's class: %w", ErrGarbage)
}

// releaseRE is a release, "3.1.0".
var releaseRE = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

// readThrough names, for how a release was proven, the layout the facts
// were read through: a family's table, or an image's DWARF.
func readThrough(l *layout.Layout, family string) string {
	if strings.HasPrefix(l.Source, "dwarf:") {
		return "its DWARF"
	}
	return family + "'s table"
}

// confirmRelease decides what the facts read with hint h's layout (through,
// as readThrough names it) prove:
// RUBY_VERSION, a release of h's family; or, where its bytes could not be
// read, RbConfig::CONFIG's RUBY_PROGRAM_VERSION, a release of h's family
// as long as RUBY_VERSION, whose PATCHLEVEL is the process's own
// RUBY_PATCHLEVEL (rbconfig.rb loads only into a Ruby of its family, and
// a family's patch levels rise release by release). It returns the
// release and how it was proven, or says why the facts prove none.
func confirmRelease(h releaseHint, f releaseFacts, through string) (release, how string, err error) {
	if f.versionErr == nil {
		if !releaseRE.MatchString(f.version) {
			return "", "", fmt.Errorf("its RUBY_VERSION, %q, is no release: %w", f.version, ErrGarbage)
		}
		if fam, _ := Family(f.version); fam != h.family {
			return "", "", fmt.Errorf("its RUBY_VERSION says Ruby %s, not %s: %w", f.version, h.family, ErrGarbage)
		}
		return f.version, "RUBY_VERSION read from Object's constants with " + through, nil
	}
	if f.cfgErr != nil {
		return "", "", fmt.Errorf("its RUBY_VERSION cannot be read (%s), nor its RbConfig (%s)", firstLine(f.versionErr), firstLine(f.cfgErr))
	}
	if !releaseRE.MatchString(f.cfgVersion) {
		return "", "", fmt.Errorf("its RbConfig::CONFIG's RUBY_PROGRAM_VERSION, %q, is no release: %w", f.cfgVersion, ErrGarbage)
	}
	if fam, _ := Family(f.cfgVersion); fam != h.family {
		return "", "", fmt.Errorf("its RbConfig::CONFIG says Ruby %s, not %s: %w", f.cfgVersion, h.family, ErrGarbage)
	}
	if pl, err := strconv.ParseInt(f.cfgPatch, 10, 64); err != nil || !f.hasPatch || pl != f.patchlevel {
		return "", "", fmt.Errorf("its RbConfig::CONFIG's PATCHLEVEL %q is not its RUBY_PATCHLEVEL (%d): %w", f.cfgPatch, f.patchlevel, ErrGarbage)
	}
	if f.versionLen != len(f.cfgVersion) {
		return "", "", fmt.Errorf("its RUBY_VERSION is %d bytes long, not %q's %d: %w", f.versionLen, f.cfgVersion, len(f.cfgVersion), ErrGarbage)
	}
	return f.cfgVersion, fmt.Sprintf("RbConfig::CONFIG's RUBY_PROGRAM_VERSION with the process's RUBY_PATCHLEVEL %d, read from its heap with %s (RUBY_VERSION's bytes are the image's, not readable here)", f.patchlevel, through), nil
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
