package main

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rbscope/rbscope/internal/testruby"
)

// daemonSetManifest is the agent's Kubernetes manifest.
const daemonSetManifest = "../../deploy/kubernetes/rbscope-agent.yaml"

// k8sObject holds what the tests read of the manifest's objects.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec struct {
				HostPID    bool `yaml:"hostPID"`
				Containers []struct {
					Name            string   `yaml:"name"`
					Command         []string `yaml:"command"`
					Args            []string `yaml:"args"`
					SecurityContext struct {
						RunAsUser                *int  `yaml:"runAsUser"`
						Privileged               *bool `yaml:"privileged"`
						AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
						ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
						Capabilities             struct {
							Add  []string `yaml:"add"`
							Drop []string `yaml:"drop"`
						} `yaml:"capabilities"`
					} `yaml:"securityContext"`
					Resources struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
					Ports []struct {
						ContainerPort int `yaml:"containerPort"`
					} `yaml:"ports"`
					VolumeMounts []k8sMount `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []k8sVolume `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// k8sMount is a container's volume mount.
type k8sMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
}

// k8sVolume is a pod's volume (a ConfigMap's, or another kind).
type k8sVolume struct {
	Name      string `yaml:"name"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

// readManifest parses the manifest's documents.
func readManifest(t *testing.T) []k8sObject {
	t.Helper()
	f, err := os.Open(daemonSetManifest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var objs []k8sObject
	dec := yaml.NewDecoder(f)
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", daemonSetManifest, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestDaemonSetManifest checks the agent's DaemonSet: the node's PID
// namespace, root with SYS_PTRACE and DAC_READ_SEARCH only, a read-only
// root filesystem, resource requests and limits; and that its command line
// parses with rbscope's own flags and loads the configuration file the
// ConfigMap mounts, as `rbscope agent` would at start.
func TestDaemonSetManifest(t *testing.T) {
	objs := readManifest(t)
	var ds *k8sObject
	configMaps := map[string]map[string]string{}
	for i, o := range objs {
		switch o.Kind {
		case "DaemonSet":
			ds = &objs[i]
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		}
	}
	if ds == nil {
		t.Fatalf("%s holds no DaemonSet", daemonSetManifest)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostPID {
		t.Error("the DaemonSet's pods do not share the node's PID namespace (hostPID)")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("the DaemonSet has %d containers, want the agent alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("the agent does not run as root (runAsUser: 0): capabilities of a non-root container are not effective")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the agent's container is privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is not read-only")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("capabilities dropped: %v, want [ALL]", sc.Capabilities.Drop)
	}
	if add := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(add, []string{"DAC_READ_SEARCH", "SYS_PTRACE"}) {
		t.Errorf("capabilities added: %v, want SYS_PTRACE and DAC_READ_SEARCH (TestDaemonSetCapabilities shows each is needed)", add)
	}
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" || c.Resources.Limits[r] == "" {
			t.Errorf("the agent has no %s request or limit", r)
		}
	}

	// The command line, as rbscope parses it.
	if len(c.Command) != 1 || path.Base(c.Command[0]) != "rbscope" {
		t.Fatalf("the container's command is %q, want rbscope", c.Command)
	}
	args := slices.Clone(c.Args)
	// The configuration file is the mounted ConfigMap's: the test puts
	// it in a directory of its own.
	dir := t.TempDir()
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--config":
			args[i+1] = mountedConfig(t, pod.Volumes, c.VolumeMounts, configMaps, args[i+1], dir)
		case "--metrics-addr":
			_, port, err := net.SplitHostPort(args[i+1])
			if err != nil {
				t.Fatalf("--metrics-addr %q: %v", args[i+1], err)
			}
			exposed := false
			for _, p := range c.Ports {
				exposed = exposed || strconv.Itoa(p.ContainerPort) == port
			}
			if !exposed {
				t.Errorf("--metrics-addr's port %s is not a container port", port)
			}
			args[i+1] = "127.0.0.1:0" // the pod's port may be taken here
		}
	}
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	cmd, _, err := root.Find(args)
	if err != nil || cmd.Name() != "agent" {
		t.Fatalf("the container's arguments %q do not name the agent: %v", c.Args, err)
	}
	// A run whose context is canceled parses the flags, loads the
	// configuration and checks it, then ends before profiling.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("rbscope %s: %v", strings.Join(c.Args, " "), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not end with its context canceled")
	}
}

// mountedConfig writes the ConfigMap file that the container sees at path
// into dir and returns where.
func mountedConfig(t *testing.T, volumes []k8sVolume, mounts []k8sMount, configMaps map[string]map[string]string, path, dir string) string {
	t.Helper()
	for _, m := range mounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			data, ok := configMaps[v.ConfigMap.Name][rel]
			if !ok {
				t.Fatalf("ConfigMap %s has no key %s for %s", v.ConfigMap.Name, rel, path)
			}
			p := filepath.Join(dir, rel)
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatalf("%s is on no ConfigMap volume of the container", path)
	return ""
}

// TestDaemonSetCapabilities runs rbscope as the manifest's container
// would, root with only the manifest's capabilities, on a Ruby process of
// another user whose libruby lies in a directory only that user may
// search (a Ruby under a 0750 home): rbscope reads it. Without any one of
// the capabilities it is refused. (The agent reads processes through the
// same code as rbscope stack.)
func TestDaemonSetCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		testruby.Missing(t, "setpriv (util-linux) is not installed")
	}
	var add []string
	for _, o := range readManifest(t) {
		if o.Kind == "DaemonSet" && len(o.Spec.Template.Spec.Containers) > 0 {
			add = o.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add
		}
	}
	if len(add) == 0 {
		t.Fatal("the manifest adds no capability")
	}
	rb, lib, soname := sharedRuby(t)

	// /tmp/X (0755, root) / home (0700, nobody) / soname.
	base, err := os.MkdirTemp("", "rbscope-caps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	home := filepath.Join(base, "home")
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(home, soname)
	if err := os.WriteFile(private, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, private} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(rb.Bin, "-e", `def rbscope_caps_probe; STDOUT.puts "ready"; STDOUT.flush; sleep; end; rbscope_caps_probe`)
	cmd.Env = append(append(os.Environ(), rb.Env...), "LD_LIBRARY_PATH="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("%s as nobody: %q %v: %s", rb.Bin, line, err, stderr.String())
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	maps, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil || !strings.Contains(string(maps), private) {
		t.Fatalf("the Ruby does not map libruby from %s: %v", private, err)
	}

	stack := func(caps []string) (string, string, int) {
		bound := "-all"
		for _, c := range caps {
			bound += ",+" + strings.ToLower(c)
		}
		return runCommand(t, exec.Command("setpriv", "--inh-caps=-all", "--bounding-set="+bound, "--", rbscopeBin, "stack", "--json", "-p", pid))
	}
	out, errOut, code := stack(add)
	var doc struct {
		Threads []struct {
			Frames []struct{ Label string } `json:"frames"`
		} `json:"threads"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Threads) == 0 ||
		!slices.ContainsFunc(doc.Threads[0].Frames, func(f struct{ Label string }) bool { return strings.Contains(f.Label, "rbscope_caps_probe") }) {
		t.Fatalf("rbscope stack with %v: exit %d: %s%s", add, code, errOut, out)
	}
	for i := range add {
		fewer := slices.Delete(slices.Clone(add), i, i+1)
		if _, errOut, code := stack(fewer); code == 0 {
			t.Errorf("rbscope stack reads the process without %s: the manifest need not add it", add[i])
		} else {
			t.Logf("without %s: %s", add[i], strings.TrimSpace(errOut))
		}
	}
}

// sharedRuby picks a test Ruby built with a shared libruby and returns it,
// the library it maps and the name its executable asks for.
func sharedRuby(t *testing.T) (testruby.Ruby, string, string) {
	t.Helper()
	for _, rb := range testruby.Rubies(t) {
		if testruby.Musl(rb) {
			continue
		}
		f, err := elf.Open(rb.Bin)
		if err != nil {
			continue
		}
		needed, _ := f.DynString(elf.DT_NEEDED)
		f.Close()
		i := slices.IndexFunc(needed, func(s string) bool { return strings.HasPrefix(s, "libruby") })
		if i < 0 {
			continue
		}
		out, err := exec.Command(rb.Bin, "-e", `print File.read("/proc/self/maps")[%r{/\S*/libruby\S*}]`).Output()
		if err != nil || len(out) == 0 {
			continue
		}
		return rb, string(out), needed[i]
	}
	testruby.Missing(t, "no test Ruby with a shared libruby")
	return testruby.Ruby{}, "", ""
}
