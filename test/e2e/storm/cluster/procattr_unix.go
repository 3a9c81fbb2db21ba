//go:build unix && !linux

package cluster

import "syscall"

// sysProcAttr puts a child in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
