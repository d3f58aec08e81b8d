//go:build linux

package main

import "github.com/gracepoll/gracepoll/examples/echo/loadgen"

// The load generator is package loadgen (examples/echo/loadgen), which
// bench/peers drives too: client connections on package net ping-ponging
// messages of 16-byte records (a per-connection tag, the sequence number,
// the record's index), every reply checked byte for byte, with churn.
// These names keep the example's own tests short.
const tagMagic = loadgen.TagMagic

func fill(msg []byte, tag uint64, seq uint32) { loadgen.Fill(msg, tag, seq) }

func foreignBytes(reply []byte, id uint32) uint64 { return loadgen.ForeignBytes(reply, id) }
