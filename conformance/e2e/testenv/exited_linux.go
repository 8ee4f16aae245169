package testenv

import "golang.org/x/sys/unix"

// exitedNoReap reports whether the child process pid has ended, leaving it
// for exec.Cmd.Wait to reap (waitid with WNOWAIT).
func exitedNoReap(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	// With WNOHANG and no state change, waitid leaves info zeroed.
	return err == nil && info.Signo != 0
}
