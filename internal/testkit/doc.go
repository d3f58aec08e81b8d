// Package testkit holds the test helpers that the tests of several packages
// share (poller, conn and the examples), so that none keeps a copy:
//
//   - [Wait], [Eventually] and [Within]: bounded waits that fail the test
//     instead of hanging the test binary (every system);
//   - [FDs], [FDDiff], [ExpectFDs] and [CheckFDLeak]: the process's open-fd
//     table from /proc/self/fd and the leak check built on it (Linux);
//   - [ListenTCP], [TCPPair] and [CloseRST]: loopback TCP sockets made with
//     raw system calls, not package net, so that the runtime's network
//     poller stays out of the tests' fd accounting (Linux);
//   - [Chromium] and [SyncBuffer]: for the examples' tests, which drive a
//     headless browser and read a running program's output.
//
// It is for tests only; nothing outside _test.go files imports it.
package testkit
