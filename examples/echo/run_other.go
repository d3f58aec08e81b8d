//go:build !linux

package main

import (
	"io"

	"github.com/gracepoll/gracepoll/poller"
)

// run needs epoll: elsewhere it reports poller.ErrUnsupported.
func run(config, io.Writer) (result, error) { return result{}, poller.ErrUnsupported }
