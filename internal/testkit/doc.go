// Package testkit holds the test helpers that the tests of packages poller
// and conn share, so that neither keeps a copy of the other's:
//
//   - [Wait], [Eventually] and [Within]: bounded waits that fail the test
//     instead of hanging the test binary (every system);
//   - [FDs], [FDDiff], [ExpectFDs] and [CheckFDLeak]: the process's open-fd
//     table from /proc/self/fd and the leak check built on it (Linux);
//   - [ListenTCP], [TCPPair] and [CloseRST]: loopback TCP sockets made with
//     raw system calls, not package net, so that the runtime's network
//     poller stays out of the tests' fd accounting (Linux).
//
// It is for tests only; nothing outside _test.go files imports it.
package testkit
