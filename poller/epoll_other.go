//go:build !linux

package poller

import "time"

// There is no epoll here: New returns ErrUnsupported before it calls any of
// these, and the rest of the package compiles unchanged.

const supported = false

type epollEvent struct {
	Events uint32
	Fd     int32
	Pad    int32
}

func epollCreate() (int, error)                          { return -1, ErrUnsupported }
func epollAdd(epfd, fd int, bits uint32, h Handle) error { return ErrUnsupported }
func epollMod(epfd, fd int, bits uint32, h Handle) error { return ErrUnsupported }
func epollDel(epfd, fd int) bool                         { return false }
func epollWait(epfd int, evs []epollEvent, msec int) (int, error) {
	return 0, ErrUnsupported
}
func epollWaitNs(epfd int, evs []epollEvent, ns int64) (int, error) {
	return 0, ErrUnsupported
}

type epollEntry struct {
	fd int
	h  Handle
}

func epollEntries(epfd int) ([]epollEntry, error) { return nil, ErrUnsupported }
func entryAlive(epfd, fd int, h Handle) bool      { return false }
func sameFile(e epollEntry) bool                  { return false }
func replaceFD(fd, target int) error              { return ErrUnsupported }
func newEventfd() (int, error)                    { return -1, ErrUnsupported }
func signal(efd int)                              {}
func drain(efd int)                               {}
func readable(fd int) bool                        { return false }
func closeFD(fd int)                              {}
func gettid() int                                 { return 0 }

type parker struct{ fd int }

func newParker() (*parker, error)                              { return nil, ErrUnsupported }
func (k *parker) watch(epfd int) error                         { return ErrUnsupported }
func (k *parker) wait(evs []epollEvent, msec int) (int, error) { return 0, ErrUnsupported }
func (k *parker) disarm()                                      {}
func (k *parker) close()                                       {}

type alarm struct{ fd int }

func newAlarm() (*alarm, error)    { return nil, ErrUnsupported }
func (a *alarm) set(time.Duration) {}
func (a *alarm) close()            {}
