package testenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"time"
)

// child is a server running as a child process. No goroutine waits for it:
// stop reaps it synchronously, so that stopping and restarting a server
// leaves no goroutine behind for a leak check to report.
type child struct {
	cmd *exec.Cmd
}

// startChild starts cmd with its output appended to the file logPath.
func startChild(cmd *exec.Cmd, logPath string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	// An *os.File is handed to the child as is (no copying goroutine), and
	// the child keeps its own descriptor, so ours closes at once.
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	if cerr := logf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return nil, err
	}
	return &child{cmd: cmd}, nil
}

// exited reports whether the process has ended. It does not reap it, so
// stop still can.
func (c *child) exited() bool { return exitedNoReap(c.cmd.Process.Pid) }

// stop sends sig, then waits for the process to end. It kills the process
// when it outlives grace or when ctx ends first, and always returns with
// the process reaped.
func (c *child) stop(ctx context.Context, sig os.Signal, grace time.Duration) error {
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	kill := func() { _ = c.cmd.Process.Kill() }
	timer := time.AfterFunc(grace, kill)
	defer timer.Stop()
	defer context.AfterFunc(ctx, kill)()
	// The exit status is that of a signalled process: not an error here.
	_ = c.cmd.Wait()
	return nil
}
