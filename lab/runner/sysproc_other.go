//go:build !linux

package runner

import "syscall"

// processAttrs: only Linux can tie a child's life to its parent's
// (Pdeathsig); the lab runs on Linux, this keeps the binary building
// elsewhere (danki-lab on a developer's Mac).
func processAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
