//go:build linux

package zfs

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// dieWithParent makes the kernel kill a zfs process when Ferry dies (even
// by SIGKILL), so that no zfs send or recv outlives the transfer it served.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pipeSize is the capacity given to the pipes between Ferry and zfs send /
// zfs recv: 1 MiB instead of Linux's 64 KiB default cuts the syscalls and
// context switches per stream sixteenfold.
const pipeSize = 1 << 20

// growPipe enlarges a pipe; failure (an old kernel, a low pipe-max-size)
// only costs speed.
func growPipe(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, pipeSize)
}
