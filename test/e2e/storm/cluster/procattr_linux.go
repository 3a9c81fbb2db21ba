package cluster

import "syscall"

// sysProcAttr puts a child in its own process group and has the kernel kill
// it should the harness die without stopping it (a panic, a SIGKILL).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
