package runner

import "syscall"

// processAttrs puts a pod's process in its own process group (stopped as a
// group) and kills it with the runner (no JVM outlives the lab).
func processAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
