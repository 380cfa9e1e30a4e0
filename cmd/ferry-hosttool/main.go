// Command ferry-hosttool is the zfs and zpool of Ferry's image: run by
// either name (a link), it runs the host's own tool of that name inside
// the host's root, mounted in the pod at $FERRY_HOST_ROOT (ferry's
// --host-root), so that the tool always matches the node's ZFS (the
// kernel module of OpenZFS, or zfs-fuse's daemon), which a copy in the
// image cannot (OpenZFS supports no userland of another version than its
// module). It is a program of its own, small and quick to start (about
// 10 ms on a busy machine, against about 70 ms for a start of ferry), as
// it runs for every zfs command. It decides nothing: it finds the tool, changes root
// and replaces itself with it.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

func main() {
	name, ok := asHostTool(os.Args[0])
	if !ok {
		fmt.Fprintf(os.Stderr, "ferry-hosttool: run it as one of %s (a link of that name), not as %s\n", strings.Join(hostTools, " or "), filepath.Base(os.Args[0]))
		os.Exit(2)
	}
	os.Exit(runHostTool(name, os.Args[1:], os.Stderr))
}

// Without a host root it runs the image's own copy of the tool
// (/usr/libexec/ferry), where the image has one: the volume managers of
// the previous release, renewed in place on this image, have no host
// root (README, "Images").
const (
	hostRootEnv = "FERRY_HOST_ROOT"
	// hostToolEnv marks the host's tool's environment: a host root that
	// leads back to these links is refused, not run in a loop.
	hostToolEnv = "FERRY_HOST_TOOL"
)

// hostTools are the names this binary answers to as a host tool.
var hostTools = []string{"zfs", "zpool"}

// hostToolDirs are where the host's tools are looked for, in the host's
// root, in this order (Debian and Ubuntu: /usr/sbin or /sbin; built from
// source: /usr/local/sbin).
var hostToolDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"}

// imageToolDirs are where the image's own copy of a tool is looked for.
var imageToolDirs = []string{"/usr/libexec/ferry"}

// imageTool returns the image's own copy of the tool: a regular file in
// imageToolDirs that is not this binary; "" if there is none.
func imageTool(name string) string {
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return ""
	}
	for _, d := range imageToolDirs {
		p := filepath.Join(d, name)
		st, err := os.Stat(p)
		if err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 && !os.SameFile(st, self) {
			return p
		}
	}
	return ""
}

// hostToolPath is the host tool's PATH: what the tool itself may run (a
// mount helper) comes from the host too.
const hostToolPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// asHostTool reports whether argv0 names a host tool, and which.
func asHostTool(argv0 string) (string, bool) {
	name := filepath.Base(argv0)
	return name, slices.Contains(hostTools, name)
}

// checkHostRoot refuses a host root that is not an absolute, clean path
// of a directory, or a loop back into these links. The root need not be
// a mount point: the charts mount the host's tool directories below it
// (/host/usr, /host/etc, ...), not the host's whole /, whose every mount
// (each dataset's, each pod's) a pod would otherwise carry a copy of.
func checkHostRoot(name, root string, env []string) error {
	if root == "" {
		return fmt.Errorf("ferry runs as %s only to run the host's own %s: set %s to where the host's root is mounted in this container (the chart mounts the host's tools below /host)", name, name, hostRootEnv)
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return fmt.Errorf("%s=%q: want an absolute, clean path", hostRootEnv, root)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, hostToolEnv+"=") {
			return fmt.Errorf("the host's %s in %s is ferry's own link again (%s=%s): is %s the host's root?", name, root, hostToolEnv, strings.TrimPrefix(kv, hostToolEnv+"="), root)
		}
	}
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("%s: %w", hostRootEnv, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s=%s is not a directory", hostRootEnv, root)
	}
	return nil
}

// hostToolEnviron is the tool's environment: this one, with the host's
// PATH and the loop mark.
func hostToolEnviron(env []string, root string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, hostToolPath, hostToolEnv+"="+root)
}

// findHostTool returns the first executable regular file of the name in
// hostToolDirs below the current root.
func findHostTool(name string) (string, error) {
	for _, d := range hostToolDirs {
		p := filepath.Join(d, name)
		st, err := os.Stat(p)
		if err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s in %s of the host's root: is ZFS installed on this node (zfsutils-linux, or zfs-fuse)?", name, strings.Join(hostToolDirs, ", "))
}

// runHostTool replaces this process with the host's tool, run in the
// host's root: on success it does not return. The tool's stdin, stdout,
// stderr, exit status and death signal (set by the caller's runner) are
// the caller's, as if the caller had run it directly.
func runHostTool(name string, args []string, stderr io.Writer) int {
	root := os.Getenv(hostRootEnv)
	if root == "" {
		// No host root: the image's own copy of the tool, where this
		// image has one (the linux/amd64 image carries the build
		// machine's, for one release: README, "Images").
		if bin := imageTool(name); bin != "" {
			err := syscall.Exec(bin, append([]string{name}, args...), os.Environ())
			fmt.Fprintf(stderr, "%s (ferry): run the image's %s: %v\n", name, bin, err)
			return 127
		}
	}
	if err := checkHostRoot(name, root, os.Environ()); err != nil {
		fmt.Fprintf(stderr, "%s (ferry): %v\n", name, err)
		return 127
	}
	env := hostToolEnviron(os.Environ(), root)
	if err := syscall.Chroot(root); err != nil {
		fmt.Fprintf(stderr, "%s (ferry): chroot %s: %v\n", name, root, err)
		return 127
	}
	if err := os.Chdir("/"); err != nil {
		fmt.Fprintf(stderr, "%s (ferry): chdir / in %s: %v\n", name, root, err)
		return 127
	}
	bin, err := findHostTool(name)
	if err != nil {
		fmt.Fprintf(stderr, "%s (ferry): %v\n", name, err)
		return 127
	}
	err = syscall.Exec(bin, append([]string{name}, args...), env) // returns only on failure
	fmt.Fprintf(stderr, "%s (ferry): run %s in %s: %v\n", name, bin, root, err)
	return 127
}
