package runner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one container's running command.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the process exited
	err     error         // exit status, valid after done
	logFile *os.File
}

// startProcess starts argv with env in dir ("": the runner's), its output
// appended to logPath. The
// process gets its own process group (so stop reaches its children) and is
// killed if the runner dies (Pdeathsig), so no pod process outlives the lab.
func startProcess(argv, env []string, logPath, dir string) (*process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("create log dir for %s: %w", logPath, err)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open process log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = processAttrs()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %v: %w", argv, err)
	}
	p := &process{cmd: cmd, started: time.Now(), done: make(chan struct{}), logFile: f}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group and waits up to grace for the
// whole group to exit, then sends SIGKILL to what is left. Waiting for the
// group, not just its leader, matters: a child that ignores TERM or outlives
// its parent would otherwise run on after the pod is gone (Pdeathsig only
// reaches the runner's direct child).
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	deadline := time.Now().Add(grace)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	// Signal 0 tests whether any process of the group exists. The leader's
	// PID cannot be reused while its group has members, so the KILL reaches
	// only what the pod's process started; an empty group is not signalled.
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	<-p.done
}
