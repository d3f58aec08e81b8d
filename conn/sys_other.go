//go:build !linux

package conn

import (
	"errors"
	"net"
	"time"
)

// There is no epoll here: NewServer fails in poller.New before any of
// these runs, and the rest of the package compiles unchanged.

var errUnsupported = errors.New("conn: not supported on this system")

func read(int, []byte) (int, error)         { return 0, errUnsupported }
func write(int, []byte) (int, error)        { return 0, errUnsupported }
func writev(int, [][]byte) (int, error)     { return 0, errUnsupported }
func shutdownWrite(int) error               { return errUnsupported }
func setLingerZero(int)                     {}
func setNoDelay(int)                        {}
func accept(int) (int, error)               { return -1, errUnsupported }
func isAgain(error) bool                    { return false }
func isReset(error) bool                    { return false }
func isNoFDs(error) bool                    { return false }
func closeFD(int)                           {}
func dupListener(net.Listener) (int, error) { return -1, errUnsupported }
func sockName(int) net.Addr                 { return nil }
func peerName(int) net.Addr                 { return nil }
func setSendBuffer(int, int)                {}
func discardInput(int) int                  { return 0 }
func unacked(int) int                       { return 0 }
func waitWritable(int, time.Duration)       {}

func connect(sockAddr) (int, bool, error) { return -1, false, errUnsupported }
func connectResult(int) error             { return errUnsupported }
