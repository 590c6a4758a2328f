package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/rbscope/rbscope/internal/arch"
)

// Result names what Build wrote.
type Result struct {
	Version string
	// Files are the release's files, one archive and one Debian package
	// per architecture rbscope is released for (arch.All).
	Files []ArchFiles
	// Warnings are what a release should have and this one lacks (the
	// licence file).
	Warnings []string
}

// ArchFiles are the release files of one architecture.
type ArchFiles struct {
	Arch    *arch.Arch
	Archive string // the .tar.gz
	Deb     string // the .deb
}

// file is one file of the release: where it is staged, and where the
// archive and the Debian package put it ("" for none).
type file struct {
	src     string
	archive string // path inside the archive's top directory
	deb     string // absolute path on the installed system
	mode    os.FileMode
	gzipDeb bool // gzipped in the package (man pages)
}

// Build builds the static binaries and the release files of the
// repository at repo into out, for every architecture of arch.All:
// rbscope-VERSION-linux-GOARCH.tar.gz and rbscope_VERSION_GOARCH.deb
// (Debian's architecture names are Go's for amd64 and arm64).
func Build(repo, out, version string) (*Result, error) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		// The completions come from running the built amd64 binary.
		return nil, fmt.Errorf("building on %s/%s: the release is built on linux/amd64", runtime.GOOS, runtime.GOARCH)
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	date := commitTime(repo)
	if version == "" {
		version = defaultVersion(repo, date)
	}
	version = strings.TrimPrefix(version, "v")
	if version == "" || !isDigit(version[0]) || strings.ContainsAny(version, " /_") {
		return nil, fmt.Errorf("-version %q: want a version such as 1.2.0 (Debian's rules: a digit first, no '_' or '/')", version)
	}
	stage, err := os.MkdirTemp("", "rbscope-dist")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	res := &Result{Version: version}

	bins := map[*arch.Arch]string{}
	for _, a := range arch.All {
		bins[a] = filepath.Join(stage, "rbscope-"+a.GOARCH)
		if err := buildBinary(repo, bins[a], a.GOARCH, version, date); err != nil {
			return nil, err
		}
	}
	bin := bins[arch.AMD64] // runs here: it writes the completions
	var fs []file

	for _, c := range []struct{ shell, archive, deb string }{
		{"bash", "completions/rbscope.bash", "/usr/share/bash-completion/completions/rbscope"},
		{"zsh", "completions/_rbscope", "/usr/share/zsh/vendor-completions/_rbscope"},
		{"fish", "completions/rbscope.fish", "/usr/share/fish/vendor_completions.d/rbscope.fish"},
	} {
		script, err := command(repo, bin, "completion", c.shell)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(stage, filepath.Base(c.archive))
		if err := os.WriteFile(p, script, 0o644); err != nil {
			return nil, err
		}
		fs = append(fs, file{src: p, archive: c.archive, deb: c.deb, mode: 0o644})
	}

	pages, err := filepath.Glob(filepath.Join(repo, "docs", "man", "*.1"))
	if err != nil || len(pages) == 0 {
		return nil, fmt.Errorf("no man pages in %s/docs/man (make docs writes them)", repo)
	}
	for _, p := range pages {
		b := filepath.Base(p)
		fs = append(fs, file{src: p, archive: "man/" + b, deb: "/usr/share/man/man1/" + b + ".gz", mode: 0o644, gzipDeb: true})
	}

	docs, err := DocFiles(repo)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		fs = append(fs, file{src: filepath.Join(repo, filepath.FromSlash(d)), archive: d, deb: "/usr/share/doc/rbscope/" + d, mode: 0o644})
	}

	unit := filepath.Join(repo, "contrib", "rbscope-agent.service")
	if _, err := os.Stat(unit); err != nil {
		return nil, fmt.Errorf("the agent's systemd unit: %w", err)
	}
	fs = append(fs, file{src: unit, archive: "systemd/rbscope-agent.service", deb: "/lib/systemd/system/rbscope-agent.service", mode: 0o644})

	licence := filepath.Join(repo, "LICENSE")
	if _, err := os.Stat(licence); err == nil {
		fs = append(fs, file{src: licence, archive: "LICENSE", deb: "/usr/share/doc/rbscope/copyright", mode: 0o644})
	} else {
		res.Warnings = append(res.Warnings, "the repository has no LICENSE file: the release carries no licence")
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	for _, a := range arch.All {
		all := append([]file{{src: bins[a], archive: "rbscope", deb: "/usr/bin/rbscope", mode: 0o755}}, fs...)
		af := ArchFiles{Arch: a,
			Archive: filepath.Join(out, "rbscope-"+version+"-linux-"+a.GOARCH+".tar.gz"),
			Deb:     filepath.Join(out, "rbscope_"+version+"_"+a.GOARCH+".deb")}
		if err := writeArchive(af.Archive, "rbscope-"+version+"-linux-"+a.GOARCH, all, date); err != nil {
			return nil, fmt.Errorf("%s archive: %w", a.GOARCH, err)
		}
		if err := writeDeb(af.Deb, stage, version, a.GOARCH, all, date); err != nil {
			return nil, fmt.Errorf("%s Debian package: %w", a.GOARCH, err)
		}
		res.Files = append(res.Files, af)
	}
	return res, nil
}

