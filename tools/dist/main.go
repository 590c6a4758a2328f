// Command dist builds rbscope's release files for linux/amd64 and
// linux/arm64 from the repository: for each, a static binary in a tar.gz with the man pages, the bash, zsh
// and fish completions, the agent's systemd unit, the licence and the
// documentation (README.md, docs/), and a Debian package that installs the
// same files where Debian keeps them.
//
//	go run ./tools/dist [-version 1.2.0] [-o dist]
//
// Without -version, the version is the tag (vX.Y.Z) at HEAD, else
// 0.0.0~gitYYYYMMDD.COMMIT. `make dist` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	version := flag.String("version", "", "the release's version (default: from the git tag at HEAD, else 0.0.0~gitDATE.COMMIT)")
	out := flag.String("o", "dist", "directory to write the archive and the package into")
	repo := flag.String("repo", ".", "the rbscope repository to build from")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "dist: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	r, err := Build(*repo, *out, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(os.Stderr, "dist: warning:", w)
	}
	for _, f := range r.Files {
		fmt.Println(f.Archive)
		fmt.Println(f.Deb)
	}
}
