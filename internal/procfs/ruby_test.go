package procfs

import "testing"

func TestIsRubyImage(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2": true, "/opt/ruby/lib/libruby.so.3.4.5": true,
		"/usr/lib/libruby.3.4.so": true, "/x/libruby.so (deleted)": true,
		"/usr/bin/ruby3.1": true, "/opt/ruby/bin/ruby": true, "/usr/bin/ruby-3.3": true, "/x/ruby (deleted)": true,
		"/usr/bin/rubocop": false, "/usr/lib/librubberband.so": false, "/bin/sh": false,
		"/usr/lib/libruby-helper": false, "/usr/lib/libruby/ext.so/x": false, "/usr/lib/libruby X.so": false,
	} {
		if IsRubyImage(path) != want {
			t.Errorf("IsRubyImage(%q) = %v", path, !want)
		}
	}
}

// TestRubyImage: the rule both discovery and the VM reader follow. A
// shared build's libruby wins over its ruby executable, a static build's
// executable is its Ruby image, a file mapped as data does not count but
// one a core kept in several segments without permissions does, and a
// process that maps no Ruby is not taken for one.
func TestRubyImage(t *testing.T) {
	exe := Mapping{Perms: "r-xp", Path: "/usr/bin/ruby3.4"}
	lib := Mapping{Perms: "r-xp", Path: "/usr/lib/libruby.so.3.4 (deleted)"}
	libc := Mapping{Perms: "r-xp", Path: "/usr/lib/libc.so.6"}
	for _, tc := range []struct {
		maps []Mapping
		want string
	}{
		{[]Mapping{exe, libc, lib}, "/usr/lib/libruby.so.3.4"},
		{[]Mapping{exe, libc}, "/usr/bin/ruby3.4"},
		{[]Mapping{{Perms: "r-xp", Path: "/bin/sh"}, {Perms: "rw-p", Path: "/usr/lib/libruby.so.3.4"}, libc}, ""},
		{[]Mapping{{Perms: "r-xp", Path: "[vdso]"}, {Perms: "r-xp"}}, ""},
		// A core that kept no permissions: every mapping reads r--p.
		{[]Mapping{{Perms: "r--p", Path: "/opt/ruby/bin/ruby"}, {Perms: "r-xp"}, {Perms: "r--p", Path: "/opt/ruby/lib/libruby.so.3.3"}, {Perms: "r--p", Path: "/opt/ruby/lib/libruby.so.3.3"}}, "/opt/ruby/lib/libruby.so.3.3"},
		// A linker reading libruby maps it whole, once.
		{[]Mapping{{Perms: "r-xp", Path: "/usr/bin/ld"}, {Perms: "r--p", Path: "/usr/lib/libruby.so.3.4"}}, ""},
	} {
		got, ok := RubyImage(tc.maps)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("RubyImage(%v) = %q, %v; want %q", tc.maps, got, ok, tc.want)
		}
	}
}
