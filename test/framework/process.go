package framework

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// DefaultStopGrace is how long Stop waits after SIGTERM before sending
// SIGKILL, unless Process.StopGrace is set.
const DefaultStopGrace = 10 * time.Second

// Process is a child process running in its own process group, with stdout
// and stderr appended to a log file. It is stopped with SIGTERM to the whole
// group, then SIGKILL after a grace period.
//
// The child gets SIGKILL if the parent dies (Pdeathsig), so a test binary
// killed by a timeout does not leak control-plane processes.
type Process struct {
	Name    string
	Path    string
	Args    []string
	LogFile string
	// StopGrace overrides DefaultStopGrace. Set it before calling Stop.
	StopGrace time.Duration

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit error; valid once done is closed
}

// StartProcess starts path with args, appending its output to logFile.
func StartProcess(name, path string, args []string, logFile string) (*Process, error) {
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	fmt.Fprintf(log, "==== %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))

	cmd := exec.Command(path, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		_ = log.Close() // the start error is what matters
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{
		Name:    name,
		Path:    path,
		Args:    args,
		LogFile: logFile,
		cmd:     cmd,
		done:    make(chan struct{}),
	}
	go func() {
		err := cmd.Wait()
		// The child wrote the log through its own descriptor; a failed
		// Close here can still mean lost output, so report it with the exit.
		if cerr := log.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close %s log: %w", name, cerr))
		}
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its wait error if so.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, waits up to StopGrace, then sends
// SIGKILL and waits for the exit. It is safe to call more than once. An exit
// caused by the signal is not an error.
func (p *Process) Stop() error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	pgid := p.Pid()
	grace := p.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, pgid)
	}
}

// Kill sends SIGKILL to the process group, as a crash, and waits for the
// exit. It is safe to call more than once.
func (p *Process) Kill() error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.Pid())
	}
}

// ExitError describes an unexpected exit, with the tail of the log. Call it
// once Done is closed.
func (p *Process) ExitError() error {
	tail := LogTail(p.LogFile, 50)
	if p.err == nil {
		// Exit status 0: there is no error to wrap.
		return fmt.Errorf("%s exited: <nil>\n%s", p.Name, tail)
	}
	return fmt.Errorf("%s exited: %w\n%s", p.Name, p.err, tail)
}

// LogTail returns the last n lines of the file at path, or a note saying why
// it could not be read.
func LogTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
