package wire

// Version is the document `rbscope version --json` prints: the build of
// rbscope and the Ruby families it has built-in layout tables for.
type Version struct {
	// Version is the release ("1.2.0", set at link time), the module's
	// version for a `go install`ed binary, or "devel".
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, empty when
	// the build recorded none; Modified says the work tree had changes.
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Date is the release's build date (set at link time), else the
	// commit's time (RFC 3339), empty when unknown.
	Date      string `json:"date,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	// RubyFamilies lists the families with a built-in table, which
	// reads Rubies that carry no debug information; a Ruby with DWARF is
	// read from its own.
	RubyFamilies []RubyFamily `json:"ruby_families"`
}

// RubyFamily is a Ruby version family ("3.4") with a built-in layout
// table, the release the table was made from ("3.4.5"), and the patch
// releases whose layout rbscope knows (the table with what each moved).
type RubyFamily struct {
	Family   string `json:"family"`
	MadeFrom string `json:"made_from"`
	// Arch is the architecture the table is for ("x86_64", "aarch64").
	Arch     string   `json:"arch"`
	Releases []string `json:"releases"`
}
