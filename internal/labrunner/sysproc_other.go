//go:build !linux

package labrunner

import "syscall"

// processAttrs: only Linux can tie a child's life to its parent's
// (Pdeathsig); the lab runs on Linux, this keeps the binary building
// elsewhere (the released darwin CLI).
func processAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
