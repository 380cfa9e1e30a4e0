//go:build !linux

package zfs

import (
	"os"
	"os/exec"
)

func dieWithParent(*exec.Cmd) {}

func growPipe(*os.File) {}

// unmountLeftover is Linux's concern only.
func unmountLeftover(dataset, mountpoint, hostRoot string) error { return nil }

func otherMounts(dataset, mountpoint, hostRoot string) []string { return nil }