// DocFiles lists the user documentation the release carries, as paths
// relative to repo with forward slashes: README.md and the pages and
// images under docs/ (the Markdown reference included, the man pages
// apart). Error messages name these pages by the same paths, which the
// archive keeps and the Debian package puts under /usr/share/doc/rbscope.
func DocFiles(repo string) ([]string, error) {
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repo, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(p); ext != ".md" && ext != ".png" {
			return nil
		}
		rel, err := filepath.Rel(repo, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the documentation: %w", err)
	}
	if len(out) == 1 {
		return nil, fmt.Errorf("no documentation under %s/docs", repo)
	}
	return out, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// buildBinary builds a static rbscope for linux/goarch, its version and
// date set at link time, stamped with the commit where repo is a
// repository.
func buildBinary(repo, bin, goarch, version string, date time.Time) error {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.buildDate=%s", version, date.UTC().Format(time.RFC3339))
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=auto", "-ldflags", ldflags, "-o", bin, "./cmd/rbscope")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// command runs a program in dir and returns its standard output.
func command(dir, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// commitTime is HEAD's commit time, the date of every file of the release
// (so that the same commit gives the same files); now outside a repository.
func commitTime(repo string) time.Time {
	out, err := command(repo, "git", "log", "-1", "--format=%ct")
	if err == nil {
		var sec int64
		if _, err := fmt.Sscan(string(out), &sec); err == nil {
			return time.Unix(sec, 0).UTC()
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}

// defaultVersion is the tag vX.Y.Z at HEAD without its v, else
// 0.0.0~gitYYYYMMDD.COMMIT (sorting before any release, as Debian orders
// '~').
func defaultVersion(repo string, date time.Time) string {
	if out, err := command(repo, "git", "describe", "--tags", "--exact-match", "--match", "v[0-9]*", "HEAD"); err == nil {
		return strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	}
	commit := "unknown"
	if out, err := command(repo, "git", "rev-parse", "--short=12", "HEAD"); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	return "0.0.0~git" + date.Format("20060102") + "." + commit
}

// writeArchive writes the files into a gzipped tar under the directory
// top, in a fixed order with the given date and root's ownership.
func writeArchive(path, top string, fs []file, date time.Time) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	var entries []file
	dirs := map[string]bool{top: true}
	for _, x := range fs {
		if x.archive == "" {
			continue
		}
		entries = append(entries, x)
		for d := filepath.Dir(x.archive); d != "."; d = filepath.Dir(d) {
			dirs[top+"/"+d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: date, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].archive < entries[j].archive })
	for _, x := range entries {
		b, err := os.ReadFile(x.src)
		if err != nil {
			return err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + x.archive, Mode: int64(x.mode), Size: int64(len(b)), ModTime: date, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// The maintainer scripts make systemd see the unit come and go. The
// package enables nothing: the agent starts once it is configured and
// enabled (the unit's ConditionPathExists).
const (
	postinst = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null || true; fi
`
	postrm = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null || true; fi
`
)

// writeDeb writes the Debian package of the files, gzipping the man pages
// into stage first.
func writeDeb(path, stage, version, debArch string, fs []file, date time.Time) (err error) {
	var contents files.Contents
	for _, x := range fs {
		if x.deb == "" {
			continue
		}
		src := x.src
		if x.gzipDeb {
			src = filepath.Join(stage, filepath.Base(x.deb))
			if err := gzipFile(x.src, src); err != nil {
				return err
			}
		}
		contents = append(contents, &files.Content{Source: src, Destination: x.deb,
			FileInfo: &files.ContentFileInfo{Mode: x.mode, MTime: date, Owner: "root", Group: "root"}})
	}
	scripts := map[string]string{"postinst": postinst, "postrm": postrm}
	for name, text := range scripts {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(text), 0o755); err != nil {
			return err
		}
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "rbscope",
		Arch:          debArch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none", // as given: Debian orders it
		Section:       "devel",
		Priority:      "optional",
		Maintainer:    "rbscope developers",
		Homepage:      "https://github.com/rbscope/rbscope",
		Description: `Look inside running, stuck or crashed Ruby processes from the outside
rbscope reads a Ruby process from the outside, with no gem, no restart and
no patch to the Ruby VM: every thread's stack, CPU and wall-time profiles,
heap dumps, threads, crash and core reports; and an agent that profiles
every Ruby process of the host for Pyroscope (rbscope-agent.service).`,
		MTime:           date,
		DisableGlobbing: true,
		Overridables: nfpm.Overridables{
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(stage, "postinst"),
				PostRemove:  filepath.Join(stage, "postrm"),
			},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	return deb.Default.Package(info, f)
}

// gzipFile writes src gzipped to dst, with no name or time in the gzip
// header (as Debian's man pages are: the same page, the same bytes).
func gzipFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := io.Copy(gz, in); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return nil
}
