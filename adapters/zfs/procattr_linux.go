//go:build linux

package zfs

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill a zfs process when Ferry dies (even
// by SIGKILL), so that no zfs send or recv outlives the transfer it served.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
