package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestMain lets a test run this test binary as the image's zfs link (the
// chroot must not happen in the test's own process).
func TestMain(m *testing.M) {
	if name := os.Getenv("FERRY_TEST_AS_HOST_TOOL"); name != "" {
		imageToolDirs = []string{os.Getenv("FERRY_TEST_IMAGE_TOOL_DIR")}
		os.Exit(runHostTool(name, os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func TestHostToolNames(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/usr/local/sbin/zfs": true, "zpool": true, "/usr/local/bin/ferry": false, "zfs.test": false, "zdb": false,
	} {
		if _, ok := asHostTool(argv0); ok != want {
			t.Errorf("asHostTool(%q) = %v, want %v", argv0, ok, want)
		}
	}
}

func TestAHostRootThatIsNotOneIsRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		root string
		env  []string
		want string
	}{
		{"", nil, "set FERRY_HOST_ROOT"},
		{"host", nil, "absolute, clean"},
		{dir + "/../" + filepath.Base(dir), nil, "absolute, clean"},
		{filepath.Join(dir, "missing"), nil, "no such file"},
		{file, nil, "not a directory"},
		{dir, []string{"FERRY_HOST_TOOL=/host"}, "ferry's own link again"},
	} {
		err := checkHostRoot("zfs", c.root, c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkHostRoot(%q, %v) = %v, want an error with %q", c.root, c.env, err, c.want)
		}
	}
	// A directory need not be a mount point: the host's tool
	// directories are mounted below it.
	if err := checkHostRoot("zfs", dir, []string{"PATH=/bin"}); err != nil {
		t.Errorf("a directory: %v", err)
	}
}

func TestTheHostsToolRunsInTheHostsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chroot needs root (CI runs the unit tests as root)")
	}
	// A host root whose zfs is a static program of its own: it prints
	// its arguments, its working directory, its PATH and a file only the
	// host's root has (or that it has none), says "err" on stderr and
	// exits 3.
	tool := fakeTool(t)
	root := t.TempDir()
	for _, d := range []string{"usr/sbin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/only-here"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/zfs"), tool, 0o755); err != nil {
		t.Fatal(err)
	}

	run := func(env ...string) (string, string, int) {
		cmd := exec.Command(os.Args[0], "list", "-H", "tank/a b")
		cmd.Dir = t.TempDir()
		cmd.Env = append(append(os.Environ(), "FERRY_TEST_AS_HOST_TOOL=zfs"), env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), code
	}
	out, errOut, code := run("FERRY_HOST_ROOT="+root, "FERRY_TEST_IMAGE_TOOL_DIR="+root+"/usr/sbin")
	want := "args:list -H tank/a b\ncwd:/\n" + strings.TrimPrefix(hostToolPath, "PATH=") + "\nhost\n"
	if out != want || errOut != "err\n" || code != 3 {
		t.Errorf("the host's zfs gave stdout %q stderr %q exit %d, want %q, %q, 3", out, errOut, code, want, "err\n")
	}

	// No host root, and no copy of the tool in the image: a clear error,
	// exit 127.
	imageDir := t.TempDir()
	if _, errOut, code := run("FERRY_HOST_ROOT=", "FERRY_TEST_IMAGE_TOOL_DIR="+imageDir); code != 127 || !strings.Contains(errOut, "set FERRY_HOST_ROOT") {
		t.Errorf("no host root: exit %d, %q", code, errOut)
	}
	// No host root, and a copy in the image: that copy runs, unchrooted.
	// A link to this binary there is no copy.
	if err := os.Symlink(os.Args[0], filepath.Join(imageDir, "zfs")); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run("FERRY_HOST_ROOT=", "FERRY_TEST_IMAGE_TOOL_DIR="+imageDir); code != 127 || !strings.Contains(errOut, "set FERRY_HOST_ROOT") {
		t.Errorf("no host root, and a link to ferry as the image's zfs: exit %d, %q", code, errOut)
	}
	if err := os.Remove(filepath.Join(imageDir, "zfs")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imageDir, "zfs"), tool, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run("FERRY_HOST_ROOT=", "FERRY_TEST_IMAGE_TOOL_DIR="+imageDir); code != 3 ||
		!strings.HasPrefix(out, "args:list -H tank/a b\n") || !strings.HasSuffix(out, "no /etc/only-here\n") {
		t.Errorf("no host root, a copy in the image: stdout %q stderr %q exit %d, want it run outside the host's root", out, errOut, code)
	}
	// With a host root, the host's tool runs, not the image's copy: the
	// host's, removed, is an error.
	if err := os.Remove(filepath.Join(root, "usr/sbin/zfs")); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run("FERRY_HOST_ROOT="+root, "FERRY_TEST_IMAGE_TOOL_DIR="+imageDir); code != 127 || !strings.Contains(errOut, "is ZFS installed on this node") {
		t.Errorf("no zfs in the host's root: exit %d, %q", code, errOut)
	}
}

// fakeTool builds a static stand-in for zfs (no library to find in a
// chroot): it prints "args:<its arguments>", "cwd:<its working
// directory>", its PATH, then /etc/only-here or "no /etc/only-here", says
// "err" on stderr and exits 3.
func fakeTool(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	src := `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	wd, _ := os.Getwd()
	fmt.Printf("args:%s\ncwd:%s\n%s\n", strings.Join(os.Args[1:], " "), wd, os.Getenv("PATH"))
	if b, err := os.ReadFile("/etc/only-here"); err == nil {
		fmt.Print(string(b))
	} else {
		fmt.Println("no /etc/only-here")
	}
	fmt.Fprintln(os.Stderr, "err")
	os.Exit(3)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "zfs")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in zfs: %v\n%s", err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return body
}
