package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// jvmArgs are the lab's JVM flags for the sample app (lab/cmd/danki-lab,
// lab/scripts/mesh.sh): G1, a 256 MB heap, no Nagle on keep-alive replies.
var jvmArgs = []string{"-Xmx256m", "-XX:+UseG1GC", "-Dsun.net.httpserver.nodelay=true"}

// app is a sample app JVM started on 127.0.0.1 by startApp.
type app struct {
	URL    string // http://127.0.0.1:PORT/
	cmd    *exec.Cmd
	stderr *os.File
	done   chan error
}

// startApp starts the sample app jar on a free 127.0.0.1 port with env
// (KEY=VALUE, on top of a minimal environment: the caller's own settings of
// the app, such as COLD_SHAPE, do not leak in) and waits until /healthz
// answers 200, as the lab's readiness probe does; the app's stderr goes to
// logPath. cpus, when not "", pins the JVM to those CPUs (taskset -c) and
// tells it it has as many (-XX:ActiveProcessorCount), as a pod's CPU limit
// does. Stop it with stop.
func startApp(ctx context.Context, jar, logPath string, env []string, ready time.Duration, cpus string) (*app, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("app log: %w", err)
	}
	args := append(append([]string{}, jvmArgs...), "-jar", jar, "--bind", "127.0.0.1", "--port", strconv.Itoa(port))
	name := "java"
	if cpus != "" {
		n, err := cpuCount(cpus)
		if err != nil {
			logf.Close()
			return nil, err
		}
		args = append([]string{"-c", cpus, "java", "-XX:ActiveProcessorCount=" + strconv.Itoa(n)}, args...)
		name = "taskset"
	}
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for _, k := range []string{"HOME", "JAVA_HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting java: %w", err)
	}
	a := &app{URL: fmt.Sprintf("http://127.0.0.1:%d/", port), cmd: cmd, stderr: logf, done: make(chan error, 1)}
	go func() { a.done <- cmd.Wait() }()
	if err := a.waitReady(ctx, ready); err != nil {
		a.stop()
		return nil, fmt.Errorf("%w (app log: %s)", err, logPath)
	}
	return a, nil
}

// waitReady polls /healthz every 50 ms until it answers 200.
func (a *app) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"healthz", nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				client.CloseIdleConnections()
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case err := <-a.done:
			a.done <- err
			return fmt.Errorf("sample app exited before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("sample app not ready within %v (last /healthz: %s)", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the JVM (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (a *app) stop() {
	defer a.stderr.Close()
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
}

// cpuCount is how many CPUs a taskset list names ("1", "0,2", "0-3").
func cpuCount(list string) (int, error) {
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(lo)
		b, errB := a, error(nil)
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || a < 0 || b < a {
			return 0, fmt.Errorf("-cpus %q: want a CPU list such as 1, 0,2 or 0-3", list)
		}
		n += b - a + 1
	}
	return n, nil
}

// compiledMs is the JIT's accumulated compile time in ms, summed over its
// series: Micrometer's jvm_compilation_time_ms_total on the Prometheus page
// at url (the Spring sample's /actuator/prometheus, the sample app's
// /metrics).
func compiledMs(url string) (float64, error) {
	return promSum(url, "jvm_compilation_time_ms_total")
}

// promSum is the value of metric name on the Prometheus text page at url,
// summed over its series (name may carry a series' labels, to pick one);
// an error when the page has none.
func promSum(url, name string) (float64, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", url, name, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	if !found {
		return 0, fmt.Errorf("%s has no %s (a Spring Boot app with Micrometer's Prometheus registry serves it)", url, name)
	}
	return sum, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
