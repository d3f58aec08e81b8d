//go:build !linux

package poller

import "context"

// Poller runs waiter goroutines on epoll. On this system there is no epoll:
// New returns ErrUnsupported and no Poller exists.
type Poller struct{}

// New returns ErrUnsupported: epoll needs Linux.
func New(Options) (*Poller, error) { return nil, ErrUnsupported }

// Add returns ErrUnsupported.
func (p *Poller) Add(Registration) (Handle, error) { return 0, ErrUnsupported }

// Modify returns ErrUnsupported.
func (p *Poller) Modify(Handle, Events) error { return ErrUnsupported }

// Delete returns ErrUnsupported.
func (p *Poller) Delete(Handle) error { return ErrUnsupported }

// Barrier returns ErrUnsupported.
func (p *Poller) Barrier(context.Context) error { return ErrUnsupported }

// Close returns ErrUnsupported.
func (p *Poller) Close() error { return ErrUnsupported }

// Done returns a closed channel.
func (p *Poller) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Stats returns the zero Stats.
func (p *Poller) Stats() Stats { return Stats{} }
