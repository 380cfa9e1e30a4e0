package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// The benchmark's own test network: two network namespaces joined by a
// veth pair, in 10.217.0.0/24 (the local test cluster owns 10.213-10.215).
// Nothing else is routed; traffic never leaves the pair.
const (
	nsA, nsB     = "ferry-bench-a", "ferry-bench-b"
	vethA, vethB = "fbench-a", "fbench-b"
	addrA, addrB = "10.217.0.1", "10.217.0.2"
)

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetwork makes the two namespaces (replacing what a killed run left)
// and the veth pair between them.
func setupNetwork() error {
	teardownNetwork()
	steps := [][]string{
		{"netns", "add", nsA},
		{"netns", "add", nsB},
		{"link", "add", vethA, "netns", nsA, "type", "veth", "peer", "name", vethB, "netns", nsB},
		{"-n", nsA, "addr", "add", addrA + "/24", "dev", vethA},
		{"-n", nsB, "addr", "add", addrB + "/24", "dev", vethB},
		{"-n", nsA, "link", "set", "lo", "up"},
		{"-n", nsB, "link", "set", "lo", "up"},
		{"-n", nsA, "link", "set", vethA, "up"},
		{"-n", nsB, "link", "set", vethB, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			teardownNetwork()
			return err
		}
	}
	return nil
}

// teardownNetwork deletes the namespaces (the veth pair goes with them).
func teardownNetwork() {
	for _, ns := range []string{nsA, nsB} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			_ = ip("netns", "del", ns)
		}
	}
}

// inNetns returns a command that runs name in namespace ns (nsenter keeps
// the host's mount namespace, so the zfs socket and the pools' mounts stay
// visible) and is killed if this process dies.
func inNetns(ns, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--", name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}
